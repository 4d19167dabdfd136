#include "lib/common/clock.h"

#include <time.h>

#include <algorithm>

namespace nodelet {

int64_t RealClock::WallSeconds() const {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

RealClock& RealClock::Get() {
  static RealClock clock;
  return clock;
}

int64_t MonotonicNanos() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

long MillisUntil(const Clock& clock, MonoTime deadline, long max_ms) {
  auto now = clock.Now();
  if (deadline <= now) return 0;
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
  // Round up so a poll never wakes a hair before its deadline and spins.
  if (std::chrono::milliseconds(ms) < deadline - now) ++ms;
  return std::clamp<long>(static_cast<long>(ms), 0, max_ms);
}

}  // namespace nodelet
