// BlockingExecutor: the threads on which a process runs its blocking calls (CRI, etcd, HTTP,
// file walks) for work its event loop schedules. The loop stays the one scheduler: a timer on
// the loop decides when work is due and submits it here; the work runs on one of a fixed number
// of threads, in order of submission; its continuation is posted back and runs on the loop's
// thread. No thread of the executor waits for time.
//
// Submit and Stop may be called from any thread but the executor's own. Stop (and the
// destructor) drops the work not yet started and waits for the running work to return; a
// continuation not yet run by then never runs, so an owner that holds the executor as a member
// may capture `this` in both.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lib/service/event_loop.h"

namespace nodelet {

class BlockingExecutor {
 public:
  // `threads` ≥ 1.
  BlockingExecutor(EventLoop& loop, int threads);
  ~BlockingExecutor();
  BlockingExecutor(const BlockingExecutor&) = delete;
  BlockingExecutor& operator=(const BlockingExecutor&) = delete;

  // Runs `work` on a thread of the executor, then `then` (if any) on the loop's thread. Ignored
  // once stopped.
  void Submit(std::function<void()> work, std::function<void()> then = nullptr);
  // Drops the queued work, waits for the running work; no continuation runs afterwards.
  void Stop();
  // Work queued or running (the loop's view: decremented when its continuation is posted).
  size_t pending() const;
  // Sets the number of threads (at least 1): more start at once; those above it end as they
  // become idle (podworkerd's probes keep one thread per probe, so none waits behind another).
  void Resize(int threads);
  // Threads running now.
  size_t threads() const;

 private:
  struct Job {
    std::function<void()> work;
    std::function<void()> then;
  };
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> ended = std::make_shared<std::atomic<bool>>(false);
  };
  void Run(std::shared_ptr<std::atomic<bool>> ended);
  // Joins the threads that ended and starts threads up to target_. Under mu_.
  void StartThreadsLocked();

  EventLoop& loop_;
  // Read on the loop's thread by each posted continuation; cleared by Stop.
  std::shared_ptr<std::atomic<bool>> alive_ = std::make_shared<std::atomic<bool>>(true);
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  size_t pending_ = 0;
  bool stopping_ = false;
  size_t target_ = 1;
  size_t live_ = 0;
  std::vector<Worker> workers_;
};

}  // namespace nodelet
