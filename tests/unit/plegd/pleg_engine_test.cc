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

TEST(PlegEngineTest, DiedEventCarriesExitCodeInRecord) {
  FakePlegRuntime rt;
  rt.AddPod("a", {{"app", ContainerState::Running}});
  EngineHarness engine(rt, {});
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
  PlegOptions opts;
  opts.relist_period = std::chrono::milliseconds(100);
  opts.inspect_wait = std::chrono::milliseconds(200);
  opts.inspect_workers = 4;
  EngineHarness e(rt, opts);
  // p0's inspection hangs once every pod's has started.
  e.hung = [&] { return rt.sandbox_inspections() >= 51 ? size_t{1} : 0; };
  e.engine.Start();

  std::set<std::string> seen;
  bool relist_done = false;
  e.GatherUntil([&](const PlegOutput& o) {
    for (const auto& p : o.pods) seen.insert(p.record.uid);
    if (!o.relists.empty()) relist_done = true;
    return seen.size() >= 50 && relist_done;
  });
  EXPECT_EQ(seen.size(), 50u) << "the 50 healthy pods were not all reported";
  EXPECT_EQ(seen.count("p0"), 0u) << "the hung pod cannot have been reported yet";
  EXPECT_TRUE(relist_done) << "RelistDone was held back by the hung pod";

  // Events of healthy pods keep flowing while p0 still hangs.
  rt.SetContainerState("p7-app", ContainerState::Exited, 1);
  bool died = false;
  e.GatherUntil([&](const PlegOutput& o) {
    for (const auto& p : o.pods) {
      for (const auto& ev : p.events) {
        died |= ev.id == "p7-app" && ev.type == EventType::ContainerDied;
      }
    }
    return died;
  });
  EXPECT_TRUE(died);

  rt.ReleaseHangs();
  e.hung = nullptr;
  bool p0 = false;
  auto late = e.GatherUntil([&](const PlegOutput& o) {
    for (const auto& p : o.pods) p0 |= p.record.uid == "p0";
    return p0;
  });
  for (const auto& p : late.pods) {
    if (p.record.uid == "p0") EXPECT_FALSE(p.events.empty());
  }
  EXPECT_TRUE(p0) << "the hung pod was not reported after it recovered";
  e.engine.Stop();
}

TEST(PlegEngineTest, FailingListMakesHealthFailingAndRecoveryClearsIt) {
  FakePlegRuntime rt;
  rt.AddPod("a", {{"app", ContainerState::Running}});
  PlegOptions opts;
  opts.relist_threshold = std::chrono::seconds(180);
  EngineHarness e(rt, opts);
  auto& engine = e.engine;
  auto& clock = e.clock;
  e.RelistOnce();
  EXPECT_TRUE(engine.Health().ok);

  rt.FailList(Internal("ListContainers: injected failure"));
  e.RelistOnce();
  auto out = e.Drain();
  ASSERT_FALSE(out.relists.empty());
  EXPECT_NE(out.relists.back().error.find("injected failure"), std::string::npos);
  EXPECT_TRUE(engine.Health().ok) << "one failed relist is within the threshold";
  clock.Advance(std::chrono::seconds(181));
  e.RelistOnce();
  auto h = engine.Health();
  EXPECT_FALSE(h.ok);
  EXPECT_NE(h.reason.find("no successful relist"), std::string::npos) << h.reason;
  EXPECT_NE(h.reason.find("injected failure"), std::string::npos) << h.reason;

  rt.FailList(std::nullopt);
  e.RelistOnce();
  EXPECT_TRUE(engine.Health().ok);

  rt.FailList(Unavailable("connection refused"));
  e.RelistOnce();
  h = engine.Health();
  EXPECT_FALSE(h.ok);
  EXPECT_NE(h.reason.find("runtime unreachable"), std::string::npos) << h.reason;
}

TEST(PlegEngineTest, FailedInspectionIsRetriedNextRelist) {
  FakePlegRuntime rt;
  rt.AddPod("a", {{"app", ContainerState::Running}});
  PlegOptions opts;
  opts.inspect_wait = std::chrono::milliseconds(100);
  EngineHarness engine(rt, opts);
  rt.HangSandbox("a-sb");
  engine.hung = [&] { return rt.sandbox_inspections() >= 1 ? size_t{1} : 0; };
  engine.RelistOnce();  // the inspection hangs past inspect_wait
  auto out = engine.Drain();
  EXPECT_TRUE(out.pods.empty());
  EXPECT_EQ(out.relists.size(), 1u);
  rt.ReleaseHangs();
  engine.hung = nullptr;
  auto late = engine.GatherUntil([](const PlegOutput& o) { return !o.pods.empty(); });
  ASSERT_EQ(late.pods.size(), 1u);
  EXPECT_EQ(late.pods[0].record.uid, "a");
}

// A relist's start goes out twice: on the wall clock for operators, and on the monotonic clock
// for subscribers that compare it with their own times (a pod worker's freshness). A step of the
// wall clock moves only the first.
TEST(PlegEngineTest, RelistStartIsStampedOnBothClocksAndAWallStepMovesOnlyTheWallOne) {
  FakePlegRuntime rt;
  rt.AddPod("a", {{"app", ContainerState::Running}});
  EngineHarness engine(rt, {});
  auto& clock = engine.clock;

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
  engine.engine.Stop();
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
  auto out = e.GatherUntil([](const PlegOutput& o) { return !o.pods.empty(); });
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
  auto again = e.GatherUntil([](const PlegOutput& o) { return !o.pods.empty(); });
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
  auto out = e.GatherUntil(
      [](const PlegOutput& o) { return HasEvent(o, "a-two", EventType::ContainerDied); });
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
  auto again = e.GatherUntil([](const PlegOutput& o) { return !o.pods.empty(); });
  ASSERT_EQ(again.pods.size(), 1u);
  EXPECT_EQ(again.pods[0].record.containers.size(), 3u);
  EXPECT_EQ(rt.container_inspections(), 4);
  e.engine.Stop();
}

