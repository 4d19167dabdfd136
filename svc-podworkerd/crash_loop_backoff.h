// CrashLoopBackoff: the kubelet's per-container restart backoff (flowcontrol.Backoff keyed by
// pod, container name and spec hash). The first restart of an exited container is immediate;
// after that each restart waits twice as long as the one before, from 10 s up to 300 s, and a
// container that ran for 10 minutes without exiting starts from the beginning again.
#pragma once

#include <chrono>
#include <map>
#include <string>

#include "lib/common/clock.h"

namespace nodelet::podworkerd {

struct CrashLoopPolicy {
  std::chrono::milliseconds initial{10000};
  std::chrono::milliseconds max{300000};
  // A container that kept running this long resets its backoff.
  std::chrono::milliseconds reset_after{600000};
};

class CrashLoopBackoff {
 public:
  CrashLoopBackoff(const Clock& clock, CrashLoopPolicy policy) : clock_(clock), policy_(policy) {}

  // Key for a container: "uid/name/hash".
  static std::string Key(const std::string& pod_uid, const std::string& container,
                         uint64_t spec_hash) {
    return pod_uid + "/" + container + "/" + std::to_string(spec_hash);
  }

  // True when the container, which exited at `finished_at`, may not be restarted yet: the
  // delay runs from the container's exit, as in the kubelet. `remaining` says for how long.
  bool InBackoff(const std::string& key, MonoTime finished_at, Duration* remaining) const {
    auto it = entries_.find(key);
    if (it == entries_.end()) return false;
    auto until = finished_at + it->second.delay;
    auto now = clock_.Now();
    if (now >= until) return false;
    if (remaining) *remaining = until - now;
    return true;
  }

  // Records a restart; `ran_for` is how long the previous instance ran. Returns the delay that
  // the next restart will wait.
  Duration RecordRestart(const std::string& key, Duration ran_for) {
    auto& e = entries_[key];
    if (e.delay == Duration::zero() || ran_for >= policy_.reset_after) {
      e.delay = policy_.initial;
    } else {
      e.delay = std::min<Duration>(e.delay * 2, policy_.max);
    }
    return e.delay;
  }

  // Forgets every key of a pod (it was removed).
  void ForgetPod(const std::string& pod_uid) {
    const std::string prefix = pod_uid + "/";
    for (auto it = entries_.lower_bound(prefix);
         it != entries_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
      it = entries_.erase(it);
    }
  }

  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    Duration delay = Duration::zero();
  };
  const Clock& clock_;
  CrashLoopPolicy policy_;
  std::map<std::string, Entry> entries_;
};

}  // namespace nodelet::podworkerd
