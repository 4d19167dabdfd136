// Status sinks: where statusd pushes committed statuses besides its store and watch stream
// (a Kubernetes API server later). The sync follows the kubelet's status manager:
//   - a sink has its own version per pod; a pod is synced when its version is newer than the
//     sink's (changes are pushed as they are committed);
//   - every full-pass interval (10 s) every pod is looked at again: what is newer, what failed
//     before, and what the sink says needs reconciling (its copy drifted) is synced again;
//   - a failed sync leaves the sink's version where it was; what failed is tried again with
//     back-off (250 ms, doubling up to the full-pass interval, back to 250 ms after a sync that
//     fails nothing), and by every full pass.
// SinkSyncer holds that logic for one sink and is driven by a caller-supplied clock (unit
// tests use a fake). SinkWorker runs syncers on their own thread, so a slow sink never stalls
// statusd's main loop.
#pragma once

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
#include "svc-statusd/status_manager.h"

namespace nodelet::statusd {

inline constexpr Duration kSinkFullPassInterval = std::chrono::seconds(10);
inline constexpr Duration kSinkFirstRetry = std::chrono::milliseconds(250);

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
  void Apply(const StatusChange& change);
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

// Runs SinkSyncers on one thread: Push() hands committed changes over without waiting, the
// thread syncs them and runs the full passes. Failures go to `on_error` (from that thread).
class SinkWorker {
 public:
  using ErrorCallback = std::function<void(const std::string& sink, const Status& error)>;

  SinkWorker(std::vector<std::unique_ptr<StatusSink>> sinks, const Clock& clock,
             ErrorCallback on_error);
  ~SinkWorker();
  SinkWorker(const SinkWorker&) = delete;
  SinkWorker& operator=(const SinkWorker&) = delete;

  void Push(const std::vector<StatusChange>& changes);
  void PushNode(const status::NodeStatusRecord& node);
  // Stops the thread (also done by the destructor).
  void Stop();

 private:
  void Run();

  std::vector<std::unique_ptr<StatusSink>> sinks_;
  std::vector<std::unique_ptr<SinkSyncer>> syncers_;
  const Clock& clock_;
  ErrorCallback on_error_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<StatusChange> queue_;
  std::optional<status::NodeStatusRecord> node_queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace nodelet::statusd
