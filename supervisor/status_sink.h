// Status sinks: where the supervisor pushes statusd's committed statuses (the fleet's etcd; a
// Kubernetes API server later). The sync follows the kubelet's status manager:
//   - a sink has its own version per pod; a pod is synced when its version is newer than the
//     sink's (changes are pushed as statusd commits them, through its watch stream);
//   - every full-pass interval (10 s) every pod is looked at again: what is newer, what failed
//     before, and what the sink says needs reconciling (its copy drifted) is synced again;
//   - a failed sync leaves the sink's version where it was; what failed is tried again with
//     back-off (250 ms, doubling up to the full-pass interval, back to 250 ms after a sync that
//     fails nothing), and by every full pass.
// SinkSyncer holds that logic for one sink and reads a caller-supplied clock (unit tests use a
// fake); a pass is planned, its sink calls made, and its outcome committed as three steps, so
// the calls can run elsewhere than the decisions. SinkWorker keeps the syncers on the
// supervisor's loop and makes each sink's calls on that sink's own executor thread, so a slow
// sink holds neither the loop nor the other sinks; it keeps them in step with statusd: it lists
// every status before it syncs anything, and again after a gap in the watch stream
// (docs/fleet.md).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "lib/common/clock.h"
#include "lib/common/status.h"
#include "lib/service/blocking_executor.h"
#include "lib/service/event_loop.h"
#include "lib/status/pod_status.h"
#include "lib/status/status_client.h"

namespace nodelet::supervisor {

using status::PodIdentity;
using status::PodStatusRecord;
using status::WatchEvent;

inline constexpr Duration kSinkFullPassInterval = std::chrono::seconds(10);
inline constexpr Duration kSinkFirstRetry = std::chrono::milliseconds(250);
// The worker lists every status again this often, though no gap showed: the stream shows a
// gap only with the next message, so messages dropped at the end of a burst would otherwise
// wait for the next change.
inline constexpr Duration kSinkRelistInterval = std::chrono::seconds(60);
// A failed list is tried again after this, doubling up to the full-pass interval.
inline constexpr Duration kSinkFirstListRetry = std::chrono::seconds(1);

class StatusSink {
 public:
  virtual ~StatusSink() = default;
  // For logs: "apiserver".
  virtual std::string Name() const = 0;
  // Pushes this record. An error leaves it unsynced; it is retried.
  virtual Status Sync(const PodStatusRecord& record) = 0;
  // The pod's status is gone from statusd. An error is retried at the next full pass.
  virtual Status Remove(const PodIdentity& pod) = 0;
  // Pushes the node's status (a v1 Node as JSON). An error leaves it unsynced; it is retried
  // with the next change and at every full pass. Sinks that carry no node status keep this.
  virtual Status SyncNode(const status::NodeStatusRecord& node) {
    (void)node;
    return Status::Ok();
  }
  // Asked at the first full pass (and at each later one until it succeeds) with every pod
  // statusd holds: the sink drops what it keeps of other pods, those removed while statusd was
  // not there to tell it. Sinks that keep nothing of their own keep this.
  virtual Status Prune(const std::set<std::string>& uids) {
    (void)uids;
    return Status::Ok();
  }
  // Asked in full passes for a pod already synced at its current version: true when the
  // sink's copy differs from what it was sent (the kubelet's needsReconcile).
  virtual bool NeedsReconcile(const PodStatusRecord& record) {
    (void)record;
    return false;
  }
};

// The sink calls of one pass, in the order they are made: what SinkSyncer::Plan decided.
struct SinkBatch {
  struct Pod {
    PodStatusRecord record;
    bool if_drifted = false;  // current already: sent only when the sink NeedsReconcile
  };
  std::optional<std::set<std::string>> prune;  // every pod statusd holds
  std::optional<status::NodeStatusRecord> node;
  std::vector<PodIdentity> removals;
  std::vector<Pod> pods;
  bool empty() const { return !prune && !node && removals.empty() && pods.empty(); }
};

// What the calls of a SinkBatch returned: one Status per call, in the batch's order.
struct SinkBatchResult {
  Status prune = Status::Ok();
  Status node = Status::Ok();
  std::vector<Status> removals;
  std::vector<Status> pods;
};

class SinkSyncer {
 public:
  SinkSyncer(StatusSink& sink, const Clock& clock, Duration full_pass = kSinkFullPassInterval);

