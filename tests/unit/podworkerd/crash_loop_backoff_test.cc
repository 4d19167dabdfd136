#include "svc-podworkerd/crash_loop_backoff.h"

#include <gtest/gtest.h>

#include "tests/fakes/fake_clock.h"

namespace nodelet::podworkerd {
namespace {

using std::chrono::seconds;
using testing::FakeClock;

TEST(CrashLoopBackoffTest, FirstRestartImmediateThenDoublingToTheCap) {
  FakeClock clock;
  CrashLoopBackoff b(clock, {});
  const auto key = CrashLoopBackoff::Key("u", "app", 42);
  EXPECT_FALSE(b.InBackoff(key, clock.Now(), nullptr));
  std::vector<long> delays;
  for (int i = 0; i < 8; ++i) {
    delays.push_back(std::chrono::duration_cast<seconds>(b.RecordRestart(key, seconds(1))).count());
  }
  EXPECT_EQ(delays, (std::vector<long>{10, 20, 40, 80, 160, 300, 300, 300}));
}

TEST(CrashLoopBackoffTest, InBackoffUntilTheDelayHasPassed) {
  FakeClock clock;
  CrashLoopBackoff b(clock, {});
  const auto key = CrashLoopBackoff::Key("u", "app", 1);
  b.RecordRestart(key, seconds(1));  // next restart waits 10 s
  const MonoTime exited = clock.Now();
  Duration left{};
  EXPECT_TRUE(b.InBackoff(key, exited, &left));
  EXPECT_EQ(std::chrono::duration_cast<seconds>(left).count(), 10);
  clock.Advance(seconds(9));
  EXPECT_TRUE(b.InBackoff(key, exited, nullptr));
  // Measured from the exit: 10 s after it, restart; 5 s after it, wait.
  EXPECT_FALSE(b.InBackoff(key, clock.Now() - seconds(10), nullptr));
  EXPECT_TRUE(b.InBackoff(key, clock.Now() - seconds(5), nullptr));
}

TEST(CrashLoopBackoffTest, LongRunResetsAndHashChangeIsANewKey) {
  FakeClock clock;
  CrashLoopBackoff b(clock, {});
  const auto key = CrashLoopBackoff::Key("u", "app", 1);
  b.RecordRestart(key, seconds(1));
  b.RecordRestart(key, seconds(1));
  EXPECT_EQ(b.RecordRestart(key, std::chrono::minutes(10)), seconds(10));
  EXPECT_FALSE(b.InBackoff(CrashLoopBackoff::Key("u", "app", 2), clock.Now(), nullptr));
  b.ForgetPod("u");
  EXPECT_EQ(b.size(), 0u);
}

}  // namespace
}  // namespace nodelet::podworkerd
