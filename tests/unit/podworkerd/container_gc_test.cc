// ContainerGc (the node-wide dead-container pass) on the fake runtime: the per-container limit,
// the node-wide maximum (per container first, then the oldest node-wide), the newest instance of
// a live pod's container always kept, running and unmanaged containers never touched.
#include "svc-podworkerd/container_gc.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "svc-podworkerd/cri_configs.h"
#include "tests/fakes/fake_cri_runtime.h"
#include "tests/unit/podworkerd/runtime_pods.h"

namespace nodelet::podworkerd {
namespace {

using ::testing::ElementsAre;
using testing::FakeCriRuntime;
namespace v1 = ::runtime::v1;

constexpr char kImage[] = "nodelet.local/busybox:1.0";

class ContainerGcTest : public ::testing::Test {
 protected:
  void Instances(const std::string& uid, const std::string& name, int count,
                 bool last_running = false, bool managed = true) {
    pods_.Instances(uid, name, count, last_running, managed);
  }
  std::vector<std::string> Left() { return pods_.Left(); }

  FakeCriRuntime runtime_;
  testing::RuntimePods pods_{runtime_, kImage};
};

TEST_F(ContainerGcTest, PerContainerLimitKeepsTheNewestDeadInstances) {
  Instances("p1", "app", 5);
  Instances("p1", "side", 3, /*last_running=*/true);
  ContainerGc gc(runtime_, {2, -1});
  auto r = gc.GarbageCollect({"p1"});
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.dead_before, 7);
  EXPECT_EQ(r.removed, 3);
  EXPECT_THAT(Left(), ElementsAre("p1/app/3", "p1/app/4", "p1/side/0", "p1/side/1", "p1/side/2R"));
}

TEST_F(ContainerGcTest, NodeWideMaximumSharesThePerContainerLimit) {
  Instances("p1", "app", 4);
  Instances("p2", "app", 4);
  Instances("p3", "app", 2, /*last_running=*/true);
  ContainerGc gc(runtime_, {5, 3});
  auto r = gc.GarbageCollect({"p1", "p2", "p3"});
  ASSERT_TRUE(r.status.ok());
  // 9 dead over 3 containers, at most 3 on the node: one each.
  EXPECT_EQ(r.removed, 6);
  EXPECT_THAT(Left(), ElementsAre("p1/app/3", "p2/app/3", "p3/app/0", "p3/app/1R"));
}

TEST_F(ContainerGcTest, OldestGoFirstButALivePodsNewestInstanceStays) {
  Instances("gone", "app", 2);  // not desired any more: nothing protected
  Instances("p1", "app", 2);    // its newest dead instance is the container's state
  Instances("p2", "app", 2, /*last_running=*/true);
  ContainerGc gc(runtime_, {5, 1});
  auto r = gc.GarbageCollect({"p1", "p2"});
  ASSERT_TRUE(r.status.ok());
  // Per container max(1, 1/3) = 1 leaves gone/1, p1/1, p2/0; then the oldest go until one is
  // left, skipping p1/1 (protected).
  EXPECT_THAT(Left(), ElementsAre("p1/app/1", "p2/app/1R"));
  EXPECT_EQ(r.removed, 4);
}

// Each removed container is reported (podworkerd removes its log symlink then).
TEST_F(ContainerGcTest, EachRemovedContainerIsReported) {
  auto ids = pods_.Instances("p1", "app", 3);
  ASSERT_EQ(ids.size(), 3u);
  ContainerGc gc(runtime_, {1, -1});
  std::vector<std::string> reported;
  gc.set_on_removed([&](const std::string& id) { reported.push_back(id); });
  auto r = gc.GarbageCollect({"p1"});
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.removed, 2);
  EXPECT_THAT(reported, ::testing::UnorderedElementsAre(ids[0], ids[1]));
}

TEST_F(ContainerGcTest, NoLimitAndUnmanagedContainersUntouched) {
  Instances("p1", "app", 3);
  Instances("foreign", "app", 4, false, /*managed=*/false);
  ContainerGc gc(runtime_, {1, 0});
  auto r = gc.GarbageCollect({"p1"});
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.dead_before, 3);
  EXPECT_THAT(Left(), ElementsAre("foreign/app/0", "foreign/app/1", "foreign/app/2",
                                  "foreign/app/3", "p1/app/2"));
  ContainerGc unlimited(runtime_, {3, -1});
  Instances("p2", "app", 3);
  EXPECT_EQ(unlimited.GarbageCollect({"p2"}).removed, 0);
}

TEST_F(ContainerGcTest, ListFailureIsReported) {
  runtime_.FailCall(testing::CriCall::kListContainers, Unavailable("down"), 1);
  ContainerGc gc(runtime_, {1, 0});
  EXPECT_EQ(gc.GarbageCollect({}).status.code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace nodelet::podworkerd
