// PlegEngine: plegd's relist loop, off the main thread.
//
// A relist thread lists the runtime every relist period, diffs with RelistDiff, and hands each
// changed pod to a pool of inspector threads (PodSandboxStatus + ContainerStatus under each
// call's own deadline). Each pod's result is queued for the main loop the moment it is ready,
// so one pod whose inspection hangs delays no other pod: its worker is simply busy, the pod is
// not queued again while in flight, and it is inspected again once it returns. After a relist's
// inspections are done (or its inspection wait has passed) a RelistDone is queued. The main loop
// is woken through `on_output` (the service posts to its EventLoop) and calls Drain().
//
// Between full relists the same thread relists single pods: those asked for by name
// (RelistPods: podworkerd after changing them) and those a runtime event names by a container
// or sandbox id (NudgeRuntimeId; docs/plegd.md, "Runtime events"). A pod's relist lists only
// its sandboxes and containers, diffs them against the pod's last view, and inspects it when it
// changed, so its record and events are those a full relist would have made; both kinds run on
// the one thread, one after the other, so an event and a relist never race over the view.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "lib/common/clock.h"
#include "svc-plegd/pleg_runtime.h"
#include "svc-plegd/relist_diff.h"

namespace nodelet::plegd {

struct PlegOptions {
  std::chrono::milliseconds relist_period{1000};
  // How long a relist waits for its inspections before reporting RelistDone anyway.
  std::chrono::milliseconds inspect_wait{1000};
  // Health turns failing when no relist succeeded for this long (the kubelet's 3 min).
  std::chrono::milliseconds relist_threshold{180000};
  int inspect_workers = 8;
};

// One pod's new record and the events that explain it.
struct PodResult {
  ipc::pleg::PodRecordT record;
  std::vector<PlegEvent> events;
  bool inspect_failed = false;
};

struct RelistResult {
  uint64_t relist = 0;
  std::chrono::microseconds duration{0};
  int64_t started_at_ns = 0;       // wall clock, for operators
  int64_t started_at_mono_ns = 0;  // Clock::MonoNanos(), compared across processes
  uint32_t pods = 0;
  uint32_t containers = 0;
  std::string error;
};

struct PlegOutput {
  std::vector<PodResult> pods;
  std::vector<RelistResult> relists;
};

struct PlegHealth {
  bool ok = true;
  std::string reason;
};

// What an event of this containerd topic says of its container, or nothing when it says nothing
// CRI shows by the time it comes: a container's create (CRI stores a new container or sandbox
// only after containerd publishes its create) and a task's create (CRI shows a container
// running, and stores a sandbox, only after its task has started). docs/plegd.md.
std::optional<RuntimeChange> ChangeOfTopic(const std::string& topic);

class PlegEngine {
 public:
  // `on_output` (required) is called from the engine's threads when Drain() has something after
  // it was empty; it must be thread-safe (EventLoop::Post).
  PlegEngine(PlegRuntime& runtime, const Clock& clock, PlegOptions options,
             std::function<void()> on_output);
  ~PlegEngine();
  PlegEngine(const PlegEngine&) = delete;
  PlegEngine& operator=(const PlegEngine&) = delete;

  // Starts the relist thread and the inspector pool.
  void Start();
  // Starts only the inspector pool; the caller drives relists with RelistOnce() (tests).
  void StartInspectors();
  // Stops and joins them (inspections in flight finish at their call's deadline).
  void Stop();
  // Asks the relist thread for a full relist now instead of at the end of the period (a new
  // subscription to the runtime's events: what happened without one was not seen). Nudges that
  // come while a relist runs make one more. Thread-safe.
  void Nudge();
  // A runtime event about this container or sandbox id, saying `change`: its pod is relisted
  // alone (found by the id in the last view, or else asked of the runtime; an id the runtime
  // does not know yet is left to podworkerd's relist requests and the full relist), unless the
  // view already shows what the event says. While the view does not show it (containerd's CRI
  // view lags its events; for kAny: while the pod's relist shows no change) the container alone
  // is asked again 10 ms later, doubling, 7 times at most, and the pod relisted when it shows the
  // change. An exit is asked again sooner (ExitRetryDelay); a start is first looked at
  // kStartLookAfter later. A newer event of the same id keeps the later of the two changes. An
  // empty id is Nudge(). Thread-safe.
  void NudgeRuntimeId(const std::string& id, RuntimeChange change = RuntimeChange::kAny);
  // A runtime event (RuntimeEventWatcher): NudgeRuntimeId with ChangeOfTopic(topic), or
  // nothing (counted) when the topic says nothing CRI shows yet. Thread-safe.
  void OnRuntimeEvent(const std::string& id, const std::string& topic);
  uint64_t runtime_events_unlooked() const { return runtime_events_unlooked_.load(); }
  // Events whose change the view showed already when their look came (no call made).
  uint64_t events_seen_already() const { return events_seen_already_.load(); }
  // Starts of ids new to the view whose look was put off (kNewStartLookAgain).
  uint64_t event_looks_put_off() const { return event_looks_put_off_.load(); }
  // Relists these pods alone now, and publishes each one's record (inspected again) even when
  // nothing changed, with the listing's time. Thread-safe.
  void RelistPods(const std::vector<std::string>& uids);
  uint64_t pod_relists() const { return pod_relists_.load(); }
  uint64_t event_retries() const { return event_retries_.load(); }
  uint64_t nudged_relists() const { return nudged_relists_.load(); }
  // Rounds of requests whose pods were relisted from one listing of the node (SharedListing).
  uint64_t shared_listings() const { return shared_listings_.load(); }
  // Runs one relist on the calling thread. Waits for this relist's inspections up to
  // inspect_wait. Not to be mixed with Start()'s relist thread.
  void RelistOnce();

