// PlegEngine: plegd's relists, scheduled by timers on the service's event loop. The loop decides
// what runs when; the runtime's blocking calls run on two executors: the listings (List, ListPod,
// PodOf and the events' ContainerStatus looks) on one thread, in order, and the inspections
// (PodSandboxStatus + ContainerStatus, each under its call's own deadline) on `inspect_workers`
// threads. The view, the diff and the output live on the loop's thread.
//
// A full relist is due every relist period (counted from its start): the node is listed, the
// listing diffed with RelistDiff on the loop, and each changed pod handed to the inspectors. Each
// pod's result is output the moment its inspection returns, so one pod whose inspection hangs
// delays no other pod: it is not handed out again while in flight, and is inspected again once it
// returns. The relist's RelistDone is output once its inspections are done or a timer of
// inspect_wait (from its start) has fired. The owner is told through `on_output`, on the loop's
// thread, and calls Drain().
//
// Between full relists single pods are relisted: those asked for by name (RelistPods: podworkerd
// after changing them) and those a runtime event names by a container or sandbox id
// (NudgeRuntimeId; docs/plegd.md, "Runtime events"), each event's look at its due time (a loop
// timer). A pod's relist lists only its sandboxes and containers, diffs them against the pod's
// last view, and inspects it when it changed, so its record and events are those a full relist
// would have made. One full relist or one round of single-pod relists runs at a time, one after
// the other, so an event and a relist never race over the view.
#pragma once

