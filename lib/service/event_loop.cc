#include "lib/service/event_loop.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>
#include <vector>

#include "lib/common/check.h"
#include "lib/common/systemd_notify.h"

namespace nodelet {

struct EventLoop::Timer::State {
  Callback callback;
  MonoTime due = MonoTime::max();
  Duration period{0};  // zero: one-shot
};

// ---- Handle ---------------------------------------------------------------------------------

EventLoop::Handle& EventLoop::Handle::operator=(Handle&& other) noexcept {
  if (this != &other) {
    Reset();
    loop_ = std::exchange(other.loop_, nullptr);
    id_ = std::exchange(other.id_, 0);
  }
  return *this;
}

void EventLoop::Handle::Reset() {
  if (loop_ != nullptr) loop_->Remove(id_);
  loop_ = nullptr;
  id_ = 0;
}

// ---- Timer ----------------------------------------------------------------------------------

void EventLoop::Timer::ArmAt(MonoTime at) {
  NODELET_CHECK(state_ != nullptr);
  state_->due = at;
  state_->period = Duration(0);
}

void EventLoop::Timer::ArmAfter(Duration delay) { ArmAt(loop_->clock_.Now() + delay); }

void EventLoop::Timer::ArmRepeating(Duration period) {
  NODELET_CHECK(state_ != nullptr && period > Duration(0));
  state_->due = loop_->clock_.Now() + period;
  state_->period = period;
}

void EventLoop::Timer::Cancel() {
  if (state_ == nullptr) return;
  state_->due = MonoTime::max();
  state_->period = Duration(0);
}

bool EventLoop::Timer::armed() const { return due() != MonoTime::max(); }

MonoTime EventLoop::Timer::due() const { return state_ ? state_->due : MonoTime::max(); }

// ---- EventLoop ------------------------------------------------------------------------------

void EventLoop::BlockSignals(std::initializer_list<int> signals) {
  sigset_t set;
  sigemptyset(&set);
  for (int s : signals) sigaddset(&set, s);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

EventLoop::EventLoop(const Clock& clock) : clock_(clock) {
  post_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  NODELET_CHECK(post_fd_ >= 0);
  sigset_t empty;
  sigemptyset(&empty);
  signal_fd_ = signalfd(-1, &empty, SFD_CLOEXEC | SFD_NONBLOCK);
  NODELET_CHECK(signal_fd_ >= 0);
}

EventLoop::~EventLoop() {
  close(post_fd_);
  close(signal_fd_);
}

EventLoop::Handle EventLoop::AddSocket(zmq::socket_ref socket, Callback on_readable) {
  uint64_t id = NextId();
  readers_[id] = std::make_shared<Reader>(Reader{socket, -1, std::move(on_readable)});
  return Handle(this, id);
}

EventLoop::Handle EventLoop::AddFd(int fd, Callback on_readable) {
  uint64_t id = NextId();
  readers_[id] = std::make_shared<Reader>(Reader{zmq::socket_ref(), fd, std::move(on_readable)});
  return Handle(this, id);
}

EventLoop::Timer EventLoop::AddTimer(Callback callback) {
  uint64_t id = NextId();
  auto state = std::make_shared<Timer::State>();
  state->callback = std::move(callback);
  timers_[id] = state;
  return Timer(this, std::move(state), Handle(this, id));
}

EventLoop::Handle EventLoop::AddAfterIteration(Callback callback) {
  uint64_t id = NextId();
  after_[id] = std::make_shared<Callback>(std::move(callback));
  return Handle(this, id);
}

EventLoop::Handle EventLoop::AddSignal(int signo, SignalCallback callback) {
  BlockSignals({signo});
  uint64_t id = NextId();
  signals_[id] = std::make_shared<SignalEntry>(SignalEntry{signo, std::move(callback)});
  UpdateSignalMask();
  return Handle(this, id);
}

void EventLoop::UpdateSignalMask() {
  sigset_t set;
  sigemptyset(&set);
  for (const auto& [_, s] : signals_) sigaddset(&set, s->signo);
  // Only changes the mask of an fd we own; it cannot fail with valid arguments.
  NODELET_CHECK(signalfd(signal_fd_, &set, SFD_CLOEXEC | SFD_NONBLOCK) == signal_fd_);
}

void EventLoop::Remove(uint64_t id) {
  if (readers_.erase(id) != 0 || after_.erase(id) != 0) return;
  if (auto it = timers_.find(id); it != timers_.end()) {
    // A timer that is due in this iteration must not fire once its handle is gone.
    it->second->due = MonoTime::max();
    timers_.erase(it);
    return;
  }
  if (signals_.erase(id) != 0) UpdateSignalMask();
}

void EventLoop::Post(Callback callback) {
  {
    std::lock_guard<std::mutex> lock(post_mu_);
    posted_.push_back(std::move(callback));
  }
  uint64_t one = 1;
  // Fails only when the counter would overflow, and then the fd is readable anyway.
  (void)!write(post_fd_, &one, sizeof one);
}

void EventLoop::RunPosted() {
  uint64_t n = 0;
  (void)!read(post_fd_, &n, sizeof n);  // reset the counter; EAGAIN when nothing was posted
  std::deque<Callback> batch;
  {
    std::lock_guard<std::mutex> lock(post_mu_);
    batch.swap(posted_);
  }
  // What these callbacks post runs at the next iteration (the eventfd is readable again).
  for (auto& cb : batch) cb();
}

void EventLoop::ReadSignals() {
  signalfd_siginfo info{};
  while (read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
    std::vector<std::shared_ptr<SignalEntry>> matching;
    for (const auto& [_, s] : signals_) {
      if (static_cast<uint32_t>(s->signo) == info.ssi_signo) matching.push_back(s);
    }
    for (const auto& s : matching) s->callback(info);
  }
}

MonoTime EventLoop::NextTimer() const {
  MonoTime next = MonoTime::max();
  for (const auto& [_, t] : timers_) next = std::min(next, t->due);
  return next;
}

void EventLoop::RunTimers() {
  const MonoTime now = clock_.Now();
  std::vector<std::pair<MonoTime, uint64_t>> due;
  for (const auto& [id, t] : timers_) {
    if (t->due <= now) due.emplace_back(t->due, id);
  }
  std::sort(due.begin(), due.end());
  for (const auto& [_, id] : due) {
    auto it = timers_.find(id);
    if (it == timers_.end()) continue;  // removed by an earlier callback
    std::shared_ptr<Timer::State> t = it->second;
    if (t->due > now) continue;  // cancelled or re-armed by an earlier callback
    t->due = t->period > Duration(0) ? now + t->period : MonoTime::max();
    t->callback();
  }
}

Status EventLoop::RunOnce(std::chrono::milliseconds max_wait) {
  if (watchdog_ != nullptr) watchdog_->Tick();
  // Snapshot the readers: a callback may add or remove sources while we dispatch.
  std::vector<uint64_t> ids;
  std::vector<zmq::pollitem_t> items;
  items.push_back(zmq::pollitem_t{nullptr, post_fd_, ZMQ_POLLIN, 0});
  items.push_back(zmq::pollitem_t{nullptr, signal_fd_, ZMQ_POLLIN, 0});
  for (const auto& [id, r] : readers_) {
    ids.push_back(id);
    items.push_back(zmq::pollitem_t{r->socket.handle(), r->fd, ZMQ_POLLIN, 0});
  }
  MonoTime next = NextTimer();
  if (watchdog_ != nullptr) next = std::min(next, watchdog_->NextDue());
  long timeout = MillisUntil(clock_, next, static_cast<long>(max_wait.count()));
  try {
    zmq::poll(items.data(), items.size(), std::chrono::milliseconds(timeout));
  } catch (const zmq::error_t& e) {
    // A signal interrupted the wait: the signalfd has it, and the next iteration reads it.
    if (e.num() != EINTR) return Internal(std::string("poll failed: ") + e.what());
    for (auto& item : items) item.revents = 0;
  }
  if (items[0].revents & ZMQ_POLLIN) RunPosted();
  if (items[1].revents & ZMQ_POLLIN) ReadSignals();
  for (size_t i = 0; i < ids.size(); ++i) {
    // An fd's hang-up or error (ZMQ_POLLERR) is dispatched too: the reader sees it when it reads.
    if (!(items[i + 2].revents & (ZMQ_POLLIN | ZMQ_POLLERR))) continue;
    auto it = readers_.find(ids[i]);
    if (it == readers_.end()) continue;  // removed by an earlier callback
    std::shared_ptr<Reader> r = it->second;
    r->callback();
  }
  RunTimers();
  std::vector<uint64_t> after_ids;
  for (const auto& [id, _] : after_) after_ids.push_back(id);
  for (uint64_t id : after_ids) {
    auto it = after_.find(id);
    if (it == after_.end()) continue;  // removed by an earlier callback
    std::shared_ptr<Callback> cb = it->second;
    (*cb)();
  }
  return Status::Ok();
}

Status EventLoop::Run() {
  while (!stopped_) {
    if (Status s = RunOnce(std::chrono::milliseconds(1000)); !s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace nodelet
