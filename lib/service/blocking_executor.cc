// The blocking executor's threads and the hand-back of continuations to the loop
// (blocking_executor.h).
#include "lib/service/blocking_executor.h"

#include <utility>

namespace nodelet {

BlockingExecutor::BlockingExecutor(EventLoop& loop, int threads) : loop_(loop) {
  if (threads < 1) threads = 1;
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

BlockingExecutor::~BlockingExecutor() { Stop(); }

void BlockingExecutor::Submit(std::function<void()> work, std::function<void()> then) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    queue_.push_back(Job{std::move(work), std::move(then)});
    ++pending_;
  }
  cv_.notify_one();
}

void BlockingExecutor::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
    pending_ -= queue_.size();
    queue_.clear();
  }
  *alive_ = false;
  cv_.notify_all();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

size_t BlockingExecutor::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_;
}

void BlockingExecutor::Run() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job.work();
    {
      std::lock_guard<std::mutex> lock(mu_);
      --pending_;
    }
    if (job.then) {
      loop_.Post([alive = alive_, then = std::move(job.then)] {
        if (*alive) then();
      });
    }
  }
}

}  // namespace nodelet
