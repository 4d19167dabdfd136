// The kubelet's eviction rules, without I/O (docs/resources.md, "Eviction"): the signals and
// their thresholds (--eviction-hard, --eviction-soft, --eviction-soft-grace-period), which
// thresholds an observation meets, the node conditions they raise (held for the pressure
// transition period), the order in which pods go, and the Evicted status's message. The
// supervisor's EvictionManager (supervisor/eviction_manager.h) measures and acts.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lib/common/status.h"

namespace nodelet::pod {

struct Pod;

enum class EvictionSignal {
  kMemoryAvailable,    // memory.available: capacity minus the root cgroup's working set
  kNodeFsAvailable,    // nodefs.available: free bytes of --root-dir's filesystem
  kNodeFsInodesFree,   // nodefs.inodesFree
  kImageFsAvailable,   // imagefs.available: free bytes of the runtime's image filesystem
  kImageFsInodesFree,  // imagefs.inodesFree
  kPidAvailable,       // pid.available: the most process IDs there can be minus the tasks
};

// "memory.available", ...
std::string_view SignalName(EvictionSignal signal);
// The resource a signal starves, as the kubelet names it in messages: memory,
// ephemeral-storage, inodes or pids.
std::string_view SignalResource(EvictionSignal signal);
// MemoryPressure, DiskPressure or PIDPressure.
std::string_view SignalCondition(EvictionSignal signal);

struct EvictionThreshold {
  EvictionSignal signal = EvictionSignal::kMemoryAvailable;
  std::optional<int64_t> quantity;  // bytes or inodes; else `percentage` of capacity
  double percentage = 0;            // 0 < p <= 100
  std::string text;                 // as given: "100Mi", "10%"
  bool hard = true;
  std::chrono::seconds grace_period{0};  // soft only: how long it must hold before evicting
  // --eviction-minimum-reclaim: once acted on, the threshold holds until this much more than
  // MinAvailable is available (bytes or inodes; else `min_reclaim_percentage` of capacity).
  std::optional<int64_t> min_reclaim;
  double min_reclaim_percentage = 0;

  // The least that must stay available of `capacity`.
  int64_t MinAvailable(int64_t capacity) const;
  // MinAvailable plus the minimum reclaim.
  int64_t ReclaimTarget(int64_t capacity) const;
};

// "memory.available<100Mi,nodefs.available<10%": the kubelet's syntax (a signal, "<", a
// quantity or a percentage). An unknown signal, another operator, a repeated signal, a negative
// quantity or a percentage outside (0, 100] is an error naming the entry. A zero quantity or
// "0%" disables that signal, as the kubelet's. `hard` marks the results.
Result<std::vector<EvictionThreshold>> ParseEvictionThresholds(const std::string& flag, bool hard);

// --eviction-soft-grace-period "memory.available=1m30s,...": sets each soft threshold's grace
// period. Every soft threshold needs one, and every grace period a soft threshold (kubelet).
// `parse_duration` reads a DURATION: nodelet's ParseDuration (lib/common/duration.h), or a
// test's stand-in.
using DurationParser = Result<std::chrono::milliseconds> (*)(const std::string&);
Status ApplySoftGracePeriods(const std::string& flag, DurationParser parse_duration,
                             std::vector<EvictionThreshold>* soft);

// --eviction-minimum-reclaim "nodefs.available=500Mi,imagefs.available=5%": the least each
// eviction of a signal must win back beyond its threshold, set on every threshold (hard and
// soft) of that signal. A negative amount, a percentage outside [0, 100], an unknown signal, a
// signal given twice or one with no threshold is an error naming the entry.
Status ApplyMinimumReclaims(const std::string& flag, std::vector<EvictionThreshold>* thresholds);

// The kubelet's defaults for --eviction-hard (Linux): memory.available<100Mi,
// nodefs.available<10%, nodefs.inodesFree<5%, imagefs.available<15%.
std::vector<EvictionThreshold> DefaultHardThresholds();
inline constexpr char kDefaultEvictionHard[] =
    "memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%,imagefs.available<15%";

struct SignalObservation {
  int64_t available = 0;
  int64_t capacity = 0;
};
using EvictionObservations = std::map<EvictionSignal, SignalObservation>;

// Whether `t` is met by `observations` (an unobserved signal never is).
bool ThresholdMet(const EvictionThreshold& t, const EvictionObservations& observations);

// The thresholds' state over time: when each was first met (for soft grace periods) and when
// each node condition was last raised (for --eviction-pressure-transition-period).
class EvictionState {
 public:
  EvictionState(std::vector<EvictionThreshold> thresholds,
                std::chrono::milliseconds pressure_transition_period)
      : thresholds_(std::move(thresholds)), transition_(pressure_transition_period) {}

