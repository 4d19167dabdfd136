// FakeClock: a Clock that moves only when a test says so. Its monotonic and wall readings move
// together; StepWall steps the wall clock alone, as an operator or NTP would.
#pragma once

#include <atomic>

#include "lib/common/clock.h"

namespace nodelet::testing {

class FakeClock : public Clock {
 public:
  MonoTime Now() const override { return MonoTime(Duration(now_.load())); }
  WallTime WallNow() const override {
    return WallTime(std::chrono::duration_cast<WallTime::duration>(
        std::chrono::seconds(1'700'000'000) + Duration(now_.load()) + Duration(wall_step_.load())));
  }
  void Advance(Duration d) { now_ += d.count(); }
  // Steps the wall clock by `d` (may be negative); the monotonic reading does not move.
  void StepWall(Duration d) { wall_step_ += d.count(); }

 private:
  std::atomic<Duration::rep> now_{Duration(std::chrono::hours(1)).count()};
  std::atomic<Duration::rep> wall_step_{0};
};

}  // namespace nodelet::testing