// The schedule on the loop: the first relist at once, then one each period counted from the
// start of the last, none before.
TEST(PlegEngineTest, ARelistComesEachPeriodAndNotBefore) {
  FakePlegRuntime rt;
  rt.AddPod("a", {{"app", ContainerState::Running}});
  PlegOptions opts;
  opts.relist_period = std::chrono::milliseconds(1000);
  EngineHarness e(rt, opts);
  e.engine.Start();
  auto first = e.GatherUntil([](const PlegOutput& o) { return !o.relists.empty(); }, Duration(0));
  ASSERT_EQ(first.relists.size(), 1u) << "the first relist runs at once";
  EXPECT_EQ(rt.lists(), 1);
  EXPECT_EQ(e.GatherFor(std::chrono::milliseconds(999)).relists.size(), 0u);
  EXPECT_EQ(rt.lists(), 1) << "no relist before its period";
  auto second = e.GatherFor(std::chrono::milliseconds(1));
  ASSERT_EQ(second.relists.size(), 1u);
  EXPECT_EQ(second.relists[0].started_at_mono_ns - first.relists[0].started_at_mono_ns,
            1'000'000'000);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(e.GatherFor(std::chrono::milliseconds(1000)).relists.size(), 1u);
  }
  EXPECT_EQ(rt.lists(), 5);
  EXPECT_EQ(e.engine.relists(), 5u);
}

// A relist whose inspection hangs ends at its inspect_wait (from its start), and the next one,
// its period past, starts then; the one after that a period later.
TEST(PlegEngineTest, AHungInspectionDelaysTheNextRelistOnlyToItsInspectWait) {
  FakePlegRuntime rt;
  rt.AddPod("p0", {{"app", ContainerState::Running}});
  rt.AddPod("p1", {{"app", ContainerState::Running}});
  rt.HangSandbox("p0-sb");
  PlegOptions opts;
  opts.relist_period = std::chrono::milliseconds(100);
  opts.inspect_wait = std::chrono::milliseconds(250);
  EngineHarness e(rt, opts);
  e.hung = [&] { return rt.sandbox_inspections() >= 2 ? size_t{1} : 0; };
  e.engine.Start();
  auto first = e.GatherFor(std::chrono::milliseconds(249));
  EXPECT_TRUE(first.relists.empty()) << "RelistDone waits for p0 up to inspect_wait";
  ASSERT_EQ(first.pods.size(), 1u);
  EXPECT_EQ(first.pods[0].record.uid, "p1");
  EXPECT_EQ(rt.lists(), 1);
  auto done = e.GatherFor(std::chrono::milliseconds(1));
  ASSERT_EQ(done.relists.size(), 2u) << "the first relist's end, and the next relist at once";
  EXPECT_EQ(done.relists[1].started_at_mono_ns - done.relists[0].started_at_mono_ns, 250'000'000);
  EXPECT_EQ(rt.lists(), 2);
  EXPECT_TRUE(e.GatherFor(std::chrono::milliseconds(99)).relists.empty());
  EXPECT_EQ(e.GatherFor(std::chrono::milliseconds(1)).relists.size(), 1u);
  EXPECT_EQ(rt.lists(), 3);
  rt.ReleaseHangs();
  e.hung = nullptr;
  auto late = e.GatherUntil([](const PlegOutput& o) { return !o.pods.empty(); });
  ASSERT_EQ(late.pods.size(), 1u);
  EXPECT_EQ(late.pods[0].record.uid, "p0");
}

// Stop with a relist waiting for its inspection (inspect_wait an hour away) returns at once; the
// inspection's result and the RelistDone never come.
TEST(PlegEngineTest, StopWithARelistInFlightEndsPromptly) {
  FakePlegRuntime rt;
  rt.AddPod("a", {{"app", ContainerState::Running}});
  rt.HangSandbox("a-sb");
  PlegOptions opts;
  opts.relist_period = std::chrono::hours(1);
  opts.inspect_wait = std::chrono::hours(1);
  EngineHarness e(rt, opts);
  e.hung = [&] { return rt.sandbox_inspections() >= 1 ? size_t{1} : 0; };
  e.engine.Start();
  ASSERT_TRUE(e.RunUntil([&] { return rt.sandbox_inspections() == 1; }, Duration(0)));
  EXPECT_NE(e.engine.next_timer(), MonoTime::max()) << "the inspect_wait timer is armed";
  rt.ReleaseHangs();  // the call returns; its continuation has not run
  const auto started = std::chrono::steady_clock::now();
  e.engine.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(1));
  EXPECT_EQ(e.engine.next_timer(), MonoTime::max());
  // Whatever was posted back runs now, and the time passes: nothing comes out.
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(e.loop.RunOnce(std::chrono::milliseconds(1)).ok());
  e.clock.Advance(std::chrono::hours(2));
  ASSERT_TRUE(e.loop.RunOnce(std::chrono::milliseconds(0)).ok());
  auto after = e.Drain();
  EXPECT_TRUE(after.pods.empty());
  EXPECT_TRUE(after.relists.empty());
  EXPECT_EQ(rt.lists(), 1);
}

}  // namespace
}  // namespace nodelet::plegd
