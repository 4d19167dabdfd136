#include "supervisor/status_sink.h"

#include <algorithm>
#include <exception>

#include "lib/common/utf8.h"

namespace nodelet::supervisor {
namespace {

// A sink call that throws (on a pod's bytes, say) fails that one write with an error the worker
// reports and retries like any other; it never ends the worker's thread and with it the process.
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
  // At the first full pass statusd's every pod has been applied (the worker makes the syncer at
  // its first list): what the sink holds of any other pod is left from before.
  if (all && !pruned_) {
    std::set<std::string> uids;
    for (const auto& [uid, _] : latest_) uids.insert(uid);
    Status s = Guarded("prune", [&] { return sink_.Prune(uids); });
    if (s.ok()) {
      pruned_ = true;
    } else {
      errors.push_back(s);
    }
  }
  // A version below the sink's is a store that started over (a new database): send it too.
  if (node_ && node_->version != synced_node_) {
    Status s = Guarded("node", [&] { return sink_.SyncNode(*node_); });
    if (s.ok()) {
      synced_node_ = node_->version;
    } else {
      errors.push_back(s);
    }
  }
  for (auto it = removed_.begin(); it != removed_.end();) {
    Status s = Guarded("remove", [&] { return sink_.Remove(it->second); });
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
    // A named reference: clang 14 does not let a lambda capture a structured binding.
    const auto& this_record = record;
    Status s = Guarded("sync", [&] { return sink_.Sync(this_record); });
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
                       Lister list, ErrorCallback on_error)
    : sinks_(std::move(sinks)),
      clock_(clock),
      list_(std::move(list)),
      on_error_(std::move(on_error)),
      next_list_(clock.Now()) {
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

void SinkWorker::Push(const WatchEvent& event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(event);
    if (event.gap) list_requested_ = true;
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

void SinkWorker::RequestList() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    list_requested_ = true;
  }
  cv_.notify_one();
}

bool SinkWorker::List() {
  auto list = list_();
  const MonoTime now = clock_.Now();
  if (!list.ok()) {
    if (list.status().message() != last_list_error_) on_error_("statusd", list.status());
    last_list_error_ = list.status().message();
    next_list_ = now + list_retry_;
    list_retry_ = std::min<Duration>(list_retry_ * 2, kSinkFullPassInterval);
    return false;
  }
  last_list_error_.clear();
  list_retry_ = kSinkFirstListRetry;
  next_list_ = now + kSinkRelistInterval;
  ++lists_;
  if (syncers_.empty()) {
    for (auto& sink : sinks_) syncers_.push_back(std::make_unique<SinkSyncer>(*sink, clock_));
  }
  for (auto& syncer : syncers_) syncer->Resync(list->records);
  listed_ = true;
  listed_incarnation_ = list->watch_incarnation;
  listed_sequence_ = list->watch_sequence;
  return true;
}

void SinkWorker::ApplyEvents(const std::vector<WatchEvent>& events) {
  for (const auto& event : events) {
    // Covered by the list: at or before its sequence. An event of another statusd (one newer
    // than the list's) is the first after a restart: it shows as a gap and brings another list.
    if (event.incarnation == listed_incarnation_ && event.sequence <= listed_sequence_) continue;
    for (auto& syncer : syncers_) syncer->Apply(event);
  }
}

void SinkWorker::Run() {
  for (;;) {
    std::vector<WatchEvent> batch;
    std::optional<status::NodeStatusRecord> node;
    {
      std::unique_lock<std::mutex> lock(mu_);
      MonoTime next = next_list_;
      for (const auto& s : syncers_) next = std::min(next, s->NextWake());
      Duration wait =
          std::clamp<Duration>(next - clock_.Now(), Duration::zero(), std::chrono::seconds(60));
      cv_.wait_for(lock, wait, [this] {
        return stop_ || !queue_.empty() || node_queue_.has_value() || list_requested_;
      });
      if (stop_) return;
      batch.swap(queue_);
      node.swap(node_queue_);
      if (list_requested_) next_list_ = std::min(next_list_, clock_.Now());
      list_requested_ = false;
    }
    if (node) held_node_ = node;
    // What came before a list is in it: statusd published it before it answered the list.
    bool listed_now = false;
    if (clock_.Now() >= next_list_) listed_now = List();
    if (!listed_) continue;
    if (!listed_now) ApplyEvents(batch);
    const bool changed = listed_now || !batch.empty() || held_node_.has_value();
    for (auto& syncer : syncers_) {
      if (held_node_) syncer->ApplyNode(*held_node_);
      std::vector<Status> errors = changed ? syncer->SyncChanged() : std::vector<Status>{};
      auto more = syncer->Tick();
      errors.insert(errors.end(), more.begin(), more.end());
      for (const auto& e : errors) on_error_(syncer->sink().Name(), e);
    }
    held_node_.reset();
  }
}

}  // namespace nodelet::supervisor
