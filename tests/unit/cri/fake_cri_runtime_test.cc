// FakeCriRuntime behaves like containerd's CRI where the tests of other components rely on it,
// and its knobs (failures, hangs, state changes) do what they promise.
#include "tests/fakes/fake_cri_runtime.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <future>
#include <thread>

namespace nodelet::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kImage[] = "nodelet.local/busybox:1.0";

v1::PodSandboxConfig SandboxConfig(const std::string& uid, const std::string& name = "web") {
  v1::PodSandboxConfig config;
  config.mutable_metadata()->set_name(name);
  config.mutable_metadata()->set_uid(uid);
  config.mutable_metadata()->set_namespace_("default");
  config.set_log_directory("/var/log/pods/" + uid);
  (*config.mutable_labels())["nodelet.io/pod-uid"] = uid;
  config.mutable_linux()->mutable_security_context()->mutable_namespace_options()->set_network(
      v1::NODE);
  return config;
}

v1::ContainerConfig ContainerConfig(const std::string& name, const std::string& image = kImage) {
  v1::ContainerConfig config;
  config.mutable_metadata()->set_name(name);
  config.mutable_image()->set_image(image);
  config.add_command("sleep");
  config.add_args("3600");
  config.set_log_path(name + "/0.log");
  (*config.mutable_labels())["nodelet.io/container-name"] = name;
  return config;
}

class FakeCriRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override { fake_.AddImage(kImage); }

  // Runs a sandbox with one started container; returns {sandbox id, container id}.
  std::pair<std::string, std::string> RunPod(const std::string& uid,
                                             const std::string& name = "app") {
    auto config = SandboxConfig(uid);
    auto sandbox = fake_.RunPodSandbox(config, "");
    EXPECT_TRUE(sandbox.ok()) << sandbox.status().ToString();
    auto container = fake_.CreateContainer(*sandbox, ContainerConfig(name), config);
    EXPECT_TRUE(container.ok()) << container.status().ToString();
    EXPECT_TRUE(fake_.StartContainer(*container).ok());
    return {*sandbox, *container};
  }

  FakeCriRuntime fake_;
};

TEST_F(FakeCriRuntimeTest, ContainerLifecycleAndStatus) {
  auto [sandbox, container] = RunPod("uid-1");
  EXPECT_EQ(sandbox.size(), 64u);
  EXPECT_NE(sandbox, container);

  auto status = fake_.ContainerStatus(container, false);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->status().state(), v1::CONTAINER_RUNNING);
  EXPECT_EQ(status->status().metadata().name(), "app");
  EXPECT_GT(status->status().started_at(), status->status().created_at());
  EXPECT_EQ(status->status().log_path(), "/var/log/pods/uid-1/app/0.log");
  EXPECT_EQ(status->status().labels().at("nodelet.io/container-name"), "app");

  ASSERT_TRUE(fake_.ExitContainer(container, 3, "Error").ok());
  status = fake_.ContainerStatus(container, false);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->status().state(), v1::CONTAINER_EXITED);
  EXPECT_EQ(status->status().exit_code(), 3);
  EXPECT_GT(status->status().finished_at(), status->status().started_at());
  // An exited container cannot be started again, nor exit twice.
  EXPECT_EQ(fake_.StartContainer(container).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(fake_.ExitContainer(container, 0).code(), StatusCode::kFailedPrecondition);

  ASSERT_TRUE(fake_.RemoveContainer(container).ok());
  EXPECT_TRUE(fake_.RemoveContainer(container).ok());  // idempotent
  auto gone = fake_.ContainerStatus(container, false);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(gone.status().message(), HasSubstr("CRI ContainerStatus failed: NOT_FOUND: "));
}

