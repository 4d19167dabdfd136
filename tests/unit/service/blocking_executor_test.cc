// BlockingExecutor: work runs on the executor's threads, at most as many at once as it has, its
// continuation on the loop's thread; Stop drops what has not started and no continuation runs
// after it.
#include "lib/service/blocking_executor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/fakes/fake_clock.h"

namespace nodelet {
namespace {

using namespace std::chrono_literals;

class BlockingExecutorTest : public ::testing::Test {
 protected:
  bool RunUntil(const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      if (!loop_.RunOnce(10ms).ok()) return false;
    }
    return true;
  }

  // A gate the work waits on (with a deadline), opened by the test.
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  bool WaitOpen() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, 5s, [&] { return open_; });
  }

  testing::FakeClock clock_;
  EventLoop loop_{clock_};
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

TEST_F(BlockingExecutorTest, WorkRunsOffTheLoopAndItsContinuationOnIt) {
  BlockingExecutor executor(loop_, 1);
  const auto loop_thread = std::this_thread::get_id();
  std::thread::id work_thread, then_thread;
  std::vector<int> order;
  for (int i = 0; i < 3; ++i) {
    executor.Submit([&] { work_thread = std::this_thread::get_id(); },
                    [&, i] {
                      then_thread = std::this_thread::get_id();
                      order.push_back(i);
                    });
  }
  ASSERT_TRUE(RunUntil([&] { return order.size() == 3; }));
  EXPECT_NE(work_thread, loop_thread);
  EXPECT_EQ(then_thread, loop_thread);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2})) << "one thread runs the work in order";
  EXPECT_EQ(executor.pending(), 0u);
}

TEST_F(BlockingExecutorTest, NoMoreWorkRunsAtOnceThanItHasThreads) {
  BlockingExecutor executor(loop_, 2);
  std::atomic<int> running{0}, most{0}, done{0};
  for (int i = 0; i < 6; ++i) {
    executor.Submit(
        [&] {
          int now = ++running;
          int seen = most.load();
          while (now > seen && !most.compare_exchange_weak(seen, now)) {
          }
          WaitOpen();
          --running;
        },
        [&] { ++done; });
  }
  ASSERT_TRUE(RunUntil([&] { return running.load() == 2; }));
  EXPECT_EQ(executor.pending(), 6u);
  Open();
  ASSERT_TRUE(RunUntil([&] { return done.load() == 6; }));
  EXPECT_EQ(most.load(), 2);
}

TEST_F(BlockingExecutorTest, ResizingAddsThreadsAtOnceAndEndsIdleOnesAboveTheNewSize) {
  BlockingExecutor executor(loop_, 1);
  EXPECT_EQ(executor.threads(), 1u);
  executor.Resize(3);
  EXPECT_EQ(executor.threads(), 3u);
  std::atomic<int> running{0}, done{0};
  for (int i = 0; i < 3; ++i) {
    executor.Submit(
        [&] {
          ++running;
          WaitOpen();
        },
        [&] { ++done; });
  }
  ASSERT_TRUE(RunUntil([&] { return running.load() == 3; })) << "all three at once";
  executor.Resize(1);  // busy threads finish their work first
  EXPECT_EQ(executor.threads(), 3u);
  Open();
  ASSERT_TRUE(RunUntil([&] { return done.load() == 3 && executor.threads() == 1; }));
  // The one left still serves, and growing again reuses nothing that ended.
  executor.Submit([] {}, [&] { ++done; });
  ASSERT_TRUE(RunUntil([&] { return done.load() == 4; }));
  executor.Resize(2);
  EXPECT_EQ(executor.threads(), 2u);
}

TEST_F(BlockingExecutorTest, StopDropsQueuedWorkAndEveryContinuationNotYetRun) {
  std::atomic<int> started{0};
  int continued = 0;
  {
    BlockingExecutor executor(loop_, 1);
    executor.Submit(
        [&] {
          ++started;
          WaitOpen();
        },
        [&] { ++continued; });
    executor.Submit([&] { ++started; }, [&] { ++continued; });
    ASSERT_TRUE(RunUntil([&] { return started.load() == 1; }));
    // Stop drops the second at once, then waits for the first, which the gate still holds.
    std::thread stopper([&] { executor.Stop(); });
    const bool dropped = RunUntil([&] { return executor.pending() == 1; });
    Open();
    stopper.join();
    ASSERT_TRUE(dropped);
    executor.Submit([&] { ++started; }, [&] { ++continued; });  // ignored once stopped
  }
  // The first work's continuation may have been posted before Stop: it must not run.
  ASSERT_TRUE(loop_.RunOnce(10ms).ok());
  ASSERT_TRUE(loop_.RunOnce(0ms).ok());
  EXPECT_EQ(started.load(), 1);
  EXPECT_EQ(continued, 0);
}

}  // namespace
}  // namespace nodelet
