// FakeClock: a Clock that moves only when a test says so.
#pragma once

#include <atomic>

#include "lib/common/clock.h"

namespace nodelet::testing {

class FakeClock : public Clock {
 public:
  MonoTime Now() const override { return MonoTime(Duration(now_.load())); }
  int64_t WallSeconds() const override {
    return 1'700'000'000 +
           std::chrono::duration_cast<std::chrono::seconds>(Duration(now_.load())).count();
  }
  void Advance(Duration d) { now_ += d.count(); }

 private:
  std::atomic<Duration::rep> now_{Duration(std::chrono::hours(1)).count()};
};

}  // namespace nodelet::testing
