#include "tests/testing/registry.h"

#include <arpa/inet.h>
#include <crypt.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace nodelet::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

bool Connects(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string Tail(const std::string& text, size_t max = 2000) {
  return text.size() > max ? "..." + text.substr(text.size() - max) : text;
}

}  // namespace

Status WritePlainHttpHostConfig(const std::string& certs_dir, const std::string& host) {
  std::error_code ec;
  fs::create_directories(certs_dir + "/" + host, ec);
  if (ec) return Internal("cannot create " + certs_dir + "/" + host + ": " + ec.message());
  std::ofstream out(certs_dir + "/" + host + "/hosts.toml");
  out << "server = \"http://" << host << "\"\n\n"
      << "[host.\"http://" << host << "\"]\n"
      << "  capabilities = [\"pull\", \"resolve\"]\n";
  out.close();
  if (!out) return Internal("cannot write " + certs_dir + "/" + host + "/hosts.toml");
  return Status::Ok();
}

Result<std::unique_ptr<RegistryInstance>> RegistryInstance::Start(const RegistryOptions& options) {
  if (access(options.registry_bin.c_str(), X_OK) != 0) {
    return FailedPrecondition(options.registry_bin +
                              " is not installed (Debian package docker-registry; run ./dev deps)");
  }
  std::unique_ptr<RegistryInstance> r(new RegistryInstance(options));
  if (r->options_.port == 0) r->options_.port = FreeLoopbackPort();
  std::error_code ec;
  fs::create_directories(r->options_.dir + "/storage", ec);
  if (ec) return Internal("cannot create " + r->options_.dir + "/storage: " + ec.message());
  std::ofstream config(r->options_.dir + "/config.yml");
  config << "version: 0.1\n"
         << "log:\n  level: info\n  accesslog:\n    disabled: false\n"
         << "storage:\n  filesystem:\n    rootdirectory: " << r->options_.dir << "/storage\n"
         << "  delete:\n    enabled: true\n"
         << "http:\n  addr: 127.0.0.1:" << r->options_.port << "\n";
  if (!r->options_.user.empty()) {
    // bcrypt, the one scheme the registry's htpasswd takes (libcrypt's "$2b$", cost 5).
    char setting[CRYPT_GENSALT_OUTPUT_SIZE];
    crypt_data data{};
    if (crypt_gensalt_rn("$2b$", 5, nullptr, 0, setting, sizeof setting) == nullptr ||
        crypt_r(r->options_.password.c_str(), setting, &data) == nullptr) {
      return Internal("cannot make a bcrypt hash for the registry's htpasswd");
    }
    std::ofstream(r->options_.dir + "/htpasswd") << r->options_.user << ":" << data.output << "\n";
    config << "auth:\n  htpasswd:\n    realm: nodelet-test\n    path: " << r->options_.dir
           << "/htpasswd\n";
  }
  config.close();
  if (!config) return Internal("cannot write " + r->options_.dir + "/config.yml");
  if (Status s = r->Launch(); !s.ok()) return s;
  return r;
}

RegistryInstance::~RegistryInstance() { (void)Stop(); }

Status RegistryInstance::Launch() {
  ++starts_;
  std::string log = options_.dir + "/registry-" + std::to_string(starts_) + ".log";
  process_ = std::make_unique<Subprocess>(
      std::vector<std::string>{options_.registry_bin, "serve", options_.dir + "/config.yml"},
      std::map<std::string, std::string>{}, log);
  auto deadline = std::chrono::steady_clock::now() + options_.start_timeout;
  while (!Connects(options_.port)) {
    // Waits on the process itself between attempts: an early exit ends the wait at once.
    if (process_->Wait(20ms).has_value()) {
      return Internal("docker-registry exited at start (port " + std::to_string(options_.port) +
                      "); its log:\n" + Tail(ReadFile(log)));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      (void)Stop();
      return DeadlineExceeded(
          "docker-registry did not listen on 127.0.0.1:" + std::to_string(options_.port) +
          " in time; its log:\n" + Tail(ReadFile(log)));
    }
  }
  return Status::Ok();
}

Status RegistryInstance::Stop() {
  if (!process_) return Status::Ok();
  if (process_->running()) {
    process_->Signal(SIGTERM);
    if (!process_->Wait(10s)) {
      process_->Signal(SIGKILL);
      if (!process_->Wait(10s)) return Internal("docker-registry did not exit after SIGKILL");
    }
  }
  process_.reset();
  return Status::Ok();
}

Status RegistryInstance::Restart() {
  if (Status s = Stop(); !s.ok()) return s;
  return Launch();
}

Status RegistryInstance::Push(const std::string& oci_archive, const std::string& repo_tag) {
  std::vector<std::string> argv = {options_.skopeo_bin, "copy", "--quiet",
                                   "--dest-tls-verify=false"};
  if (!options_.user.empty())
    argv.push_back("--dest-creds=" + options_.user + ":" + options_.password);
  argv.push_back("oci-archive:" + oci_archive);
  argv.push_back("docker://" + host() + "/" + repo_tag);
  auto r = RunCommand(argv, 60s);
  if (r.exit_code != 0) {
    return Internal("skopeo copy of " + oci_archive + " to " + host() + "/" + repo_tag +
                    " failed (exit " + std::to_string(r.exit_code) + "): " + Tail(r.output));
  }
  return Status::Ok();
}

int RegistryInstance::ManifestRequests(const std::string& repo,
                                       const std::string& reference) const {
  const std::string path = " /v2/" + repo + "/manifests/" + reference + " HTTP/";
  int count = 0;
  for (int i = 1; i <= starts_; ++i) {
    std::istringstream in(ReadFile(options_.dir + "/registry-" + std::to_string(i) + ".log"));
    for (std::string line; std::getline(in, line);) {
      // The access log's combined format: ... "GET /v2/REPO/manifests/REF HTTP/1.1" 200 ...
      if (line.find("\"GET" + path) != std::string::npos ||
          line.find("\"HEAD" + path) != std::string::npos) {
        ++count;
      }
    }
  }
  return count;
}

}  // namespace nodelet::testing
