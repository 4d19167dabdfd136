#include "svc-podworkerd/status_sender.h"

#include "lib/common/logging.h"
#include "lib/status/status_client.h"

namespace nodelet::podworkerd {

StatusSender::StatusSender(ipc::Context& ctx, std::string run_dir, StatusSenderOptions options)
    : ctx_(ctx), run_dir_(std::move(run_dir)), options_(options), thread_([this] { Loop(); }) {}

StatusSender::~StatusSender() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StatusSender::Send(const status::PodIdentity& pod, const status::PodStatus& st) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_[pod.uid] = {pod, st};
  }
  cv_.notify_all();
}

void StatusSender::SendEvents(std::vector<status::PodEvent> events) {
  if (events.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& e : events) {
      if (events_.size() >= kMaxQueuedEvents) break;
      events_.push_back(std::move(e));
    }
  }
  cv_.notify_all();
}

std::set<std::string> StatusSender::Unsent() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string> uids;
  for (const auto& [uid, _] : pending_) uids.insert(uid);
  if (!in_flight_.empty()) uids.insert(in_flight_);
  return uids;
}

bool StatusSender::Idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_.empty() && in_flight_.empty();
}

void StatusSender::Loop() {
  status::StatusClientOptions options;
  options.sender = ipc::ServiceId::Podworkerd;
  options.attempt_timeout = options_.attempt_timeout;
  options.deadline = options_.deadline;
  status::StatusClient client(ctx_, run_dir_, options);
  (void)client.Connect();
  bool logged = false;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    cv_.wait(lock, [this] { return stopping_ || !pending_.empty() || !events_.empty(); });
    if (stopping_) break;
    if (!events_.empty()) {
      std::vector<status::PodEvent> batch;
      batch.swap(events_);
      lock.unlock();
      auto r = client.RecordEvents(batch);
      lock.lock();
      if (!r.ok()) {
        // Put them back (before any newer ones) and try again after a pause.
        batch.insert(batch.end(), events_.begin(), events_.end());
        if (batch.size() > kMaxQueuedEvents) batch.resize(kMaxQueuedEvents);
        events_.swap(batch);
        cv_.wait_for(lock, options_.retry_pause, [this] { return stopping_; });
      }
      continue;
    }
    auto node = pending_.extract(pending_.begin());
    in_flight_ = node.key();
    lock.unlock();
    auto r = client.SetPodStatus(node.mapped().first, node.mapped().second);
    lock.lock();
    in_flight_.clear();
    if (r.ok()) {
      ++sent_;
      logged = false;
      continue;
    }
    ++failed_;
    const StatusCode code = r.status().code();
    if (code == StatusCode::kFailedPrecondition || code == StatusCode::kInvalidArgument) {
      // Refused by statusd's guards or as malformed: sending it again cannot help.
      GetLogger("podworkerd")
          ->warn("statusd refused the status of pod {}: {}", node.key(), r.status().ToString());
      continue;
    }
    if (!logged) {
      GetLogger("podworkerd")
          ->warn("Failed to send the status of pod {} to statusd: {}", node.key(),
                 r.status().ToString());
      logged = true;
    }
    // Keep it unless a newer status arrived meanwhile; statusd may be restarting.
    pending_.insert(std::move(node));
    cv_.wait_for(lock, options_.retry_pause, [this] { return stopping_; });
  }
}

}  // namespace nodelet::podworkerd
