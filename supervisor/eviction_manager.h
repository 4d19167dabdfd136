// EvictionManager: the kubelet's eviction manager, in the supervisor (docs/resources.md,
// "Eviction").
//
// A timer on the supervisor's loop asks for a sample of the node (StatsSource) every monitoring
// period (10 s, as the kubelet's); the sample's blocking reads run on a one-thread executor and
// the decision round runs on the loop with the result. Its pods are sampled too while a round
// may evict: a threshold met, or a pod with a local-storage limit (else a node-only sample,
// which costs nothing per pod; a round that finds a threshold met in one has a whole sample
// taken at once). There the manager:
// - observes memory.available, nodefs.available, nodefs.inodesFree, imagefs.available and
//   imagefs.inodesFree and pid.available, and holds MemoryPressure / DiskPressure /
//   PIDPressure (node conditions and admission)
//   while a threshold is met and for --eviction-pressure-transition-period after;
// - when a hard threshold is met, or a soft one has been for its grace period: under disk
//   pressure first asks podworkerd to reclaim (container and image GC, DesiredPods'
//   reclaim_requests) and decides again on the next sample; then evicts one pod, ranked as the
//   kubelet ranks (lib/pod/eviction.h), never a critical one. Hard thresholds kill at once
//   (grace 1 s, the kubelet's), soft ones with the pod's grace period capped by
//   --eviction-max-pod-grace-period;
// - before the thresholds, evicts every pod past its own local-storage limits (an emptyDir's
//   sizeLimit, the sum of its containers' ephemeral-storage limits, a container's own), at
//   once (1 s), as the kubelet does with LocalStorageCapacityIsolation;
// - waits, before evicting another, until the evicted pod has no running container (or 30 s,
//   the kubelet's pod clean-up timeout) and a sample taken after that.
//
// An eviction is written to ROOT/evictions (JSON, replaced atomically) before the pod manager
// sends it to podworkerd, and every supervisor reads the file back at start: a crash of the
// supervisor or of podworkerd never loses an Evicted status nor evicts the same pod twice. A
// record goes when no source has its pod any more.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "lib/common/clock.h"
#include "lib/common/status.h"
#include "lib/pod/eviction.h"
#include "lib/service/blocking_executor.h"
#include "lib/service/event_loop.h"
#include "supervisor/pod_manager.h"
#include "supervisor/service_control.h"
#include "supervisor/stats_collector.h"

namespace nodelet::supervisor {

struct EvictionManagerOptions {
  std::vector<pod::EvictionThreshold> thresholds;  // hard and soft
  std::chrono::milliseconds pressure_transition_period{std::chrono::minutes(5)};
  int64_t max_pod_grace_seconds = 0;  // soft evictions; <= 0: the pod's own
  std::chrono::milliseconds monitoring_period{std::chrono::seconds(10)};
  std::chrono::milliseconds pod_cleanup_timeout{std::chrono::seconds(30)};
  std::string records_path;  // ROOT/evictions
};

// The flags' thresholds: --eviction-hard (default pod::kDefaultEvictionHard) and
// --eviction-soft with --eviction-soft-grace-period, each with its --eviction-minimum-reclaim.
// An error names the flag.
Result<std::vector<pod::EvictionThreshold>> EvictionThresholdsFromFlags(
    const std::string& hard, const std::string& soft, const std::string& soft_grace,
    const std::string& minimum_reclaim = "");

// The observations of a sample.
pod::EvictionObservations ObserveSignals(const NodeStats& sample);

// The node conditions the eviction manager holds, shared with the node status and the pod
// manager's admission (it outlives neither). Thread-safe.
class NodePressure {
 public:
  // MemoryPressure, DiskPressure or PIDPressure.
  bool Get(std::string_view condition) const;
  void Set(bool memory, bool disk, bool pid) {
    memory_ = memory;
    disk_ = disk;
    pid_ = pid;
  }
  // The kubelet's eviction admission: under DiskPressure or PIDPressure no pod, under
  // MemoryPressure alone no BestEffort pod, is admitted (reason Evicted); critical pods always
  // are.
  AdmissionResult Admit(const pod::Pod& pod) const;

