// Status sinks: where the supervisor pushes statusd's committed statuses (the fleet's etcd; a
// Kubernetes API server later). The sync follows the kubelet's status manager:
//   - a sink has its own version per pod; a pod is synced when its version is newer than the
//     sink's (changes are pushed as statusd commits them, through its watch stream);
//   - every full-pass interval (10 s) every pod is looked at again: what is newer, what failed
//     before, and what the sink says needs reconciling (its copy drifted) is synced again;
//   - a failed sync leaves the sink's version where it was; what failed is tried again with
//     back-off (250 ms, doubling up to the full-pass interval, back to 250 ms after a sync that
//     fails nothing), and by every full pass.
// SinkSyncer holds that logic for one sink and is driven by a caller-supplied clock (unit
// tests use a fake). SinkWorker runs syncers on their own thread, so a slow sink never stalls
// the supervisor's loop, and keeps them in step with statusd: it lists every status before it
// syncs anything, and again after a gap in the watch stream (docs/fleet.md).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "lib/common/clock.h"
#include "lib/common/status.h"
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

// Runs SinkSyncers on one thread, fed from the supervisor's loop: Push() hands each watch event
// over without waiting. The thread syncs nothing before `list` (statusd's ListPodStatuses, made
// on the thread) has given it every status; it lists again after a gap in the stream (Push of
// an event with `gap`, or RequestList), every kSinkRelistInterval, and after a failed list
// (kSinkFirstListRetry, doubling). Events the list already covers (all that came before it, and
// those after it up to its watch sequence) are dropped. The syncers are made at the first list, so
// their first full pass, which prunes what the sink keeps of other pods, comes once the whole list
// is known. Failures go to `on_error` (from that thread).
class SinkWorker {
 public:
  using ErrorCallback = std::function<void(const std::string& sink, const Status& error)>;
  using Lister = std::function<Result<status::PodStatusList>()>;

  SinkWorker(std::vector<std::unique_ptr<StatusSink>> sinks, const Clock& clock, Lister list,
             ErrorCallback on_error);
  ~SinkWorker();
  SinkWorker(const SinkWorker&) = delete;
  SinkWorker& operator=(const SinkWorker&) = delete;

  void Push(const WatchEvent& event);
  void PushNode(const status::NodeStatusRecord& node);
  // Lists again soon (a watch message that could not be read).
  void RequestList();
  // Stops the thread (also done by the destructor).
  void Stop();
  // Lists taken so far (for tests and logs).
  uint64_t lists() const { return lists_.load(); }

 private:
  void Run();
  // Lists and resyncs every syncer (making them at the first list); false when the list failed.
  bool List();
  // Applies `events`, which came after the last list, skipping what that list covers.
  void ApplyEvents(const std::vector<WatchEvent>& events);

  std::vector<std::unique_ptr<StatusSink>> sinks_;
  const Clock& clock_;
  Lister list_;
  ErrorCallback on_error_;
  // The worker thread's own.
  std::vector<std::unique_ptr<SinkSyncer>> syncers_;
  MonoTime next_list_;
  Duration list_retry_ = kSinkFirstListRetry;
  bool listed_ = false;
  uint64_t listed_incarnation_ = 0;
  uint64_t listed_sequence_ = 0;
  std::optional<status::NodeStatusRecord> held_node_;
  std::string last_list_error_;
  std::atomic<uint64_t> lists_{0};
  // Shared with Push and PushNode.
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<WatchEvent> queue_;
  std::optional<status::NodeStatusRecord> node_queue_;
  bool list_requested_ = false;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace nodelet::supervisor
