// Helpers of the PlegEngine unit tests (pleg_engine_test.cc and pleg_engine_events_test.cc):
// EngineHarness, an engine on the fake runtime with a FakeClock and a loop the test turns (the
// fake time moves only to the engine's next timer, and only once no runtime call but the hung
// ones is in flight), gathering the engine's output; finding an event in it; and EventedEngine,
// an engine whose full relist runs once, at its start.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <utility>

#include "lib/service/event_loop.h"
#include "svc-plegd/pleg_engine.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_pleg_runtime.h"

namespace nodelet::plegd {

using ipc::pleg::EventType;
using testing::FakeClock;
using testing::FakePlegRuntime;

class EngineHarness {
 public:
  EngineHarness(FakePlegRuntime& rt, PlegOptions options)
      : engine(loop, rt, options, [this] { Collect(); }) {}
  ~EngineHarness() { engine.Stop(); }

  // Turns the loop until `done()` holds, at most `limit` of fake time (and 5 s of real time):
  // runs what is ready, and once no runtime call but the hung ones is in flight, moves the fake
  // clock to the engine's next timer if it comes by then. False when `done()` does not hold and
  // nothing more is to come by then.
  bool RunUntil(const std::function<bool()>& done, Duration limit = std::chrono::seconds(5)) {
    const MonoTime until = clock.Now() + limit;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    for (;;) {
      EXPECT_TRUE(loop.RunOnce(std::chrono::milliseconds(0)).ok());
      if (done()) return true;
      if (std::chrono::steady_clock::now() > deadline) return false;
      if (engine.calls_in_flight() > Hung()) {
        EXPECT_TRUE(loop.RunOnce(std::chrono::milliseconds(5)).ok());
        continue;
      }
      const MonoTime next = engine.next_timer();
      if (next > until) return false;
      if (next > clock.Now()) clock.Advance(next - clock.Now());
    }
  }
  // The output gathered once `pred` holds for it (or the limit passed), taken.
  PlegOutput GatherUntil(const std::function<bool(const PlegOutput&)>& pred,
                         Duration limit = std::chrono::seconds(5)) {
    RunUntil([&] { return pred(gathered_); }, limit);
    return Drain();
  }
  // Lets `d` of fake time pass, running all that comes due in it; the output, taken.
  PlegOutput GatherFor(Duration d) {
    const MonoTime until = clock.Now() + d;
    RunUntil([] { return false; }, d);
    if (clock.Now() < until) clock.Advance(until - clock.Now());
    EXPECT_TRUE(loop.RunOnce(std::chrono::milliseconds(0)).ok());
    return Drain();
  }
  // One full relist, turned until its RelistDone is out (its inspections done, or inspect_wait
  // passed).
  void RelistOnce() {
    const size_t relists = gathered_.relists.size();
    engine.RelistOnce();
    RunUntil([&] { return gathered_.relists.size() > relists; });
  }
  // The output gathered since the last call.
  PlegOutput Drain() {
    PlegOutput out = std::move(gathered_);
    gathered_ = {};
    return out;
  }

  FakeClock clock;
  EventLoop loop{clock};
  // How many runtime calls are in flight now that do not return until the test releases them
  // (the fake time moves while they are); none when unset.
  std::function<size_t()> hung;

 private:
  size_t Hung() const { return hung ? hung() : 0; }
  void Collect() {
    PlegOutput out = engine.Drain();
    for (auto& p : out.pods) gathered_.pods.push_back(std::move(p));
    for (auto& r : out.relists) gathered_.relists.push_back(std::move(r));
  }
  PlegOutput gathered_;

 public:
  PlegEngine engine;
};

inline bool HasEvent(const PlegOutput& out, const std::string& id, EventType type) {
  for (const auto& p : out.pods) {
    for (const auto& e : p.events) {
      if (e.id == id && e.type == type) return true;
    }
  }
  return false;
}

// A long period: after the first relist, only single-pod relists run.
struct EventedEngine : EngineHarness {
  explicit EventedEngine(FakePlegRuntime& rt) : EngineHarness(rt, Options()) {
    engine.Start();
    first = GatherUntil([](const PlegOutput& o) { return !o.relists.empty(); });
  }
  static PlegOptions Options() {
    PlegOptions o;
    o.relist_period = std::chrono::hours(1);
    return o;
  }
  PlegOutput first;
};

}  // namespace nodelet::plegd
