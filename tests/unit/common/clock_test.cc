// Clock's two readings: RealClock's monotonic time is CLOCK_MONOTONIC (what crosses processes),
// and FakeClock moves its readings only when told, the wall one alone when stepped.
#include "lib/common/clock.h"

#include <gtest/gtest.h>
#include <time.h>

#include "tests/fakes/fake_clock.h"

namespace nodelet {
namespace {

int64_t MonotonicNow() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

TEST(ClockTest, RealMonoNanosIsClockMonotonic) {
  const Clock& clock = RealClock::Get();
  const int64_t before = MonotonicNow();
  const int64_t mono = clock.MonoNanos();
  const int64_t after = MonotonicNow();
  EXPECT_LE(before, mono);
  EXPECT_LE(mono, after);
}

TEST(ClockTest, RealWallReadingsAgree) {
  const Clock& clock = RealClock::Get();
  const int64_t ns = clock.WallNanos();
  const int64_t s = clock.WallSeconds();
  EXPECT_GT(s, 1'600'000'000);  // after 2020
  EXPECT_LE(ns / 1'000'000'000, s);
  EXPECT_LE(s - ns / 1'000'000'000, 1);
}

TEST(ClockTest, FakeMovesOnlyWhenTold) {
  testing::FakeClock clock;
  const MonoTime t0 = clock.Now();
  const int64_t mono0 = clock.MonoNanos();
  const int64_t wall0 = clock.WallNanos();
  EXPECT_EQ(clock.Now(), t0);
  clock.Advance(std::chrono::milliseconds(1500));
  EXPECT_EQ(clock.Now() - t0, std::chrono::milliseconds(1500));
  EXPECT_EQ(clock.MonoNanos() - mono0, 1'500'000'000);
  EXPECT_EQ(clock.WallNanos() - wall0, 1'500'000'000);
  EXPECT_EQ(clock.WallSeconds(), wall0 / 1'000'000'000 + 1);
}

TEST(ClockTest, FakeWallStepLeavesMonotonicTimeAlone) {
  testing::FakeClock clock;
  const int64_t mono0 = clock.MonoNanos();
  const int64_t wall0 = clock.WallSeconds();
  clock.StepWall(-std::chrono::hours(2));
  EXPECT_EQ(clock.MonoNanos(), mono0);
  EXPECT_EQ(clock.WallSeconds(), wall0 - 7200);
}

TEST(ClockTest, TimeUntilIsNeverNegative) {
  testing::FakeClock clock;
  EXPECT_EQ(TimeUntil(clock, clock.Now() + std::chrono::seconds(3)), std::chrono::seconds(3));
  EXPECT_EQ(TimeUntil(clock, clock.Now() - std::chrono::seconds(3)), Duration::zero());
  clock.Advance(std::chrono::seconds(1));
  EXPECT_EQ(TimeUntil(clock, clock.Now() + std::chrono::seconds(3) - std::chrono::seconds(1)),
            std::chrono::seconds(2));
}

}  // namespace
}  // namespace nodelet
