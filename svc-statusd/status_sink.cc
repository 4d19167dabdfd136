#include "svc-statusd/status_sink.h"

#include <algorithm>

namespace nodelet::statusd {

SinkSyncer::SinkSyncer(StatusSink& sink, const Clock& clock, Duration full_pass)
    : sink_(sink), clock_(clock), full_pass_(full_pass), next_full_pass_(clock.Now() + full_pass) {}

void SinkSyncer::Apply(const StatusChange& change) {
  const std::string& uid = change.record.pod.uid;
  if (change.kind == StatusChange::Kind::kUpdated) {
    removed_.erase(uid);
    latest_[uid] = change.record;
  } else {
    latest_.erase(uid);
    removed_[uid] = change.record.pod;
  }
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
  const MonoTime now = clock_.Now();
  if (now >= next_full_pass_) {
    next_full_pass_ = now + full_pass_;
    return Sync(true);
  }
  if (retry_at_ && now >= *retry_at_) return Sync(false);
  return {};
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
  std::vector<Status> errors;
  // At the first full pass statusd's every pod has been applied (its store's contents are pushed
  // when the worker starts): what the sink holds of any other pod is left from before.
  if (all && !pruned_) {
    std::set<std::string> uids;
    for (const auto& [uid, _] : latest_) uids.insert(uid);
    Status s = sink_.Prune(uids);
    if (s.ok()) {
      pruned_ = true;
    } else {
      errors.push_back(s);
    }
  }
  // A version below the sink's is a store that started over (a new database): send it too.
  if (node_ && node_->version != synced_node_) {
    Status s = sink_.SyncNode(*node_);
    if (s.ok()) {
      synced_node_ = node_->version;
    } else {
      errors.push_back(s);
    }
  }
  for (auto it = removed_.begin(); it != removed_.end();) {
    Status s = sink_.Remove(it->second);
    if (s.ok()) {
      synced_.erase(it->first);
      it = removed_.erase(it);
    } else {
      errors.push_back(s);
      ++it;
    }
  }
  for (const auto& [uid, record] : latest_) {
    uint64_t synced = SyncedVersion(uid);
    bool newer = record.version > synced;
    // A reused uid restarts at version 1: a version below the sink's is a new pod.
    bool restarted = record.version < synced;
    if (!newer && !restarted && !(all && sink_.NeedsReconcile(record))) continue;
    Status s = sink_.Sync(record);
    if (s.ok()) {
      synced_[uid] = record.version;
    } else {
      errors.push_back(s);
    }
  }
  Backoff(!errors.empty());
  return errors;
}

SinkWorker::SinkWorker(std::vector<std::unique_ptr<StatusSink>> sinks, const Clock& clock,
                       ErrorCallback on_error)
    : sinks_(std::move(sinks)), clock_(clock), on_error_(std::move(on_error)) {
  for (auto& sink : sinks_) syncers_.push_back(std::make_unique<SinkSyncer>(*sink, clock_));
  thread_ = std::thread([this] { Run(); });
}

SinkWorker::~SinkWorker() { Stop(); }

void SinkWorker::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void SinkWorker::Push(const std::vector<StatusChange>& changes) {
  if (changes.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.insert(queue_.end(), changes.begin(), changes.end());
  }
  cv_.notify_one();
}

void SinkWorker::PushNode(const status::NodeStatusRecord& node) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    node_queue_ = node;
  }
  cv_.notify_one();
}

void SinkWorker::Run() {
  for (;;) {
    std::vector<StatusChange> batch;
    std::optional<status::NodeStatusRecord> node;
    {
      std::unique_lock<std::mutex> lock(mu_);
      MonoTime next = MonoTime::max();
      for (const auto& s : syncers_) next = std::min(next, s->NextWake());
      Duration wait =
          next == MonoTime::max() ? Duration(std::chrono::seconds(60)) : next - clock_.Now();
      wait = std::clamp<Duration>(wait, Duration::zero(), std::chrono::seconds(60));
      cv_.wait_for(lock, wait,
                   [this] { return stop_ || !queue_.empty() || node_queue_.has_value(); });
      if (stop_) return;
      batch.swap(queue_);
      node.swap(node_queue_);
    }
    const bool changed = !batch.empty() || node.has_value();
    for (auto& syncer : syncers_) {
      for (const auto& change : batch) syncer->Apply(change);
      if (node) syncer->ApplyNode(*node);
      std::vector<Status> errors = changed ? syncer->SyncChanged() : syncer->Tick();
      if (changed) {
        auto more = syncer->Tick();
        errors.insert(errors.end(), more.begin(), more.end());
      }
      for (const auto& e : errors) on_error_(syncer->sink().Name(), e);
    }
  }
}

}  // namespace nodelet::statusd
