#include "supervisor/status_sink.h"

#include <algorithm>
#include <exception>

#include "lib/common/utf8.h"

namespace nodelet::supervisor {
namespace {

// A sink call that throws (on a pod's bytes, say) fails that one write with an error the worker
// reports and retries like any other; it never ends the sink's executor thread and with it the
// process.
template <typename F>
Status Guarded(const char* what, F&& call) {
  try {
    return call();
  } catch (const std::exception& e) {
    return Internal(std::string("status sink ") + what + ": " + ValidUtf8(e.what()));
  }
}

}  // namespace

SinkSyncer::SinkSyncer(StatusSink& sink, const Clock& clock, Duration full_pass)
    : sink_(sink), clock_(clock), full_pass_(full_pass), next_full_pass_(clock.Now() + full_pass) {}

void SinkSyncer::Apply(const WatchEvent& change) {
  const std::string& uid = change.record.pod.uid;
  if (change.kind == WatchEvent::Kind::kChanged) {
    removed_.erase(uid);
    latest_[uid] = change.record;
  } else {
    latest_.erase(uid);
    removed_[uid] = change.record.pod;
  }
}

void SinkSyncer::Resync(const std::vector<PodStatusRecord>& records) {
  std::unordered_map<std::string, PodStatusRecord> listed;
  for (const auto& record : records) {
    removed_.erase(record.pod.uid);
    listed[record.pod.uid] = record;
  }
  for (auto& [uid, record] : latest_) {
    if (listed.count(uid) == 0) removed_[uid] = record.pod;
  }
  latest_ = std::move(listed);
}

void SinkSyncer::ApplyNode(const status::NodeStatusRecord& node) {
  if (!node_ || node.version != node_->version) node_ = node;
}

uint64_t SinkSyncer::SyncedVersion(const std::string& uid) const {
  auto it = synced_.find(uid);
  return it == synced_.end() ? 0 : it->second;
}

std::vector<Status> SinkSyncer::SyncChanged() { return Sync(false); }

std::vector<Status> SinkSyncer::Tick() {
  std::optional<bool> due = TakeDue();
  if (!due) return {};
  return Sync(*due);
}

std::optional<bool> SinkSyncer::TakeDue() {
  const MonoTime now = clock_.Now();
  if (now >= next_full_pass_) {
    next_full_pass_ = now + full_pass_;
    return true;
  }
  if (retry_at_ && now >= *retry_at_) return false;
  return std::nullopt;
}

void SinkSyncer::Backoff(bool failed) {
  if (!failed) {
    retry_at_.reset();
    retry_delay_ = kSinkFirstRetry;
    return;
  }
  retry_at_ = clock_.Now() + retry_delay_;
  retry_delay_ = std::min<Duration>(retry_delay_ * 2, full_pass_);
}

std::vector<Status> SinkSyncer::Sync(bool all) {
  SinkBatch batch = Plan(all);
  return Commit(batch, Execute(sink_, batch));
}

SinkBatch SinkSyncer::Plan(bool all) const {
  SinkBatch batch;
  // At the first full pass statusd's every pod has been applied (the worker makes the syncer at
  // its first list): what the sink holds of any other pod is left from before.
  if (all && !pruned_) {
    std::set<std::string> uids;
    for (const auto& [uid, _] : latest_) uids.insert(uid);
    batch.prune = std::move(uids);
  }
  // A version below the sink's is a store that started over (a new database): send it too.
  if (node_ && node_->version != synced_node_) batch.node = node_;
  for (const auto& [uid, pod] : removed_) batch.removals.push_back(pod);
  for (const auto& [uid, record] : latest_) {
    uint64_t synced = SyncedVersion(uid);
    bool newer = record.version > synced;
    // A reused uid restarts at version 1: a version below the sink's is a new pod.
    bool restarted = record.version < synced;
    if (newer || restarted) {
      batch.pods.push_back({record, false});
    } else if (all) {
      batch.pods.push_back({record, true});
    }
  }
  return batch;
}

SinkBatchResult SinkSyncer::Execute(StatusSink& sink, const SinkBatch& batch) {
  SinkBatchResult result;
  if (batch.prune) result.prune = Guarded("prune", [&] { return sink.Prune(*batch.prune); });
  if (batch.node) result.node = Guarded("node", [&] { return sink.SyncNode(*batch.node); });
  for (const auto& pod : batch.removals) {
    result.removals.push_back(Guarded("remove", [&] { return sink.Remove(pod); }));
  }
  for (const auto& pod : batch.pods) {
    if (pod.if_drifted && !sink.NeedsReconcile(pod.record)) {
      result.pods.push_back(Status::Ok());
      continue;
    }
    result.pods.push_back(Guarded("sync", [&] { return sink.Sync(pod.record); }));
  }
  return result;
}

std::vector<Status> SinkSyncer::Commit(const SinkBatch& batch, const SinkBatchResult& result) {
  std::vector<Status> errors;
  if (batch.prune) {
    if (result.prune.ok()) {
      pruned_ = true;
    } else {
      errors.push_back(result.prune);
    }
  }
  if (batch.node) {
    if (result.node.ok()) {
      synced_node_ = batch.node->version;
    } else {
      errors.push_back(result.node);
    }
  }
  for (size_t i = 0; i < batch.removals.size() && i < result.removals.size(); ++i) {
    const std::string& uid = batch.removals[i].uid;
    if (result.removals[i].ok()) {
      synced_.erase(uid);
      // Unless the pod came back meanwhile: then latest_ holds it and removed_ does not.
      removed_.erase(uid);
    } else {
      errors.push_back(result.removals[i]);
    }
  }
  for (size_t i = 0; i < batch.pods.size() && i < result.pods.size(); ++i) {
    const PodStatusRecord& record = batch.pods[i].record;
    if (result.pods[i].ok()) {
      synced_[record.pod.uid] = record.version;
    } else {
      errors.push_back(result.pods[i]);
    }
  }
  Backoff(!errors.empty());
  return errors;
}

SinkWorker::SinkWorker(EventLoop& loop, std::vector<std::unique_ptr<StatusSink>> sinks, Lister list,
                       ErrorCallback on_error)
    : loop_(loop),
      clock_(loop.clock()),
      list_(std::move(list)),
      on_error_(std::move(on_error)),
      next_list_(clock_.Now()),
      list_timer_(loop.AddTimer([this] { StartList(); })),
      list_executor_(loop, 1) {
  for (auto& sink : sinks) {
    auto lane = std::make_unique<Lane>();
    lane->sink = std::move(sink);
    lane->timer = loop.AddTimer([this, l = lane.get()] { Pump(*l); });
    lane->executor = std::make_unique<BlockingExecutor>(loop, 1);
    lanes_.push_back(std::move(lane));
  }
  // The first list at the loop's first iteration.
  list_timer_.ArmAt(next_list_);
}

SinkWorker::~SinkWorker() { Stop(); }

void SinkWorker::Stop() {
  stopped_ = true;
  *alive_ = false;
  list_timer_.Cancel();
  list_executor_.Stop();
  for (auto& lane : lanes_) {
    lane->timer.Cancel();
    lane->executor->Stop();
  }
}

bool SinkWorker::busy() const {
  return listing_ || std::any_of(lanes_.begin(), lanes_.end(),
                                 [](const auto& l) { return l->busy || l->dirty; });
}

void SinkWorker::Push(const WatchEvent& event) {
  if (stopped_) return;
  if (listing_ || event.gap) {
    queue_.push_back(event);
    if (event.gap) StartList();
    return;
  }
  if (!listed_) return;  // the first list brings it
  ApplyEvents({event});
  MarkChanged();
}

void SinkWorker::PushNode(const status::NodeStatusRecord& node) {
  loop_.Post([this, alive = alive_, node] {
    if (*alive) OnNode(node);
  });
}

void SinkWorker::OnNode(const status::NodeStatusRecord& node) {
  held_node_ = node;
  if (!listed_) return;
  for (auto& lane : lanes_) lane->syncer->ApplyNode(*held_node_);
  held_node_.reset();
  MarkChanged();
}

void SinkWorker::RequestList() {
  if (!stopped_) StartList();
}

void SinkWorker::StartList() {
  if (stopped_) return;
  if (listing_) {
    relist_ = true;
    return;
  }
  listing_ = true;
  relist_ = false;
  list_timer_.Cancel();
  // What came before a list is in it: statusd published it before it answered the list.
  covered_ = std::move(queue_);
  queue_.clear();
  auto answer = std::make_shared<std::optional<Result<status::PodStatusList>>>();
  list_executor_.Submit([this, answer] { answer->emplace(list_()); },
                        [this, answer] {
                          listing_ = false;
                          OnList(std::move(**answer));
                        });
}

void SinkWorker::OnList(Result<status::PodStatusList> list) {
  const MonoTime now = clock_.Now();
  if (!list.ok()) {
    if (list.status().message() != last_list_error_) on_error_("statusd", list.status());
    last_list_error_ = list.status().message();
    next_list_ = now + list_retry_;
    list_retry_ = std::min<Duration>(list_retry_ * 2, kSinkFullPassInterval);
    // Not covered after all: what came after the last list that succeeded still counts.
    if (listed_) ApplyEvents(covered_);
  } else {
    last_list_error_.clear();
    list_retry_ = kSinkFirstListRetry;
    next_list_ = now + kSinkRelistInterval;
    ++lists_;
    for (auto& lane : lanes_) {
      if (!lane->syncer) lane->syncer = std::make_unique<SinkSyncer>(*lane->sink, clock_);
      lane->syncer->Resync(list->records);
      if (held_node_) lane->syncer->ApplyNode(*held_node_);
    }
    held_node_.reset();
    listed_ = true;
    listed_incarnation_ = list->watch_incarnation;
    listed_sequence_ = list->watch_sequence;
  }
  covered_.clear();
  if (relist_) {
    StartList();  // what came during this list is covered by the next
  } else {
    if (listed_) ApplyEvents(queue_);
    queue_.clear();
    list_timer_.ArmAt(next_list_);
  }
  if (listed_) MarkChanged();
}

void SinkWorker::ApplyEvents(const std::vector<WatchEvent>& events) {
  for (const auto& event : events) {
    // Covered by the list: at or before its sequence. An event of another statusd (one newer
    // than the list's) is the first after a restart: it shows as a gap and brings another list.
    if (event.incarnation == listed_incarnation_ && event.sequence <= listed_sequence_) continue;
    for (auto& lane : lanes_) lane->syncer->Apply(event);
  }
}

void SinkWorker::MarkChanged() {
  const MonoTime now = clock_.Now();
  for (auto& lane : lanes_) {
    lane->dirty = true;
    if (!lane->busy) lane->timer.ArmAt(now);
  }
}

void SinkWorker::Pump(Lane& lane) {
  if (stopped_ || lane.busy || !lane.syncer) return;
  for (;;) {
    // A due full pass covers the changes too.
    std::optional<bool> due = lane.syncer->TakeDue();
    if (!due && lane.dirty) due = false;
    if (!due) {
      lane.timer.ArmAt(lane.syncer->NextWake());
      return;
    }
    lane.dirty = false;
    auto batch = std::make_shared<SinkBatch>(lane.syncer->Plan(*due));
    if (batch->empty()) {
      Report(lane, lane.syncer->Commit(*batch, {}));
      continue;
    }
    lane.busy = true;
    lane.timer.Cancel();
    auto result = std::make_shared<SinkBatchResult>();
    lane.executor->Submit(
        [sink = lane.sink.get(), batch, result] { *result = SinkSyncer::Execute(*sink, *batch); },
        [this, &lane, batch, result] {
          lane.busy = false;
          Report(lane, lane.syncer->Commit(*batch, *result));
          Pump(lane);
        });
    return;
  }
}

void SinkWorker::Report(Lane& lane, const std::vector<Status>& errors) {
  for (const auto& e : errors) on_error_(lane.sink->Name(), e);
}

}  // namespace nodelet::supervisor
