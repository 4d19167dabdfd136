// PodDispatcher: podworkerd's decisions without threads or I/O. It keeps one entry per pod
// (desired or an orphan found in the runtime), drives PodLifecycle, and decides what to run and
// when: a sync waits (parked) until plegd's cache is ready and holds a relist (a full one, or one
// of the pod alone, which it asks plegd for) that started after the pod's last runtime change (and
// so does the removal of a pod that was stopped, whose final status is read from that relist); a
// failed sync is retried 100 ms doubling to 5 s; every pod is resynced periodically; removals and
// orphan kills wait until every pod source has reported; a kill that arrives while a worker is busy
// is never lost; a pod deleted and re-added while terminating is created again.
//
// Inputs are plain calls (the desired pods, changed pods, ticks, work completions); outputs go
// through DispatcherEffects (the work to run, statuses, events, probes, the GC's desired set).
// The service (podworkerd_service.h) is the I/O shell around it.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "lib/common/clock.h"
#include "lib/common/histogram.h"
#include "lib/common/status.h"
#include "lib/pod/pod.h"
#include "lib/status/pod_status.h"
#include "pleg_generated.h"
#include "svc-podworkerd/pod_lifecycle.h"
#include "svc-podworkerd/pod_sync.h"

namespace nodelet::podworkerd {

// What the dispatcher reads of plegd's pod cache (the service's PlegMirror).
class PodCacheView {
 public:
  virtual ~PodCacheView() = default;
  // The replica holds a complete relist.
  virtual bool ready() const = 0;
  // When plegd's last relist started (CLOCK_MONOTONIC nanoseconds).
  virtual int64_t relist_started_mono_ns() const = 0;
  virtual const std::map<std::string, ipc::pleg::PodRecordT>& pods() const = 0;
};

// One piece of work for a worker thread, with what the job needs.
struct DispatchedWork {
  Work<pod::Pod> work;
  // The pod's runtime view when the work was dispatched (kSync only).
  std::optional<ipc::pleg::PodRecordT> record;
  // The pod is still desired (a kTerminated of a desired pod removes nothing).
  bool desired = false;
  // The first sync of this pod in this incarnation: carry readiness over from statusd.
  bool seed_readiness = false;
  // The pod's place in arrival order (from 1): its work runs before that of pods that came
  // later (WorkerPool's priority).
  uint64_t arrival = 0;
};

// What a worker reports back when its work is done.
struct WorkDone {
  std::string uid;
  WorkKind kind = WorkKind::kSync;
  SyncOutcome outcome;  // kSync (kTerminating: only its events, the failed preStop hooks)
  int64_t completed_mono_ns = 0;
  std::chrono::microseconds took{0};
  Status error = Status::Ok();  // kTerminating, kTerminated
};

// The dispatcher's effects; called synchronously from its methods.
class DispatcherEffects {
 public:
  virtual ~DispatcherEffects() = default;
  // Runs the work (on a worker thread); its WorkDone comes back through HandleDone().
  virtual void Run(DispatchedWork work) = 0;
  virtual void ReportStatus(const pod::Pod& pod, const status::PodStatus& status) = 0;
  // A pod being stopped: its status as the runtime's view `record` (null: nothing left) shows it;
  // `terminal` once every container and the sandbox are stopped (the phase is then final).
  virtual void ReportStoppingStatus(const pod::Pod& pod, const ipc::pleg::PodRecordT* record,
                                    bool terminal) = 0;
  virtual void SendEvents(std::vector<status::PodEvent> events) = 0;
  // The pod's containers were stopped (the "Killing" event).
  virtual void PodStopped(const pod::Pod& pod) = 0;
  virtual void EnsureProbes(const std::string& uid, const pod::Pod& pod) = 0;
  virtual void RemoveProbes(const std::string& uid) = 0;
  // The pod is gone for good: drop what the syncer keeps of it.
  virtual void ForgetPod(const std::string& uid) = 0;
  // The desired pods' uids and images, which garbage collection keeps.
  virtual void SetGcDesired(std::set<std::string> uids, std::set<std::string> images) = 0;
  // The pod must stop while its worker runs a sync: the sync stops waiting for an image pull
  // (PodSyncer::CancelPulls). Any thread may be the worker's.
  virtual void CancelSync(const std::string& uid) { (void)uid; }
  // The pod was just changed in the runtime: ask plegd to relist it alone now rather than wait
  // for its next full relist.
  virtual void RequestRelist(const std::string& uid) { (void)uid; }
};

struct DispatcherCounters {
  uint64_t syncs = 0, sync_errors = 0, kills = 0, orphans_killed = 0, containers_gc = 0;
  // The syncs' container starts and failed starts (SyncOutcome), summed.
  std::map<std::string, uint64_t> container_starts;
  std::map<std::pair<std::string, std::string>, uint64_t> container_start_errors;
};

class PodDispatcher {
 public:
  static constexpr std::chrono::milliseconds kErrorBackoffInitial{100};
  static constexpr std::chrono::milliseconds kErrorBackoffMax{5000};

