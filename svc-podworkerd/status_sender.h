// StatusSender: podworkerd's writer to statusd. Pod workers hand it each pod's newest status and
// their events; its own thread sends them (so a slow or restarting statusd never holds a worker
// back), coalescing per pod (only the newest status of a pod is kept) and retrying while statusd
// is away. Events are kept in order, at most kMaxQueuedEvents of them. A status statusd refuses
// for good (an illegal transition, a malformed status) is dropped with a warning, not retried.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "lib/ipc/sockets.h"
#include "lib/status/pod_status.h"

namespace nodelet::podworkerd {

struct StatusSenderOptions {
  std::chrono::milliseconds attempt_timeout{500};  // each try of a call to statusd
  std::chrono::milliseconds deadline{2000};        // each call
  std::chrono::milliseconds retry_pause{200};      // after a failed call
};

class StatusSender {
 public:
  static constexpr size_t kMaxQueuedEvents = 1000;

  StatusSender(ipc::Context& ctx, std::string run_dir, StatusSenderOptions options = {});
  // Stops the thread; statuses and events not sent yet are dropped.
  ~StatusSender();
  StatusSender(const StatusSender&) = delete;
  StatusSender& operator=(const StatusSender&) = delete;

  // Replaces any status of the same pod not sent yet. Thread-safe.
  void Send(const status::PodIdentity& pod, const status::PodStatus& status);
  // Queues events for statusd (kept, at most kMaxQueuedEvents, while statusd is away).
  void SendEvents(std::vector<status::PodEvent> events);
  // The pods whose status is queued or being sent now. Thread-safe.
  std::set<std::string> Unsent() const;
  // True when nothing is queued or being sent (Unsent() is empty). Thread-safe.
  bool Idle() const;
  uint64_t sent() const { return sent_.load(); }
  uint64_t failed() const { return failed_.load(); }

 private:
  void Loop();
  ipc::Context& ctx_;
  std::string run_dir_;
  StatusSenderOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::pair<status::PodIdentity, status::PodStatus>> pending_;
  std::vector<status::PodEvent> events_;
  std::string in_flight_;  // the pod whose status is being sent
  bool stopping_ = false;
  std::atomic<uint64_t> sent_{0}, failed_{0};
  std::thread thread_;
};

}  // namespace nodelet::podworkerd
