// PlegEngine's relists on the fake runtime: the full relist and its events, hung and failed
// inspections, health, the relist's two clocks, relists of single pods and what an inspection
// asks again. The runtime's events are pleg_engine_events_test.cc's.
#include "svc-plegd/pleg_engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "tests/unit/plegd/pleg_engine_fixture.h"

namespace nodelet::plegd {
namespace {

// For the tests that drain by hand after RelistOnce(): the wake-up is not needed.
void Ignore() {}

TEST(PlegEngineTest, DiedEventCarriesExitCodeInRecord) {
  FakePlegRuntime rt;
  rt.AddPod("a", {{"app", ContainerState::Running}});
  FakeClock clock;
  PlegEngine engine(rt, clock, {}, Ignore);
  engine.StartInspectors();
  engine.RelistOnce();
  auto first = engine.Drain();
  ASSERT_EQ(first.pods.size(), 1u);
  ASSERT_EQ(first.relists.size(), 1u);
  rt.SetContainerState("a-app", ContainerState::Exited, 7);
  engine.RelistOnce();
  auto out = engine.Drain();
  ASSERT_EQ(out.pods.size(), 1u);
  const auto& r = out.pods[0];
  ASSERT_EQ(r.events.size(), 1u);
  EXPECT_EQ(r.events[0].type, EventType::ContainerDied);
  ASSERT_EQ(r.record.containers.size(), 1u);
  EXPECT_EQ(r.record.containers[0]->exit_code, 7);
  EXPECT_EQ(r.record.relist, 2u);
}

TEST(PlegEngineTest, HungInspectionDoesNotDelayOtherPods) {
  FakePlegRuntime rt;
  for (int i = 0; i < 51; ++i)
    rt.AddPod("p" + std::to_string(i), {{"app", ContainerState::Running}});
  rt.HangSandbox("p0-sb");
  FakeClock clock;
  PlegOptions opts;
  opts.relist_period = std::chrono::milliseconds(100);
  opts.inspect_wait = std::chrono::milliseconds(200);
  opts.inspect_workers = 4;
  WakeSignal woken;
  PlegEngine engine(rt, clock, opts, woken.Callback());
  engine.Start();

  std::set<std::string> seen;
  bool relist_done = false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((seen.size() < 50 || !relist_done) && std::chrono::steady_clock::now() < deadline) {
    auto out = WaitOutput(engine, woken, std::chrono::milliseconds(1000));
    for (const auto& p : out.pods) seen.insert(p.record.uid);
    if (!out.relists.empty()) relist_done = true;
  }
  EXPECT_EQ(seen.size(), 50u) << "the 50 healthy pods were not all reported";
  EXPECT_EQ(seen.count("p0"), 0u) << "the hung pod cannot have been reported yet";
  EXPECT_TRUE(relist_done) << "RelistDone was held back by the hung pod";

  // Events of healthy pods keep flowing while p0 still hangs.
  rt.SetContainerState("p7-app", ContainerState::Exited, 1);
  bool died = false;
  deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!died && std::chrono::steady_clock::now() < deadline) {
    for (const auto& p : WaitOutput(engine, woken, std::chrono::milliseconds(1000)).pods) {
      for (const auto& e : p.events) died |= e.id == "p7-app" && e.type == EventType::ContainerDied;
    }
  }
  EXPECT_TRUE(died);

  rt.ReleaseHangs();
  bool p0 = false;
  deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!p0 && std::chrono::steady_clock::now() < deadline) {
    for (const auto& p : WaitOutput(engine, woken, std::chrono::milliseconds(1000)).pods) {
      if (p.record.uid == "p0") {
        p0 = true;
        EXPECT_FALSE(p.events.empty());
      }
    }
  }
  EXPECT_TRUE(p0) << "the hung pod was not reported after it recovered";
  engine.Stop();
}