  PodDispatcher(const Clock& clock, const PodCacheView& cache, DispatcherEffects& effects,
                std::chrono::milliseconds resync_period);

  // The supervisor's desired pods (every one decoded, with a uid). `sources_ready`: every pod
  // source has reported, so a pod missing from `pods` is removed and orphans are killed.
  // `evicted`: the desired pods the supervisor evicted; once such a pod has finished, its content
  // may go (the kubelet's ShouldPodContentBeRemoved): garbage collection no longer protects
  // its containers, and it leaves InUse() (volumed then tears its volumes down).
  void ApplyDesired(const std::vector<std::shared_ptr<const pod::Pod>>& pods, bool sources_ready,
                    const std::set<std::string>& evicted = {});
  // The part of ApplyDesired that depends on the runtime's view, not on the desired set: kills
  // the orphans plegd shows (once every source has reported). For a desired set received again
  // unchanged.
  void Housekeep();
  // Syncs the pods whose runtime view changed (events, volumes, probes), then RunParked().
  void SyncChanged(const std::set<std::string>& changed);
  // Every pod the dispatcher knows (after plegd's cache was replaced). These are also the pods
  // whose containers may exist or be started: desired, terminating, or orphans being killed. A
  // pod leaves the set once it is stopped and removed for good.
  std::set<std::string> Known() const;
  // Known() without the evicted pods that have finished: the pods whose containers may run or
  // be started, or whose content is kept.
  std::set<std::string> InUse() const;
  // Known() holds every pod that has containers in the runtime: orphans were looked for in a
  // complete relist (so every pod source had reported) in this incarnation.
  bool known_complete() const { return orphans_scanned_; }
  // Runs the parked syncs whose pod cache is now fresh enough.
  void RunParked();
  // The periodic pass: parked work, resyncs and retries that are due.
  void OnTick();
  // When OnTick next has something to do: now while work is parked, else the earliest retry
  // or resync of a desired pod; nullopt when there is none.
  std::optional<MonoTime> NextDue() const;
  // A worker finished; dispatches the pod's next work, if any.
  void HandleDone(WorkDone& done);

  size_t workers() const { return lifecycle_.size(); }
  size_t pods() const { return pods_.size(); }
  size_t parked() const { return parked_.size(); }
  bool Knows(const std::string& uid) const { return pods_.count(uid) != 0; }
  const PodLifecycle<pod::Pod>& lifecycle() const { return lifecycle_; }
  const DispatcherCounters& counters() const { return counters_; }
  const Histogram& pod_start() const { return pod_start_; }
  const Histogram& worker_duration() const { return worker_duration_; }

 private:
  struct Entry {
    std::shared_ptr<const pod::Pod> pod;  // null for an orphan found in the runtime
    std::string config_hash;
    bool desired = false;
    // The next sync waits for a relist that started after this (Clock::MonoNanos(), compared
    // with plegd's monotonic relist start: the same CLOCK_MONOTONIC in both processes).
    int64_t fresh_after_mono_ns = 0;
    MonoTime next_resync{};
    std::optional<MonoTime> retry_at;
    std::chrono::milliseconds error_backoff{0};
    bool finished = false;
    bool evicted = false;  // by the supervisor's eviction manager
    bool seeded = false;   // readiness carried over from statusd
    MonoTime created{};    // when this podworkerd first got the pod (pod start-up metric)
    uint64_t arrival = 0;  // the order it came in (parked work runs in this order)
    bool start_recorded = false;
    // The last sync error, and every error logged since the last successful sync (each is
    // logged once until a sync succeeds).
    std::string last_error;
    std::set<std::string> logged_errors;
  };

  void KillOrphans();
  void Update(PodUpdate<pod::Pod> update);
  void Dispatch(Work<pod::Pod> work);
  void Execute(Work<pod::Pod> work, std::optional<ipc::pleg::PodRecordT> record);
  // The pod changed the runtime after the last full relist started and after the last relist
  // of the pod alone.
  bool Stale(const std::string& uid, const Entry& e) const;
  // The work must wait (parked) for plegd's cache, or for a relist newer than the pod's last
  // runtime change.
  bool WaitsForRelist(const Work<pod::Pod>& work) const;
  void ReportStopping(const Entry& e, const std::string& uid, bool terminal);

  const Clock& clock_;
  const PodCacheView& cache_;
  DispatcherEffects& effects_;
  const std::chrono::milliseconds resync_period_;

  PodLifecycle<pod::Pod> lifecycle_;
  std::map<std::string, Entry> pods_;
  std::map<std::string, Work<pod::Pod>> parked_;  // syncs waiting for a fresh cache
  uint64_t arrivals_ = 0;
  bool sources_ready_ = false;
  bool orphans_scanned_ = false;
  DispatcherCounters counters_;
  Histogram pod_start_{Histogram::StartupBuckets()};
  Histogram worker_duration_{Histogram::LatencyBuckets()};
};

}  // namespace nodelet::podworkerd
