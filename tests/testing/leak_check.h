// Leak checks for tests that run real containers: what a stopped pod, a removed pod or a stopped
// node must not leave behind (containerd shims, container processes, processes naming the test's
// directory, mounts under it, cgroups of its sandboxes and containers). Shared by the chaos soak
// (tests/chaos) and the runtime fault tests (tests/integration/runtime_faults_test.cc).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <set>
#include <string>
#include <vector>

namespace nodelet::testing {

class ContainerdInstance;

// Mount points at or under `dir` in this mount namespace, latest (deepest) first, with
// mountinfo's octal escapes decoded.
std::vector<std::string> MountsUnder(const std::string& dir);

// Live processes whose command line contains `needle`, except this process and `except`.
std::vector<pid_t> ProcessesMentioning(const std::string& needle, pid_t except);

// Cgroup directories (any hierarchy under /sys/fs/cgroup, up to four levels deep) named after
// one of `ids` (containerd names a container's cgroup after its id).
std::vector<std::string> CgroupsNamed(const std::set<std::string>& ids);

struct LeakScope {
  // The test's directory: no process may name it (besides containerd), no mount may be under it.
  std::string dir;
  // Its containerd: none of its shims may be left (they exit by themselves once their last
  // sandbox is removed; waited for up to `shim_timeout`).
  const ContainerdInstance* containerd = nullptr;
  std::chrono::milliseconds shim_timeout{std::chrono::seconds(30)};
  // Every sandbox and container id seen during the test: none may have a cgroup left.
  std::set<std::string> ids;
  // Every container process seen: none may be alive.
  std::set<pid_t> container_pids;
};

// One line per leak found ("containerd shim 1234 left", "mount left: /tmp/...", ...); empty when
// nothing is left.
std::vector<std::string> FindLeaks(const LeakScope& scope);

}  // namespace nodelet::testing
