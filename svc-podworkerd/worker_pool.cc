#include "svc-podworkerd/worker_pool.h"

#include <utility>

namespace nodelet::podworkerd {

WorkerPool::WorkerPool(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

WorkerPool::~WorkerPool() { Stop(); }

void WorkerPool::Submit(std::function<void()> job, uint64_t priority) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    jobs_.emplace(std::make_pair(priority, ++submitted_), std::move(job));
  }
  cv_.notify_one();
}

void WorkerPool::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkerPool::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
    if (stopping_) return;
    auto first = jobs_.begin();
    auto job = std::move(first->second);
    jobs_.erase(first);
    lock.unlock();
    job();
    lock.lock();
  }
}

}  // namespace nodelet::podworkerd
