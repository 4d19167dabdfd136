// RegistryInstance: a real OCI registry for integration tests — Debian's docker-registry
// (distribution 2.8, `docker-registry serve CONFIG`) on 127.0.0.1:PORT, its storage and
// logs under the test's directory, started as a child and ended by its pid. Push copies an OCI
// archive into it with skopeo; ManifestRequests counts manifest requests in its own access
// log, an account of pulls that does not depend on the code under test. Stop and Start again
// keep the port and the storage (a registry that goes down and comes back).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "lib/common/status.h"
#include "tests/testing/harness.h"

namespace nodelet::testing {

struct RegistryOptions {
  // config.yml, storage/ and one log per start (registry-N.log) go here; created when missing.
  std::string dir;
  int port = 0;  // 0: a free loopback port
  std::string registry_bin = "/usr/bin/docker-registry";
  std::string skopeo_bin = "/usr/bin/skopeo";
  // Until the registry answers on its port.
  std::chrono::milliseconds start_timeout{std::chrono::seconds(30)};
  // Not empty: every request needs HTTP basic authentication as this user (htpasswd, bcrypt),
  // Push included.
  std::string user, password;
};

class RegistryInstance {
 public:
  // Writes the config and starts the registry; fails naming the step and the log's tail.
  static Result<std::unique_ptr<RegistryInstance>> Start(const RegistryOptions& options);
  ~RegistryInstance();  // Stop()
  RegistryInstance(const RegistryInstance&) = delete;
  RegistryInstance& operator=(const RegistryInstance&) = delete;

  int port() const { return options_.port; }
  // "127.0.0.1:PORT", the registry part of an image reference.
  std::string host() const { return "127.0.0.1:" + std::to_string(options_.port); }
  bool running() const { return process_ != nullptr && process_->running(); }

  // SIGTERM to its pid, SIGKILL after 10 s; waits for the exit. Idempotent.
  Status Stop();
  // Starts it again on the same port with the same storage, and waits until it answers.
  Status Restart();

  // Copies an OCI archive (an image-layout tarball) to host()/repo_tag over plain HTTP.
  Status Push(const std::string& oci_archive, const std::string& repo_tag);
  // GET and HEAD requests for /v2/REPO/manifests/REFERENCE in every start's access log.
  int ManifestRequests(const std::string& repo, const std::string& reference) const;

 private:
  explicit RegistryInstance(RegistryOptions options) : options_(std::move(options)) {}
  Status Launch();

  RegistryOptions options_;
  int starts_ = 0;
  std::unique_ptr<Subprocess> process_;
};

// Writes CERTS_DIR/HOST/hosts.toml telling containerd (CRI `registry.config_path`) to reach
// HOST ("127.0.0.1:PORT") over plain HTTP, for ContainerdOptions::registry_config_path.
Status WritePlainHttpHostConfig(const std::string& certs_dir, const std::string& host);

}  // namespace nodelet::testing