TEST(PlegEngineTest, FailingListMakesHealthFailingAndRecoveryClearsIt) {
  FakePlegRuntime rt;
  rt.AddPod("a", {{"app", ContainerState::Running}});
  FakeClock clock;
  PlegOptions opts;
  opts.relist_threshold = std::chrono::seconds(180);
  PlegEngine engine(rt, clock, opts, Ignore);
  engine.StartInspectors();
  engine.RelistOnce();
  EXPECT_TRUE(engine.Health().ok);

  rt.FailList(Internal("ListContainers: injected failure"));
  engine.RelistOnce();
  auto out = engine.Drain();
  ASSERT_FALSE(out.relists.empty());
  EXPECT_NE(out.relists.back().error.find("injected failure"), std::string::npos);
  EXPECT_TRUE(engine.Health().ok) << "one failed relist is within the threshold";
  clock.Advance(std::chrono::seconds(181));
  engine.RelistOnce();
  auto h = engine.Health();
  EXPECT_FALSE(h.ok);
  EXPECT_NE(h.reason.find("no successful relist"), std::string::npos) << h.reason;
  EXPECT_NE(h.reason.find("injected failure"), std::string::npos) << h.reason;

  rt.FailList(std::nullopt);
  engine.RelistOnce();
  EXPECT_TRUE(engine.Health().ok);

  rt.FailList(Unavailable("connection refused"));
  engine.RelistOnce();
  h = engine.Health();
  EXPECT_FALSE(h.ok);
  EXPECT_NE(h.reason.find("runtime unreachable"), std::string::npos) << h.reason;
}

TEST(PlegEngineTest, FailedInspectionIsRetriedNextRelist) {
  FakePlegRuntime rt;
  rt.AddPod("a", {{"app", ContainerState::Running}});
  FakeClock clock;
  PlegOptions opts;
  opts.inspect_wait = std::chrono::milliseconds(100);
  WakeSignal woken;
  PlegEngine engine(rt, clock, opts, woken.Callback());
  engine.StartInspectors();
  rt.HangSandbox("a-sb");
  engine.RelistOnce();  // the inspection hangs past inspect_wait
  auto out = engine.Drain();
  EXPECT_TRUE(out.pods.empty());
  EXPECT_EQ(out.relists.size(), 1u);
  rt.ReleaseHangs();
  auto late = WaitOutput(engine, woken, std::chrono::milliseconds(5000));
  ASSERT_EQ(late.pods.size(), 1u);
  EXPECT_EQ(late.pods[0].record.uid, "a");
}

