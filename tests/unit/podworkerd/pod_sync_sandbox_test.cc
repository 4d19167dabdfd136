// A pod's sandbox: DecideSandbox (the kubelet's PodSandboxChanged), PodSyncer making, keeping
// and replacing sandboxes on the fake runtime, and the clean-up after a sandbox goes (leftover
// cgroups, CountingRuntime's removal hook and its repair of a task containerd kept).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "svc-podworkerd/counting_runtime.h"
#include "svc-podworkerd/cri_configs.h"
#include "svc-podworkerd/pod_sync.h"
#include "tests/unit/podworkerd/pod_sync_fixture.h"

namespace nodelet::podworkerd {
namespace {

// ---- Sandbox decisions (the kubelet's PodSandboxChanged) ----------------------------------

SandboxView View(const std::string& id, bool ready, uint32_t attempt, int64_t created,
                 bool host_network = true, const std::string& ip = "") {
  SandboxView v;
  v.id = id;
  v.ready = ready;
  v.attempt = attempt;
  v.created_at_ns = created;
  v.host_network = host_network;
  v.ip = ip;
  return v;
}

pod::Pod HostNetworkPod(bool host_network = true) {
  pod::Pod p;
  p.metadata.uid = "u";
  p.spec.host_network = host_network;
  return p;
}

TEST(SandboxDecisionTest, NoSandboxMeansANewOneWithAttemptZero) {
  SandboxDecision d = DecideSandbox(HostNetworkPod(), {});
  EXPECT_TRUE(d.create);
  EXPECT_EQ(d.attempt, 0u);
  EXPECT_TRUE(d.reason.empty());
  EXPECT_TRUE(d.stop.empty());
}

TEST(SandboxDecisionTest, TheNewestReadySandboxIsKept) {
  SandboxDecision d =
      DecideSandbox(HostNetworkPod(), {View("old", false, 0, 10), View("new", true, 1, 20)});
  EXPECT_FALSE(d.create);
  EXPECT_EQ(d.keep_id, "new");
  EXPECT_EQ(d.attempt, 1u);
}

TEST(SandboxDecisionTest, ANotReadyNewestSandboxIsReplacedAboveTheHighestAttempt) {
  // The highest attempt is not the newest sandbox's: the new name must still be unused.
  SandboxDecision d =
      DecideSandbox(HostNetworkPod(), {View("a", false, 5, 10), View("b", false, 2, 20)});
  EXPECT_TRUE(d.create);
  EXPECT_EQ(d.attempt, 6u);
  EXPECT_THAT(d.reason, ::testing::HasSubstr("not ready"));
  EXPECT_TRUE(d.stop.empty());
}

TEST(SandboxDecisionTest, TwoReadySandboxesAreBothStoppedAndReplaced) {
  SandboxDecision d =
      DecideSandbox(HostNetworkPod(), {View("a", true, 0, 10), View("b", true, 1, 20)});
  EXPECT_TRUE(d.create);
  EXPECT_EQ(d.attempt, 2u);
  EXPECT_THAT(d.stop, ::testing::UnorderedElementsAre("a", "b"));
}

TEST(SandboxDecisionTest, AChangedNetworkNamespaceReplacesTheSandbox) {
  SandboxDecision d =
      DecideSandbox(HostNetworkPod(false), {View("a", true, 0, 10, /*host_network=*/true)});
  EXPECT_TRUE(d.create);
  EXPECT_EQ(d.attempt, 1u);
  EXPECT_THAT(d.stop, ::testing::ElementsAre("a"));
}

TEST(SandboxDecisionTest, APodNetworkSandboxWithoutAnIpIsReplaced) {
  EXPECT_TRUE(DecideSandbox(HostNetworkPod(false), {View("a", true, 0, 10, false, "")}).create);
  EXPECT_FALSE(
      DecideSandbox(HostNetworkPod(false), {View("a", true, 0, 10, false, "198.18.0.5")}).create);
}

TEST(SandboxDecisionTest, TheNameHolderIsReadFromContainerdsError) {
  const std::string id(64, 'a');
  EXPECT_EQ(SandboxNameHolder("failed to reserve sandbox name \"p_default_u_0\": name "
                              "\"p_default_u_0\" is reserved for \"" +
                              id + "\""),
            id);
  EXPECT_EQ(SandboxNameHolder("failed to reserve container name \"x\": name \"x\" is "
                              "reserved for \"" +
                              id + "\""),
            "");
  EXPECT_EQ(SandboxNameHolder("failed to reserve sandbox name: is reserved for \"../x\""), "");
  EXPECT_EQ(SandboxNameHolder("connection refused"), "");
}

// After a runtime restart plegd's record may not show the pod's sandbox yet (or at all, from a
// plegd that just started): the runtime's own listing shows it ready, so nothing is created and
// the sync waits for plegd, without calling it a failure to create the sandbox.
TEST_F(PodSyncTest, AReadySandboxPlegdHasNotReportedIsWaitedForNotDuplicated) {
  SyncOutcome out = syncer_.SyncPod(pod_, nullptr);
  EXPECT_EQ(runtime_.CallCount(CriCall::kRunPodSandbox), 1);  // the fixture's own
  EXPECT_EQ(runtime_.CallCount(CriCall::kCreateContainer), 0);
  EXPECT_THAT(out.error, ::testing::HasSubstr("plegd has not reported"));
  EXPECT_TRUE(out.changed_runtime);
  EXPECT_NE(out.status.reason, "CreatePodSandboxError");
  EXPECT_FALSE(out.pod_finished);
}

// A not-ready sandbox the record missed (attempt 3) still counts: the new sandbox takes
// attempt 4, so containerd's name index cannot refuse it, and the old one is stopped.
TEST_F(PodSyncTest, ANewSandboxStepsOverEveryAttemptTheRuntimeLists) {
  ASSERT_TRUE(runtime_.StopPodSandbox(record_.sandboxes[0]->id).ok());
  std::string unseen = UnseenSandbox(3, /*ready=*/false);
  record_.sandboxes[0]->state = SandboxState::NotReady;
  SyncOutcome out = syncer_.SyncPod(pod_, &record_);
  EXPECT_TRUE(out.error.empty()) << out.error;
  int ready = 0;
  for (const auto& [id, s] : RuntimeSandboxes()) {
    if (s.second) {
      ++ready;
      EXPECT_EQ(s.first, 4u);
    }
  }
  EXPECT_EQ(ready, 1);
  EXPECT_TRUE(HasEvent(out, "SandboxChanged"));
  EXPECT_EQ(runtime_.CallCount(CriCall::kStartContainer), 1);
}

// containerd can still refuse the name (a listing taken before it loaded every sandbox): the
// holder is found from the error, stopped when not ready, and the next attempt is used at once.
TEST_F(PodSyncTest, AReservedSandboxNameIsResolvedThroughItsHolder) {
  ASSERT_TRUE(runtime_.StopPodSandbox(record_.sandboxes[0]->id).ok());
  // The fixture's sandbox has attempt 0 and the listing shows it; the holder of attempt 1 is
  // missing from the listing, so the first try (attempt 1) collides with it.
  const std::string holder = UnseenSandbox(1, /*ready=*/false);
  runtime_.HideFromListing(holder);
  record_.sandboxes.clear();  // plegd shows nothing (a fresh plegd, a partial listing)
  SyncOutcome out = syncer_.SyncPod(pod_, &record_);
  EXPECT_TRUE(out.error.empty()) << out.error;
  EXPECT_EQ(runtime_.CallCount(CriCall::kRunPodSandbox), 1 + 1 + 2);  // fixture, unseen, two tries
  int ready = 0;
  for (const auto& [id, s] : RuntimeSandboxes()) ready += s.second ? 1 : 0;
  EXPECT_EQ(ready, 1);
}

// A sandbox that cannot be made is retried by the caller, and says why in the pod's status (as
// the kubelet's CreatePodSandboxError) and as a FailedCreatePodSandBox event.
TEST_F(PodSyncTest, AFailedSandboxCreationIsShownInTheStatusAndAsAnEvent) {
  record_.sandboxes.clear();
  ASSERT_TRUE(runtime_.StopPodSandbox(runtime_.ListPodSandbox({})->at(0).id()).ok());
  runtime_.FailCall(CriCall::kRunPodSandbox,
                    Status(StatusCode::kUnavailable, "can't get final child's PID from pipe"), 1);
  SyncOutcome out = syncer_.SyncPod(pod_, &record_);
  EXPECT_THAT(out.error, ::testing::HasSubstr("final child"));
  EXPECT_EQ(out.status.reason, "CreatePodSandboxError");
  EXPECT_THAT(out.status.message, ::testing::HasSubstr("Failed to create pod sandbox"));
  EXPECT_TRUE(HasEvent(out, "FailedCreatePodSandBox"));
  ASSERT_EQ(out.status.container_statuses.size(), 1u);
  ASSERT_TRUE(out.status.container_statuses[0].state.waiting.has_value());
  // The next sync (the failure was one-off) makes it.
  SyncOutcome again = syncer_.SyncPod(pod_, &record_);
  EXPECT_TRUE(again.error.empty()) << again.error;
}

// Two ready sandboxes (one the runtime made again behind plegd's back, both reported): the
// running container is stopped first, both sandboxes are stopped, and one new sandbox is made.
TEST_F(PodSyncTest, TwoReadySandboxesHaveTheirContainersKilledAndAreReplaced) {
  pod_.spec.restart_policy = "Always";
  v1::ContainerConfig cc = MakeContainerConfig(pod_, pod_.spec.containers[0], 0);
  v1::PodSandboxConfig sbc = MakeSandboxConfig(pod_, 0, "/nonexistent-log-dir");
  auto cid = runtime_.CreateContainer(record_.sandboxes[0]->id, cc, sbc);
  ASSERT_TRUE(cid.ok());
  ASSERT_TRUE(runtime_.StartContainer(*cid).ok());
  auto c = std::make_unique<ContainerRecordT>();
  c->id = *cid;
  c->name = "app";
  c->state = ContainerState::Running;
  c->sandbox_id = record_.sandboxes[0]->id;
  record_.containers.push_back(std::move(c));
  auto second = std::make_unique<SandboxRecordT>();
  second->id = UnseenSandbox(1, /*ready=*/true);
  second->state = SandboxState::Ready;
  second->attempt = 1;
  second->created_at_ns = 5;
  second->host_network = true;
  record_.sandboxes.push_back(std::move(second));
  SyncOutcome out = syncer_.SyncPod(pod_, &record_);
  EXPECT_TRUE(out.error.empty()) << out.error;
  EXPECT_GE(runtime_.CallCount(CriCall::kStopContainer), 1);
  auto st = runtime_.ContainerStatus(*cid, false);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->status().state(), v1::CONTAINER_EXITED);
  EXPECT_TRUE(HasEvent(out, "SandboxChanged"));
  int ready = 0;
  for (const auto& [id, s] : RuntimeSandboxes()) {
    if (s.second) {
      ++ready;
      EXPECT_EQ(s.first, 2u);
    }
  }
  EXPECT_EQ(ready, 1);
}

// plegd's record says the sandbox is not ready, the runtime says it is: the record is stale, so
// nothing is killed or created.
TEST_F(PodSyncTest, AStaleNotReadyRecordKillsNothing) {
  record_.sandboxes[0]->state = SandboxState::NotReady;
  SyncOutcome out = syncer_.SyncPod(pod_, &record_);
  EXPECT_EQ(runtime_.CallCount(CriCall::kStopPodSandbox), 0);
  EXPECT_EQ(runtime_.CallCount(CriCall::kRunPodSandbox), 1);
  EXPECT_THAT(out.error, ::testing::HasSubstr("waiting"));
}

// ---- Leftover cgroups ---------------------------------------------------------------------

TEST(LeftoverCgroupsTest, TheCgroupsPathIsReadFromTheRuntimeSpec) {
  const std::string id(64, 'c');
  EXPECT_EQ(CgroupsPathFromInfo(R"({"pid": 1, "runtimeSpec": {"linux": {"cgroupsPath": "/k8s.io/)" +
                                id + R"("}}})"),
            "/k8s.io/" + id);
  EXPECT_EQ(
      CgroupsPathFromInfo(R"({"runtimeSpec": {"linux": {"cgroupsPath": "/k8s.io/../../etc"}}})"),
      std::nullopt);
  EXPECT_EQ(CgroupsPathFromInfo(R"({"runtimeSpec": {"linux": {"cgroupsPath": "/k8s.io//x"}}})"),
            std::nullopt);
  EXPECT_EQ(
      CgroupsPathFromInfo(R"({"runtimeSpec": {"linux": {"cgroupsPath": "system.slice:cri:x"}}})"),
      std::nullopt);
  EXPECT_EQ(CgroupsPathFromInfo(R"({"runtimeSpec": {"linux": {"cgroupsPath": 7}}})"), std::nullopt);
  EXPECT_EQ(CgroupsPathFromInfo("not json"), std::nullopt);
  EXPECT_EQ(CgroupsPathFromInfo("{}"), std::nullopt);
}

