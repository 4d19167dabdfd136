// ContainerLogManager: the kubelet's container log manager (pkg/kubelet/logs) and the log
// housekeeping of its runtime manager, for the logs under podworkerd's log directory LOG-DIR:
//
// - rotation: every monitor interval, each running container's log
//   (LOG-DIR/pods/NS_NAME_UID/CONTAINER/N.log) that reached the maximum size is renamed to
//   N.log.YYYYMMDD-HHMMSS (UTC) and the runtime is asked to reopen it (CRI ReopenContainerLog);
//   when that fails, the file is renamed back and the next pass tries again. Before that, older
//   rotated files are gzip-compressed (N.log.STAMP.gz, written through N.log.STAMP.tmp) and the
//   oldest removed, so that with the file about to be rotated and the new one at most
//   max_files files remain (the newest rotated file stays uncompressed: a reader may still
//   follow it). What is lost is what the kubelet loses: the oldest rotated files.
// - the /var/log/containers-style symlinks for log shippers,
//   LOG-DIR/containers/POD_NAMESPACE_CONTAINER-CONTAINERID.log -> the container's log: made
//   when podworkerd creates a container (CreateContainerLogSymlink), removed with it
//   (RemoveContainerLogSymlinks) and swept when their container is gone, or exited and the
//   link dangles.
// - a removed pod's log directory LOG-DIR/pods/NS_NAME_UID is deleted once the pod is neither
//   desired nor has any sandbox or container in the runtime (the kubelet's
//   evictPodLogsDirectories).
//
// Containers and manifests are hostile: every name a path is built from is checked, every
// directory is opened one component at a time without following symlinks, and files are
// renamed, opened and removed relative to those directory fds, so nothing outside
// LOG-DIR/pods and LOG-DIR/containers is ever touched.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "lib/common/clock.h"
#include "lib/common/status.h"
#include "lib/cri/runtime_service.h"
#include "lib/service/blocking_executor.h"
#include "lib/service/event_loop.h"

namespace nodelet::podworkerd {

struct ContainerLogPolicy {
  int64_t max_size_bytes = 10 * 1024 * 1024;  // --container-log-max-size
  int max_files = 5;                          // --container-log-max-files, at least 2
  std::chrono::milliseconds monitor_interval{std::chrono::seconds(10)};
};

// The clean-up of removed pods' and containers' logs runs at every this many rotation passes
// (every minute by default, as the kubelet's container GC, which does it).
inline constexpr int kLogCleanupEveryPasses = 6;

// LOG-DIR/containers/POD_NAMESPACE_CONTAINER-ID.log for a container; an error when a name
// could not be one path component.
Result<std::string> ContainerLogSymlinkPath(const std::string& log_dir, const std::string& pod_name,
                                            const std::string& pod_namespace,
                                            const std::string& container_name,
                                            const std::string& container_id);
// Makes (or replaces) that symlink, pointing at `target` (the container's log path), in
// LOG-DIR/containers (made at podworkerd's start: an error when it is missing).
Status CreateContainerLogSymlink(const std::string& log_dir, const std::string& pod_name,
                                 const std::string& pod_namespace,
                                 const std::string& container_name, const std::string& container_id,
                                 const std::string& target);
// Removes every symlink of the container (by the "-ID.log" ending of its name). Returns how many.
Result<int> RemoveContainerLogSymlinks(const std::string& log_dir, const std::string& container_id);

struct LogRotationResult {
  int rotated = 0;     // logs renamed and reopened
  int compressed = 0;  // rotated files gzipped
  int removed = 0;     // oldest rotated files removed
  Status status;       // the first failure
};

struct LogCleanupResult {
  int pod_dirs_removed = 0;
  std::vector<std::string> removed_pod_dirs;  // their names (NS_NAME_UID)
  int symlinks_removed = 0;
  Status status;  // the first failure
};

class ContainerLogManager {
 public:
  // The loop's clock times the passes.
  ContainerLogManager(EventLoop& loop, cri::RuntimeService& runtime, std::string log_dir,
                      ContainerLogPolicy policy);
  // Waits for a pass in flight; none starts afterwards.
  ~ContainerLogManager();
  ContainerLogManager(const ContainerLogManager&) = delete;
  ContainerLogManager& operator=(const ContainerLogManager&) = delete;

  // One rotation pass over the runtime's running containers (only those nodelet manages).
  LogRotationResult RotateLogs();
  // Rotates the log at `log_path` of the running container `container_id` when it reached the
  // maximum size (and reopens it when it is missing).
  LogRotationResult RotateLog(const std::string& container_id, const std::string& log_path);
  // Deletes the log directories of pods not in `live_pods` that the runtime has no sandbox or
  // container of, and the symlinks whose container the runtime does not list or that dangle
  // and whose container exited.
  LogCleanupResult CleanUp(const std::set<std::string>& live_pods);

  // Runs RotateLogs every monitor interval and, once SetDesired was called, CleanUp: a timer on
  // the loop, the pass on a thread of the manager's executor; each interval counts from the end
  // of the last pass. On the loop's thread.
  void Start();
  // The pods podworkerd runs (uids). Thread-safe.
  void SetDesired(std::set<std::string> pod_uids);
  // The running containers of nodelet's pods as plegd's cache shows them (ids): from then on a
  // rotation pass takes them from here instead of listing the runtime (a list of every running
  // container every 10 s was most of an idle pass at 100 pods). Thread-safe.
  void SetRunning(std::set<std::string> container_ids);
  // Heartbeat counters (name, value). Thread-safe.
  std::vector<std::pair<std::string, uint64_t>> Counters() const;
  // Passes run so far, whole (rotation, and clean-up when due). Thread-safe.
  uint64_t passes() const { return passes_.load(); }
  // Whether a pass is on the executor (its continuation not yet run on the loop).
  bool pass_running() const { return pass_running_; }

 private:
  // The timer's: starts a pass on the executor unless one runs.
  void StartPass();
  // One pass (the executor's thread): rotation, then the clean-up every few passes.
  void Pass(const std::optional<std::set<std::string>>& live);

  cri::RuntimeService& runtime_;
  const Clock& clock_;
  std::string log_dir_;
  ContainerLogPolicy policy_;

  mutable std::mutex mu_;
  std::optional<std::set<std::string>> desired_pods_;
  std::optional<std::set<std::string>> running_;  // SetRunning's
  // RotateLogs, one pass at a time: the log path of each running container seen by the last
  // pass, by container id.
  std::mutex rotate_mu_;
  std::map<std::string, std::string> log_paths_;
  // The passes' own state (the executor's one thread).
  std::string last_rotation_error_, last_cleanup_error_;
  int passes_to_cleanup_ = 0;  // the first clean-up comes with the first pass that can make it
  std::atomic<uint64_t> passes_{0};
  bool pass_running_ = false;  // on the loop

  std::atomic<uint64_t> rotations_{0}, rotation_failures_{0}, compressed_{0}, removed_{0},
      pod_dirs_removed_{0}, symlinks_removed_{0};
  EventLoop::Timer timer_;
  // Last: stopped (a pass in flight waited for) before what the pass uses goes.
  BlockingExecutor executor_;
};

}  // namespace nodelet::podworkerd
