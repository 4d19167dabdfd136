// WakeSignal: stands in for the EventLoop::Post a component's worker thread calls to wake its
// owner, in a test that runs no loop. Callback() is what the component is given; Wait() blocks
// until it was called (or the timeout passed) and clears it, so several calls before one Wait()
// count once, as the loop's own wake-up does. Must outlive the component that calls it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>

namespace nodelet::testing {

class WakeSignal {
 public:
  std::function<void()> Callback() {
    return [this] {
      std::lock_guard<std::mutex> lock(mu_);
      woken_ = true;
      cv_.notify_all();
    };
  }

  // True once the callback was called since the last Wait(); false at the timeout.
  bool Wait(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    const bool woken = cv_.wait_for(lock, timeout, [this] { return woken_; });
    woken_ = false;
    return woken;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool woken_ = false;
};

}  // namespace nodelet::testing
