#include "svc-podworkerd/worker_pool.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace nodelet::podworkerd {
namespace {

// Waits (up to a deadline) until `done` holds under `mu`.
template <typename Pred>
bool WaitFor(std::mutex& mu, std::condition_variable& cv, Pred done) {
  std::unique_lock<std::mutex> lock(mu);
  return cv.wait_for(lock, std::chrono::seconds(10), done);
}

TEST(WorkerPoolTest, RunsEveryJobOnItsThreads) {
  WorkerPool pool(3);
  EXPECT_EQ(pool.threads(), 3u);
  std::mutex mu;
  std::condition_variable cv;
  int ran = 0;
  std::set<std::thread::id> threads;
  for (int i = 0; i < 50; ++i) {
    pool.Submit([&] {
      std::lock_guard<std::mutex> lock(mu);
      ++ran;
      threads.insert(std::this_thread::get_id());
      cv.notify_all();
    });
  }
  ASSERT_TRUE(WaitFor(mu, cv, [&] { return ran == 50; }));
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_LE(threads.size(), 3u);
  EXPECT_EQ(threads.count(std::this_thread::get_id()), 0u);
}

// podworkerd's order: a pod that came earlier has its next step run before a later pod's work.
TEST(WorkerPoolTest, LowerPriorityFirstThenInOrderOfSubmission) {
  WorkerPool pool(1);
  std::mutex mu;
  std::condition_variable cv;
  bool release = false, started = false;
  std::vector<int> order;
  // The one thread is busy while the others are queued.
  pool.Submit([&] {
    std::unique_lock<std::mutex> lock(mu);
    started = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
  });
  ASSERT_TRUE(WaitFor(mu, cv, [&] { return started; }));
  auto job = [&](int id) {
    return [&, id] {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(id);
      cv.notify_all();
    };
  };
  pool.Submit(job(50), 5);
  pool.Submit(job(30), 3);
  pool.Submit(job(31), 3);
  pool.Submit(job(10), 1);
  pool.Submit(job(0));  // no priority given: before any pod's
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  ASSERT_TRUE(WaitFor(mu, cv, [&] { return order.size() == 5; }));
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(order, (std::vector<int>{0, 10, 30, 31, 50}));
}

TEST(WorkerPoolTest, JobsRunInParallelUpToTheThreadCount) {
  WorkerPool pool(2);
  std::mutex mu;
  std::condition_variable cv;
  int started = 0;
  bool release = false;
  for (int i = 0; i < 2; ++i) {
    pool.Submit([&] {
      std::unique_lock<std::mutex> lock(mu);
      ++started;
      cv.notify_all();
      cv.wait(lock, [&] { return release; });
    });
  }
  // Both run at once: each waits for the release while the other starts.
  EXPECT_TRUE(WaitFor(mu, cv, [&] { return started == 2; }));
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  pool.Stop();
}

TEST(WorkerPoolTest, StopWaitsForTheRunningJobThenIgnoresNewOnes) {
  WorkerPool pool(1);
  std::mutex mu;
  std::condition_variable cv;
  bool running = false, release = false, finished = false;
  pool.Submit([&] {
    std::unique_lock<std::mutex> lock(mu);
    running = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
    finished = true;
  });
  ASSERT_TRUE(WaitFor(mu, cv, [&] { return running; }));
  std::thread stopper([&] { pool.Stop(); });
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  stopper.join();
  EXPECT_TRUE(finished);  // Stop returned only after the running job
  bool ran_after_stop = false;
  pool.Submit([&] { ran_after_stop = true; });  // ignored once stopped: no thread runs it
  pool.Stop();                                  // idempotent
  EXPECT_FALSE(ran_after_stop);
}

}  // namespace
}  // namespace nodelet::podworkerd
