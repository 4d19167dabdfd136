// The kubelet's pod cgroup flags: --cgroups-per-qos (default true), --cgroup-driver (cgroupfs;
// the default, and the only driver nodelet has so far: docs/resources.md) and --cgroup-root
// (default "/"). The supervisor (nodelet) takes them and passes them to podworkerd, which takes
// the same flags and makes the pod cgroups (svc-podworkerd/pod_cgroups.h). Header-only.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace nodelet {

struct CgroupFlags {
  bool per_qos = true;
  std::string driver = "cgroupfs";
  std::string root = "/";
  // --enforce-node-allocatable: "pods" (the default) limits the kubepods cgroup to the node's
  // allocatable; "none" (or nothing) does not.
  std::vector<std::string> enforce_node_allocatable = {"pods"};

  bool EnforcePods() const {
    for (const auto& e : enforce_node_allocatable) {
      if (e == "pods") return true;
    }
    return false;
  }
};

// A cgroup path component nodelet writes or removes: letters, digits, '.', '_', '-', at most 255
// bytes, not "." or "..". Shared by --cgroup-root, the pod cgroups and the leftover-cgroup
// clean-up (svc-podworkerd).
inline bool IsPlainCgroupComponent(const std::string& c) {
  if (c.empty() || c == "." || c == ".." || c.size() > 255) return false;
  for (char ch : c) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
    if (!ok) return false;
  }
  return true;
}

// "" when `root` is a valid --cgroup-root ("/" or an absolute path of plain components), else
// the reason.
inline std::string CgroupRootProblem(const std::string& root) {
  if (root == "/") return "";
  if (root.empty() || root[0] != '/' || root.back() == '/') {
    return "\"" + root + "\" must be \"/\" or an absolute path without a trailing \"/\"";
  }
  size_t start = 1;
  while (start <= root.size()) {
    size_t end = root.find('/', start);
    if (end == std::string::npos) end = root.size();
    if (!IsPlainCgroupComponent(root.substr(start, end - start))) {
      return "\"" + root +
             "\": each component must be letters, digits, '.', '_' or '-' (not "
             "\".\" or \"..\")";
    }
    start = end + 1;
  }
  return "";
}

inline void AddCgroupOptions(CLI::App& app, CgroupFlags& flags) {
  app.add_option("--cgroups-per-qos", flags.per_qos,
                 "Make a cgroup per pod under kubepods/, kubepods/burstable/ and "
                 "kubepods/besteffort/ and run the pod's containers in it (true/false)")
      ->default_str("true");
  app.add_option("--cgroup-driver", flags.driver,
                 "How pod cgroups are made: cgroupfs (the runtime must use cgroupfs too; "
                 "containerd: SystemdCgroup = false)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            if (text == "cgroupfs") return "";
            if (text == "systemd") {
              return "\"systemd\" is not supported by nodelet yet (slices through systemd's "
                     "D-Bus API); use cgroupfs with a runtime on cgroupfs";
            }
            return "\"" + text + "\" is not a cgroup driver (cgroupfs)";
          },
          "DRIVER"))
      ->capture_default_str();
  app.add_option("--enforce-node-allocatable", flags.enforce_node_allocatable,
                 "Levels whose allocatable is enforced with cgroups: pods (the kubepods cgroup "
                 "gets the node's allocatable cpu shares and memory limit) or none")
      ->delimiter(',')
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            if (text == "pods" || text == "none" || text.empty()) return "";
            if (text == "system-reserved" || text == "kube-reserved") {
              return "\"" + text + "\" is not supported by nodelet yet (it needs --" + text +
                     "-cgroup, which nodelet does not have)";
            }
            return "\"" + text + "\" is not an enforcement level (pods, none)";
          },
          "LEVEL"))
      ->default_str("pods");
  app.add_option("--cgroup-root", flags.root,
                 "The cgroup under which kubepods/ is made (a cgroupfs path)")
      ->check(CLI::Validator([](std::string& text) { return CgroupRootProblem(text); }, "PATH"))
      ->capture_default_str();
}

}  // namespace nodelet
