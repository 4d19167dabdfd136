// Leak checks for tests that run real containers: what a stopped pod, a removed pod or a stopped
// node must not leave behind (containerd shims, container processes, processes naming the test's
// directory, mounts under it, cgroups of its sandboxes and containers). Shared by the chaos soak
// (tests/chaos) and the runtime fault tests (tests/integration/runtime_faults_test.cc).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
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

// TestCgroupRoot (the --cgroup-root of a test's nodelet) and RemoveCgroupTree are in harness.h.

// The pod cgroups (pod<UID> directories) under ROOT/kubepods, ROOT/kubepods/burstable and
// ROOT/kubepods/besteffort, in any hierarchy.
std::vector<std::string> PodCgroupsUnder(const std::string& root);

// Network interfaces named like the private containerds' bridges (nlbrN, tests/testing/
// pod_network.h), whoever made them.
std::vector<std::string> PodNetworkBridges();

// The pod IPs that host-local has allocated for `network` in `ipam_data_dir` (it writes one file
// per allocated IP, named by the IP, beside last_reserved_ip.N and a lock file).
std::set<std::string> AllocatedPodIps(const std::string& ipam_data_dir, const std::string& network);

// One line per difference between the IPs allocated in `ipam_data_dir` for `network` and
// `expected` (the IPs of the live pod-network sandboxes): "pod IP X allocated, no live sandbox
// has it", "sandbox IP X is not allocated"; empty when they are the same.
std::vector<std::string> CheckIpamHolds(const std::string& ipam_data_dir,
                                        const std::string& network,
                                        const std::set<std::string>& expected);

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
  // When set and the containerd has a pod network: its IPAM dir must hold exactly these IPs
  // (after the removal of every pod: none).
  std::optional<std::set<std::string>> pod_ips;
};

// One line per leak found ("containerd shim 1234 left", "mount left: /tmp/...", ...); empty when
// nothing is left.
std::vector<std::string> FindLeaks(const LeakScope& scope);

}  // namespace nodelet::testing
