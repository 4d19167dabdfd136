#include "svc-podworkerd/registry_credentials.h"

#include <fnmatch.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "lib/common/base64.h"
#include "lib/common/fs.h"

namespace nodelet::podworkerd {
namespace {

// A config.json is an operator's file of a few entries; more than this is not one.
constexpr size_t kMaxConfigBytes = 1 << 20;

// Docker Hub's names for itself, as keys and as image hosts.
std::string Canonical(std::string host) {
  if (host == "index.docker.io" || host == "registry-1.docker.io") return "docker.io";
  return host;
}

// An entry's key without its scheme and, for Docker Hub's "https://index.docker.io/v1/", its
// API path: (host[:port], path).
std::pair<std::string, std::string> SplitKey(std::string key) {
  for (std::string_view scheme : {"https://", "http://"}) {
    if (key.rfind(scheme, 0) == 0) key.erase(0, scheme.size());
  }
  const size_t slash = key.find('/');
  std::string host = key.substr(0, slash);
  std::string path = slash == std::string::npos ? "" : key.substr(slash + 1);
  while (!path.empty() && path.back() == '/') path.pop_back();
  host = Canonical(host);
  if (host == "docker.io" && (path == "v1" || path == "v2")) path.clear();
  return {host, path};
}

std::vector<std::string> Labels(const std::string& host) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t dot; (dot = host.find('.', start)) != std::string::npos; start = dot + 1) {
    out.push_back(host.substr(start, dot - start));
  }
  out.push_back(host.substr(start));
  return out;
}

// The kubelet's URLsMatch: the same number of labels, each matching its glob; the same port
// when the key names one; the key's path a prefix of the repository's.
bool Matches(const std::string& key, const ImageLocation& image) {
  auto [key_host, key_path] = SplitKey(key);
  auto split_port = [](const std::string& h) {
    const size_t colon = h.rfind(':');
    return colon == std::string::npos ? std::make_pair(h, std::string())
                                      : std::make_pair(h.substr(0, colon), h.substr(colon + 1));
  };
  auto [kh, kp] = split_port(key_host);
  auto [ih, ip] = split_port(image.host);
  if (!kp.empty() && kp != ip) return false;
  const auto kl = Labels(kh), il = Labels(ih);
  if (kl.size() != il.size()) return false;
  for (size_t i = 0; i < kl.size(); ++i) {
    if (fnmatch(kl[i].c_str(), il[i].c_str(), 0) != 0) return false;
  }
  if (key_path.empty()) return true;
  return image.repository == key_path || image.repository.rfind(key_path + "/", 0) == 0;
}

}  // namespace

ImageLocation LocateImage(std::string_view image) {
  std::string ref(image);
  // Without its digest and tag (a tag's ':' comes after the last '/'; a port's before it).
  if (const size_t at = ref.find('@'); at != std::string::npos) ref.erase(at);
  const size_t last_slash = ref.rfind('/');
  const size_t colon = ref.rfind(':');
  if (colon != std::string::npos && (last_slash == std::string::npos || colon > last_slash)) {
    ref.erase(colon);
  }
  ImageLocation out;
  const size_t slash = ref.find('/');
  const std::string first = ref.substr(0, slash);
  const bool has_host =
      slash != std::string::npos && (first.find('.') != std::string::npos ||
                                     first.find(':') != std::string::npos || first == "localhost");
  if (has_host) {
    out.host = Canonical(first);
    out.repository = ref.substr(slash + 1);
  } else {
    out.host = "docker.io";
    out.repository = slash == std::string::npos ? "library/" + ref : ref;
  }
  return out;
}

