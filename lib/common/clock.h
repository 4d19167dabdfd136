// Clock: the one way nodelet code reads time, so tests can drive time by hand
// (tests/fakes/fake_clock.h) and never sleep.
//
// Two readings: monotonic (Now, MonoNanos) for deadlines, timers, durations and freshness, and
// wall (WallNow, WallSeconds, WallNanos) only for what operators read (statuses, events, logs,
// names). Monotonic time is CLOCK_MONOTONIC: the same clock in every process on the node and
// immune to steps of the wall clock, so a time that crosses processes (IPC) is MonoNanos().
// Nothing outside lib/common reads a clock directly (direct_clock_reads_test.cc checks it).
// Code that blocks in real time (poll, a socket timeout) and measures its deadline on the Clock
// it is given needs a clock that moves: RealClock. FakeClock is for cores without I/O.
#pragma once

#include <chrono>
#include <cstdint>

namespace nodelet {

// libstdc++'s steady_clock is CLOCK_MONOTONIC on Linux.
using MonoTime = std::chrono::steady_clock::time_point;
using Duration = std::chrono::steady_clock::duration;
using WallTime = std::chrono::system_clock::time_point;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::seconds;

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic time, for deadlines, timers and durations.
  virtual MonoTime Now() const = 0;
  // Wall-clock time, for what operators read (timestamps, names).
  virtual WallTime WallNow() const = 0;

  // Now() in nanoseconds of CLOCK_MONOTONIC: comparable across the node's processes.
  int64_t MonoNanos() const;
  // WallNow() as Unix epoch seconds and nanoseconds.
  int64_t WallSeconds() const;
  int64_t WallNanos() const;
};

class RealClock : public Clock {
 public:
  MonoTime Now() const override;
  WallTime WallNow() const override;
  // The process-wide instance. Only a process's root (a main, the service runtime, the
  // supervisor) takes it; everything else gets a Clock from its creator.
  static RealClock& Get();
};

// Milliseconds from now until `deadline`, clamped to [0, max_ms]; for poll() timeouts.
long MillisUntil(const Clock& clock, MonoTime deadline, long max_ms);

// Time from now until `deadline`, never negative: for waits measured by the real steady clock
// (condition variables, poll), so a fake clock that does not move makes them wait the whole
// remaining time instead of spinning.
Duration TimeUntil(const Clock& clock, MonoTime deadline);

}  // namespace nodelet
