// Clock: the one way nodelet code reads time, so tests can drive time by hand
// (tests/fakes/fake_clock.h) and never sleep.
#pragma once

#include <chrono>
#include <cstdint>

namespace nodelet {

using MonoTime = std::chrono::steady_clock::time_point;
using Duration = std::chrono::steady_clock::duration;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::seconds;

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic time, for deadlines, timers and durations.
  virtual MonoTime Now() const = 0;
  // Wall-clock time as Unix epoch seconds, for what operators read (timestamps).
  virtual int64_t WallSeconds() const = 0;
};

class RealClock : public Clock {
 public:
  MonoTime Now() const override { return std::chrono::steady_clock::now(); }
  int64_t WallSeconds() const override;
  // A process-wide instance.
  static RealClock& Get();
};

// CLOCK_MONOTONIC in nanoseconds (what the IPC envelope carries).
int64_t MonotonicNanos();

// Milliseconds from now until `deadline`, clamped to [0, max_ms]; for poll() timeouts.
long MillisUntil(const Clock& clock, MonoTime deadline, long max_ms);

}  // namespace nodelet