  // Takes a committed change into the syncer's view (does not sync yet).
  void Apply(const WatchEvent& change);
  // Takes statusd's whole list into the syncer's view: every record as a change, and every pod
  // the syncer knew that is not in it as removed (does not sync yet).
  void Resync(const std::vector<PodStatusRecord>& records);
  // Takes a newer node status into the syncer's view (does not sync yet).
  void ApplyNode(const status::NodeStatusRecord& node);
  // Syncs every pod whose version is newer than the sink's, and pending removals (the
  // kubelet's syncBatch(all=false)). Returns the failures, one Status per pod.
  std::vector<Status> SyncChanged();
  // Runs a full pass when it is due (the kubelet's syncBatch(all=true)), else retries what
  // failed when its back-off is up; returns the failures.
  std::vector<Status> Tick();
  MonoTime NextFullPass() const { return next_full_pass_; }
  // When Tick has something to do: the next full pass, or the retry of what failed.
  MonoTime NextWake() const {
    return retry_at_ && *retry_at_ < next_full_pass_ ? *retry_at_ : next_full_pass_;
  }

  // A pass in three steps (SyncChanged and Tick run all three at once). TakeDue says which
  // pass Tick would run now: a full pass (true; the next one is then counted from now), the
  // retry of what failed (false), or none. Plan picks the calls of a pass; Execute makes them
  // (on any thread: it touches the sink only); Commit takes their outcome into the syncer's
  // view (whatever was applied meanwhile stays) and returns the failures.
  std::optional<bool> TakeDue();
  SinkBatch Plan(bool all) const;
  static SinkBatchResult Execute(StatusSink& sink, const SinkBatch& batch);
  std::vector<Status> Commit(const SinkBatch& batch, const SinkBatchResult& result);

  // The sink's version of a pod (0: never synced).
  uint64_t SyncedVersion(const std::string& uid) const;
  // The sink's version of the node status (0: never synced).
  uint64_t SyncedNodeVersion() const { return synced_node_; }
  StatusSink& sink() { return sink_; }

 private:
  std::vector<Status> Sync(bool all);
  // Schedules (after failures) or clears (after none) the retry.
  void Backoff(bool failed);

  StatusSink& sink_;
  const Clock& clock_;
  Duration full_pass_;
  MonoTime next_full_pass_;
  std::unordered_map<std::string, PodStatusRecord> latest_;
  std::unordered_map<std::string, uint64_t> synced_;
  // Pods removed from statusd that the sink has not yet been told about.
  std::unordered_map<std::string, PodIdentity> removed_;
  std::optional<status::NodeStatusRecord> node_;
  uint64_t synced_node_ = 0;
  bool pruned_ = false;  // the sink's Prune succeeded once
  std::optional<MonoTime> retry_at_;
  Duration retry_delay_ = kSinkFirstRetry;
};

// Runs one SinkSyncer per sink on the supervisor's loop, fed from it: Push() and RequestList()
// are called on the loop's thread, PushNode() from any thread (it posts to the loop). Nothing
// is synced before `list` (statusd's ListPodStatuses, called on an executor thread of the
// worker's own, always the same one) has given every status; the worker lists again after a gap
// in the stream (Push of an event with `gap`, or RequestList), every kSinkRelistInterval, and
// after a failed list (kSinkFirstListRetry, doubling). Events the list already covers (all that
// came before it, and those after it up to its watch sequence) are dropped. The syncers are made
// at the first list, so their first full pass, which prunes what the sink keeps of other pods,
// comes once the whole list is known.
//
// Each sink has a one-thread executor for its calls and a timer on the loop: the syncer plans a
// pass on the loop's thread (when something changed, its back-off is up or its full pass is
// due), the calls run on the executor, and the outcome is committed back on the loop's thread,
// which then plans the next; one pass per sink is in flight at a time, and what changes
// meanwhile goes in the next. Failures go to `on_error` on the loop's thread.
class SinkWorker {
 public:
  using ErrorCallback = std::function<void(const std::string& sink, const Status& error)>;
  using Lister = std::function<Result<status::PodStatusList>()>;

