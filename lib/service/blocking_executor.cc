// The blocking executor's threads and the hand-back of continuations to the loop
// (blocking_executor.h).
#include "lib/service/blocking_executor.h"

#include <utility>

namespace nodelet {

BlockingExecutor::BlockingExecutor(EventLoop& loop, int threads) : loop_(loop) {
  std::lock_guard<std::mutex> lock(mu_);
  target_ = threads < 1 ? 1 : static_cast<size_t>(threads);
  StartThreadsLocked();
}

void BlockingExecutor::StartThreadsLocked() {
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (it->ended->load()) {
      it->thread.join();  // it has returned or is about to
      it = workers_.erase(it);
    } else {
      ++it;
    }
  }
  while (live_ < target_) {
    Worker w;
    w.thread = std::thread([this, ended = w.ended] { Run(ended); });
    workers_.push_back(std::move(w));
    ++live_;
  }
}

void BlockingExecutor::Resize(int threads) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    target_ = threads < 1 ? 1 : static_cast<size_t>(threads);
    StartThreadsLocked();
  }
  cv_.notify_all();  // idle threads above the target end
}

size_t BlockingExecutor::threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_;
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
  std::vector<Worker> workers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    pending_ -= queue_.size();
    queue_.clear();
    workers.swap(workers_);
  }
  *alive_ = false;
  cv_.notify_all();
  for (auto& w : workers) {
    if (w.thread.joinable()) w.thread.join();
  }
}

size_t BlockingExecutor::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_;
}

void BlockingExecutor::Run(std::shared_ptr<std::atomic<bool>> ended) {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || live_ > target_; });
      if (stopping_) return;
      if (live_ > target_) {  // resized down: the others serve the queue
        --live_;
        ended->store(true);
        return;
      }
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
