// TurnLoopUntil: for unit tests that drive an EventLoop on a FakeClock while a component's
// executor runs its blocking work on real threads. Turns the loop until `done()` holds and
// `busy()` does not (work in flight posts its continuation back through the loop), within
// `limit` of real time; the fake clock does not move.
#pragma once

#include <chrono>
#include <functional>

#include "lib/service/event_loop.h"

namespace nodelet::testing {

inline bool TurnLoopUntil(EventLoop& loop, const std::function<bool()>& done,
                          const std::function<bool()>& busy,
                          std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done() || busy()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    if (!loop.RunOnce(std::chrono::milliseconds(10)).ok()) return false;
  }
  return true;
}

}  // namespace nodelet::testing