namespace {

// The entries of an "auths" map (`prefix` names it in errors: "auths." or "" for a .dockercfg).
Result<std::vector<RegistryCredential>> ParseAuths(const nlohmann::json& auths,
                                                   const std::string& origin,
                                                   const std::string& prefix) {
  std::vector<RegistryCredential> entries;
  for (const auto& item : auths.items()) {
    const std::string& key = item.key();
    const nlohmann::json& entry = item.value();
    const std::string at = origin + ": " + prefix + key;
    if (!entry.is_object()) return InvalidArgument(at + ": not an object");
    RegistryCredential c;
    c.registry = key;
    auto text = [&](const char* field, std::string* out) -> Status {
      if (!entry.contains(field)) return Status::Ok();
      if (!entry[field].is_string()) return InvalidArgument(at + "." + field + ": not a string");
      *out = entry[field].get<std::string>();
      return Status::Ok();
    };
    std::string auth;
    for (auto [field, out] : {std::pair{"auth", &auth},
                              {"username", &c.username},
                              {"password", &c.password},
                              {"identitytoken", &c.identity_token},
                              {"registrytoken", &c.registry_token}}) {
      if (Status s = text(field, out); !s.ok()) return s;
    }
    if (!auth.empty()) {
      auto decoded = DecodeBase64(auth);
      const size_t colon = decoded ? decoded->find(':') : std::string::npos;
      if (colon == std::string::npos) {
        return InvalidArgument(at + ".auth: not base64 of USER:PASSWORD");
      }
      c.username = decoded->substr(0, colon);
      c.password = decoded->substr(colon + 1);
    }
    entries.push_back(std::move(c));
  }
  return entries;
}

}  // namespace

Result<DockerKeyring> DockerKeyring::Parse(std::string_view json, const std::string& origin) {
  auto doc = nlohmann::json::parse(json, nullptr, false);
  if (doc.is_discarded() || !doc.is_object())
    return InvalidArgument(origin + ": not a JSON object");
  DockerKeyring k;
  if (!doc.contains("auths")) return k;  // credential helpers only: nothing nodelet reads
  if (!doc["auths"].is_object()) return InvalidArgument(origin + ": auths: not an object");
  auto entries = ParseAuths(doc["auths"], origin, "auths.");
  if (!entries.ok()) return entries.status();
  k.entries_ = std::move(*entries);
  return k;
}

Result<DockerKeyring> DockerKeyring::ParseDockercfg(std::string_view json,
                                                    const std::string& origin) {
  auto doc = nlohmann::json::parse(json, nullptr, false);
  if (doc.is_discarded() || !doc.is_object())
    return InvalidArgument(origin + ": not a JSON object");
  auto entries = ParseAuths(doc, origin, "");
  if (!entries.ok()) return entries.status();
  DockerKeyring k;
  k.entries_ = std::move(*entries);
  return k;
}

void DockerKeyring::Add(const DockerKeyring& other) {
  entries_.insert(entries_.end(), other.entries_.begin(), other.entries_.end());
}

std::vector<RegistryCredential> DockerKeyring::Lookup(std::string_view image) const {
  const ImageLocation where = LocateImage(image);
  std::vector<RegistryCredential> out;
  for (const auto& e : entries_) {
    if (Matches(e.registry, where)) out.push_back(e);
  }
  // Most specific first: a longer key (a path, a port, fewer globs) before a shorter one.
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.registry.size() > b.registry.size();
  });
  return out;
}

std::vector<std::string> DockerConfigPaths(const std::string& root_dir) {
  std::vector<std::string> out;
  if (!root_dir.empty()) out.push_back(root_dir + "/config.json");
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    out.push_back(std::string(home) + "/.docker/config.json");
  }
  out.push_back("/.docker/config.json");
  return out;
}

Result<DockerKeyring> ReadDockerKeyring(const std::vector<std::string>& paths) {
  for (const auto& path : paths) {
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) continue;
    auto text = ReadFileBounded(path, kMaxConfigBytes);
    if (!text.ok()) return InvalidArgument(path + ": " + text.status().message());
    return DockerKeyring::Parse(*text, path);
  }
  return DockerKeyring{};
}

}  // namespace nodelet::podworkerd
