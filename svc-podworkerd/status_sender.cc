// The status sender's queue on the loop and its calls to statusd on its executor
// (status_sender.h).
#include "svc-podworkerd/status_sender.h"

#include <future>

#include "lib/common/logging.h"
#include "lib/status/status_client.h"

namespace nodelet::podworkerd {

StatusSender::StatusSender(EventLoop& loop, ipc::Context& ctx, std::string run_dir,
                           StatusSenderOptions options)
    : ctx_(ctx),
      run_dir_(std::move(run_dir)),
      options_(options),
      retry_(loop.AddTimer([this] { Pump(); })),
      executor_(loop, 1) {
  // The socket is made on the executor's thread, the one that uses it.
  executor_.Submit([this] {
    status::StatusClientOptions o;
    o.sender = ipc::ServiceId::Podworkerd;
    o.attempt_timeout = options_.attempt_timeout;
    o.deadline = options_.deadline;
    client_ = std::make_unique<status::StatusClient>(ctx_, run_dir_, o);
    (void)client_->Connect();
  });
}

StatusSender::~StatusSender() {
  retry_.Cancel();
  // Closed on the executor's thread too, after the call in flight (if any) returns.
  std::promise<void> closed;
  executor_.Submit([this, &closed] {
    client_.reset();
    closed.set_value();
  });
  closed.get_future().wait();
  executor_.Stop();
}

void StatusSender::Send(const status::PodIdentity& pod, const status::PodStatus& st) {
  pending_[pod.uid] = {pod, st};
  Pump();
}

void StatusSender::SendEvents(std::vector<status::PodEvent> events) {
  if (events.empty()) return;
  for (auto& e : events) {
    if (events_.size() >= kMaxQueuedEvents) break;
    events_.push_back(std::move(e));
  }
  Pump();
}

std::set<std::string> StatusSender::Unsent() const {
  std::set<std::string> uids;
  for (const auto& [uid, _] : pending_) uids.insert(uid);
  if (!in_flight_.empty()) uids.insert(in_flight_);
  return uids;
}

bool StatusSender::Idle() const { return pending_.empty() && in_flight_.empty(); }

void StatusSender::Pump() {
  if (calling_ || retry_.armed()) return;
  if (!events_.empty()) {
    SendEventBatch();
  } else if (!pending_.empty()) {
    SendOneStatus();
  }
}

void StatusSender::SendEventBatch() {
  auto batch = std::make_shared<std::vector<status::PodEvent>>();
  batch->swap(events_);
  auto result = std::make_shared<Status>();
  calling_ = true;
  executor_.Submit([this, batch, result] { *result = client_->RecordEvents(*batch).status(); },
                   [this, batch, result] {
                     calling_ = false;
                     if (!result->ok()) {
                       // Put them back (before any newer ones) and try again after a pause.
                       batch->insert(batch->end(), events_.begin(), events_.end());
                       if (batch->size() > kMaxQueuedEvents) batch->resize(kMaxQueuedEvents);
                       events_.swap(*batch);
                       Pause();
                       return;
                     }
                     Pump();
                   });
}

void StatusSender::SendOneStatus() {
  auto entry = std::make_shared<const Entry>(std::move(pending_.begin()->second));
  in_flight_ = pending_.begin()->first;
  pending_.erase(pending_.begin());
  auto result = std::make_shared<Status>();
  calling_ = true;
  executor_.Submit(
      [this, entry, result] {
        *result = client_->SetPodStatus(entry->first, entry->second).status();
      },
      [this, entry, result] {
        calling_ = false;
        const std::string uid = std::move(in_flight_);
        in_flight_.clear();
        if (result->ok()) {
          ++sent_;
          logged_ = false;
          Pump();
          return;
        }
        ++failed_;
        const StatusCode code = result->code();
        if (code == StatusCode::kFailedPrecondition || code == StatusCode::kInvalidArgument) {
          // Refused by statusd's guards or as malformed: sending it again cannot help.
          GetLogger("podworkerd")
              ->warn("statusd refused the status of pod {}: {}", uid, result->ToString());
          Pump();
          return;
        }
        if (!logged_) {
          GetLogger("podworkerd")
              ->warn("Failed to send the status of pod {} to statusd: {}", uid, result->ToString());
          logged_ = true;
        }
        // Kept unless a newer status arrived meanwhile; statusd may be restarting.
        pending_.try_emplace(uid, *entry);
        Pause();
      });
}

}  // namespace nodelet::podworkerd