  PlegOutput Drain();

  PlegHealth Health() const;
  uint64_t relists() const { return relists_.load(); }
  uint64_t relist_errors() const { return relist_errors_.load(); }
  uint64_t inspections() const { return inspections_.load(); }
  uint64_t inspection_errors() const { return inspection_errors_.load(); }
  // ContainerStatus calls made by inspections, and containers whose last record was kept
  // (sandboxes' records are kept the same way, not counted).
  uint64_t containers_inspected() const { return containers_inspected_.load(); }
  uint64_t containers_reused() const { return containers_reused_.load(); }
  int64_t last_relist_duration_us() const { return last_duration_us_.load(); }

 private:
  struct Job {
    PodView view;
    std::vector<PlegEvent> events;
    uint64_t relist = 0;
    int64_t listed_at_mono_ns = 0;  // when the listing behind `view` started
    bool counted = false;           // a full relist waits for it (outstanding_)
  };
  struct IdRequest {
    MonoTime due{};
    int attempt = 0;
    RuntimeChange change = RuntimeChange::kAny;
    bool deferred = false;  // a start of an id new to the view, put off once (kNewStartLookAgain)
  };

  void RelistLoop();
  void InspectorLoop();
  // A pod's records from its last inspection, by id: ContainerStatus and PodSandboxStatus say
  // nothing new while the container or sandbox stays in the state its record shows (nodelet
  // resizes no container; a sandbox's IPs are set when it is made).
  struct InspectedPod {
    std::map<std::string, ipc::pleg::ContainerRecordT> containers;
    std::map<std::string, ipc::pleg::SandboxRecordT> sandboxes;
  };
  // Inspects the pod: each sandbox and container whose listed state differs from its record in
  // `known` (the others keep that record).
  PodResult Inspect(const Job& job, const InspectedPod& known);
  // One listing of the whole node, indexed as ListPod and PodOf would answer: a round of
  // requests that concerns several pods relists them all from it (docs/plegd.md, "One listing
  // per round"). containerd builds every listing from all its sandboxes and containers whatever
  // the filter, so a round's pods cost it one listing instead of one per pod.
  struct SharedListing {
    int64_t listed_at_mono_ns = 0;
    std::map<std::string, RuntimeListing> pods;  // uid -> its sandboxes and their containers
    std::map<std::string, PodRef> refs;          // container or sandbox id -> nodelet's pod
  };
  static SharedListing Index(RuntimeListing listing, int64_t listed_at);
  // One round of requests: the pods asked for by name, then the runtime events' ids that are due.
  void HandleRound(const std::set<std::string>& pods,
                   const std::vector<std::pair<std::string, IdRequest>>& ids);
  // Relists one pod; whether it changed. `force`: inspect and publish it even when not.
  // `sandbox`: a sandbox of the pod the last view may not hold (an event's). `shared`: the
  // round's listing to take the pod from, instead of asking the runtime.
  bool RelistPod(const std::string& uid, bool force, const std::string& sandbox = "",
                 const SharedListing* shared = nullptr);
  // Queues the event of `id` to be looked at again, unless its looks have run out.
  void LookAgain(const std::string& id, const IdRequest& request);
  // Queues a start of an id the view does not hold to be looked at kNewStartLookAgain later.
  void PutOff(const std::string& id, const IdRequest& request);
  // The id's state in the pod's view: a container's, 100 + a sandbox's, -1 when it has none.
  int ViewState(const std::string& uid, const std::string& id) const;
  // Whether the runtime's ContainerStatus (PodSandboxStatus for a sandbox of the view) of `id`
  // shows `change` where the view of pod `uid` does not (kAny: another state than the view's);
  // true also when the id is gone, unknown to the view, or the call fails.
  bool RuntimeMovedOn(const std::string& uid, const std::string& id, RuntimeChange change);
  // Whether the view of pod `uid` shows `change` of this id: started (running or exited; a
  // sandbox listed at all), exited (a sandbox not ready), removed; an exit or removal also when
  // the id is not in the view. Never for kAny.
  bool ViewShows(const std::string& uid, const std::string& id, RuntimeChange change) const;
  // Under mu_: the changes' inspection jobs (removed pods go to `removed`), with the events of
  // pods waiting for a reinspection (every one, or `only_uid`'s). `counted`: the full relist
  // `relist` waits for these jobs. Returns how many were queued.
  size_t QueueLocked(std::vector<PodChange>& changes, uint64_t relist, int64_t listed_at,
                     const std::string* only_uid, bool counted, std::vector<PodResult>* removed);
  void Emit(PodResult result);
  void EmitRelist(RelistResult result);
  // Queues for Drain(); true when the output was empty, so the owner must be woken.
  bool PushLocked(PodResult result);
  void Wake();

