// The etcd pod source's watches on the loop: opened and read on the executor, retried after a
// back-off timer (etcd_watch_pump.h).
#include "supervisor/sources/etcd_watch_pump.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "lib/common/utf8.h"

namespace nodelet::supervisor {

namespace {

// How long one read waits for a batch: long, as an idle node should not wake for nothing (the
// destructor's Cancel ends a read at once).
constexpr std::chrono::milliseconds kReadWait = std::chrono::seconds(60);

}  // namespace

Status CatchAll(const std::string& what, const std::function<Status()>& call) {
  try {
    return call();
  } catch (const std::exception& e) {
    return Internal(what + " failed: " + ValidUtf8(e.what()));
  }
}

EtcdWatchPump::EtcdWatchPump(EventLoop& loop, BlockingExecutor& executor, etcd::Client& client,
                             WatchPumpOptions options, Deliver deliver,
                             std::function<void()> on_restart)
    : executor_(executor),
      client_(client),
      options_(std::move(options)),
      deliver_(std::move(deliver)),
      on_restart_(std::move(on_restart)),
      next_(options_.start_revision),
      retry_(loop.AddTimer([this] { Open(); })) {
  Open();
}

EtcdWatchPump::~EtcdWatchPump() {
  *alive_ = false;
  if (watch_) watch_->Cancel();
}

void EtcdWatchPump::RetryLater() {
  backoff_ =
      backoff_.count() == 0 ? options_.retry_min : std::min(backoff_ * 2, options_.retry_max);
  retry_.ArmAfter(backoff_);
}

void EtcdWatchPump::Open() {
  struct Opened {
    Status status;
    std::unique_ptr<etcd::Watch> watch;
  };
  auto opened = std::make_shared<Opened>();
  executor_.Submit(
      [client = &client_, key = options_.key, prefix = options_.prefix, from = next_, opened] {
        opened->status = CatchAll("opening the etcd watch of " + key, [&]() -> Status {
          auto w = prefix ? client->WatchPrefix(key, from) : client->WatchKey(key, from);
          if (!w.ok()) return w.status();
          opened->watch = std::move(*w);
          return Status::Ok();
        });
      },
      [this, alive = std::weak_ptr<bool>(alive_), opened] {
        if (!alive.lock()) return;
        if (!opened->status.ok()) {
          RetryLater();
          return;
        }
        watch_ = std::move(opened->watch);
        Read();
      });
}

void EtcdWatchPump::Read() {
  auto batch = std::make_shared<Result<etcd::Watch::Batch>>(Internal("not read"));
  executor_.Submit(
      [watch = watch_, batch] {
        Status s = CatchAll("reading the etcd watch", [&] {
          *batch = watch->Next(kReadWait);
          return Status::Ok();
        });
        if (!s.ok()) *batch = s;
      },
      [this, alive = std::weak_ptr<bool>(alive_), batch] {
        if (!alive.lock()) return;
        if (batch->ok()) {
          backoff_ = std::chrono::milliseconds(0);
          etcd::Watch::Batch b = std::move(**batch);
          if (b.compacted) {
            watch_.reset();
            deliver_(std::move(b));  // the owner may destroy the pump here: nothing after it
            return;
          }
          if (b.revision >= next_) next_ = b.revision + 1;
          const bool events = !b.events.empty();
          Read();
          if (events) deliver_(std::move(b));
          return;
        }
        if (batch->status().code() == StatusCode::kDeadlineExceeded) {
          Read();
          return;
        }
        // The stream broke (a member down, the cluster away): open it again after the back-off.
        watch_.reset();
        on_restart_();
        RetryLater();
      });
}

}  // namespace nodelet::supervisor
