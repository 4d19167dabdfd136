// ContainerGc (the node-wide dead-container pass) on the fake runtime: the per-container limit,
// the node-wide maximum (per container first, then the oldest node-wide), the newest instance of
// a live pod's container always kept, running and unmanaged containers never touched.
#include "svc-podworkerd/container_gc.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "svc-podworkerd/cri_configs.h"
#include "tests/fakes/fake_cri_runtime.h"

namespace nodelet::podworkerd {
namespace {

using ::testing::ElementsAre;
using testing::FakeCriRuntime;
namespace v1 = ::runtime::v1;

constexpr char kImage[] = "nodelet.local/busybox:1.0";

class ContainerGcTest : public ::testing::Test {
 protected:
  void SetUp() override { runtime_.AddImage(kImage); }

  // Instances 0..count-1 of container `name` in pod `uid`, each started and exited, except the
  // last one when `last_running`.
  void Instances(const std::string& uid, const std::string& name, int count,
                 bool last_running = false, bool managed = true) {
    if (!sandboxes_.count(uid)) {
      v1::PodSandboxConfig sb;
      sb.mutable_metadata()->set_name("pod-" + uid);
      sb.mutable_metadata()->set_uid(uid);
      sb.mutable_metadata()->set_namespace_("default");
      auto id = runtime_.RunPodSandbox(sb, "");
      ASSERT_TRUE(id.ok());
      sandboxes_[uid] = {*id, sb};
    }
    auto& [sandbox_id, sb] = sandboxes_[uid];
    for (int a = 0; a < count; ++a) {
      v1::ContainerConfig c;
      c.mutable_metadata()->set_name(name);
      c.mutable_metadata()->set_attempt(static_cast<uint32_t>(a));
      c.mutable_image()->set_image(kImage);
      if (managed) (*c.mutable_labels())[kManagedLabel] = "true";
      (*c.mutable_labels())[kPodUidLabel] = uid;
      (*c.mutable_labels())[kContainerNameLabel] = name;
      auto id = runtime_.CreateContainer(sandbox_id, c, sb);
      ASSERT_TRUE(id.ok()) << id.status().ToString();
      ASSERT_TRUE(runtime_.StartContainer(*id).ok());
      if (!(last_running && a == count - 1)) {
        ASSERT_TRUE(runtime_.ExitContainer(*id, 1).ok());
      }
    }
  }

  // "uid/name/attempt" of every container left, sorted.
  std::vector<std::string> Left() {
    std::vector<std::string> out;
    auto list = runtime_.ListContainers({});
    if (!list.ok()) return out;
    for (const auto& c : *list) {
      out.push_back(c.labels().at(kPodUidLabel) + "/" + c.metadata().name() + "/" +
                    std::to_string(c.metadata().attempt()) +
                    (c.state() == v1::CONTAINER_RUNNING ? "R" : ""));
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  FakeCriRuntime runtime_;
  std::map<std::string, std::pair<std::string, v1::PodSandboxConfig>> sandboxes_;
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
