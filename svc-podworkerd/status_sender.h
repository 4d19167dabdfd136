// StatusSender: podworkerd's writer to statusd. The service hands it each pod's newest status and
// the pods' events on its loop's thread; what to send next is decided there, and each call to
// statusd runs on the sender's own one-thread executor, which alone creates, uses and closes the
// ZeroMQ socket (so a slow or restarting statusd never holds the loop or a pod worker). Only the
// newest status of each pod is kept (a newer one replaces the one waiting), events are kept in
// order, at most kMaxQueuedEvents of them, and one call is in flight at a time. A failed call is
// tried again after a pause on a loop timer; a status statusd refuses for good (an illegal
// transition, a malformed status) is dropped with a warning, not retried. Every method but the
// counters is called on the loop's thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "lib/ipc/sockets.h"
#include "lib/service/blocking_executor.h"
#include "lib/service/event_loop.h"
#include "lib/status/pod_status.h"

namespace nodelet::status {
class StatusClient;
}  // namespace nodelet::status

namespace nodelet::podworkerd {

struct StatusSenderOptions {
  std::chrono::milliseconds attempt_timeout{500};  // each try of a call to statusd
  std::chrono::milliseconds deadline{2000};        // each call
  std::chrono::milliseconds retry_pause{200};      // after a failed call
};

class StatusSender {
 public:
  static constexpr size_t kMaxQueuedEvents = 1000;

  StatusSender(EventLoop& loop, ipc::Context& ctx, std::string run_dir,
               StatusSenderOptions options = {});
  // Waits for the call in flight (bounded by its deadline) and closes the socket; statuses and
  // events not sent yet are dropped.
  ~StatusSender();
  StatusSender(const StatusSender&) = delete;
  StatusSender& operator=(const StatusSender&) = delete;

  // Replaces any status of the same pod not sent yet.
  void Send(const status::PodIdentity& pod, const status::PodStatus& status);
  // Queues events for statusd (kept, at most kMaxQueuedEvents, while statusd is away).
  void SendEvents(std::vector<status::PodEvent> events);
  // The pods whose status is queued or being sent now.
  std::set<std::string> Unsent() const;
  // True when no status is queued or being sent (Unsent() is empty).
  bool Idle() const;
  // Whether a call to statusd is on the executor (its outcome not yet seen on the loop).
  bool calling() const { return calling_; }
  // Whether a failed call's pause is running (nothing is sent until it ends).
  bool pausing() const { return retry_.armed(); }
  // Heartbeat counters; any thread.
  uint64_t sent() const { return sent_.load(); }
  uint64_t failed() const { return failed_.load(); }

 private:
  using Entry = std::pair<status::PodIdentity, status::PodStatus>;
  // Starts the next call unless one is in flight or a pause runs: events first, then statuses.
  void Pump();
  void SendEventBatch();
  void SendOneStatus();
  void Pause() { retry_.ArmAfter(options_.retry_pause); }

  ipc::Context& ctx_;
  std::string run_dir_;
  StatusSenderOptions options_;
  // The loop's thread.
  std::map<std::string, Entry> pending_;
  std::vector<status::PodEvent> events_;
  std::string in_flight_;  // the pod whose status is being sent
  bool calling_ = false;
  bool logged_ = false;  // the failure to reach statusd was logged (once until a success)
  EventLoop::Timer retry_;
  std::atomic<uint64_t> sent_{0}, failed_{0};
  // The executor's thread only: made by the first work, closed by the last.
  std::unique_ptr<status::StatusClient> client_;
  // Last: stopped (and its thread joined) before the members its work uses go.
  BlockingExecutor executor_;
};

}  // namespace nodelet::podworkerd
