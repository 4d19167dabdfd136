// EtcdWatchPump: one etcd watch the etcd pod source keeps open, scheduled on the supervisor's
// loop. Opening the watch (WatchPrefix or WatchKey) and each read of it (Watch::Next) run on the
// source's executor; every batch of events comes back to the loop's thread and goes to `deliver`.
// A watch that cannot be opened, or whose stream breaks, is opened again from the revision after
// the last one delivered once its back-off has passed (a loop timer: retry_min, doubling up to
// retry_max; a batch resets it), so nothing that changed meanwhile is lost. A compaction is
// delivered and ends the pump: its owner lists (or reads the key) again and starts another.
// Every method is called on the loop's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "lib/common/status.h"
#include "lib/etcd/etcd_client.h"
#include "lib/service/blocking_executor.h"
#include "lib/service/event_loop.h"

namespace nodelet::supervisor {

// Runs `call` (on an executor's thread), an exception turned into an Internal error naming
// `what`: whatever throws, the source reports a failure and goes on.
Status CatchAll(const std::string& what, const std::function<Status()>& call);

struct WatchPumpOptions {
  std::string key;  // a prefix, or one key
  bool prefix = true;
  int64_t start_revision = 0;
  std::chrono::milliseconds retry_min{200}, retry_max{5000};
};

class EtcdWatchPump {
 public:
  using Deliver = std::function<void(etcd::Watch::Batch)>;
  // Starts opening the watch. `client` and `executor` outlive the pump; `on_restart` is called
  // each time a broken stream is to be opened again.
  EtcdWatchPump(EventLoop& loop, BlockingExecutor& executor, etcd::Client& client,
                WatchPumpOptions options, Deliver deliver, std::function<void()> on_restart);
  // Cancels the open watch (a read in flight returns at once); what is in flight on the executor
  // then finishes there and its result is dropped.
  ~EtcdWatchPump();
  EtcdWatchPump(const EtcdWatchPump&) = delete;
  EtcdWatchPump& operator=(const EtcdWatchPump&) = delete;

  // A watch is open (not waiting for its back-off or being opened).
  bool open() const { return watch_ != nullptr; }

 private:
  void Open();
  void Read();
  // The next back-off, and the timer armed for it.
  void RetryLater();

  BlockingExecutor& executor_;
  etcd::Client& client_;
  const WatchPumpOptions options_;
  Deliver deliver_;
  std::function<void()> on_restart_;
  int64_t next_;  // the revision to watch from
  std::chrono::milliseconds backoff_{0};
  std::shared_ptr<etcd::Watch> watch_;  // shared with a read in flight
  // Checked by every continuation: the pump may be gone when its call returns.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  EventLoop::Timer retry_;
};

}  // namespace nodelet::supervisor