#include <algorithm>
#include <array>
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
#include "lib/service/blocking_executor.h"
#include "lib/service/event_loop.h"
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
  // `on_output` (required) is called on the loop's thread when Drain() has something after it
  // was empty. The engine must be stopped (or destroyed) before `loop` goes.
  PlegEngine(EventLoop& loop, PlegRuntime& runtime, PlegOptions options,
             std::function<void()> on_output);
  ~PlegEngine();
  PlegEngine(const PlegEngine&) = delete;
  PlegEngine& operator=(const PlegEngine&) = delete;

  // Starts the schedule: the first full relist at once, then one every relist period.
  void Start();
  // Cancels the timers and stops the executors (waiting for the calls running on them); no
  // continuation runs afterwards. On the loop's thread.
  void Stop();
  // Asks for a full relist now instead of at the end of the period (a new subscription to the
  // runtime's events: what happened without one was not seen). Nudges that come while a relist
  // runs make one more. Thread-safe (posted to the loop).
  void Nudge();
  // A runtime event about this container or sandbox id, saying `change`: its pod is relisted
  // alone (found by the id in the last view, or else asked of the runtime; an id the runtime
  // does not know yet is left to podworkerd's relist requests and the full relist), unless the
  // view already shows what the event says. While the view does not show it (containerd's CRI
  // view lags its events; for kAny: while the pod's relist shows no change) the container alone
  // is asked again 10 ms later, doubling, 7 times at most, and the pod relisted when it shows the
  // change. An exit is asked again sooner (ExitRetryDelay); a start is first looked at
  // kStartLookAfter later. A newer event of the same id keeps the later of the two changes. An
  // empty id is Nudge(). Thread-safe (posted to the loop).
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
  // nothing changed, with the listing's time. Thread-safe (posted to the loop).
  void RelistPods(const std::vector<std::string>& uids);
  uint64_t pod_relists() const { return pod_relists_.load(); }
  uint64_t event_retries() const { return event_retries_.load(); }
  uint64_t nudged_relists() const { return nudged_relists_.load(); }
  // Rounds of requests whose pods were relisted from one listing of the node (SharedListing).
  uint64_t shared_listings() const { return shared_listings_.load(); }
  // Starts one full relist now, unless one or a round is running (tests drive relists this
  // way without Start()). Its RelistDone is output once its inspections are done or
  // inspect_wait has passed. On the loop's thread.
  void RelistOnce();

  // The output gathered since the last call. On the loop's thread.
  PlegOutput Drain();

  // On the loop's thread.
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
  // Runtime calls handed to the executors whose continuation has not run yet (tests: nothing
  // but timers is pending when this is 0). On the loop's thread.
  size_t calls_in_flight() const { return calls_in_flight_; }
  // When the engine's next timer fires; MonoTime::max() when none is armed (tests).
  MonoTime next_timer() const { return std::min(relist_timer_.due(), inspect_timer_.due()); }

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
  // A pod's records from its last inspection, by id: ContainerStatus and PodSandboxStatus say
  // nothing new while the container or sandbox stays in the state its record shows (nodelet
  // resizes no container; a sandbox's IPs are set when it is made).
  struct InspectedPod {
    std::map<std::string, ipc::pleg::ContainerRecordT> containers;
    std::map<std::string, ipc::pleg::SandboxRecordT> sandboxes;
  };
  // One listing of the whole node, indexed as ListPod and PodOf would answer: a round of
  // requests that concerns several pods relists them all from it (docs/plegd.md, "One listing
  // per round"). containerd builds every listing from all its sandboxes and containers whatever
  // the filter, so a round's pods cost it one listing instead of one per pod.
  struct SharedListing {
    int64_t listed_at_mono_ns = 0;
    std::map<std::string, RuntimeListing> pods;  // uid -> its sandboxes and their containers
    std::map<std::string, PodRef> refs;          // container or sandbox id -> nodelet's pod
  };
  // The full relist in flight: its listing, then its wait for its inspections.
  struct FullRelist {
    uint64_t relist = 0;
    MonoTime t0{};
    RelistResult done;
    Result<RuntimeListing> listing = RuntimeListing{};
  };
  // A listing asked of the runtime (the node's, or a pod's), and when it was asked.
  struct Listed {
    int64_t at = 0;  // Clock::MonoNanos()
    Result<RuntimeListing> listing = RuntimeListing{};
  };
  // An event whose pod is to be relisted in its round, with what the view showed of its id
  // before.
  struct Look {
    std::string id;
    IdRequest request;
    std::optional<std::string> uid;  // from the view; else the runtime names it
    int before = -1;
    std::string sandbox;    // the id's sandbox, when the runtime named it
    bool resolved = false;  // its pod asked of the runtime (or of the shared listing) already
  };
  // One round of requests: the pods asked for by name, then the runtime events' ids that are
  // due. It goes step by step, each runtime call on the listing executor and the step after it
  // in the call's continuation.
  struct Round {
    std::vector<std::string> pods;
    std::vector<std::pair<std::string, IdRequest>> ids;
    size_t next_id = 0;
    std::vector<Look> looks;
    std::set<std::string> wanted;
    size_t unresolved = 0;
    bool listing_asked = false;
    std::optional<SharedListing> shared;
    size_t next_pod = 0;
    std::set<std::string> relisted;  // pods already taken from the shared listing
    size_t next_look = 0;
  };

  // Runs `work` (a runtime call) on `executor`, then `then` on the loop, counting it in flight.
  void Call(BlockingExecutor& executor, std::function<void()> work, std::function<void()> then);
  // Starts what is due (a full relist first, then a round), unless one runs; else arms the
  // relist timer for the next due time.
  void Schedule();
  // Posts `fn` to the loop, where it runs unless the engine has stopped.
  void OnLoop(std::function<void()> fn);

  // The full relist: its listing (on the executor), then the diff and the inspections' jobs
  // (on the loop), then its RelistDone once they are done or inspect_wait has passed.
  void StartFullRelist();
  void OnListed(std::shared_ptr<FullRelist> full);
  void FinishFullRelist();

  // Inspects the pod: each sandbox and container whose listed state differs from its record in
  // `known` (the others keep that record). On an inspector's thread.
  PodResult Inspect(const Job& job, const InspectedPod& known);
  // Hands each queued job to the inspectors.
  void DispatchJobs();
  // An inspection returned (on the loop).
  void OnInspected(const Job& job, PodResult result);

  static SharedListing Index(RuntimeListing listing, int64_t listed_at);
  // The round's next step, until one waits for a runtime call (its continuation calls this
  // again) or the round is over.
  void ContinueRound();
  // The round's next event: whether it was handled without a runtime call.
  bool ClassifyNext(Round& round);
  void AddLook(Round& round, const std::string& id, const IdRequest& request,
               const std::optional<std::string>& uid);
  // The round's next look: whether it was handled without waiting for a runtime call.
  bool LookNext(Round& round);
  // After the look's pod was relisted: looked at again unless the view shows its change.
  void FinishLook(const Look& look, bool changed);
  // Relists one pod. `force`: inspect and publish it even when it did not change. `sandbox`: a
  // sandbox of the pod the last view may not hold (an event's). `shared`: the round's listing
  // to take the pod from, instead of asking the runtime. Returns whether the pod changed when
  // that is known at once; else nothing, and `then(changed)` runs on the loop after the pod's
  // listing came back.
  std::optional<bool> RelistPod(const std::string& uid, bool force, const std::string& sandbox,
                                const SharedListing* shared, std::function<void(bool)> then);
  // Applies one pod's listing to the view and queues its inspection; whether it changed.
  bool ApplyPodListing(const std::string& uid, bool force, const Result<RuntimeListing>& listing,
                       int64_t listed_at);
  // Queues the event of `id` to be looked at again, unless its looks have run out.
  void LookAgain(const std::string& id, const IdRequest& request);
  // Queues a start of an id the view does not hold to be looked at kNewStartLookAgain later.
  void PutOff(const std::string& id, const IdRequest& request);
  void QueueIdRequest(const std::string& id, RuntimeChange change);
  // The id's state in the pod's view: a container's, 100 + a sandbox's, -1 when it has none.
  int ViewState(const std::string& uid, const std::string& id) const;
  // Whether the runtime's ContainerStatus (PodSandboxStatus when `sandbox` holds the view's
  // state of a sandbox) of `id` shows `change` where the view's state does not (kAny: another
  // state than the view's); true also when the id is gone, unknown to the view (neither state
  // given), or the call fails. On the listing executor's thread.
  static bool RuntimeMovedOn(PlegRuntime& runtime, const std::string& id, RuntimeChange change,
                             std::optional<SandboxState> sandbox,
                             std::optional<ContainerState> container);
  // Whether the view of pod `uid` shows `change` of this id: started (running or exited; a
  // sandbox listed at all), exited (a sandbox not ready), removed; an exit or removal also when
  // the id is not in the view. Never for kAny.
  bool ViewShows(const std::string& uid, const std::string& id, RuntimeChange change) const;
  // The changes' inspection jobs (removed pods go to `removed`), with the events of pods waiting
  // for a reinspection (every one, or `only_uid`'s). `counted`: the full relist `relist` waits
  // for these jobs. Returns how many were queued.
  size_t QueueJobs(std::vector<PodChange>& changes, uint64_t relist, int64_t listed_at,
                   const std::string* only_uid, bool counted, std::vector<PodResult>* removed);
  void Emit(PodResult result);
  void EmitRelist(RelistResult result);
  // Tells the owner when the output was empty.
  void Wake(bool was_empty);

  EventLoop& loop_;
  PlegRuntime& runtime_;
  const Clock& clock_;
  PlegOptions options_;
  std::function<void()> on_output_;
  // Read by posted callbacks on the loop's thread; false once stopped.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);

  // Everything below but the atomics is the loop's thread's.
  RelistDiff diff_;
  uint64_t relist_seq_ = 0;
  bool started_ = false;
  MonoTime next_full_{};
  bool busy_ = false;                 // a full relist or a round is running
  std::shared_ptr<FullRelist> full_;  // the full relist waiting for its inspections
  std::optional<Round> round_;        // the round running
  size_t calls_in_flight_ = 0;
  std::vector<Job> jobs_;  // queued by QueueJobs, handed out by DispatchJobs
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
  bool nudged_ = false;                           // a full relist is wanted now
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

  // Last: destroyed first, so nothing fires or continues once the members above are gone.
  EventLoop::Timer relist_timer_;   // the next full relist or event look that is due
  EventLoop::Timer inspect_timer_;  // the full relist's inspect_wait
  BlockingExecutor lister_;         // List, ListPod, PodOf, the events' looks: one thread
  BlockingExecutor inspectors_;     // the inspections: inspect_workers threads
};

}  // namespace nodelet::plegd
