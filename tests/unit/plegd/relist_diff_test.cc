#include "svc-plegd/relist_diff.h"

#include <gtest/gtest.h>

#include "tests/fakes/fake_pleg_runtime.h"

namespace nodelet::plegd {
namespace {

using ipc::pleg::EventType;
using testing::FakePlegRuntime;

std::vector<EventType> Types(const PodChange& c) {
  std::vector<EventType> t;
  for (const auto& e : c.events) t.push_back(e.type);
  return t;
}

TEST(RelistDiffTest, FirstRelistReportsEveryPodWithStartedEvents) {
  FakePlegRuntime rt;
  rt.AddPod("a", {{"app", ContainerState::Running}, {"init", ContainerState::Exited}});
  RelistDiff diff;
  auto changes = diff.Update(*rt.List());
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].view.uid, "a");
  EXPECT_FALSE(changes[0].view.foreign);
  auto t = Types(changes[0]);
  EXPECT_EQ(std::count(t.begin(), t.end(), EventType::ContainerStarted), 1);
  EXPECT_EQ(std::count(t.begin(), t.end(), EventType::ContainerDied), 1);
  EXPECT_EQ(std::count(t.begin(), t.end(), EventType::SandboxReady), 1);
}

TEST(RelistDiffTest, UnchangedPodsProduceNothing) {
  FakePlegRuntime rt;
  rt.AddPod("a", {{"app", ContainerState::Running}});
  RelistDiff diff;
  diff.Update(*rt.List());
  EXPECT_TRUE(diff.Update(*rt.List()).empty());
}

TEST(RelistDiffTest, RunningToExitedIsDied) {
  FakePlegRuntime rt;
  rt.AddPod("a", {{"app", ContainerState::Running}});
  RelistDiff diff;
  diff.Update(*rt.List());
  rt.SetContainerState("a-app", ContainerState::Exited, 3);
  auto changes = diff.Update(*rt.List());
  ASSERT_EQ(changes.size(), 1u);
  ASSERT_EQ(changes[0].events.size(), 1u);
  EXPECT_EQ(changes[0].events[0].type, EventType::ContainerDied);
  EXPECT_EQ(changes[0].events[0].id, "a-app");
  EXPECT_EQ(changes[0].events[0].container_name, "app");
}

TEST(RelistDiffTest, RunningContainerRemovedIsDiedThenRemoved) {
  FakePlegRuntime rt;
  rt.AddPod("a", {{"app", ContainerState::Running}, {"side", ContainerState::Exited}});
  RelistDiff diff;
  diff.Update(*rt.List());
  rt.RemoveContainer("a-app");
  rt.RemoveContainer("a-side");
  auto changes = diff.Update(*rt.List());
  ASSERT_EQ(changes.size(), 1u);
  std::vector<std::pair<std::string, EventType>> got;
  for (const auto& e : changes[0].events) got.emplace_back(e.id, e.type);
  std::vector<std::pair<std::string, EventType>> want = {{"a-app", EventType::ContainerDied},
                                                         {"a-app", EventType::ContainerRemoved},
                                                         {"a-side", EventType::ContainerRemoved}};
  EXPECT_EQ(got, want);
}

TEST(RelistDiffTest, CreatedIsChanged) {
  FakePlegRuntime rt;
  rt.AddPod("a", {{"app", ContainerState::Created}});
  RelistDiff diff;
  auto changes = diff.Update(*rt.List());
  ASSERT_EQ(changes.size(), 1u);
  auto t = Types(changes[0]);
  EXPECT_EQ(std::count(t.begin(), t.end(), EventType::ContainerChanged), 1);
}

TEST(RelistDiffTest, ForeignPodsAreMarkedAndRemovedPodsReported) {
  FakePlegRuntime rt;
  rt.AddPod("mine", {{"app", ContainerState::Running}});
  rt.AddPod("theirs", {{"app", ContainerState::Running}}, /*managed=*/false);
  RelistDiff diff;
  auto changes = diff.Update(*rt.List());
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_FALSE(diff.Find("mine")->foreign);
  EXPECT_TRUE(diff.Find("theirs")->foreign);

  FakePlegRuntime empty;
  auto gone = diff.Update(*empty.List());
  ASSERT_EQ(gone.size(), 2u);
  for (const auto& c : gone) {
    EXPECT_TRUE(c.removed);
    auto t = Types(c);
    EXPECT_EQ(std::count(t.begin(), t.end(), EventType::SandboxRemoved), 1);
    EXPECT_EQ(std::count(t.begin(), t.end(), EventType::ContainerRemoved), 1);
  }
  EXPECT_EQ(diff.pod_count(), 0u);
}

// A pod relisted alone (an event) and then in a full relist, or only in the full relist:
// the same events in all and the same view either way.
TEST(RelistDiffTest, APodRelistedAloneThenInFullEndsAsAFullRelistAlone) {
  FakePlegRuntime rt;
  rt.AddPod("u1", {{"app", ContainerState::Running}});
  rt.AddPod("u2", {{"app", ContainerState::Running}});
  const RuntimeListing before = *rt.List();
  rt.SetContainerState("u1-app", ContainerState::Exited);
  rt.SetContainerState("u2-app", ContainerState::Exited);
  const RuntimeListing after = *rt.List();
  const RuntimeListing pod1 = *rt.ListPod("u1", {});

  RelistDiff full_only, evented;
  full_only.Update(before);
  evented.Update(before);
  auto all = full_only.Update(after);

  auto one = evented.UpdatePod("u1", pod1);
  ASSERT_TRUE(one.has_value());
  ASSERT_EQ(one->events.size(), 1u);
  EXPECT_EQ(one->events[0].type, EventType::ContainerDied);
  EXPECT_EQ(evented.Find("u2")->containers.at("u2-app"), ContainerState::Running) << "untouched";
  auto rest = evented.Update(after);
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].view.uid, "u2");
  EXPECT_EQ(all.size(), 2u);
  for (const char* uid : {"u1", "u2"}) {
    EXPECT_EQ(evented.Find(uid)->containers, full_only.Find(uid)->containers) << uid;
    EXPECT_EQ(evented.Find(uid)->sandbox_ids, full_only.Find(uid)->sandbox_ids) << uid;
  }
  // Relisted alone with nothing of it left: removed, with Died-less Removed events.
  auto gone = evented.UpdatePod("u1", RuntimeListing{});
  ASSERT_TRUE(gone.has_value());
  EXPECT_TRUE(gone->removed);
  EXPECT_EQ(evented.Find("u1"), nullptr);
  EXPECT_EQ(evented.UidOf("u2-app"), "u2");
  EXPECT_EQ(evented.UidOf("u2-sb"), "u2");
  EXPECT_EQ(evented.UidOf("u1-app"), std::nullopt);
}

}  // namespace
}  // namespace nodelet::plegd
