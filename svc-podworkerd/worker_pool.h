// WorkerPool: a fixed number of threads that run submitted jobs in order of submission. Stop()
// drops the jobs not yet started and joins the threads (after their running jobs return).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace nodelet::podworkerd {

class WorkerPool {
 public:
  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues a job for the next idle thread; ignored once stopped.
  void Submit(std::function<void()> job);
  // Idempotent.
  void Stop();
  size_t threads() const { return threads_.size(); }

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace nodelet::podworkerd
