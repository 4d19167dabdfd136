// The CRI client against a real, private containerd (tests/testing/containerd.h), one for the
// whole suite, with the project's own images: version and status, the imported images,
// host-network pods, container lifecycle, exec, containerd's task service, and errors with their
// gRPC codes. The harness itself (what Stop() leaves, restarts, the pod network) is tested in
// containerd_harness_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "lib/cri/containerd_tasks.h"
#include "lib/cri/grpc_cri_client.h"
#include "tests/integration/cri_containerd_helpers.h"
#include "tests/testing/containerd.h"
#include "tests/testing/harness.h"

namespace nodelet::testing {
namespace {

namespace v1 = ::runtime::v1;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// One containerd for the suite's ordinary tests (starting one takes about a second).
class CriContainerdTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    ContainerdOptions options;
    options.dir = dir_->Sub("ctd");
    options.image_tarballs = DefaultImageTarballs(ImagesDir());
    auto started = ContainerdInstance::Start(options);
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    containerd_ = std::move(started).value().release();
  }
  static void TearDownTestSuite() {
    if (containerd_ != nullptr) {
      Status stopped = containerd_->Stop();
      EXPECT_TRUE(stopped.ok()) << stopped.ToString();
      delete containerd_;
      containerd_ = nullptr;
    }
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(containerd_, nullptr) << "containerd did not start";
    log_dir_ = dir_->Sub(
        "logs-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::create_directories(log_dir_);
  }
  cri::GrpcCriClient& cri() { return containerd_->cri(); }

  static TempDir* dir_;
  static ContainerdInstance* containerd_;
  std::string log_dir_;
};

TempDir* CriContainerdTest::dir_ = nullptr;
ContainerdInstance* CriContainerdTest::containerd_ = nullptr;

TEST_F(CriContainerdTest, VersionAndStatusAnswer) {
  auto version = cri().Version();
  ASSERT_TRUE(version.ok()) << version.status().ToString();
  EXPECT_EQ(version->runtime_name(), "containerd");
  EXPECT_EQ(version->runtime_api_version(), "v1");
  auto status = cri().RuntimeStatus(false);
  ASSERT_TRUE(status.ok()) << status.status().ToString();
  bool runtime_ready = false;
  for (const auto& condition : status->status().conditions()) {
    if (condition.type() == "RuntimeReady") runtime_ready = condition.status();
  }
  EXPECT_TRUE(runtime_ready);
}

TEST_F(CriContainerdTest, TheProjectsImagesAreImported) {
  for (const char* ref : {kPauseImage, kBusyboxImage}) {
    v1::ImageSpec spec;
    spec.set_image(ref);
    auto status = cri().ImageStatus(spec, false);
    ASSERT_TRUE(status.ok()) << status.status().ToString();
    ASSERT_TRUE(status->has_image()) << ref;
    EXPECT_THAT(status->image().repo_tags(), ::testing::Contains(ref));
    EXPECT_GT(status->image().size(), 0u);
  }
  v1::ImageSpec absent;
  absent.set_image("nodelet.local/absent:1.0");
  auto status = cri().ImageStatus(absent, false);
  ASSERT_TRUE(status.ok());
  EXPECT_FALSE(status->has_image());
  auto images = cri().ListImages({});
  ASSERT_TRUE(images.ok());
  EXPECT_GE(images->size(), 2u);
}

TEST_F(CriContainerdTest, HostNetworkPodWithABusyboxContainer) {
  auto sandbox_config = HostNetworkSandbox("sleeper", log_dir_);
  auto sandbox = cri().RunPodSandbox(sandbox_config, "");
  ASSERT_TRUE(sandbox.ok()) << sandbox.status().ToString();

  auto sandbox_status = cri().PodSandboxStatus(*sandbox, false);
  ASSERT_TRUE(sandbox_status.ok()) << sandbox_status.status().ToString();
  EXPECT_EQ(sandbox_status->status().state(), v1::SANDBOX_READY);
  EXPECT_EQ(sandbox_status->status().metadata().name(), "sleeper");
  EXPECT_EQ(sandbox_status->status().linux().namespaces().options().network(), v1::NODE);

  auto container =
      cri().CreateContainer(*sandbox, BusyboxContainer("sleep", {"sleep", "3600"}), sandbox_config);
  ASSERT_TRUE(container.ok()) << container.status().ToString();
  ASSERT_TRUE(cri().StartContainer(*container).ok());

  v1::ContainerFilter in_sandbox;
  in_sandbox.set_pod_sandbox_id(*sandbox);
  auto listed = cri().ListContainers(in_sandbox);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->at(0).id(), *container);
  EXPECT_EQ(listed->at(0).state(), v1::CONTAINER_RUNNING);
  EXPECT_EQ(listed->at(0).labels().at(kManagedLabel), "sleep");

