// Pod cgroups, the kubelet's way with the cgroupfs driver (docs/resources.md).
//
// Under --cgroup-root (default "/") a `kubepods` cgroup holds one cgroup per pod: Guaranteed
// pods directly (kubepods/pod<UID>), Burstable ones under kubepods/burstable/, BestEffort ones
// under kubepods/besteffort/. The pod's cgroup is made before its sandbox and given to CRI as
// the sandbox's cgroup_parent, so containerd puts the sandbox's and every container's cgroup
// inside it. Its limits are the kubelet's ResourceConfigForPod: cpu shares from the pod's cpu
// requests (2 for BestEffort), a CFS quota over a 100 ms period from its cpu limits and a memory
// limit from its memory limits, the last two only when every container declares that limit (and
// always for Guaranteed). A pod's requests or limits are the sum over its containers, or the
// largest of its init containers' when that is larger.
//
// cgroup v1 (each controller its own hierarchy, as on a hybrid host): the cgroup is made in the
// cpu, memory and pids hierarchies and the limits written to cpu.shares, cpu.cfs_period_us,
// cpu.cfs_quota_us and memory.limit_in_bytes; runc makes the path in the other hierarchies
// itself. cgroup v2: cpu, memory and pids are enabled down the path (cgroup.subtree_control) and
// the limits written to cpu.weight, cpu.max and memory.max.
//
// Removal is rmdir only, deepest first, in every hierarchy: it removes nothing that still has a
// process, and an error names what stayed.
//
// With the systemd driver (--cgroup-driver systemd) the same cgroups are slice units named as the
// kubelet names them (lib/service/cgroup_names.h): kubepods.slice, kubepods-burstable.slice,
// kubepods-besteffort.slice and kubepods[-QOS]-pod<UID with '_' for '-'>.slice. systemd makes
// them and writes their limits (CPUShares or CPUWeight, CPUQuotaPerSecUSec, MemoryLimit or
// MemoryMax) through SliceManager, and removes them when they are stopped; CRI gets the slice's
// full path as the sandbox's cgroup_parent, under which containerd (SystemdCgroup = true) puts
// each container in a cri-containerd-<ID>.scope.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "lib/common/status.h"
#include "lib/pod/node_resources.h"
#include "lib/pod/pod.h"
#include "svc-podworkerd/systemd_slices.h"

namespace nodelet::podworkerd {

struct PodCgroupConfig {
  bool enabled = false;                    // --cgroups-per-qos
  std::string root = "/";                  // --cgroup-root: an absolute cgroupfs path
  std::string fs_root = "/sys/fs/cgroup";  // where the hierarchies are mounted (tests: a tree)
  bool systemd = false;                    // --cgroup-driver systemd
  std::shared_ptr<SliceManager> slices;    // with systemd: how slices are made and removed
};

// Whether `root` is "/" or an absolute path of plain components ([A-Za-z0-9._-], no "." or
// ".."), as --cgroup-root must be.
Status ValidateCgroupRoot(const std::string& root);

// "/ROOT/kubepods[/burstable|/besteffort]/pod<UID>" for the pod's QoS class (with systemd the
// slice's path, "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<UID>.slice"); an
// error when the UID is not a plain component.
Result<std::string> PodCgroupName(const PodCgroupConfig& config, const pod::Pod& pod);

struct PodCgroupLimits {
  int64_t cpu_shares = 2;
  std::optional<int64_t> cpu_quota_us;  // with a period of kCpuPeriodUs
  std::optional<int64_t> memory_bytes;
  bool operator==(const PodCgroupLimits&) const = default;
};
inline constexpr int64_t kCpuPeriodUs = 100000;

PodCgroupLimits PodLimits(const pod::Pod& pod);

// Makes the pod's cgroup (and its parents) and writes its limits; `name` is a path from
// PodCgroupName, KubepodsName or the QoS cgroups'.
Status EnsurePodCgroup(const PodCgroupConfig& config, const std::string& name,
                       const PodCgroupLimits& limits);

// "/ROOT/kubepods" ("/kubepods.slice" with systemd).
std::string KubepodsName(const PodCgroupConfig& config);

// The kubelet's limits of the kubepods cgroup (enforceNodeAllocatableCgroups): cpu shares for
// `allocatable`'s cpu and a memory limit of its memory, no CFS quota. `allocatable` is the
// node's capacity minus --system-reserved and --kube-reserved with --enforce-node-allocatable
// pods, else the capacity (the hard eviction threshold is not taken off: eviction is meant to
// act before the kernel's OOM killer does).
PodCgroupLimits KubepodsLimits(const pod::NodeResourceList& allocatable);

// The kubelet's QoS cgroups (its qos_container_manager, without the alpha memory reservation):
// ROOT/kubepods/burstable gets cpu shares for the sum of the cpu requests (milli) of the
// Burstable pods, ROOT/kubepods/besteffort the minimum shares (2); no CFS quota and no memory
// limit on either. Makes them when missing.
Status EnsureQosCgroups(const PodCgroupConfig& config, int64_t burstable_cpu_requests_milli);
// The Burstable pods' cpu requests in thousandths, summed (for EnsureQosCgroups).
int64_t BurstableCpuRequests(const std::vector<const pod::Pod*>& pods);

// Removes the cgroup of pod `uid` wherever its QoS class put it, with whatever empty cgroups are
// left inside it, in every hierarchy. OK when there was none.
Status RemovePodCgroup(const PodCgroupConfig& config, const std::string& uid);

// The UIDs that have a pod cgroup under the root (in any hierarchy), as PodCgroupKey gives them.
std::set<std::string> PodCgroupUids(const PodCgroupConfig& config);
// How a pod's UID appears in its cgroup's name: itself, or with systemd each '-' as '_'.
// RemovePodCgroup takes either form.
std::string PodCgroupKey(const PodCgroupConfig& config, const std::string& uid);

}  // namespace nodelet::podworkerd
