// EventLoop: the single-threaded loop every nodelet process runs on (each service and the
// supervisor). Components register their own sources and keep the handles: readers for ZeroMQ
// sockets and fds, timers on the injected Clock, signals through one signalfd, and callbacks
// posted from other threads (how every worker thread wakes its process's loop). A handle removes
// its source when destroyed, also from inside a callback; the loop must outlive its handles.
// EINTR and the watchdog ping are handled here, once. zmq::poll underneath.
#pragma once

#include <signal.h>
#include <sys/signalfd.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <zmq.hpp>

#include "lib/common/clock.h"
#include "lib/common/status.h"

namespace nodelet {

class WatchdogPinger;

class EventLoop {
 public:
  using Callback = std::function<void()>;
  using SignalCallback = std::function<void(const signalfd_siginfo&)>;

  // Removes its source from the loop when destroyed or reset. Move-only.
  class Handle {
   public:
    Handle() = default;
    Handle(Handle&& other) noexcept { *this = std::move(other); }
    Handle& operator=(Handle&& other) noexcept;
    Handle(const Handle&) = delete;
    Handle& operator=(const Handle&) = delete;
    ~Handle() { Reset(); }
    void Reset();
    bool active() const { return loop_ != nullptr; }

   private:
    friend class EventLoop;
    Handle(EventLoop* loop, uint64_t id) : loop_(loop), id_(id) {}
    EventLoop* loop_ = nullptr;
    uint64_t id_ = 0;
  };

  // A timer: fires once at the time it is armed for, or every period; disarmed when created.
  // Re-arming or cancelling it, from anywhere on the loop's thread (its own callback included),
  // replaces what was armed before. Removed from the loop when destroyed. Move-only.
  class Timer {
   public:
    Timer() = default;
    void ArmAt(MonoTime at);
    void ArmAfter(Duration delay);
    // Fires every `period`, first after one period; each next time is counted from the firing.
    void ArmRepeating(Duration period);
    void Cancel();
    bool armed() const;
    // When it fires next; MonoTime::max() when disarmed.
    MonoTime due() const;

   private:
    friend class EventLoop;
    struct State;
    Timer(EventLoop* loop, std::shared_ptr<State> state, Handle handle)
        : loop_(loop), state_(std::move(state)), handle_(std::move(handle)) {}
    EventLoop* loop_ = nullptr;
    std::shared_ptr<State> state_;
    Handle handle_;
  };

  // Blocks `signals` in the calling thread. Call it before any thread starts (ZeroMQ's I/O
  // threads inherit the mask), so that only AddSignal's signalfd sees them.
  static void BlockSignals(std::initializer_list<int> signals);

  // The loop's own eventfd (for Post) and signalfd are made here; a failure aborts (fds).
  explicit EventLoop(const Clock& clock);
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Calls `on_readable` on the loop's thread while the socket (or fd) has input, or the fd a
  // hang-up or an error (its read returns 0 or fails).
  [[nodiscard]] Handle AddSocket(zmq::socket_ref socket, Callback on_readable);
  [[nodiscard]] Handle AddFd(int fd, Callback on_readable);
  // Calls `callback` when the timer fires; arm the returned Timer to start it.
  [[nodiscard]] Timer AddTimer(Callback callback);
  // Delivers `signo` through the loop's signalfd. The signal must have been blocked in every
  // thread (BlockSignals before threads start); AddSignal blocks it in the calling thread too.
  [[nodiscard]] Handle AddSignal(int signo, SignalCallback callback);
  // Calls `callback` at the end of every iteration, after the sources it dispatched (or after
  // the wait timed out): for an owner that recomputes a summary or deadlines from everything
  // the iteration changed (the supervisor). In the order added.
  [[nodiscard]] Handle AddAfterIteration(Callback callback);
  // Runs `callback` on the loop's thread at its next iteration. Callable from any thread, also
  // while Run() is not running; what is still queued when the loop is destroyed never runs.
  void Post(Callback callback);
  // Called with Tick() at every iteration and woken for by its NextDue(), so the pings stop
  // when a callback blocks the loop. Null: none.
  void SetWatchdog(WatchdogPinger* watchdog) { watchdog_ = watchdog; }

  // Iterates until Stop(); an error only when polling itself fails.
  Status Run();
  // One iteration: waits at most `max_wait` (less when a timer is due sooner) for a source,
  // then runs what is ready: posted callbacks, signals, readers, due timers in time order, and
  // last the AddAfterIteration callbacks.
  Status RunOnce(std::chrono::milliseconds max_wait);
  // Makes Run() return after the current iteration; from the loop's thread.
  void Stop() { stopped_ = true; }
  bool stopped() const { return stopped_; }

  const Clock& clock() const { return clock_; }

 private:
  struct Reader {
    zmq::socket_ref socket;
    int fd = -1;
    Callback callback;
  };
  struct SignalEntry {
    int signo = 0;
    SignalCallback callback;
  };

  uint64_t NextId() { return next_id_++; }
  void Remove(uint64_t id);
  void UpdateSignalMask();
  void RunPosted();
  void ReadSignals();
  void RunTimers();
  MonoTime NextTimer() const;

  const Clock& clock_;
  WatchdogPinger* watchdog_ = nullptr;
  bool stopped_ = false;
  uint64_t next_id_ = 1;
  // Entries are shared so that one removed by its own callback lives until that call returns.
  std::map<uint64_t, std::shared_ptr<Reader>> readers_;
  std::map<uint64_t, std::shared_ptr<Timer::State>> timers_;
  std::map<uint64_t, std::shared_ptr<SignalEntry>> signals_;
  std::map<uint64_t, std::shared_ptr<Callback>> after_;

  int signal_fd_ = -1;
  int post_fd_ = -1;
  std::mutex post_mu_;
  std::deque<Callback> posted_;
};

}  // namespace nodelet