  v1::ContainerFilter running;
  running.mutable_state()->set_state(v1::CONTAINER_RUNNING);
  (*running.mutable_label_selector())[kManagedLabel] = "sleep";
  EXPECT_EQ(cri().ListContainers(running)->size(), 1u);

  auto status = cri().ContainerStatus(*container, false);
  ASSERT_TRUE(status.ok()) << status.status().ToString();
  EXPECT_EQ(status->status().state(), v1::CONTAINER_RUNNING);
  EXPECT_GT(status->status().started_at(), 0);
  EXPECT_EQ(status->status().log_path(), log_dir_ + "/sleep.log");

  auto hi = cri().ExecSync(*container, {"echo", "hi"}, 10);
  ASSERT_TRUE(hi.ok()) << hi.status().ToString();
  EXPECT_EQ(hi->stdout(), "hi\n");
  EXPECT_EQ(hi->exit_code(), 0);
  auto failing = cri().ExecSync(*container, {"sh", "-c", "echo oops >&2; exit 3"}, 10);
  ASSERT_TRUE(failing.ok()) << failing.status().ToString();
  EXPECT_EQ(failing->exit_code(), 3);
  EXPECT_EQ(failing->stderr(), "oops\n");

  // sleep as PID 1 ignores SIGTERM: a zero grace period kills it.
  ASSERT_TRUE(cri().StopContainer(*container, 0).ok());
  status = cri().ContainerStatus(*container, false);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->status().state(), v1::CONTAINER_EXITED);
  EXPECT_EQ(status->status().exit_code(), 137);
  EXPECT_GE(status->status().finished_at(), status->status().started_at());
  EXPECT_TRUE(cri().StopContainer(*container, 0).ok());  // idempotent

  ASSERT_TRUE(cri().StopPodSandbox(*sandbox).ok());
  EXPECT_EQ(cri().PodSandboxStatus(*sandbox, false)->status().state(), v1::SANDBOX_NOTREADY);
  ASSERT_TRUE(cri().RemovePodSandbox(*sandbox).ok());
  EXPECT_EQ(cri().ContainerStatus(*container, false).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(cri().RemovePodSandbox(*sandbox).ok());  // idempotent
}

// The repair for a task containerd keeps after a cancelled start (lib/cri/containerd_tasks.h),
// against the real task service: its processes die, the task and its cgroups go, and CRI then
// sees the container exited and removes it. A second repair finds nothing and is fine.
TEST_F(CriContainerdTest, ContainerdTasksKillsAndDeletesATask) {
  auto tasks = cri::ContainerdTasks::Create(containerd_->endpoint(), RealClock::Get());
  ASSERT_TRUE(tasks.ok()) << tasks.status().ToString();
  auto sandbox_config = HostNetworkSandbox("tasks", log_dir_);
  auto sandbox = cri().RunPodSandbox(sandbox_config, "");
  ASSERT_TRUE(sandbox.ok()) << sandbox.status().ToString();
  auto container =
      cri().CreateContainer(*sandbox, BusyboxContainer("stuck", {"sleep", "3600"}), sandbox_config);
  ASSERT_TRUE(container.ok()) << container.status().ToString();
  ASSERT_TRUE(cri().StartContainer(*container).ok());
  ASSERT_FALSE(CgroupsNamed(*container).empty());

  Status repaired = (*tasks)->KillAndDelete(*container);
  ASSERT_TRUE(repaired.ok()) << repaired.ToString();
  EXPECT_TRUE(CgroupsNamed(*container).empty());
  // CRI learns of the exit from containerd's task-exit event, asynchronously: polled (CRI has
  // no exit notification in containerd 1.6), bounded.
  v1::ContainerState state = v1::CONTAINER_UNKNOWN;
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
       std::chrono::steady_clock::now() < deadline;
       std::this_thread::sleep_for(std::chrono::milliseconds(20))) {
    auto status = cri().ContainerStatus(*container, false);
    ASSERT_TRUE(status.ok()) << status.status().ToString();
    state = status->status().state();
    if (state == v1::CONTAINER_EXITED) break;
  }
  EXPECT_EQ(state, v1::CONTAINER_EXITED);
  EXPECT_TRUE((*tasks)->KillAndDelete(*container).ok());  // no task left: nothing to do

  EXPECT_TRUE(cri().RemoveContainer(*container).ok());
  ASSERT_TRUE(cri().StopPodSandbox(*sandbox).ok());
  ASSERT_TRUE(cri().RemovePodSandbox(*sandbox).ok());
}

