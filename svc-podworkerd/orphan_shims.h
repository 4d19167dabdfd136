// Orphaned containerd shims: shim processes of nodelet's containerd that serve an id nothing can
// reach any more.
//
// How one is made (docs/chaos.md, "A shim left by a cancelled RunPodSandbox"): containerd's
// RunPodSandbox writes the sandbox's container record, then starts its shim and asks it to create
// the task. When the caller dies (podworkerd SIGKILLed) while the shim creates the task, the call's
// context is cancelled: containerd logs "failed to create shim task: context canceled", runs the
// shim binary's cleanup ("cleaning up dead shim"), deletes the container record, and answers the
// dead caller with the error. The shim process itself stays, serving an id that CRI never listed
// and containerd no longer knows. A StopPodSandbox cancelled the same way can leave a removed
// sandbox's shim too.
//
// The evidence that a shim is orphaned, all three at once:
//   1. CRI lists no sandbox and no container with the shim's id (any state);
//   2. containerd's containers service has no record of the id: containerd writes the record
//      before it starts a shim and deletes it only after the shim's task is gone or its creation
//      failed, so a RunPodSandbox in flight (shim started, CRI not listing it yet) always has its
//      record, and so does everything containerd loads after a restart (its metadata is on disk,
//      unlike CRI's in-memory listing, which can be partial right after a restart);
//   3. the same process (pid and start time) was found so in the previous sweep as well, so a
//      shim that is exiting after a normal removal is given a period to do so. The final sweep
//      when podworkerd stops ends what it finds at once: podworkerd makes no CRI calls then.
// An orphan is ended by pidfd with SIGKILL, its descendants first (the shim is their subreaper),
// and the empty cgroups its descendants were in whose last component is the shim's id (a
// sandbox's container cgroup) are removed with rmdir. Only shims started for nodelet's containerd
// (`-address` = its socket) in CRI's namespace (`-namespace k8s.io`) are ever considered.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "lib/common/clock.h"
#include "lib/common/status.h"

namespace nodelet::podworkerd {

struct ShimProcess {
  int pid = 0;
  std::string id;           // its -id argument (a sandbox id, containerd groups a pod's tasks)
  std::string ns;           // its -namespace argument
  uint64_t start_time = 0;  // /proc/PID/stat field 22 (clock ticks after boot): pid reuse check
};

// The containerd shims (argv[0] a `containerd-shim*` binary) whose `-address` is
// `containerd_socket` (a path, without "unix://"), read from `proc_root`.
std::vector<ShimProcess> ListShims(const std::string& containerd_socket,
                                   const std::string& proc_root = "/proc");

// The pids of the shims in ListShims serving `id` (e.g. a sandbox podworkerd just removed).
std::vector<int> OrphanShimPids(const std::string& id, const std::string& containerd_socket,
                                const std::string& proc_root = "/proc");

// What a sweep needs from the world; real ones in podworkerd, fakes in the unit test.
struct OrphanSweepDeps {
  std::function<std::vector<ShimProcess>()> list_shims;
  // Every sandbox and container id CRI lists, in any state.
  std::function<Result<std::set<std::string>>()> cri_ids;
  // Whether containerd holds a container record of the id (ContainerdTasks::ContainerKnown).
  std::function<Result<bool>(const std::string& id)> containerd_knows;
  // Ends the shim (EndShimTree).
  std::function<Status(const ShimProcess&)> end;
};

struct OrphanSweepResult {
  std::vector<ShimProcess> ended;
  std::vector<std::pair<ShimProcess, Status>> failed;  // found orphaned, could not be ended
  int suspects = 0;  // found orphaned once, to be ended at the next sweep if still so
  Status error;      // the sweep decided nothing (CRI could not list)
};

class OrphanShimSweeper {
 public:
  // `ns`: CRI's containerd namespace ("k8s.io"); shims of other namespaces are never touched.
  OrphanShimSweeper(std::string ns, OrphanSweepDeps deps);

  // One sweep. `final_sweep`: end orphans found now without waiting for a second sighting.
  OrphanSweepResult Sweep(bool final_sweep = false);

 private:
  std::string ns_;
  OrphanSweepDeps deps_;
  std::map<int, ShimProcess> suspects_;  // by pid, from the previous sweep
};

// Ends a shim and every process below it with SIGKILL through pidfds (the shim only if its start
// time is still `shim.start_time`), waits up to `timeout` for them to exit, then removes with
// rmdir the cgroups (every hierarchy) its descendants were in whose last component is `shim.id`,
// and `/NS/ID` (the task's cgroup in containerd's CRI layout), which a cancelled start can leave
// empty with nothing in it.
// The timeout is measured on `clock`.
Status EndShimTree(const Clock& clock, const ShimProcess& shim, std::chrono::milliseconds timeout,
                   const std::string& proc_root = "/proc",
                   const std::string& cgroup_root = "/sys/fs/cgroup");

}  // namespace nodelet::podworkerd