 private:
  std::atomic<bool> memory_{false}, disk_{false}, pid_{false};
};

// What the eviction manager needs of the pods: the supervisor's PodManager (through
// PodManagerEvictionPods below), or a test's stand-in. Used on the loop's thread only.
class EvictionPods {
 public:
  virtual ~EvictionPods() = default;
  virtual const std::map<std::string, std::shared_ptr<const pod::Pod>>& admitted() const = 0;
  virtual const std::map<std::string, PodEviction>& evictions() const = 0;
  virtual void Evict(const std::string& uid, PodEviction eviction) = 0;
  virtual std::set<std::string> ForgetGoneEvictions() = 0;
  virtual void RequestReclaim() = 0;
  virtual std::set<std::string> TerminalPods() = 0;
};

// The PodManager as EvictionPods (defined here, so that only its user links the pod manager).
class PodManagerEvictionPods final : public EvictionPods {
 public:
  explicit PodManagerEvictionPods(PodManager& pods) : pods_(pods) {}
  const std::map<std::string, std::shared_ptr<const pod::Pod>>& admitted() const override {
    return pods_.admitted();
  }
  const std::map<std::string, PodEviction>& evictions() const override { return pods_.evictions(); }
  void Evict(const std::string& uid, PodEviction eviction) override {
    pods_.Evict(uid, std::move(eviction));
  }
  std::set<std::string> ForgetGoneEvictions() override { return pods_.ForgetGoneEvictions(); }
  void RequestReclaim() override { pods_.RequestReclaim(); }
  std::set<std::string> TerminalPods() override { return pods_.TerminalPods(); }

 private:
  PodManager& pods_;
};

class EvictionManager {
 public:
  // `stats`, `pods` and `runtime` must outlive the manager; `pods` and `runtime` are used on the
  // loop's thread only, `stats` on the executor's. The manager sets `pressure`.
  EvictionManager(EventLoop& loop, const Clock& clock, EvictionManagerOptions options,
                  StatsSource& stats, EvictionPods& pods, const RuntimeView& runtime,
                  std::shared_ptr<NodePressure> pressure)
      : EvictionManager(loop, clock, std::move(options), stats, nullptr, &pods, runtime,
                        std::move(pressure)) {}
  // With the supervisor's pod manager.
  EvictionManager(EventLoop& loop, const Clock& clock, EvictionManagerOptions options,
                  StatsSource& stats, PodManager& pods, const RuntimeView& runtime,
                  std::shared_ptr<NodePressure> pressure)
      : EvictionManager(loop, clock, std::move(options), stats,
                        std::make_unique<PodManagerEvictionPods>(pods), nullptr, runtime,
                        std::move(pressure)) {}
  // Waits for a sample in flight to return; no decision round runs afterwards.
  ~EvictionManager();
  EvictionManager(const EvictionManager&) = delete;
  EvictionManager& operator=(const EvictionManager&) = delete;
  // Reads the records back (handing them to the pod manager) and takes the first sample.
  // A record file that cannot be read is an error; one that is not JSON is logged and replaced.
  Status Start();
  // On the loop: no sample is taken and no round runs from now on; a sample in flight is not
  // waited for (the destructor does).
  void RequestStop();

  uint64_t evictions() const { return evictions_total_.load(); }
  // On the loop: pods evicted by signal, under the kubelet's names (kubelet_evictions):
  // "memory.available", "nodefs.available", ..., and for a pod past its own limits
  // "emptydirfs.limit", "ephemeralcontainerfs.limit" or "ephemeralpodfs.limit".
  const std::map<std::string, uint64_t>& evictions_by_signal() const { return by_signal_; }
  // On the loop: whether a sample is on the executor (its round not yet run).
  bool sampling() const { return sampling_; }