TEST_F(CriContainerdTest, AGracefulStopKeepsTheProcessExitCode) {
  auto sandbox_config = HostNetworkSandbox("graceful", log_dir_);
  auto sandbox = cri().RunPodSandbox(sandbox_config, "");
  ASSERT_TRUE(sandbox.ok()) << sandbox.status().ToString();
  // The shell exits 7 on SIGTERM.
  auto container = cri().CreateContainer(
      *sandbox,
      BusyboxContainer("trapper",
                       {"sh", "-c", "trap 'exit 7' TERM; while true; do sleep 1 & wait $!; done"}),
      sandbox_config);
  ASSERT_TRUE(container.ok()) << container.status().ToString();
  ASSERT_TRUE(cri().StartContainer(*container).ok());
  // The trap is set once the shell runs; exec through it so the stop cannot race its start.
  auto ready = cri().ExecSync(*container, {"true"}, 10);
  ASSERT_TRUE(ready.ok()) << ready.status().ToString();

  ASSERT_TRUE(cri().StopContainer(*container, 20).ok());
  auto status = cri().ContainerStatus(*container, false);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->status().state(), v1::CONTAINER_EXITED);
  EXPECT_EQ(status->status().exit_code(), 7);
  EXPECT_EQ(status->status().reason(), "Error");

  v1::ContainerFilter exited;
  exited.mutable_state()->set_state(v1::CONTAINER_EXITED);
  exited.set_pod_sandbox_id(*sandbox);
  EXPECT_EQ(cri().ListContainers(exited)->size(), 1u);

  ASSERT_TRUE(cri().RemoveContainer(*container).ok());
  EXPECT_TRUE(cri().RemoveContainer(*container).ok());  // idempotent
  ASSERT_TRUE(cri().StopPodSandbox(*sandbox).ok());
  ASSERT_TRUE(cri().RemovePodSandbox(*sandbox).ok());
}

TEST_F(CriContainerdTest, ErrorsCarryTheGrpcCode) {
  auto unknown = cri().ContainerStatus("0123456789abcdef", false);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(unknown.status().message(), StartsWith("CRI ContainerStatus failed: NOT_FOUND: "));

  auto unknown_sandbox = cri().PodSandboxStatus("0123456789abcdef", false);
  ASSERT_FALSE(unknown_sandbox.ok());
  EXPECT_EQ(unknown_sandbox.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(unknown_sandbox.status().message(),
              StartsWith("CRI PodSandboxStatus failed: NOT_FOUND: "));

  auto sandbox_config = HostNetworkSandbox("badimage", log_dir_);
  auto sandbox = cri().RunPodSandbox(sandbox_config, "");
  ASSERT_TRUE(sandbox.ok()) << sandbox.status().ToString();
  auto config = BusyboxContainer("x", {"true"});
  config.mutable_image()->set_image("nodelet.local/absent:1.0");
  auto bad = cri().CreateContainer(*sandbox, config, sandbox_config);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), StartsWith("CRI CreateContainer failed: NOT_FOUND: "));
  EXPECT_THAT(bad.status().message(), HasSubstr("nodelet.local/absent:1.0"));

  // The same sandbox name again is refused while the first one exists.
  auto again = cri().RunPodSandbox(sandbox_config, "");
  ASSERT_FALSE(again.ok());
  EXPECT_THAT(again.status().message(), StartsWith("CRI RunPodSandbox failed: "));
  EXPECT_THAT(again.status().message(), HasSubstr("reserved"));
  ASSERT_TRUE(cri().RemovePodSandbox(*sandbox).ok());
}

}  // namespace
}  // namespace nodelet::testing
