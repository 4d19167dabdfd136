// PlegEngine and the runtime's events: the relist of the event's pod, looking again while the
// view lags what the event says (and not once it shows it), rounds of several pods sharing one
// listing, starts of ids new to the view, and what each event topic means.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "svc-plegd/pleg_engine.h"
#include "tests/unit/plegd/pleg_engine_fixture.h"

namespace nodelet::plegd {
namespace {

TEST(PlegEngineTest, ARuntimeEventRelistsItsPodAndLooksAgainWhileTheViewLags) {
  FakePlegRuntime rt;
  rt.AddPod("a", {{"app", ContainerState::Running}});
  rt.AddPod("b", {{"app", ContainerState::Running}});
  EventedEngine e(rt);
  // The event comes before the runtime shows the change: the pod listed at the first look, the
  // container alone asked at the second and third, which shows it; then the pod listed again.
  rt.DeferState("a-app", ContainerState::Exited, 3);
  e.engine.NudgeRuntimeId("a-app");
  auto out = e.GatherUntil(
      [](const PlegOutput& o) { return HasEvent(o, "a-app", EventType::ContainerDied); });
  EXPECT_TRUE(HasEvent(out, "a-app", EventType::ContainerDied));
  EXPECT_EQ(rt.pod_lists(), 2);
  EXPECT_EQ(e.engine.event_retries(), 2u);
  EXPECT_EQ(rt.lists(), 1) << "no full relist";

  // An id the runtime does not know (yet): a sandbox or container being created. One question,
  // nothing listed, not asked again: podworkerd asks for a relist once it has made it, and the
  // full relist sees what others make.
  const int lists = rt.pod_lists();
  e.engine.NudgeRuntimeId("new-sandbox");
  EXPECT_TRUE(e.GatherFor(std::chrono::milliseconds(300)).pods.empty());
  EXPECT_EQ(rt.pod_lists(), lists);
  EXPECT_EQ(e.engine.event_retries(), 2u);

  // An id the last view does not hold: its pod is found through the runtime.
  rt.AddPod("c", {{"app", ContainerState::Running}});
  e.engine.NudgeRuntimeId("c-app");
  auto c = e.GatherUntil(
      [](const PlegOutput& o) { return HasEvent(o, "c-app", EventType::ContainerStarted); });
  EXPECT_TRUE(HasEvent(c, "c-app", EventType::ContainerStarted));

  // A foreign pod's event is left to the full relist.
  rt.AddPod("f", {{"app", ContainerState::Running}}, false);
  const int lists_before = rt.pod_lists();
  e.engine.NudgeRuntimeId("f-app");
  EXPECT_TRUE(e.GatherFor(std::chrono::milliseconds(300)).pods.empty());
  EXPECT_EQ(rt.pod_lists(), lists_before);
  // An empty id (a new subscription) is a full relist.
  e.engine.NudgeRuntimeId("");
  auto full = e.GatherUntil([](const PlegOutput& o) { return !o.relists.empty(); });
  EXPECT_EQ(full.relists.size(), 1u);
  EXPECT_EQ(e.engine.nudged_relists(), 1u);

  // The foreign pod is in the view now: its events, an exit too, cost nothing and are not
  // looked at again (they were, 48 times for an exit, as their relist never changed).
  const int lists_now = rt.pod_lists();
  const int asked_now = rt.container_inspections();
  const uint64_t retries_now = e.engine.event_retries();
  rt.SetContainerState("f-app", ContainerState::Exited, 1);
  e.engine.NudgeRuntimeId("f-app", RuntimeChange::kExited);
  EXPECT_TRUE(e.GatherFor(std::chrono::milliseconds(300)).pods.empty());
  EXPECT_EQ(rt.pod_lists(), lists_now);
  EXPECT_EQ(rt.container_inspections(), asked_now);
  EXPECT_EQ(e.engine.event_retries(), retries_now);
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
  auto died = e.GatherUntil(
      [](const PlegOutput& o) { return HasEvent(o, "a-app", EventType::ContainerDied); });
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
  auto died = e.GatherUntil(
      [](const PlegOutput& o) { return HasEvent(o, "a-app", EventType::ContainerDied); });
  EXPECT_TRUE(HasEvent(died, "a-app", EventType::ContainerDied));
  // The pod listed at the first look; then the container alone asked, twice, the second time
  // showing the exit; then the pod listed and the container inspected.
  EXPECT_EQ(rt.pod_lists(), 2);
  EXPECT_EQ(rt.container_inspections() - inspections, 3);
  EXPECT_EQ(e.engine.event_retries(), 2u);

  // b's exit seen first by a relist of b.
  rt.SetContainerState("b-app", ContainerState::Exited, 1);
  e.engine.RelistPods({"b"});
  auto seen = e.GatherUntil(
      [](const PlegOutput& o) { return HasEvent(o, "b-app", EventType::ContainerDied); });
  ASSERT_TRUE(HasEvent(seen, "b-app", EventType::ContainerDied));
  const int lists = rt.pod_lists();
  e.engine.NudgeRuntimeId("b-app", RuntimeChange::kExited);
  EXPECT_TRUE(e.GatherFor(std::chrono::milliseconds(300)).pods.empty());
  EXPECT_EQ(rt.pod_lists(), lists) << "the view shows it already: no look";
  EXPECT_EQ(e.engine.event_retries(), 2u);
  // Another event of b's container that finds nothing new is looked at again (the container
  // alone).
  const int asked = rt.container_inspections();
  e.engine.NudgeRuntimeId("b-app");
  EXPECT_TRUE(e.GatherFor(std::chrono::milliseconds(300)).pods.empty());
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
  auto out = e.GatherUntil([](const PlegOutput& o) {
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
  auto again = e.GatherUntil(
      [](const PlegOutput& o) { return HasEvent(o, "a-app", EventType::ContainerStarted); });
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
  auto started = e.GatherUntil(
      [](const PlegOutput& o) { return HasEvent(o, "c-app", EventType::ContainerStarted); });
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
  e.RunUntil([&] { return e.engine.events_seen_already() >= seen + 2; });
  EXPECT_EQ(e.engine.events_seen_already(), seen + 2);
  EXPECT_EQ(rt.pod_lists(), lists);
  EXPECT_EQ(rt.container_inspections(), asked);

  // A removal: the pod relisted, the container gone, not looked at again.
  rt.SetContainerState("a-app", ContainerState::Exited, 0);
  rt.RemoveContainer("a-app");
  e.engine.NudgeRuntimeId("a-app", RuntimeChange::kRemoved);
  auto removed = e.GatherUntil(
      [](const PlegOutput& o) { return HasEvent(o, "a-app", EventType::ContainerRemoved); });
  EXPECT_TRUE(HasEvent(removed, "a-app", EventType::ContainerRemoved));
  EXPECT_EQ(e.engine.event_retries(), retries);

  // A container's create and a task's create say nothing CRI shows yet: not looked at.
  const int lists_now = rt.pod_lists();
  e.engine.OnRuntimeEvent("c-app", "/tasks/create");
  e.engine.OnRuntimeEvent("c-new", "/containers/create");
  EXPECT_TRUE(e.GatherFor(std::chrono::milliseconds(300)).pods.empty());
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
  e.RunUntil([&] { return e.engine.event_looks_put_off() >= 4; });
  ASSERT_EQ(e.engine.event_looks_put_off(), 4u);
  EXPECT_EQ(rt.lists(), lists);
  EXPECT_EQ(rt.pod_lists(), pod_lists);
  EXPECT_EQ(rt.pod_ofs(), 0);

  // b's maker asks for its relist (podworkerd, once its sync is done): b's starts are in the
  // view when their looks come again, and cost nothing. c's are looked at then, and c is seen.
  e.engine.RelistPods({"b"});
  auto out = e.GatherUntil([](const PlegOutput& o) {
    return HasEvent(o, "b-app", EventType::ContainerStarted) &&
           HasEvent(o, "c-app", EventType::ContainerStarted);
  });
  EXPECT_TRUE(HasEvent(out, "b-app", EventType::ContainerStarted));
  EXPECT_TRUE(HasEvent(out, "c-app", EventType::ContainerStarted));
  e.RunUntil([&] { return e.engine.events_seen_already() >= seen + 2; });
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

// An event's looks are timers on the loop: a start's first look kStartLookAfter (500 ms) after
// it, a look again 10 ms after the look before, doubling; none before its time.
TEST(PlegEngineTest, AnEventsLooksComeAtTheirTimes) {
  FakePlegRuntime rt;
  rt.AddPod("a", {{"app", ContainerState::Created}});
  EventedEngine e(rt);
  const int pod_lists = rt.pod_lists();
  rt.DeferState("a-app", ContainerState::Running, 4);
  e.engine.NudgeRuntimeId("a-app", RuntimeChange::kStarted);
  EXPECT_TRUE(e.GatherFor(std::chrono::milliseconds(499)).pods.empty());
  EXPECT_EQ(rt.pod_lists(), pod_lists) << "a start is not looked at before 500 ms";
  e.GatherFor(std::chrono::milliseconds(1));
  EXPECT_EQ(rt.pod_lists(), pod_lists + 1) << "its first look";
  const int asked = rt.container_inspections();
  e.GatherFor(std::chrono::milliseconds(9));
  EXPECT_EQ(rt.container_inspections(), asked) << "the look again is 10 ms later";
  e.GatherFor(std::chrono::milliseconds(1));
  EXPECT_EQ(rt.container_inspections(), asked + 1);
  e.GatherFor(std::chrono::milliseconds(19));
  EXPECT_EQ(rt.container_inspections(), asked + 1) << "then 20 ms later";
  auto out = e.GatherUntil(
      [](const PlegOutput& o) { return HasEvent(o, "a-app", EventType::ContainerStarted); });
  EXPECT_TRUE(HasEvent(out, "a-app", EventType::ContainerStarted));
  EXPECT_EQ(rt.lists(), 1) << "no full relist";
}

}  // namespace
}  // namespace nodelet::plegd
