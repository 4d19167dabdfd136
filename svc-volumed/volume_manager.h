// VolumeManager: volumed's desired state of the world (the pods the supervisor wants, with the
// ConfigMaps and Secrets), its actual state (the volumes set up under ROOT/pods/UID/volumes, by
// plugin: volume_plugin.h), and the reconciler that moves one towards the other. It tears down
// what is no longer desired before it sets up what is, one operation per volume at a time.
//
// A pod's volumes are torn down (and its directory removed) only when nothing can use them any
// more: the pod is not desired, every pod source has reported, and podworkerd's complete report
// of the pods whose containers may exist does not name it, so every container and the sandbox
// of the pod are stopped (the kubelet's order). Until then a deleted pod keeps its volumes
// through its grace period, and a restart of any service changes nothing of that.
//
// The reconciler runs on change, not on a poll: SetDesired marks the pods whose volumes it
// changes (a new pod, a changed pod, a ConfigMap or Secret it uses that changed, a pod that
// went), and a pass works only on those and on failed operations whose retry is due. A failed
// operation (a volume's set-up, a pod's tear-down, the removal of a leftover directory) is
// logged with its path and why (once, and again when the reason changes) and retried after
// 500 ms, doubling up to 2 min 8 s. A pod directory is removed in bounded steps (TreeRemover,
// at most kRemovalOpsPerPass entries per pass for all pods together): a tree of any depth or
// file count takes as many passes as it needs, one per turn of the loop, and the other pods'
// set-ups and the requests are served in between. Once every pod source has reported, ROOT/pods
// is also swept every 2 s for directories of pods nobody wants (left by an earlier run, or made
// by another process after a tear-down). NextReconcile says when a pass has work; the service
// runs one then. Everything is idempotent, so a restart rebuilds the actual state by looking
// (mountinfo, directories) and never mounts twice.
//
// Single-threaded (volumed's main loop).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "lib/common/clock.h"
#include "lib/common/status.h"
#include "lib/common/tree_remover.h"
#include "lib/pod/pod.h"
#include "svc-volumed/atomic_writer.h"
#include "svc-volumed/mounter.h"
#include "svc-volumed/volume_plugin.h"

namespace nodelet::volumed {

struct DesiredState {
  std::map<std::string, std::shared_ptr<const pod::Pod>> pods;  // by uid
  std::map<std::string, ConfigObject> config_maps;              // by "namespace/name"
  std::map<std::string, ConfigObject> secrets;
  // Every pod source has reported: pods on disk that are not desired may be removed.
  bool sources_ready = false;
  // The pods whose containers may still exist or be started (podworkerd's report, through the
  // supervisor): their volumes stay even when they are no longer desired, because a container
  // in its grace period still uses them. Only a complete report (`in_use_known`) lets volumed
  // tear anything down.
  std::set<std::string> in_use;
  bool in_use_known = false;
};

struct VolumeInfo {
  std::string pod_name;
  std::string name;
  std::string plugin;  // empty-dir, host-path, downward-api, configmap, secret
  std::string host_path;
  std::string state;  // desired, mounted, failing
  std::string error;
};

struct PodVolumesInfo {
  bool known = false;
  bool ready = false;
  std::string reason;
  std::vector<VolumeInfo> volumes;
};

// Exponential back-off of one failing operation: 500 ms, doubling to 2 min 8 s.
class RetryBackoff {
 public:
  static constexpr std::chrono::milliseconds kInitial{500};
  static constexpr std::chrono::milliseconds kMax{128000};
  // Not before `next()` again.
  void Failed(MonoTime now);
  void Succeeded() { *this = RetryBackoff(); }
  bool Due(MonoTime now) const { return next_ <= now; }
  bool failing() const { return backoff_.count() != 0; }
  MonoTime next() const { return next_; }

 private:
  MonoTime next_{};
  std::chrono::milliseconds backoff_{0};
};

class VolumeManager {
 public:
  // With the host's mount table (MounterImpl).
  VolumeManager(std::string root_dir, const Clock& clock);
  // With `mounter`, which must outlive the manager (unit tests pass a FakeMounter).
  VolumeManager(std::string root_dir, const Clock& clock, Mounter& mounter);

