// Node-wide registry credentials, read as the kubelet's keyring reads them (its
// credentialprovider package, docs/runtime.md "Registry credentials"): a docker config.json
// ({"auths": {"REGISTRY[/PATH]": {"auth": base64("USER:PASSWORD")} or "username"/"password",
// "identitytoken", "registrytoken"}}) from the first of ROOT-DIR/config.json,
// $HOME/.docker/config.json and /.docker/config.json that exists, read again at each pull so
// that an edit counts at the next one. An image's credentials are every entry whose registry
// matches the image's (the host, a "*" glob per DNS label, the port when the entry names one,
// and its path as a prefix of the image's repository), most specific first; the puller tries
// them in turn, and pulls without credentials when none match.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "lib/common/status.h"

namespace nodelet::podworkerd {

struct RegistryCredential {
  std::string registry;  // the entry's key, as written
  std::string username, password, identity_token, registry_token;
  bool operator==(const RegistryCredential&) const = default;
};

// An image reference's registry host ("docker.io" when it names none, as the runtime reads it)
// and repository path ("library/busybox").
struct ImageLocation {
  std::string host;
  std::string repository;
};
ImageLocation LocateImage(std::string_view image);

class DockerKeyring {
 public:
  // A config.json's text; `origin` names it in errors ("FILE: auths.KEY.auth: not base64").
  static Result<DockerKeyring> Parse(std::string_view json, const std::string& origin);
  // The older ~/.dockercfg form (a Secret's .dockercfg): the "auths" map alone.
  static Result<DockerKeyring> ParseDockercfg(std::string_view json, const std::string& origin);
  // `other`'s entries beside these (Lookup orders them all by how specific they are).
  void Add(const DockerKeyring& other);
  // The credentials for `image`, most specific entry first.
  std::vector<RegistryCredential> Lookup(std::string_view image) const;
  size_t size() const { return entries_.size(); }

 private:
  std::vector<RegistryCredential> entries_;
};

// ROOT-DIR/config.json, then $HOME/.docker/config.json and /.docker/config.json.
std::vector<std::string> DockerConfigPaths(const std::string& root_dir);
// The keyring of the first of `paths` that exists (empty when none does); an error for one that
// cannot be read or parsed, naming it.
Result<DockerKeyring> ReadDockerKeyring(const std::vector<std::string>& paths);

}  // namespace nodelet::podworkerd
