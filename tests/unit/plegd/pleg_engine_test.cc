#include "svc-plegd/pleg_engine.h"

#include <gtest/gtest.h>

#include <functional>
#include <set>

#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_pleg_runtime.h"
#include "tests/testing/wake_signal.h"

namespace nodelet::plegd {
namespace {

using ipc::pleg::EventType;
using testing::FakeClock;
using testing::FakePlegRuntime;
using testing::WakeSignal;

// For the tests that drain by hand after RelistOnce(): the wake-up is not needed.
void Ignore() {}

// Waits for the engine to wake its owner and drains, until there is output or the timeout
// passed (then empty output). A wake-up whose output was already drained is skipped.
PlegOutput WaitOutput(PlegEngine& engine, WakeSignal& woken, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    if (left.count() <= 0 || !woken.Wait(left)) return {};
    PlegOutput out = engine.Drain();
    if (!out.pods.empty() || !out.relists.empty()) return out;
  }
}

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

}  // namespace
}  // namespace nodelet::plegd

namespace nodelet::plegd {
namespace {

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

// Drains until `pred` holds for the output gathered so far, or 5 s pass.
PlegOutput GatherUntil(PlegEngine& engine, WakeSignal& woken,
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

bool HasEvent(const PlegOutput& out, const std::string& id, EventType type) {
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

TEST(PlegEngineTest, ARuntimeEventRelistsItsPodAndLooksAgainWhileTheViewLags) {
  FakePlegRuntime rt;
  rt.AddPod("a", {{"app", ContainerState::Running}});
  rt.AddPod("b", {{"app", ContainerState::Running}});
  EventedEngine e(rt);
  // The event comes before the runtime shows the change: the pod listed at the first look, the
  // container alone asked at the second and third, which shows it; then the pod listed again.
  rt.DeferState("a-app", ContainerState::Exited, 3);
  e.engine.NudgeRuntimeId("a-app");
  auto out = GatherUntil(e.engine, e.woken, [](const PlegOutput& o) {
    return HasEvent(o, "a-app", EventType::ContainerDied);
  });
  EXPECT_TRUE(HasEvent(out, "a-app", EventType::ContainerDied));
  EXPECT_EQ(rt.pod_lists(), 2);
  EXPECT_EQ(e.engine.event_retries(), 2u);
  EXPECT_EQ(rt.lists(), 1) << "no full relist";

  // An id the runtime does not know (yet): a sandbox or container being created. One question,
  // nothing listed, not asked again: podworkerd asks for a relist once it has made it, and the
  // full relist sees what others make.
  const int lists = rt.pod_lists();
  e.engine.NudgeRuntimeId("new-sandbox");
  EXPECT_TRUE(WaitOutput(e.engine, e.woken, std::chrono::milliseconds(300)).pods.empty());
  EXPECT_EQ(rt.pod_lists(), lists);
  EXPECT_EQ(e.engine.event_retries(), 2u);

  // An id the last view does not hold: its pod is found through the runtime.
  rt.AddPod("c", {{"app", ContainerState::Running}});
  e.engine.NudgeRuntimeId("c-app");
  auto c = GatherUntil(e.engine, e.woken, [](const PlegOutput& o) {
    return HasEvent(o, "c-app", EventType::ContainerStarted);
  });
  EXPECT_TRUE(HasEvent(c, "c-app", EventType::ContainerStarted));

  // A foreign pod's event is left to the full relist.
  rt.AddPod("f", {{"app", ContainerState::Running}}, false);
  const int lists_before = rt.pod_lists();
  e.engine.NudgeRuntimeId("f-app");
  EXPECT_TRUE(WaitOutput(e.engine, e.woken, std::chrono::milliseconds(300)).pods.empty());
  EXPECT_EQ(rt.pod_lists(), lists_before);
  // An empty id (a new subscription) is a full relist.
  e.engine.NudgeRuntimeId("");
  auto full =
      GatherUntil(e.engine, e.woken, [](const PlegOutput& o) { return !o.relists.empty(); });
  EXPECT_EQ(full.relists.size(), 1u);
  EXPECT_EQ(e.engine.nudged_relists(), 1u);

  // The foreign pod is in the view now: its events, an exit too, cost nothing and are not
  // looked at again (they were, 48 times for an exit, as their relist never changed).
  const int lists_now = rt.pod_lists();
  const int asked_now = rt.container_inspections();
  const uint64_t retries_now = e.engine.event_retries();
  rt.SetContainerState("f-app", ContainerState::Exited, 1);
  e.engine.NudgeRuntimeId("f-app", RuntimeChange::kExited);
  EXPECT_TRUE(WaitOutput(e.engine, e.woken, std::chrono::milliseconds(300)).pods.empty());
  EXPECT_EQ(rt.pod_lists(), lists_now);
  EXPECT_EQ(rt.container_inspections(), asked_now);
  EXPECT_EQ(e.engine.event_retries(), retries_now);
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

// Another event of the container (the task's delete) that comes while its exit is being looked
// at again keeps the look an exit's: the container alone is polled, the pod not relisted.
TEST(PlegEngineTest, AnEventDuringAnExitsLookAgainKeepsItAnExit) {
  FakePlegRuntime rt;
  rt.AddPod("a", {{"app", ContainerState::Running}});
  PlegEngine* engine = nullptr;
  std::atomic<bool> armed{false};
  rt.on_inspect_container = [&](const std::string& id) {
    if (id == "a-app" && armed.exchange(false)) engine->NudgeRuntimeId(id);  // not an exit
  };
  EventedEngine e(rt);
  engine = &e.engine;
  rt.DeferState("a-app", ContainerState::Exited, 6);
  armed = true;
  e.engine.NudgeRuntimeId("a-app", RuntimeChange::kExited);
  auto died = GatherUntil(e.engine, e.woken, [](const PlegOutput& o) {
    return HasEvent(o, "a-app", EventType::ContainerDied);
  });
  EXPECT_TRUE(HasEvent(died, "a-app", EventType::ContainerDied));
  // The exit's first look, the delete's first look, and the listing once the container showed
  // the exit. (Had the delete's look been taken for another event's, the container would have
  // been asked only 10 ms doubling apart.)
  EXPECT_EQ(rt.pod_lists(), 3);
  e.engine.Stop();
}

// A task's exit is looked at again while the view lags it, and not once the view shows it:
// when a relist of its pod saw the exit first (podworkerd asks for one after killing a
// container), its event costs one look, where another event that finds nothing new is looked
// at again.
TEST(PlegEngineTest, AnExitIsLookedAtAgainOnlyUntilTheViewShowsIt) {
  FakePlegRuntime rt;
  rt.AddPod("a", {{"app", ContainerState::Running}});
  rt.AddPod("b", {{"app", ContainerState::Running}});
  EventedEngine e(rt);
  const int inspections = rt.container_inspections();
  rt.DeferState("a-app", ContainerState::Exited, 3);
  e.engine.NudgeRuntimeId("a-app", RuntimeChange::kExited);
  auto died = GatherUntil(e.engine, e.woken, [](const PlegOutput& o) {
    return HasEvent(o, "a-app", EventType::ContainerDied);
  });
  EXPECT_TRUE(HasEvent(died, "a-app", EventType::ContainerDied));
  // The pod listed at the first look; then the container alone asked, twice, the second time
  // showing the exit; then the pod listed and the container inspected.
  EXPECT_EQ(rt.pod_lists(), 2);
  EXPECT_EQ(rt.container_inspections() - inspections, 3);
  EXPECT_EQ(e.engine.event_retries(), 2u);

  // b's exit seen first by a relist of b.
  rt.SetContainerState("b-app", ContainerState::Exited, 1);
  e.engine.RelistPods({"b"});
  auto seen = GatherUntil(e.engine, e.woken, [](const PlegOutput& o) {
    return HasEvent(o, "b-app", EventType::ContainerDied);
  });
  ASSERT_TRUE(HasEvent(seen, "b-app", EventType::ContainerDied));
  const int lists = rt.pod_lists();
  e.engine.NudgeRuntimeId("b-app", RuntimeChange::kExited);
  EXPECT_TRUE(WaitOutput(e.engine, e.woken, std::chrono::milliseconds(300)).pods.empty());
  EXPECT_EQ(rt.pod_lists(), lists) << "the view shows it already: no look";
  EXPECT_EQ(e.engine.event_retries(), 2u);
  // Another event of b's container that finds nothing new is looked at again (the container
  // alone).
  const int asked = rt.container_inspections();
  e.engine.NudgeRuntimeId("b-app");
  EXPECT_TRUE(WaitOutput(e.engine, e.woken, std::chrono::milliseconds(300)).pods.empty());
  EXPECT_GT(e.engine.event_retries(), 2u);
  EXPECT_EQ(rt.pod_lists(), lists + 1) << "the pod listed at the first look only";
  EXPECT_GT(rt.container_inspections(), asked);
  e.engine.Stop();
}

// A round of requests that concerns several pods (they came while the last round ran) lists the
// node once and relists each pod from that listing: the same events and records as a listing
// per pod, an id the view does not hold found in it too, and an event whose id another request
// of the round already showed moved not looked at again.
TEST(PlegEngineTest, ARoundOfSeveralPodsSharesOneListing) {
  FakePlegRuntime rt;
  rt.AddPod("a", {{"app", ContainerState::Running}});
  rt.AddPod("b", {{"app", ContainerState::Running}, {"side", ContainerState::Running}});
  rt.AddPod("x", {{"app", ContainerState::Running}});
  rt.AddPod("f", {{"app", ContainerState::Running}}, false);
  PlegEngine* engine = nullptr;
  std::atomic<bool> armed{false};
  // While x's relist runs, the next round's requests come in.
  rt.on_list_pod = [&](const std::string& uid) {
    if (uid != "x" || !armed.exchange(false)) return;
    engine->NudgeRuntimeId("a-app", RuntimeChange::kExited);
    engine->NudgeRuntimeId("b-app");
    engine->NudgeRuntimeId("b-side");
    engine->NudgeRuntimeId("c-app");  // a pod the view does not hold yet
    engine->NudgeRuntimeId("f-app");  // foreign
    engine->RelistPods({"b"});
  };
  EventedEngine e(rt);
  engine = &e.engine;
  ASSERT_EQ(rt.lists(), 1);
  rt.SetContainerState("a-app", ContainerState::Exited, 9);
  rt.SetContainerState("b-app", ContainerState::Exited, 2);
  rt.SetContainerState("b-side", ContainerState::Exited, 3);
  rt.AddPod("c", {{"app", ContainerState::Running}});
  rt.SetContainerState("x-app", ContainerState::Exited, 1);
  armed = true;
  e.engine.NudgeRuntimeId("x-app");
  auto out = GatherUntil(e.engine, e.woken, [](const PlegOutput& o) {
    return HasEvent(o, "x-app", EventType::ContainerDied) &&
           HasEvent(o, "a-app", EventType::ContainerDied) &&
           HasEvent(o, "b-app", EventType::ContainerDied) &&
           HasEvent(o, "b-side", EventType::ContainerDied) &&
           HasEvent(o, "c-app", EventType::ContainerStarted);
  });
  EXPECT_TRUE(HasEvent(out, "a-app", EventType::ContainerDied));
  EXPECT_TRUE(HasEvent(out, "b-app", EventType::ContainerDied));
  EXPECT_TRUE(HasEvent(out, "b-side", EventType::ContainerDied));
  EXPECT_TRUE(HasEvent(out, "c-app", EventType::ContainerStarted));
  EXPECT_EQ(rt.lists(), 2) << "the second round listed the node once";
  EXPECT_EQ(rt.pod_lists(), 1) << "x's alone, in the first round";
  EXPECT_EQ(e.engine.shared_listings(), 1u);
  EXPECT_EQ(e.engine.event_retries(), 0u) << "every event's id moved in its round";
  for (const auto& p : out.pods) {
    EXPECT_NE(p.record.uid, "f") << "a foreign pod is the full relist's";
    if (p.record.uid != "a") continue;
    ASSERT_EQ(p.record.containers.size(), 1u);
    EXPECT_EQ(p.record.containers[0]->exit_code, 9);
  }
  // A round of one pod asks the runtime for that pod alone.
  rt.SetContainerState("a-app", ContainerState::Running);
  e.engine.NudgeRuntimeId("a-app");
  auto again = GatherUntil(e.engine, e.woken, [](const PlegOutput& o) {
    return HasEvent(o, "a-app", EventType::ContainerStarted);
  });
  EXPECT_TRUE(HasEvent(again, "a-app", EventType::ContainerStarted));
  EXPECT_EQ(rt.lists(), 2);
  EXPECT_EQ(rt.pod_lists(), 2);
  e.engine.Stop();
}

// An event is looked at until the view shows what it says: a start until the container is
// running (a new container that CRI lists still created is not taken for it), not at all when
// the view shows it already; a removal once the container is gone.
TEST(PlegEngineTest, AnEventIsLookedAtUntilTheViewShowsWhatItSays) {
  FakePlegRuntime rt;
  rt.AddPod("a", {{"app", ContainerState::Running}});
  EventedEngine e(rt);
  // A new pod whose container CRI lists created when its task's start comes: the pod's relist
  // changes the view (the pod is new), but the start is looked at again until it shows.
  rt.AddPod("c", {{"app", ContainerState::Created}});
  rt.DeferState("c-app", ContainerState::Running, 3);
  e.engine.NudgeRuntimeId("c-app", RuntimeChange::kStarted);
  auto started = GatherUntil(e.engine, e.woken, [](const PlegOutput& o) {
    return HasEvent(o, "c-app", EventType::ContainerStarted);
  });
  EXPECT_TRUE(HasEvent(started, "c-app", EventType::ContainerStarted));
  EXPECT_EQ(rt.lists(), 1) << "seen without the full relist";
  const uint64_t retries = e.engine.event_retries();
  EXPECT_GE(retries, 1u) << "looked at again after the pod's relist";

  // A start the view shows already (podworkerd's relist saw it first) costs nothing when its
  // look comes (half a second after the event).
  const int lists = rt.pod_lists();
  const int asked = rt.container_inspections();
  const uint64_t seen = e.engine.events_seen_already();
  e.engine.NudgeRuntimeId("a-app", RuntimeChange::kStarted);
  e.engine.NudgeRuntimeId("a-sb", RuntimeChange::kStarted);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (e.engine.events_seen_already() < seen + 2 && std::chrono::steady_clock::now() < end) {
    WaitOutput(e.engine, e.woken, std::chrono::milliseconds(50));
  }
  EXPECT_EQ(e.engine.events_seen_already(), seen + 2);
  EXPECT_EQ(rt.pod_lists(), lists);
  EXPECT_EQ(rt.container_inspections(), asked);

  // A removal: the pod relisted, the container gone, not looked at again.
  rt.SetContainerState("a-app", ContainerState::Exited, 0);
  rt.RemoveContainer("a-app");
  e.engine.NudgeRuntimeId("a-app", RuntimeChange::kRemoved);
  auto removed = GatherUntil(e.engine, e.woken, [](const PlegOutput& o) {
    return HasEvent(o, "a-app", EventType::ContainerRemoved);
  });
  EXPECT_TRUE(HasEvent(removed, "a-app", EventType::ContainerRemoved));
  EXPECT_EQ(e.engine.event_retries(), retries);

  // A container's create and a task's create say nothing CRI shows yet: not looked at.
  const int lists_now = rt.pod_lists();
  e.engine.OnRuntimeEvent("c-app", "/tasks/create");
  e.engine.OnRuntimeEvent("c-new", "/containers/create");
  EXPECT_TRUE(WaitOutput(e.engine, e.woken, std::chrono::milliseconds(300)).pods.empty());
  EXPECT_EQ(rt.pod_lists(), lists_now);
  EXPECT_EQ(e.engine.runtime_events_unlooked(), 2u);
  e.engine.Stop();
}

TEST(PlegEngineTest, AStartOfAnIdNewToTheViewIsPutOffThenLookedAt) {
  FakePlegRuntime rt;
  rt.AddPod("a", {{"app", ContainerState::Running}});
  EventedEngine e(rt);
  // Two pods being started: their sandboxes' and containers' starts come before anyone asks
  // for their relist.
  rt.AddPod("b", {{"app", ContainerState::Running}});
  rt.AddPod("c", {{"app", ContainerState::Running}});
  const int lists = rt.lists();
  const int pod_lists = rt.pod_lists();
  const uint64_t seen = e.engine.events_seen_already();
  for (const char* id : {"b-sb", "b-app", "c-sb", "c-app"}) {
    e.engine.NudgeRuntimeId(id, RuntimeChange::kStarted);
  }
  // Their looks (half a second after the events) find ids the view does not hold: put off,
  // nothing asked of the runtime.
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (e.engine.event_looks_put_off() < 4 && std::chrono::steady_clock::now() < end) {
    WaitOutput(e.engine, e.woken, std::chrono::milliseconds(50));
  }
  ASSERT_EQ(e.engine.event_looks_put_off(), 4u);
  EXPECT_EQ(rt.lists(), lists);
  EXPECT_EQ(rt.pod_lists(), pod_lists);
  EXPECT_EQ(rt.pod_ofs(), 0);

  // b's maker asks for its relist (podworkerd, once its sync is done): b's starts are in the
  // view when their looks come again, and cost nothing. c's are looked at then, and c is seen.
  e.engine.RelistPods({"b"});
  auto out = GatherUntil(e.engine, e.woken, [](const PlegOutput& o) {
    return HasEvent(o, "b-app", EventType::ContainerStarted) &&
           HasEvent(o, "c-app", EventType::ContainerStarted);
  });
  EXPECT_TRUE(HasEvent(out, "b-app", EventType::ContainerStarted));
  EXPECT_TRUE(HasEvent(out, "c-app", EventType::ContainerStarted));
  end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (e.engine.events_seen_already() < seen + 2 && std::chrono::steady_clock::now() < end) {
    WaitOutput(e.engine, e.woken, std::chrono::milliseconds(50));
  }
  EXPECT_GE(e.engine.events_seen_already(), seen + 2) << "b's starts";
  EXPECT_EQ(e.engine.event_looks_put_off(), 4u) << "put off once only";
  EXPECT_GE(rt.pod_ofs() + rt.lists() - lists, 1) << "c asked of the runtime at the second look";
  e.engine.Stop();
}

TEST(PlegEngineTest, EachTopicSaysWhatItsEventMeans) {
  EXPECT_EQ(ChangeOfTopic("/containers/create"), std::nullopt);
  EXPECT_EQ(ChangeOfTopic("/tasks/create"), std::nullopt);
  EXPECT_EQ(ChangeOfTopic("/tasks/start"), RuntimeChange::kStarted);
  EXPECT_EQ(ChangeOfTopic("/tasks/exit"), RuntimeChange::kExited);
  EXPECT_EQ(ChangeOfTopic("/tasks/delete"), RuntimeChange::kExited);
  EXPECT_EQ(ChangeOfTopic("/containers/delete"), RuntimeChange::kRemoved);
  EXPECT_EQ(ChangeOfTopic("/tasks/oom"), RuntimeChange::kAny);
  EXPECT_EQ(ChangeOfTopic("/containers/update"), RuntimeChange::kAny);
}

}  // namespace
}  // namespace nodelet::plegd