  // Replaces the desired state and marks what changed for the next pass; a state equal to the
  // current one marks nothing.
  void SetDesired(DesiredState desired);
  // One pass over what is due (see above). Returns the pods whose readiness or volume content
  // changed, and those torn down.
  std::set<std::string> Reconcile();
  // When Reconcile next has work: MonoTime{} (now) after a change, else the earliest retry of a
  // failed operation or the next sweep; MonoTime::max() when nothing is due.
  MonoTime NextReconcile() const;

  PodVolumesInfo Get(const std::string& uid) const;
  // Every known pod's volumes (all pods when uid is empty).
  std::vector<std::pair<std::string, VolumeInfo>> Report(const std::string& uid) const;

  // ROOT/pods/UID; a uid that is not one path component (see lib/common/safe_path.h) is an
  // error, so no pod data names a directory outside ROOT/pods.
  Result<std::string> PodDir(const std::string& uid) const;
  uint64_t operations() const { return operations_; }
  uint64_t failures() const { return failures_; }

  static constexpr std::chrono::seconds kSweepPeriod{2};
  // Entries (files, links, directories) removed or looked at per pass, for all pods together.
  static constexpr size_t kRemovalOpsPerPass = 20000;

 private:
  struct Vol {
    VolumePlugin* plugin = nullptr;  // from the volume's source, when the pod is new or changed
    PluginVolumeState plugin_state;
    bool ready = false;
    std::string error;
    RetryBackoff retry;
  };
  // The removal of a pod directory, across passes, and how its last attempt failed.
  struct Removal {
    std::unique_ptr<TreeRemover> tree;  // the directory's mounts are gone once it is set
    std::string error;                  // logged once per reason
  };
  struct PodState {
    std::map<std::string, Vol> volumes;  // by volume name
    RetryBackoff teardown;               // once the pod is no longer desired
    Removal removal;
  };
  struct Leftover {
    RetryBackoff retry;
    bool reported = false;  // its failure was counted once
    Removal removal;
  };

  // Anything may be removed at all: every source reported, and podworkerd's report of the pods
  // in use is complete.
  bool Removing() const;
  // The pod is not desired and nothing may use its volumes any more.
  bool MayTearDown(const std::string& uid) const;
  void TearDownUndesired(MonoTime now, std::set<std::string>* changed);
  // True when the pod's directory is gone; false when its removal goes on at the next pass.
  Result<bool> TearDownPod(const std::string& uid, PodState& ps);
  // Unmounts under `dir` (first time) and removes what the pass's budget allows of it.
  Result<bool> RemovePodDir(const std::string& dir, Removal& removal);
  // Logs a failed removal (once per reason); `now` for its retry.
  void RemovalFailed(const std::string& what, const Status& s, Removal& removal);
  void SweepLeftovers(MonoTime now);
  // Sets up the volumes of one desired pod that are due; true when the pod changed.
  bool SetUpPod(const pod::Pod& pod, bool spec_changed, MonoTime now);
  // Every volume of a pod with `volumes` volumes is held and set up.
  static bool AllReady(const PodState& ps, size_t volumes);
  void ScheduleNext();

  std::string root_;
  const Clock& clock_;
  std::unique_ptr<Mounter> own_mounter_;
  Mounter& mounter_;
  VolumePlugins plugins_;
  DesiredState desired_;
  std::map<std::string, PodState> pods_;
  // The next pass's work besides due retries.
  std::set<std::string> changed_pods_;  // desired pods to set up again
  bool teardown_pending_ = false;       // a pod went
  bool sweep_pending_ = false;          // sweep ROOT/pods at the next pass
  MonoTime next_sweep_{};
  MonoTime next_retry_ = MonoTime::max();
  size_t removal_budget_ = 0;   // what is left of this pass's kRemovalOpsPerPass
  bool removal_going_ = false;  // a removal was cut short by the budget: another pass at once
  std::map<std::string, Leftover> leftovers_;  // leftover pod directories that failed to go
  uint64_t operations_ = 0, failures_ = 0;
};

}  // namespace nodelet::volumed
