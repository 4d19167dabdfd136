// PodLifecycle: the kubelet's pod worker state machine (pod_workers.go), without threads or I/O.
//
// Each pod has one serialized worker that moves through syncing → terminating → terminated.
// Updates that arrive while the worker is busy coalesce to the latest; a pending kill is never
// overwritten by a sync; the grace period can only shrink; a terminated pod's worker ignores
// updates until it is forgotten. The owner runs each returned Work item (on any thread), then
// calls Complete() for that pod, which returns the pod's next Work, if any.
//
// Spec is the pod type carried along (lib/pod's Pod in podworkerd; anything in tests).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace nodelet::podworkerd {

enum class UpdateType {
  kCreate,  // a new pod from the pod manager
  kUpdate,  // its spec changed
  kSync,    // periodic resync or a PLEG event: nothing changed in the spec
  kKill,    // delete it (or it must stop: evicted, failed admission, orphan)
};

enum class WorkKind {
  kSync,         // make the runtime match the spec
  kTerminating,  // stop every container within the grace period, then the sandbox
  kTerminated,   // clean up what is left (sandbox removal, volumes, status finalisation)
};

enum class LifecyclePhase { kSyncing, kTerminating, kTerminated };

inline constexpr int64_t kDefaultGracePeriodSeconds = 30;
// The kubelet's minimum for a graceful stop.
inline constexpr int64_t kMinimumGracePeriodSeconds = 2;

template <typename Spec>
struct PodUpdate {
  std::string uid;
  UpdateType type = UpdateType::kSync;
  std::shared_ptr<const Spec> pod;
  // For kKill: the grace period to use (already the pod's terminationGracePeriodSeconds or an
  // override); nullopt: the pod's own or the default.
  std::optional<int64_t> grace_period_seconds;
};

template <typename Spec>
struct Work {
  std::string uid;
  WorkKind kind = WorkKind::kSync;
  std::shared_ptr<const Spec> pod;
  int64_t grace_period_seconds = kDefaultGracePeriodSeconds;
};

template <typename Spec>
class PodLifecycle {
 public:
  // Takes an update; returns work to start now when the pod's worker is idle.
  std::optional<Work<Spec>> Update(PodUpdate<Spec> update) {
    State& s = pods_[update.uid];
    if (s.phase == LifecyclePhase::kTerminated) {
      ++ignored_;
      return std::nullopt;  // until Forget()
    }
    if (update.pod) s.pod = update.pod;
    if (update.type == UpdateType::kKill) {
      int64_t grace = std::max(update.grace_period_seconds.value_or(kDefaultGracePeriodSeconds),
                               kMinimumGracePeriodSeconds);
      if (update.grace_period_seconds && *update.grace_period_seconds == 0) grace = 0;  // force
      s.grace = s.kill_requested ? std::min(s.grace, grace) : grace;
      s.kill_requested = true;
    }
    if (s.busy) {
      s.pending = true;  // coalesces: the next work is computed from the latest state
      return std::nullopt;
    }
    return Next(update.uid, s);
  }

  // The worker finished its work. `pod_finished` is true when a sync found the pod done for
  // good (every container exited and none will restart): the pod then terminates.
  std::optional<Work<Spec>> Complete(const std::string& uid, WorkKind done, bool pod_finished) {
    auto it = pods_.find(uid);
    if (it == pods_.end()) return std::nullopt;
    State& s = it->second;
    s.busy = false;
    switch (done) {
      case WorkKind::kSync:
        if (pod_finished && !s.kill_requested) {
          s.kill_requested = true;
          s.grace = kMinimumGracePeriodSeconds;
        }
        break;
      case WorkKind::kTerminating:
        s.phase = LifecyclePhase::kTerminating;
        s.terminating_done = true;
        break;
      case WorkKind::kTerminated:
        s.phase = LifecyclePhase::kTerminated;
        s.pending = false;
        return std::nullopt;
    }
    if (s.kill_requested || s.pending) return Next(uid, s);
    return std::nullopt;
  }

  // Drops a terminated pod's worker so the uid may be used again.
  bool Forget(const std::string& uid) {
    auto it = pods_.find(uid);
    if (it == pods_.end() || it->second.phase != LifecyclePhase::kTerminated) return false;
    pods_.erase(it);
    return true;
  }

  std::optional<LifecyclePhase> Phase(const std::string& uid) const {
    auto it = pods_.find(uid);
    if (it == pods_.end()) return std::nullopt;
    return it->second.phase;
  }
  bool Busy(const std::string& uid) const {
    auto it = pods_.find(uid);
    return it != pods_.end() && it->second.busy;
  }
  // The grace period in force for a pod being killed.
  std::optional<int64_t> GracePeriod(const std::string& uid) const {
    auto it = pods_.find(uid);
    if (it == pods_.end() || !it->second.kill_requested) return std::nullopt;
    return it->second.grace;
  }
  size_t size() const { return pods_.size(); }
  uint64_t ignored_updates() const { return ignored_; }

 private:
  struct State {
    LifecyclePhase phase = LifecyclePhase::kSyncing;
    std::shared_ptr<const Spec> pod;
    bool busy = false;
    bool pending = false;
    bool kill_requested = false;
    bool terminating_done = false;
    int64_t grace = kDefaultGracePeriodSeconds;
  };

  std::optional<Work<Spec>> Next(const std::string& uid, State& s) {
    s.pending = false;
    Work<Spec> w;
    w.uid = uid;
    w.pod = s.pod;
    w.grace_period_seconds = s.grace;
    if (s.terminating_done) {
      w.kind = WorkKind::kTerminated;
    } else if (s.kill_requested) {
      s.phase = LifecyclePhase::kTerminating;
      w.kind = WorkKind::kTerminating;
    } else {
      w.kind = WorkKind::kSync;
    }
    s.busy = true;
    return w;
  }

  std::map<std::string, State> pods_;
  uint64_t ignored_ = 0;
};

}  // namespace nodelet::podworkerd