// rmdir in every hierarchy: empty leftovers go, a cgroup with anything in it (here a file, as a
// live cgroup has its children) stays, symlinked aliases are not followed.
TEST(LeftoverCgroupsTest, OnlyEmptyDirectoriesOfThePathAreRemoved) {
  char tmpl[] = "/tmp/leftover-cgroups.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string root = tmpl;
  for (const char* h : {"cpu,cpuacct", "memory", "unified"}) {
    ASSERT_EQ(mkdir((root + "/" + h).c_str(), 0755), 0);
    ASSERT_EQ(mkdir((root + "/" + h + "/k8s.io").c_str(), 0755), 0);
    ASSERT_EQ(mkdir((root + "/" + h + "/k8s.io/abc").c_str(), 0755), 0);
  }
  ASSERT_EQ(symlink("cpu,cpuacct", (root + "/cpu").c_str()), 0);
  // memory's is not empty: kept.
  ASSERT_EQ(mkdir((root + "/memory/k8s.io/abc/child").c_str(), 0755), 0);
  EXPECT_EQ(RemoveLeftoverCgroups({"/k8s.io/abc", "/k8s.io/missing"}, root), 2);
  struct stat st {};
  EXPECT_NE(stat((root + "/cpu,cpuacct/k8s.io/abc").c_str(), &st), 0);
  EXPECT_NE(stat((root + "/unified/k8s.io/abc").c_str(), &st), 0);
  EXPECT_EQ(stat((root + "/memory/k8s.io/abc").c_str(), &st), 0);
  EXPECT_EQ(stat((root + "/memory/k8s.io").c_str(), &st), 0);
  std::filesystem::remove_all(root);
}

