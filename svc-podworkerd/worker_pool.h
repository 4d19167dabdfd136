// WorkerPool: a fixed number of threads that run submitted jobs, those of a lower priority first
// and those of equal priority in order of submission. podworkerd gives a pod's work the pod's
// place in arrival order: a pod seen earlier gets its next step (the sync after its sandbox, the
// one that reports it Running) before pods seen later get their first, so pods finish in the
// order they came, as one thread per pod would, and the median pod of a burst is not held back
// until the burst's end. Stop() drops the jobs not yet started and joins the threads (after
// their running jobs return).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace nodelet::podworkerd {

class WorkerPool {
 public:
  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues a job for the next idle thread (lowest `priority` first, then first submitted first);
  // ignored once stopped.
  void Submit(std::function<void()> job, uint64_t priority = 0);
  // Idempotent.
  void Stop();
  size_t threads() const { return threads_.size(); }

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  // By (priority, submission number).
  std::map<std::pair<uint64_t, uint64_t>, std::function<void()>> jobs_;
  uint64_t submitted_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace nodelet::podworkerd