  // On the loop: a reloaded configuration's thresholds, transition period, soft evictions' grace
  // limit and monitoring period (validated by the caller); the next sample is taken at once.
  void Reconfigure(std::vector<pod::EvictionThreshold> thresholds,
                   std::chrono::milliseconds pressure_transition_period,
                   int64_t max_pod_grace_seconds, std::chrono::milliseconds monitoring_period);

  // On the loop: one decision round over `sample` (each sample's continuation runs one).
  void Decide(const NodeStats& sample);

 private:
  // `pods`, or else `owned`.
  EvictionManager(EventLoop& loop, const Clock& clock, EvictionManagerOptions options,
                  StatsSource& stats, std::unique_ptr<EvictionPods> owned, EvictionPods* pods,
                  const RuntimeView& runtime, std::shared_ptr<NodePressure> pressure);
  // The timer's: submits a sample (whole or node-only) unless one is in flight or stopped.
  void TakeSample();
  Status SaveRecords();
  // The evicted pod is done: no running container of it in the runtime's view.
  bool CleanedUp(const std::string& uid) const;
  void EvictOne(const pod::EvictionThreshold& t, const pod::SignalObservation& observed,
                const NodeStats& sample);
  // Whether the next samples read the pods (`want`), and whether one is taken at once (`now`).
  void WantPods(bool want, bool now);
  // Some admitted pod has an emptyDir sizeLimit or an ephemeral-storage limit.
  bool AnyLocalStorageLimits() const;
  // Evicts every pod past an emptyDir sizeLimit or an ephemeral-storage limit; whether any.
  bool EvictPastLocalStorageLimits(const NodeStats& sample);
  // Records the eviction (ROOT/evictions), then has the pod manager carry it out; false when
  // the record could not be written (logged).
  bool Evict(const std::string& uid, const std::string& name, const PodEviction& eviction,
             const std::string& signal);
  // The admitted pods that may still be evicted (not evicted, not being deleted, not finished)
  // and that `want` (when given) picks.
  std::vector<std::pair<std::string, const pod::Pod*>> Evictable(
      const std::function<bool(const std::string&, const pod::Pod&)>& want = nullptr);

  // The kubelet's immediateEvictionGracePeriodSeconds: hard thresholds and local-storage limits.
  static constexpr int64_t kImmediateGraceSeconds = 1;

  const Clock& clock_;
  EvictionManagerOptions options_;
  StatsSource& stats_;
  std::unique_ptr<EvictionPods> owned_pods_;  // with the PodManager constructor
  EvictionPods& pods_;
  const RuntimeView& runtime_;
  std::shared_ptr<NodePressure> pressure_;
  pod::EvictionState state_;
  std::atomic<uint64_t> evictions_total_{0};
  std::map<std::string, uint64_t> by_signal_;
  // The pod evicted last, until it is cleaned up or its deadline (Unix ms) passes.
  std::optional<std::pair<std::string, int64_t>> pending_;
  int64_t decide_after_ms_ = 0;  // samples taken before this only update the conditions
  bool reclaimed_ = false;       // the last round under disk pressure asked for a reclaim
  int blind_rounds_ = 0;         // rounds waited for a pod's missing figures
  std::string last_refusal_;     // "nothing to evict" logged once per reason
  struct Record {
    PodEviction eviction;
    int64_t at_unix_ms = 0;
  };
  std::map<std::string, Record> records_;

  bool stopping_ = false;
  bool sampling_ = false;  // a sample is on the executor
  // Whether the samples read the pods (a whole sample), from the first on until a round finds
  // no threshold met and no pod with a local-storage limit; and whether a round (or a reload)
  // asked for one at once.
  bool want_pods_ = true;
  bool want_pods_now_ = false;
  EventLoop::Timer timer_;
  // Last: stopped (its thread joined) before the members its work and continuations use go.
  BlockingExecutor executor_;
};

}  // namespace nodelet::supervisor
