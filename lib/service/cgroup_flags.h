// The kubelet's pod cgroup flags: --cgroups-per-qos (default true), --cgroup-driver (cgroupfs, the
// default, or systemd: docs/resources.md) and --cgroup-root (default "/"). The supervisor (nodelet)
// takes them and passes them to podworkerd, which takes the same flags and makes the pod cgroups
// (svc-podworkerd/pod_cgroups.h). Header-only.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "lib/service/cgroup_names.h"

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

// "" when `root` is a valid --cgroup-root for some driver (the syntax of a path of plain
// components), else the reason; CgroupFlagsProblem checks it against the chosen driver.
inline std::string CgroupRootProblem(const std::string& root) {
  return ParseCgroupRoot(root, false, nullptr);
}

// "" when the flags go together, else the reason: with the systemd driver --cgroup-root must be
// "/" or a slice's path.
inline std::string CgroupFlagsProblem(const CgroupFlags& flags) {
  std::string problem = ParseCgroupRoot(flags.root, flags.driver == "systemd", nullptr);
  return problem.empty() ? "" : "--cgroup-root " + problem;
}

inline void AddCgroupOptions(CLI::App& app, CgroupFlags& flags) {
  app.add_option("--cgroups-per-qos", flags.per_qos,
                 "Make a cgroup per pod under kubepods/, kubepods/burstable/ and "
                 "kubepods/besteffort/ and run the pod's containers in it (true/false)")
      ->default_str("true");
  app.add_option("--cgroup-driver", flags.driver,
                 "How pod cgroups are made: cgroupfs (directories written directly) or systemd "
                 "(slices made through systemd's D-Bus API); the runtime must use the same "
                 "(containerd: SystemdCgroup = false or true)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            if (text == "cgroupfs" || text == "systemd") return "";
            return "\"" + text + "\" is not a cgroup driver (cgroupfs, systemd)";
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
                 "The cgroup under which kubepods is made: a cgroupfs path, or with the systemd "
                 "driver a slice's path (/a.slice/a-b.slice)")
      ->check(CLI::Validator([](std::string& text) { return CgroupRootProblem(text); }, "PATH"))
      ->capture_default_str();
  // The root's form depends on the driver: checked once both are read (flags or config file),
  // before anything is made.
  app.parse_complete_callback([&flags] {
    if (std::string problem = CgroupFlagsProblem(flags); !problem.empty()) {
      throw CLI::ValidationError(problem);
    }
  });
}

}  // namespace nodelet
