// What the node and its pods use, read from the kernel as the kubelet's cAdvisor reads it
// (docs/resources.md, "Usage"): cgroup CPU and memory counters (v1 or v2), the node's memory
// from /proc/meminfo and the root cgroup, filesystems by statvfs, directories by a walk.
//
// Shared by the supervisor's stats collector (/stats/summary, `nodeletctl top`, the usage
// metrics) and its eviction manager. Every path here is built from configuration and from pod
// UIDs that are plain cgroup components; directory walks never follow a symlink nor leave the
// filesystem they start on, since pods write those directories.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lib/common/status.h"

namespace nodelet::stats {

struct CpuUsage {
  uint64_t usage_core_nanoseconds = 0;  // cumulative, since the cgroup was made
};

struct MemoryUsage {
  int64_t usage_bytes = 0;
  // usage minus inactive file pages, at least 0: what the kubelet evicts and OOM-ranks on.
  int64_t working_set_bytes = 0;
  int64_t rss_bytes = 0;
  int64_t page_faults = 0;
  int64_t major_page_faults = 0;
};

struct CgroupUsage {
  std::optional<CpuUsage> cpu;        // absent when the counters are unreadable
  std::optional<MemoryUsage> memory;  // likewise
  std::optional<int64_t> processes;   // tasks (threads included): pids.current
};

// The cgroup at cgroupfs path `cgroup` ("/kubepods/burstable/pod<UID>"), in the v1 cpuacct,
// memory and pids hierarchies under `fs_root` or, on a v2 host, the unified one.
CgroupUsage ReadCgroupUsage(const std::string& fs_root, const std::string& cgroup);

// The pod's cgroup path under `cgroup_root` ("/" or "/a/b"): ROOT/kubepods/pod<UID>,
// ROOT/kubepods/burstable/pod<UID> or ROOT/kubepods/besteffort/pod<UID>, whichever exists (with
// `systemd`, the slices' paths: /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-
// pod<UID>.slice, lib/service/cgroup_names.h); nullopt when none does or `uid` is not a plain
// cgroup component.
std::optional<std::string> FindPodCgroup(const std::string& fs_root, const std::string& cgroup_root,
                                         const std::string& uid, bool systemd = false);

struct NodeMemory {
  int64_t capacity_bytes = 0;     // MemTotal
  int64_t working_set_bytes = 0;  // of the root cgroup
  int64_t usage_bytes = 0;
  int64_t available_bytes = 0;  // capacity minus working set (the eviction signal)
};

// The node's memory as the kubelet measures memory.available: MemTotal from PROC/meminfo, the
// working set of the root cgroup (v1: memory.usage_in_bytes minus total_inactive_file of the
// root memory cgroup; v2, whose root has no such files: MemTotal - MemFree - Inactive(file) from
// meminfo).
Result<NodeMemory> ReadNodeMemory(const std::string& fs_root, const std::string& proc = "/proc");

// The node's cumulative CPU time (root cgroup's cpuacct.usage on v1; on v2 the sum of
// /proc/stat's busy columns in ns).
Result<CpuUsage> ReadNodeCpu(const std::string& fs_root, const std::string& proc = "/proc");

struct FsStats {
  int64_t capacity_bytes = 0;
  int64_t available_bytes = 0;  // to unprivileged users (f_bavail), as the kubelet
  int64_t used_bytes = 0;       // capacity minus free
  int64_t inodes = 0;
  int64_t inodes_free = 0;
  int64_t inodes_used = 0;
};

// statvfs of the filesystem holding `path`; an error names the path.
Result<FsStats> StatFilesystem(const std::string& path);

struct DirUsage {
  int64_t used_bytes = 0;  // allocated blocks (st_blocks * 512), as du
  int64_t inodes_used = 0;
};

// The bytes and inodes under `path` (itself included), without following symlinks or crossing
// into other filesystems; hard links counted once. Missing path: zeros. Unreadable entries are
// skipped.
DirUsage MeasureDirectory(const std::string& path);

// How far one directory walk may go. A walk holds one open directory per level it is in, so its
// depth is always capped; deeper subtrees are left out (and the walk is not complete).
struct DirWalkLimits {
  int64_t max_entries = INT64_MAX;  // entries looked at (stat) before the walk stops
  int max_depth = 128;              // directory levels below `path`
};

struct DirMeasurement {
  DirUsage usage;
  int64_t entries = 0;   // entries looked at
  bool complete = true;  // false: a limit stopped the walk, `usage` is a lower bound
};

// MeasureDirectory within `limits` (MeasureDirectory is this with the default limits). With
// `by_child`, also each top-level entry's own share (its subtree; a hard link is counted in the
// first subtree that has it), keyed by its name.
DirMeasurement MeasureDirectoryBounded(const std::string& path, const DirWalkLimits& limits,
                                       std::map<std::string, DirUsage>* by_child = nullptr);

// True when `fs_root` is a cgroup v2 (unified) mount: it has cgroup.controllers.
bool IsCgroupV2(const std::string& fs_root);

// When the node booted, in Unix seconds (PROC/stat's btime).
Result<int64_t> ReadBootTime(const std::string& proc = "/proc");

// The node's process IDs as the kubelet's pid.available reads them: the most there can be
// (the smaller of kernel.pid_max and kernel.threads-max) and the tasks there are (threads
// included: the total of /proc/loadavg, as sysinfo's procs).
struct NodePids {
  int64_t max = 0;
  int64_t in_use = 0;
};
Result<NodePids> ReadNodePids(const std::string& proc = "/proc");

}  // namespace nodelet::stats
