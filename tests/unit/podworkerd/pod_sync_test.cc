// PodSyncer on the fake runtime: what a sync decides from a pod cache record when podworkerd
// comes back after dying in the middle of a StartContainer call.
#include "svc-podworkerd/pod_sync.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "lib/pod/canonical.h"
#include "svc-podworkerd/counting_runtime.h"
#include "svc-podworkerd/cri_configs.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_cri_runtime.h"

namespace nodelet::podworkerd {
namespace {

using ipc::pleg::ContainerRecordT;
using ipc::pleg::ContainerState;
using ipc::pleg::PodRecordT;
using ipc::pleg::SandboxRecordT;
using ipc::pleg::SandboxState;
using testing::CriCall;
using testing::FakeCriRuntime;
namespace v1 = ::runtime::v1;

constexpr char kImage[] = "nodelet.local/busybox:1.0";

class PodSyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    runtime_.AddImage(kImage);
    pod_.metadata.name = "job";
    pod_.metadata.namespace_name = "default";
    pod_.metadata.uid = "uid-job";
    pod_.spec.restart_policy = "Never";
    pod::Container c;
    c.name = "app";
    c.image = kImage;
    c.image_pull_policy = "IfNotPresent";
    c.command = {"sh", "-c", "exit 0"};
    pod_.spec.containers.push_back(c);
    // The pod's sandbox, ready, as plegd reports it.
    v1::PodSandboxConfig sb;
    sb.mutable_metadata()->set_name(pod_.metadata.name);
    sb.mutable_metadata()->set_uid(pod_.metadata.uid);
    sb.mutable_metadata()->set_namespace_(pod_.metadata.namespace_name);
    auto id = runtime_.RunPodSandbox(sb, "");
    ASSERT_TRUE(id.ok());
    record_.uid = pod_.metadata.uid;
    record_.name = pod_.metadata.name;
    record_.namespace_ = pod_.metadata.namespace_name;
    auto s = std::make_unique<SandboxRecordT>();
    s->id = *id;
    s->state = SandboxState::Ready;
    s->created_at_ns = 1;
    record_.sandboxes.push_back(std::move(s));
  }

  // The app container's first instance, exited without ever running.
  void ExitedBeforeRunning(const std::string& reason, const std::string& message) {
    auto c = std::make_unique<ContainerRecordT>();
    c->id = "c0";
    c->name = "app";
    c->attempt = 0;
    c->state = ContainerState::Exited;
    c->created_at_ns = 2;
    c->started_at_ns = 0;
    c->finished_at_ns = 3;
    c->exit_code = 128;
    c->reason = reason;
    c->message = message;
    c->sandbox_id = record_.sandboxes[0]->id;
    c->spec_hash = pod::ContainerSpecHash(pod_.spec.containers[0]);
    record_.containers.push_back(std::move(c));
  }

  FakeCriRuntime runtime_;
  testing::FakeClock clock_;
  PodSyncer syncer_{runtime_, runtime_, clock_, CrashLoopPolicy{}, "/nonexistent-log-dir"};
  pod::Pod pod_;
  PodRecordT record_;
};

// containerd marks a start whose caller vanished (podworkerd SIGKILLed mid-call) as StartError
// with the context's error: the container never ran, so even a restartPolicy Never pod gets it
// started, and the pod is not finished (nor Failed).
TEST_F(PodSyncTest, StartCancelledByOurOwnDeathIsStartedAgainUnderNever) {
  ExitedBeforeRunning("StartError",
                      "failed to start containerd task \"c0\": context canceled: unknown");
  SyncOutcome out = syncer_.SyncPod(pod_, &record_);
  EXPECT_FALSE(out.pod_finished);
  EXPECT_EQ(runtime_.CallCount(CriCall::kCreateContainer), 1);
  EXPECT_EQ(runtime_.CallCount(CriCall::kStartContainer), 1);
  auto list = runtime_.ListContainers({});
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].state(), v1::CONTAINER_RUNNING);
  EXPECT_EQ((*list)[0].metadata().attempt(), 1u);
  EXPECT_NE(out.status.phase, status::PodPhase::kFailed);
}

// A start that failed on its own (a missing executable) is a run that failed: under Never the
// pod is finished and Failed, and nothing is created again, as in the kubelet.
TEST_F(PodSyncTest, GenuineStartErrorFinishesANeverPod) {
  ExitedBeforeRunning("StartError",
                      "failed to create containerd task: exec: \"nope\": executable file not "
                      "found in $PATH: unknown");
  SyncOutcome out = syncer_.SyncPod(pod_, &record_);
  EXPECT_TRUE(out.pod_finished);
  EXPECT_EQ(runtime_.CallCount(CriCall::kCreateContainer), 0);
  EXPECT_EQ(runtime_.CallCount(CriCall::kStartContainer), 0);
  EXPECT_EQ(out.status.phase, status::PodPhase::kFailed);
}

// The same interrupted start on an init container: started again, not a failed pod.
TEST_F(PodSyncTest, InterruptedInitContainerStartIsStartedAgainUnderNever) {
  pod::Container init = pod_.spec.containers[0];
  init.name = "init";
  pod_.spec.init_containers.push_back(init);
  ExitedBeforeRunning("StartError", "context canceled");
  record_.containers[0]->name = "init";
  record_.containers[0]->spec_hash = pod::ContainerSpecHash(init);
  SyncOutcome out = syncer_.SyncPod(pod_, &record_);
  EXPECT_FALSE(out.pod_finished);
  EXPECT_EQ(runtime_.CallCount(CriCall::kStartContainer), 1);
  auto list = runtime_.ListContainers({});
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].metadata().name(), "init");
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