  PlegRuntime& runtime_;
  const Clock& clock_;
  PlegOptions options_;
  std::function<void()> on_output_;

  // Relist state: only the relist thread (or RelistOnce's caller) touches these.
  RelistDiff diff_;
  uint64_t relist_seq_ = 0;

  std::mutex mu_;
  std::condition_variable work_cv_;  // inspectors wait for jobs
  std::condition_variable done_cv_;  // a relist waits for its jobs
  std::condition_variable stop_cv_;  // the relist thread waits for its next period
  std::deque<Job> jobs_;
  std::set<std::string> in_flight_;
  // Pods to inspect again at the next relist (failed, or changed while in flight), with the
  // events not yet delivered.
  std::map<std::string, std::vector<PlegEvent>> reinspect_;
  std::map<uint64_t, int> outstanding_;  // relist -> jobs not finished
  // uid -> its containers' records at its last inspection that succeeded. A pod's entry is taken
  // out while it is inspected (one inspection per pod at a time) and dropped at the first full
  // relist without the pod.
  std::map<std::string, InspectedPod> inspected_;
  PlegOutput output_;
  bool stopping_ = false;
  bool nudged_ = false;                           // a full relist is wanted now
  bool woken_ = false;                            // pod relists are wanted
  std::set<std::string> pod_requests_;            // uids
  std::map<std::string, IdRequest> id_requests_;  // runtime ids of events
  // A round that concerns this many pods (or more) lists the node once for them all.
  static constexpr size_t kShareListingAt = 2;
  static constexpr int kEventAttempts = 7;
  static constexpr std::chrono::milliseconds kEventRetryFirst{10};
  // A start's first look waits this long: a start nodelet made (all but a few) is seen first by
  // the relist podworkerd asks for once its sync is done, and the look then costs nothing
  // (docs/plegd.md); what anyone else starts is seen this much later.
  static constexpr std::chrono::milliseconds kStartLookAfter{500};
  // A start whose id the view does not hold at its look (a new sandbox or container: podworkerd
  // asks for its pod's relist only once its sync is done) is looked at again this much later,
  // and only then asked of the runtime: during a start burst those looks were most of plegd's
  // whole-node listings (docs/plegd.md).
  static constexpr std::chrono::milliseconds kNewStartLookAgain{2000};
  // An exit's looks again: kExitPolls polls of its container kExitPollEvery apart (times the
  // exits waiting, so a burst of exits polls no faster in all), where containerd's CRI plugin
  // catches up; then 10 ms doubling to 640 ms (docs/plegd.md).
  static constexpr int kExitPolls = 40;
  static constexpr std::chrono::milliseconds kExitPollEvery{2};
  static constexpr int kExitAttempts = kExitPolls + 8;
  static Duration ExitRetryDelay(int attempt, int exits);
  std::atomic<uint64_t> nudged_relists_{0}, pod_relists_{0}, event_retries_{0}, shared_listings_{0},
      runtime_events_unlooked_{0}, events_seen_already_{0}, event_looks_put_off_{0};
  MonoTime last_success_{};
  std::string last_error_;
  bool runtime_unreachable_ = false;

  std::atomic<uint64_t> relists_{0}, relist_errors_{0}, inspections_{0}, inspection_errors_{0};
  std::atomic<uint64_t> containers_inspected_{0}, containers_reused_{0};
  std::atomic<int64_t> last_duration_us_{0};
  std::thread relist_thread_;
  std::vector<std::thread> inspectors_;
};

}  // namespace nodelet::plegd