TEST_F(FakeCriRuntimeTest, StopSemantics) {
  auto [sandbox, container] = RunPod("uid-1");
  fake_.SetStopExitCode(143);
  ASSERT_TRUE(fake_.StopContainer(container, 10).ok());
  ASSERT_TRUE(fake_.StopContainer(container, 10).ok());  // idempotent
  EXPECT_EQ(fake_.ContainerStatus(container, false)->status().exit_code(), 143);
  EXPECT_EQ(fake_.StopContainer("nope", 0).code(), StatusCode::kNotFound);
  EXPECT_EQ(fake_.StopPodSandbox("nope").code(), StatusCode::kNotFound);
  EXPECT_TRUE(fake_.RemovePodSandbox("nope").ok());  // idempotent
}

TEST_F(FakeCriRuntimeTest, StopPodSandboxKillsItsContainersAndRemoveTakesThemAway) {
  auto [sandbox, container] = RunPod("uid-1");
  auto [other_sandbox, other_container] = RunPod("uid-2");
  ASSERT_TRUE(fake_.StopPodSandbox(sandbox).ok());
  EXPECT_EQ(fake_.PodSandboxStatus(sandbox, false)->status().state(), v1::SANDBOX_NOTREADY);
  EXPECT_EQ(fake_.ContainerStatus(container, false)->status().state(), v1::CONTAINER_EXITED);
  EXPECT_EQ(fake_.ContainerStatus(container, false)->status().exit_code(), 137);
  EXPECT_EQ(fake_.ContainerStatus(other_container, false)->status().state(), v1::CONTAINER_RUNNING);
  // A stopped sandbox takes no new containers.
  auto refused = fake_.CreateContainer(sandbox, ContainerConfig("late"), SandboxConfig("uid-1"));
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);

  ASSERT_TRUE(fake_.RemovePodSandbox(sandbox).ok());
  auto containers = fake_.ListContainers({});
  ASSERT_TRUE(containers.ok());
  ASSERT_EQ(containers->size(), 1u);
  EXPECT_EQ(containers->at(0).id(), other_container);
  EXPECT_EQ(fake_.PodSandboxStatus(sandbox, false).status().code(), StatusCode::kNotFound);
}

TEST_F(FakeCriRuntimeTest, NamesAreReserved) {
  auto config = SandboxConfig("uid-1");
  auto first = fake_.RunPodSandbox(config, "");
  ASSERT_TRUE(first.ok());
  auto again = fake_.RunPodSandbox(config, "");
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
  config.mutable_metadata()->set_attempt(1);
  EXPECT_TRUE(fake_.RunPodSandbox(config, "").ok());

  ASSERT_TRUE(fake_.CreateContainer(*first, ContainerConfig("app"), config).ok());
  EXPECT_EQ(fake_.CreateContainer(*first, ContainerConfig("app"), config).status().code(),
            StatusCode::kAlreadyExists);
}

TEST_F(FakeCriRuntimeTest, BadInputIsRefused) {
  v1::PodSandboxConfig no_metadata;
  EXPECT_EQ(fake_.RunPodSandbox(no_metadata, "").status().code(), StatusCode::kInvalidArgument);
  auto sandbox = fake_.RunPodSandbox(SandboxConfig("uid-1"), "");
  ASSERT_TRUE(sandbox.ok());
  auto missing_image = fake_.CreateContainer(
      *sandbox, ContainerConfig("app", "nodelet.local/nope:1"), SandboxConfig("uid-1"));
  EXPECT_EQ(missing_image.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing_image.status().message(), HasSubstr("nodelet.local/nope:1"));
  EXPECT_EQ(
      fake_.CreateContainer("nope", ContainerConfig("app"), SandboxConfig("uid-1")).status().code(),
      StatusCode::kNotFound);
}

