// Helpers of the PlegEngine unit tests (pleg_engine_test.cc and pleg_engine_events_test.cc):
// waiting for the engine's output and gathering it, finding an event in it, and EventedEngine, an
// engine on the fake runtime whose full relist runs once, at its start.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <utility>

#include "svc-plegd/pleg_engine.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_pleg_runtime.h"
#include "tests/testing/wake_signal.h"

namespace nodelet::plegd {

using ipc::pleg::EventType;
using testing::FakeClock;
using testing::FakePlegRuntime;
using testing::WakeSignal;

// Waits for the engine to wake its owner and drains, until there is output or the timeout
// passed (then empty output). A wake-up whose output was already drained is skipped.
inline PlegOutput WaitOutput(PlegEngine& engine, WakeSignal& woken,
                             std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    if (left.count() <= 0 || !woken.Wait(left)) return {};
    PlegOutput out = engine.Drain();
    if (!out.pods.empty() || !out.relists.empty()) return out;
  }
}

// Drains until `pred` holds for the output gathered so far, or 5 s pass.
inline PlegOutput GatherUntil(PlegEngine& engine, WakeSignal& woken,
                              const std::function<bool(const PlegOutput&)>& pred) {
  PlegOutput all;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!pred(all) && std::chrono::steady_clock::now() < end) {
    PlegOutput out = WaitOutput(engine, woken, std::chrono::milliseconds(500));
    for (auto& p : out.pods) all.pods.push_back(std::move(p));
    for (auto& r : out.relists) all.relists.push_back(std::move(r));
  }
  return all;
}

inline bool HasEvent(const PlegOutput& out, const std::string& id, EventType type) {
  for (const auto& p : out.pods) {
    for (const auto& e : p.events) {
      if (e.id == id && e.type == type) return true;
    }
  }
  return false;
}

// A long period: after the first relist, only single-pod relists run.
struct EventedEngine {
  explicit EventedEngine(FakePlegRuntime& rt) : engine(rt, clock, Options(), woken.Callback()) {
    engine.Start();
    first = GatherUntil(engine, woken, [](const PlegOutput& o) { return !o.relists.empty(); });
  }
  static PlegOptions Options() {
    PlegOptions o;
    o.relist_period = std::chrono::hours(1);
    return o;
  }
  FakeClock clock;
  WakeSignal woken;
  PlegEngine engine;
  PlegOutput first;
};

}  // namespace nodelet::plegd