// A relist's start goes out twice: on the wall clock for operators, and on the monotonic clock
// for subscribers that compare it with their own times (a pod worker's freshness). A step of the
// wall clock moves only the first.
TEST(PlegEngineTest, RelistStartIsStampedOnBothClocksAndAWallStepMovesOnlyTheWallOne) {
  FakePlegRuntime rt;
  rt.AddPod("a", {{"app", ContainerState::Running}});
  FakeClock clock;
  PlegEngine engine(rt, clock, {}, Ignore);
  engine.StartInspectors();

  const int64_t mono1 = clock.MonoNanos();
  const int64_t wall1 = clock.WallNanos();
  engine.RelistOnce();
  auto first = engine.Drain();
  ASSERT_EQ(first.relists.size(), 1u);
  EXPECT_EQ(first.relists[0].started_at_mono_ns, mono1);
  EXPECT_EQ(first.relists[0].started_at_ns, wall1);

  // The wall clock is set back an hour, then a second passes.
  clock.StepWall(-std::chrono::hours(1));
  clock.Advance(std::chrono::seconds(1));
  engine.RelistOnce();
  auto second = engine.Drain();
  ASSERT_EQ(second.relists.size(), 1u);
  EXPECT_EQ(second.relists[0].started_at_mono_ns - mono1, 1'000'000'000);
  EXPECT_LT(second.relists[0].started_at_ns, wall1) << "the wall reading follows the step";
  engine.Stop();
}

TEST(PlegEngineTest, ARelistOfOnePodSeesOnlyThatPodAndIsPublishedEvenWhenUnchanged) {
  FakePlegRuntime rt;
  rt.AddPod("a", {{"app", ContainerState::Running}});
  rt.AddPod("b", {{"app", ContainerState::Running}});
  EventedEngine e(rt);
  ASSERT_EQ(e.first.relists.size(), 1u);
  const int64_t first_listed = e.first.relists[0].started_at_mono_ns;
  rt.SetContainerState("a-app", ContainerState::Exited, 3);
  rt.SetContainerState("b-app", ContainerState::Exited, 4);
  e.clock.Advance(std::chrono::milliseconds(5));
  e.engine.RelistPods({"a"});
  auto out = GatherUntil(e.engine, e.woken, [](const PlegOutput& o) { return !o.pods.empty(); });
  ASSERT_EQ(out.pods.size(), 1u);
  EXPECT_EQ(out.pods[0].record.uid, "a");
  EXPECT_TRUE(HasEvent(out, "a-app", EventType::ContainerDied));
  EXPECT_EQ(out.pods[0].record.containers[0]->exit_code, 3);
  EXPECT_GT(out.pods[0].record.listed_at_mono_ns, first_listed);
  EXPECT_TRUE(out.relists.empty()) << "no full relist";
  EXPECT_EQ(rt.lists(), 1);
  EXPECT_EQ(rt.pod_lists(), 1);

  // Asked again with nothing new: inspected and published all the same, with a later listing.
  e.clock.Advance(std::chrono::milliseconds(5));
  e.engine.RelistPods({"a"});
  auto again = GatherUntil(e.engine, e.woken, [](const PlegOutput& o) { return !o.pods.empty(); });
  ASSERT_EQ(again.pods.size(), 1u);
  EXPECT_TRUE(again.pods[0].events.empty());
  EXPECT_GT(again.pods[0].record.listed_at_mono_ns, out.pods[0].record.listed_at_mono_ns);
  e.engine.Stop();
}

// A pod's inspection asks ContainerStatus only of the containers whose listed state moved since
// its last inspection (or that are new), and PodSandboxStatus likewise; the record still holds
// every container and sandbox in full.
TEST(PlegEngineTest, AnInspectionAsksOnlyTheContainersWhoseStateMoved) {
  FakePlegRuntime rt;
  rt.AddPod("a", {{"one", ContainerState::Running},
                  {"two", ContainerState::Running},
                  {"three", ContainerState::Running}});
  EventedEngine e(rt);
  EXPECT_EQ(rt.container_inspections(), 3) << "the first relist inspects all";
  EXPECT_EQ(rt.sandbox_inspections(), 1);
  EXPECT_EQ(e.engine.containers_inspected(), 3u);
  rt.SetContainerState("a-two", ContainerState::Exited, 7);
  e.engine.RelistPods({"a"});
  auto out = GatherUntil(e.engine, e.woken, [](const PlegOutput& o) {
    return HasEvent(o, "a-two", EventType::ContainerDied);
  });
  EXPECT_EQ(rt.container_inspections(), 4) << "only a-two asked again";
  EXPECT_EQ(rt.sandbox_inspections(), 1) << "the sandbox is still ready";
  EXPECT_EQ(e.engine.containers_reused(), 2u);
  ASSERT_FALSE(out.pods.empty());
  const auto& record = out.pods.back().record;
  ASSERT_EQ(record.containers.size(), 3u);
  ASSERT_EQ(record.sandboxes.size(), 1u);
  EXPECT_EQ(record.sandboxes[0]->id, "a-sb");
  for (const auto& c : record.containers) {
    EXPECT_FALSE(c->name.empty()) << c->id << " kept in full";
    EXPECT_EQ(c->state, c->id == "a-two" ? ContainerState::Exited : ContainerState::Running);
    EXPECT_EQ(c->exit_code, c->id == "a-two" ? 7 : 0);
  }
  // Asked by name with nothing new: published, and nothing asked of the runtime.
  e.engine.RelistPods({"a"});
  auto again = GatherUntil(e.engine, e.woken, [](const PlegOutput& o) { return !o.pods.empty(); });
  ASSERT_EQ(again.pods.size(), 1u);
  EXPECT_EQ(again.pods[0].record.containers.size(), 3u);
  EXPECT_EQ(rt.container_inspections(), 4);
  e.engine.Stop();
}

}  // namespace
}  // namespace nodelet::plegd