// After a sandbox's removal the hook hears of the sandbox and of every container that was in it
// (podworkerd deletes any task containerd kept of them); not after a failed removal.
TEST(CountingRuntimeTest, TheSandboxRemovalHookGetsEveryIdOfTheSandbox) {
  FakeCriRuntime fake;
  fake.AddImage(kSyncImage);
  CountingRuntime runtime(fake, fake);
  std::vector<std::string> heard;
  runtime.set_after_sandbox_removal([&](const std::vector<std::string>& ids) {
    heard.insert(heard.end(), ids.begin(), ids.end());
  });
  pod::Pod p;
  p.metadata.name = "p";
  p.metadata.namespace_name = "default";
  p.metadata.uid = "u";
  pod::Container c;
  c.name = "app";
  c.image = kSyncImage;
  p.spec.containers.push_back(c);
  v1::PodSandboxConfig sbc = MakeSandboxConfig(p, 0, "/nonexistent-log-dir");
  auto sandbox = fake.RunPodSandbox(sbc, "");
  ASSERT_TRUE(sandbox.ok());
  auto container = fake.CreateContainer(*sandbox, MakeContainerConfig(p, c, 0), sbc);
  ASSERT_TRUE(container.ok());
  fake.FailCall(CriCall::kRemovePodSandbox, Status(StatusCode::kUnavailable, "down"), 1);
  EXPECT_FALSE(runtime.RemovePodSandbox(*sandbox).ok());
  EXPECT_TRUE(heard.empty());
  EXPECT_TRUE(runtime.RemovePodSandbox(*sandbox).ok());
  EXPECT_THAT(heard, ::testing::UnorderedElementsAre(*sandbox, *container));
}

