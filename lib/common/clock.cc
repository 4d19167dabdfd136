#include "lib/common/clock.h"

#include <algorithm>

namespace nodelet {

int64_t Clock::MonoNanos() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Now().time_since_epoch()).count();
}

int64_t Clock::WallSeconds() const {
  return std::chrono::duration_cast<std::chrono::seconds>(WallNow().time_since_epoch()).count();
}

int64_t Clock::WallNanos() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(WallNow().time_since_epoch()).count();
}

// The only direct clock reads of nodelet's production code.
MonoTime RealClock::Now() const { return std::chrono::steady_clock::now(); }

WallTime RealClock::WallNow() const { return std::chrono::system_clock::now(); }

RealClock& RealClock::Get() {
  static RealClock clock;
  return clock;
}

long MillisUntil(const Clock& clock, MonoTime deadline, long max_ms) {
  auto now = clock.Now();
  if (deadline <= now) return 0;
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
  // Round up so a poll never wakes a hair before its deadline and spins.
  if (std::chrono::milliseconds(ms) < deadline - now) ++ms;
  return std::clamp<long>(static_cast<long>(ms), 0, max_ms);
}

Duration TimeUntil(const Clock& clock, MonoTime deadline) {
  const MonoTime now = clock.Now();
  return deadline > now ? deadline - now : Duration::zero();
}

}  // namespace nodelet