  // Takes an observation made at `now_ms` (Unix ms). Returns the thresholds to act on now: the
  // hard ones met, and the soft ones met continuously for their grace period. A threshold
  // returned last time stays met (and keeps its condition) until its minimum reclaim is won
  // back: available >= ReclaimTarget.
  std::vector<EvictionThreshold> Observe(const EvictionObservations& observations, int64_t now_ms);
  // Whether `condition` (MemoryPressure, DiskPressure) holds at `now_ms`: a threshold of it
  // (soft ones without waiting for their grace) was met within the transition period.
  bool Pressure(std::string_view condition, int64_t now_ms) const;
  const std::vector<EvictionThreshold>& thresholds() const { return thresholds_; }
  // New thresholds and transition period (a reloaded configuration): thresholds are met afresh
  // (soft ones wait their grace again); a condition seen stays for the transition period.
  void Reconfigure(std::vector<EvictionThreshold> thresholds,
                   std::chrono::milliseconds pressure_transition_period) {
    thresholds_ = std::move(thresholds);
    transition_ = pressure_transition_period;
    first_met_ms_.clear();
    acting_.clear();
  }

 private:
  std::vector<EvictionThreshold> thresholds_;
  std::chrono::milliseconds transition_;
  std::map<size_t, int64_t> first_met_ms_;  // threshold index -> when first met
  std::vector<bool> acting_;                // returned by the last Observe
  std::map<std::string, int64_t, std::less<>> condition_seen_ms_;
};

// One pod as the ranking sees it.
struct EvictionCandidate {
  std::string uid;
  std::string name;  // NAMESPACE/NAME, for logs
  int32_t priority = 0;
  bool has_stats = false;  // usage below is measured
  int64_t memory_request = 0;
  int64_t memory_usage = 0;  // working set
  int64_t storage_request = 0;
  int64_t storage_usage = 0;  // logs + local volumes + writable layers
  int64_t inodes_usage = 0;
  int64_t processes = 0;  // tasks in the pod's cgroup
  // Per container: (name, usage, request) of the signal's resource, for the message.
  struct Container {
    std::string name;
    int64_t memory_usage = 0;
    int64_t memory_request = 0;
    int64_t storage_usage = 0;
    int64_t storage_request = 0;
  };
  std::vector<Container> containers;
};

// Whether a pod may never be evicted: its priority is system-critical (>= 2000000000, the
// system-node-critical and system-cluster-critical classes). The kubelet also spares every
// static pod; every nodelet pod is one, so nodelet keeps only the priority rule.
bool IsEvictionExempt(int32_t priority);

// Indexes into `pods`, first to evict first, for `signal`; exempt pods left out. Memory: pods
// whose usage exceeds their request first, then lower priority, then larger usage above the
// request. Disk bytes: the same with ephemeral storage. Inodes: the same with inodes (whose
// request is 0). PIDs: lower priority, then more processes (the kubelet's rankPIDPressure).
// Pods without stats go last.
std::vector<size_t> RankForEviction(EvictionSignal signal,
                                    const std::vector<EvictionCandidate>& pods);

// The Evicted status's message, in the kubelet's words: "The node was low on resource: memory.
// Threshold quantity: 100Mi, available: 51200Ki. Container app was using 300Mi, request is 0,
// has larger consumption of memory. "
std::string EvictionMessage(const EvictionThreshold& t, const SignalObservation& observed,
                            const EvictionCandidate& pod);

// A pod's use of local ephemeral storage, as the local-storage limits read it.
struct PodStorageUsage {
  std::map<std::string, int64_t> volumes;     // local volume name -> bytes
  std::map<std::string, int64_t> containers;  // container name -> logs + writable layer bytes
  int64_t total = 0;                          // logs + local volumes + writable layers
};

// The kubelet's local-storage eviction (LocalStorageCapacityIsolation): the Evicted message
// when the pod is past one of its local-storage limits, checked in the kubelet's order: an
// emptyDir past its sizeLimit ("Usage of EmptyDir volume "data" exceeds the limit "2Mi". "),
// the pod past the sum of its containers' ephemeral-storage limits, a container's logs and
// writable layer past its own limit. Nothing when within every limit.
std::optional<std::string> LocalStorageViolation(const Pod& pod, const PodStorageUsage& usage);

// Whether the pod has a local-storage limit LocalStorageViolation would check: an emptyDir's
// sizeLimit or a container's (or init container's) ephemeral-storage limit.
bool HasLocalStorageLimits(const Pod& pod);

// Bytes in the kubelet's style: the largest binary suffix that divides the value ("100Mi",
// "51200Ki", "7").
std::string FormatBytes(int64_t bytes);

}  // namespace nodelet::pod