TEST_F(FakeCriRuntimeTest, ListFilters) {
  auto [sandbox1, container1] = RunPod("uid-1");
  auto [sandbox2, container2] = RunPod("uid-2");
  ASSERT_TRUE(fake_.StopPodSandbox(sandbox2).ok());

  v1::PodSandboxFilter ready;
  ready.mutable_state()->set_state(v1::SANDBOX_READY);
  auto sandboxes = fake_.ListPodSandbox(ready);
  ASSERT_TRUE(sandboxes.ok());
  ASSERT_EQ(sandboxes->size(), 1u);
  EXPECT_EQ(sandboxes->at(0).id(), sandbox1);

  v1::PodSandboxFilter by_label;
  (*by_label.mutable_label_selector())["nodelet.io/pod-uid"] = "uid-2";
  sandboxes = fake_.ListPodSandbox(by_label);
  ASSERT_EQ(sandboxes->size(), 1u);
  EXPECT_EQ(sandboxes->at(0).id(), sandbox2);

  v1::PodSandboxFilter by_prefix;
  by_prefix.set_id(sandbox1.substr(0, 12));
  EXPECT_EQ(fake_.ListPodSandbox(by_prefix)->size(), 1u);
  EXPECT_EQ(fake_.ListPodSandbox({})->size(), 2u);

  v1::ContainerFilter running;
  running.mutable_state()->set_state(v1::CONTAINER_RUNNING);
  auto containers = fake_.ListContainers(running);
  ASSERT_EQ(containers->size(), 1u);
  EXPECT_EQ(containers->at(0).id(), container1);

  v1::ContainerFilter in_sandbox;
  in_sandbox.set_pod_sandbox_id(sandbox2);
  containers = fake_.ListContainers(in_sandbox);
  ASSERT_EQ(containers->size(), 1u);
  EXPECT_EQ(containers->at(0).id(), container2);
  EXPECT_EQ(containers->at(0).state(), v1::CONTAINER_EXITED);
}

TEST_F(FakeCriRuntimeTest, InjectedFailuresCountDownAndMatchIds) {
  auto [sandbox1, container1] = RunPod("uid-1");
  auto [sandbox2, container2] = RunPod("uid-2");
  fake_.FailCall(CriCall::kListContainers, Unavailable("connection refused"), 2);
  for (int i = 0; i < 2; ++i) {
    auto r = fake_.ListContainers({});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
    EXPECT_EQ(r.status().message(), "CRI ListContainers failed: UNAVAILABLE: connection refused");
  }
  EXPECT_TRUE(fake_.ListContainers({}).ok());
  EXPECT_EQ(fake_.CallCount(CriCall::kListContainers), 3);

  // A rule for a sandbox id also matches calls about its containers, and nothing else.
  fake_.FailCall(CriCall::kContainerStatus, Internal("boom"), -1, sandbox1);
  EXPECT_EQ(fake_.ContainerStatus(container1, false).status().code(), StatusCode::kInternal);
  EXPECT_EQ(fake_.ContainerStatus(container1, false).status().code(), StatusCode::kInternal);
  EXPECT_TRUE(fake_.ContainerStatus(container2, false).ok());
  fake_.ClearFailures();
  EXPECT_TRUE(fake_.ContainerStatus(container1, false).ok());
}

TEST_F(FakeCriRuntimeTest, OneHungInspectionDoesNotBlockOthers) {
  auto [sandbox1, container1] = RunPod("uid-1");
  auto [sandbox2, container2] = RunPod("uid-2");
  fake_.HangCall(CriCall::kPodSandboxStatus, sandbox1);

  auto hung = std::async(std::launch::async,
                         [this, id = sandbox1] { return fake_.PodSandboxStatus(id, false); });
  ASSERT_TRUE(fake_.WaitForHungCalls(1, std::chrono::seconds(10)));
  // Other pods, and other calls about the hung one, still answer while it hangs.
  EXPECT_TRUE(fake_.PodSandboxStatus(sandbox2, false).ok());
  EXPECT_TRUE(fake_.ContainerStatus(container1, false).ok());
  EXPECT_TRUE(fake_.ListPodSandbox({}).ok());
  EXPECT_EQ(hung.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);

  fake_.ReleaseHangs();
  auto result = hung.get();
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(fake_.hung_calls(), 0);
  EXPECT_TRUE(fake_.PodSandboxStatus(sandbox1, false).ok());  // the rule is gone
}