  SinkWorker(EventLoop& loop, std::vector<std::unique_ptr<StatusSink>> sinks, Lister list,
             ErrorCallback on_error);
  ~SinkWorker();
  SinkWorker(const SinkWorker&) = delete;
  SinkWorker& operator=(const SinkWorker&) = delete;

  void Push(const WatchEvent& event);
  void PushNode(const status::NodeStatusRecord& node);
  // Lists again soon (a watch message that could not be read).
  void RequestList();
  // Drops the work not started and waits for the sink calls and the list in flight; nothing
  // runs afterwards (also done by the destructor). On the loop's thread.
  void Stop();
  // Lists taken so far (for tests and logs).
  uint64_t lists() const { return lists_.load(); }
  // Whether a list or a sink's pass is on an executor (its continuation not yet run on the
  // loop), or a sink's pass is about to be planned. On the loop's thread.
  bool busy() const;

 private:
  // One sink's: its syncer, its timer and its executor (last: stopped before the others go).
  struct Lane {
    std::unique_ptr<StatusSink> sink;
    std::unique_ptr<SinkSyncer> syncer;  // made at the first list
    bool busy = false;                   // a pass is on the executor
    bool dirty = false;                  // something changed since the last pass was planned
    EventLoop::Timer timer;
    std::unique_ptr<BlockingExecutor> executor;
  };

  // Submits a list unless one is in flight (then another follows it).
  void StartList();
  // Takes a list's answer; lists again, or arms the timer for the next list.
  void OnList(Result<status::PodStatusList> list);
  // Applies `events`, which came after the last list, skipping what that list covers.
  void ApplyEvents(const std::vector<WatchEvent>& events);
  void OnNode(const status::NodeStatusRecord& node);
  // Something changed for every sink: each plans a pass (at this iteration's timers, so that a
  // burst of events makes one pass).
  void MarkChanged();
  // Plans and submits the lane's next pass when one is due, else arms its timer.
  void Pump(Lane& lane);
  void Report(Lane& lane, const std::vector<Status>& errors);

  EventLoop& loop_;
  const Clock& clock_;
  Lister list_;  // called on list_executor_'s thread only
  ErrorCallback on_error_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  // The rest is the loop's thread's.
  MonoTime next_list_;
  Duration list_retry_ = kSinkFirstListRetry;
  bool listed_ = false;
  bool listing_ = false;  // a list is on the executor
  bool relist_ = false;   // asked for while one was
  uint64_t listed_incarnation_ = 0;
  uint64_t listed_sequence_ = 0;
  // Pushed before the list in flight was asked for: covered by it if it succeeds.
  std::vector<WatchEvent> covered_;
  // Pushed while a list is in flight: applied after it, unless another list follows.
  std::vector<WatchEvent> queue_;
  std::optional<status::NodeStatusRecord> held_node_;  // until the first list
  std::string last_list_error_;
  std::atomic<uint64_t> lists_{0};
  bool stopped_ = false;
  // Read by what PushNode posted: false once stopped.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  EventLoop::Timer list_timer_;
  // Last: stopped before the members its work and continuations use go.
  BlockingExecutor list_executor_;
};

}  // namespace nodelet::supervisor
