// AfterIterationWork: how the supervisor's parts that recompute their state from whatever an
// iteration changed (each ServiceBackend, the supervisor core) sit on the EventLoop: `work` runs
// at the end of every iteration (EventLoop::AddAfterIteration), and WakeAt() names the latest
// time the loop must iterate again when no source has input: a timer with nothing to do but wake
// the loop for `work`. Both are removed from the loop when it is destroyed or replaced.
#pragma once

#include <utility>

#include "lib/common/clock.h"
#include "lib/service/event_loop.h"

namespace nodelet::supervisor {

class AfterIterationWork {
 public:
  AfterIterationWork() = default;
  AfterIterationWork(EventLoop& loop, EventLoop::Callback work)
      : wake_(loop.AddTimer([] {})), work_(loop.AddAfterIteration(std::move(work))) {}

  // Replaces the previous wake-up time.
  void WakeAt(MonoTime at) { wake_.ArmAt(at); }

 private:
  EventLoop::Timer wake_;
  EventLoop::Handle work_;
};

}  // namespace nodelet::supervisor