TEST_F(FakeCriRuntimeTest, HangThatProceedsAfterRelease) {
  fake_.HangCall(CriCall::kVersion, "", /*fail_when_released=*/false);
  auto hung = std::async(std::launch::async, [&] { return fake_.Version(); });
  ASSERT_TRUE(fake_.WaitForHungCalls(1, std::chrono::seconds(10)));
  fake_.ReleaseHangs();
  auto version = hung.get();
  ASSERT_TRUE(version.ok());
  EXPECT_EQ(version->runtime_api_version(), "v1");
}

TEST(FakeCriRuntimeDestruction, ReleasesHungCalls) {
  std::future<Result<std::vector<v1::Container>>> hung;
  {
    FakeCriRuntime fake;
    fake.HangCall(CriCall::kListContainers);
    hung = std::async(std::launch::async, [&] { return fake.ListContainers({}); });
    ASSERT_TRUE(fake.WaitForHungCalls(1, std::chrono::seconds(10)));
  }
  EXPECT_EQ(hung.get().status().code(), StatusCode::kDeadlineExceeded);
}

TEST_F(FakeCriRuntimeTest, ExecSyncUsesTheHandlerAndNeedsARunningContainer) {
  auto [sandbox, container] = RunPod("uid-1");
  fake_.SetExecHandler([](const std::string& id, const std::vector<std::string>& cmd) {
    v1::ExecSyncResponse r;
    r.set_stdout(cmd.size() > 1 ? cmd[1] + "\n" : "");
    r.set_exit_code(cmd[0] == "false" ? 1 : 0);
    return r;
  });
  auto hi = fake_.ExecSync(container, {"echo", "hi"}, 5);
  ASSERT_TRUE(hi.ok());
  EXPECT_EQ(hi->stdout(), "hi\n");
  EXPECT_EQ(fake_.ExecSync(container, {"false"}, 5)->exit_code(), 1);
  ASSERT_TRUE(fake_.StopContainer(container, 0).ok());
  EXPECT_EQ(fake_.ExecSync(container, {"echo"}, 5).status().code(),
            StatusCode::kFailedPrecondition);
}

TEST_F(FakeCriRuntimeTest, Images) {
  auto status = fake_.ImageStatus(
      [] {
        v1::ImageSpec s;
        s.set_image("nodelet.local/pause:1.0");
        return s;
      }(),
      false);
  ASSERT_TRUE(status.ok());
  EXPECT_FALSE(status->has_image());

  v1::ImageSpec pause;
  pause.set_image("nodelet.local/pause:1.0");
  auto ref = fake_.PullImage(pause, nullptr, nullptr, nullptr);
  ASSERT_TRUE(ref.ok());
  status = fake_.ImageStatus(pause, false);
  ASSERT_TRUE(status->has_image());
  EXPECT_EQ(status->image().id(), *ref);
  EXPECT_THAT(status->image().repo_tags(), ElementsAre("nodelet.local/pause:1.0"));

  v1::ImageSpec untagged;
  untagged.set_image("busybox");
  fake_.AddImage("busybox");
  EXPECT_EQ(fake_.ImageStatus(untagged, false)->image().repo_tags(0), "busybox:latest");

  auto images = fake_.ListImages({});
  ASSERT_TRUE(images.ok());
  EXPECT_EQ(images->size(), 3u);
  v1::ImageFilter one;
  one.mutable_image()->set_image(*ref);
  EXPECT_EQ(fake_.ListImages(one)->size(), 1u);

  ASSERT_TRUE(fake_.RemoveImage(pause).ok());
  EXPECT_TRUE(fake_.RemoveImage(pause).ok());  // idempotent
  EXPECT_FALSE(fake_.ImageStatus(pause, false)->has_image());
}

}  // namespace
}  // namespace nodelet::testing