// A removal refused for a task containerd kept (lib/cri/containerd_tasks.h) is repaired through
// the hook and tried again; any other removal error is returned as it is, without a repair.
TEST(CountingRuntimeTest, RepairsAStuckTaskAndRemovesAgain) {
  FakeCriRuntime fake;
  CountingRuntime runtime(fake, fake);
  std::vector<std::string> repaired;
  runtime.set_stuck_task_repair([&](const std::string& id) {
    repaired.push_back(id);
    return Status::Ok();
  });
  v1::PodSandboxConfig sb;
  sb.mutable_metadata()->set_name("p");
  sb.mutable_metadata()->set_uid("u");
  sb.mutable_metadata()->set_namespace_("default");
  auto sandbox = fake.RunPodSandbox(sb, "");
  ASSERT_TRUE(sandbox.ok());
  const std::string stuck(64, 'b');
  fake.FailCall(CriCall::kRemovePodSandbox,
                Status(StatusCode::kFailedPrecondition,
                       "failed to remove container: cannot delete running task " + stuck +
                           ": failed precondition"),
                1);
  EXPECT_TRUE(runtime.RemovePodSandbox(*sandbox).ok());
  EXPECT_EQ(repaired, std::vector<std::string>{stuck});
  EXPECT_EQ(fake.CallCount(CriCall::kRemovePodSandbox), 2);
  EXPECT_EQ(runtime.Snapshot().at("repair_stuck_task").first, 1u);

  fake.FailCall(CriCall::kRemoveContainer, Status(StatusCode::kFailedPrecondition, "in use"), 1);
  EXPECT_FALSE(runtime.RemoveContainer("whatever").ok());
  EXPECT_EQ(repaired.size(), 1u);
}

}  // namespace
}  // namespace nodelet::podworkerd
