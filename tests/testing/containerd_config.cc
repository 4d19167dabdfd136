// containerd's config for a private instance (MakeContainerdConfig: `containerd config default`
// with the settings containerd.h lists), and where the image tarballs are.
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/testing/containerd.h"
#include "tests/testing/containerd_internal.h"

namespace nodelet::testing {
namespace {

constexpr char kCriPluginSection[] = "[plugins.\"io.containerd.grpc.v1.cri\"]";
constexpr char kRuncOptionsSection[] =
    "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]";
constexpr char kRegistrySection[] = "[plugins.\"io.containerd.grpc.v1.cri\".registry]";
constexpr char kCniSection[] = "[plugins.\"io.containerd.grpc.v1.cri\".cni]";

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

namespace containerd_internal {

std::string Trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

}  // namespace containerd_internal

using containerd_internal::Trim;

std::vector<std::string> DefaultImageTarballs(const std::string& images_dir) {
  return {images_dir + "/pause.tar", images_dir + "/busybox.tar"};
}

std::string ImagesDir() {
  const char* dir = std::getenv("NODELET_IMAGES_DIR");
  if (dir == nullptr)
    throw std::runtime_error("NODELET_IMAGES_DIR is not set (run through meson test)");
  return dir;
}

Result<std::string> MakeContainerdConfig(const std::string& default_config, const std::string& dir,
                                         const std::string& sandbox_image,
                                         const std::string& registry_config_path) {
  struct Setting {
    std::string section;  // "" for the top level
    std::string key;
    std::string value;  // TOML value
    bool found = false;
  };
  std::vector<Setting> settings = {
      {"", "root", Quote(dir + "/root")},
      {"", "state", Quote(dir + "/state")},
      {"[grpc]", "address", Quote(dir + "/containerd.sock")},
      {kCriPluginSection, "sandbox_image", Quote(sandbox_image)},
      {kCriPluginSection, "restrict_oom_score_adj", "true"},
      {kCriPluginSection, "netns_mounts_under_state_dir", "true"},
      // The streaming server of exec, attach and port-forward (docs/operate.md): loopback only,
      // a free port, no TLS (sessions never leave the host).
      {kCriPluginSection, "stream_server_address", Quote("127.0.0.1")},
      {kCriPluginSection, "stream_server_port", Quote("0")},
      {kCriPluginSection, "enable_tls_streaming", "false"},
      // Writable layers measured every second (default 10 s), for the local-storage tests.
      {kCriPluginSection, "stats_collect_period", "1"},
      // runc's state (default /run/containerd/runc, shared by every instance) under ours too.
      {kRuncOptionsSection, "Root", Quote(dir + "/state/runc")},
      // CNI: Debian's plugins, a conf dir of our own (empty without a pod network).
      {kCniSection, "bin_dir", Quote(kCniBinDir)},
      {kCniSection, "conf_dir", Quote(dir + "/cni/net.d")},
      {kCniSection, "max_conf_num", "1"},
  };
  if (!registry_config_path.empty()) {
    settings.push_back({kRegistrySection, "config_path", Quote(registry_config_path)});
  }
  std::string out;
  std::string section;
  std::istringstream in(default_config);
  for (std::string line; std::getline(in, line);) {
    std::string trimmed = Trim(line);
    if (!trimmed.empty() && trimmed[0] == '[') section = trimmed;
    auto eq = trimmed.find('=');
    if (eq != std::string::npos && trimmed[0] != '#' && trimmed[0] != '[') {
      std::string key = Trim(trimmed.substr(0, eq));
      for (auto& s : settings) {
        if (s.section == section && s.key == key) {
          line = line.substr(0, line.find_first_not_of(" \t")) + key + " = " + s.value;
          s.found = true;
        }
      }
    }
    out += line + "\n";
  }
  for (const auto& s : settings) {
    if (!s.found) {
      return InvalidArgument("containerd's default config has no '" + s.key + "' in section '" +
                             (s.section.empty() ? "(top level)" : s.section) + "'");
    }
  }
  return out;
}

}  // namespace nodelet::testing
