// PodSyncer on the fake runtime, for its containers: what a sync decides from a pod cache record
// when podworkerd comes back after dying in the middle of a StartContainer call, the pod's active
// deadline, image pulls, lifecycle hooks, the environment from config objects and pods waiting
// for the runtime's network. Its sandboxes are pod_sync_sandbox_test.cc's.
#include "svc-podworkerd/pod_sync.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tests/unit/podworkerd/pod_sync_fixture.h"

namespace nodelet::podworkerd {
namespace {

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

// The same call cancelled while containerd ran the shim's start command: containerd kills the
// command with the call's context, and the container's message names the kill instead.
TEST_F(PodSyncTest, AShimStartKilledWithTheCancelledCallIsStartedAgainUnderNever) {
  ExitedBeforeRunning("StartError",
                      "failed to create containerd task: failed to start shim: start failed: : "
                      "signal: killed: unknown");
  SyncOutcome out = syncer_.SyncPod(pod_, &record_);
  EXPECT_FALSE(out.pod_finished);
  EXPECT_EQ(runtime_.CallCount(CriCall::kStartContainer), 1);
  EXPECT_NE(out.status.phase, status::PodPhase::kFailed);
}

// containerd restarted in the middle of a StartContainer (the chaos soak's "task already
// exists" on the retry): the container exited without ever running, with a reason that is not
// the context's. Its start was cut by the runtime, so it is started again even under Never,
// and the pod is not Failed.
TEST_F(PodSyncTest, StartCutByTheRuntimeIsStartedAgainUnderNever) {
  runtime_.FailCall(CriCall::kStartContainer,
                    Status(StatusCode::kAlreadyExists,
                           "failed to create containerd task: task "
                           "already exists"),
                    1);
  (void)syncer_.SyncPod(pod_, &record_);
  ASSERT_EQ(runtime_.CallCount(CriCall::kStartContainer), 1);
  auto list = runtime_.ListContainers({});
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  // plegd then shows that instance exited, never started, as containerd leaves it.
  ExitedBeforeRunning("Unknown", "shim disconnected");
  record_.containers.back()->id = (*list)[0].id();
  SyncOutcome out = syncer_.SyncPod(pod_, &record_);
  EXPECT_FALSE(out.pod_finished);
  EXPECT_NE(out.status.phase, status::PodPhase::kFailed);
  EXPECT_EQ(runtime_.CallCount(CriCall::kCreateContainer), 2) << out.error;
}

// The same, with podworkerd restarted between the cut start and the container's exit (the
// chaos soak, seed 2958233716637673032): the next podworkerd reads the cut start from the
// ledger under the root directory and still starts the container again under Never.
TEST_F(PodSyncTest, AStartCutBeforeAPodworkerdRestartIsStillStartedAgainUnderNever) {
  char tmpl[] = "/tmp/nodelet-pod-sync.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string root = tmpl;
  syncer_.set_root_dir(root);
  runtime_.FailCall(
      CriCall::kStartContainer,
      Status(StatusCode::kAlreadyExists, "failed to create containerd task: task already exists"),
      1);
  (void)syncer_.SyncPod(pod_, &record_);
  auto list = runtime_.ListContainers({});
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  ExitedBeforeRunning("StartError", "failed to create containerd task: task already exists");
  record_.containers.back()->id = (*list)[0].id();

  PodSyncer restarted{runtime_, runtime_, clock_, CrashLoopPolicy{}, "/nonexistent-log-dir"};
  restarted.set_root_dir(root);
  SyncOutcome out = restarted.SyncPod(pod_, &record_);
  std::filesystem::remove_all(root);
  EXPECT_FALSE(out.pod_finished);
  EXPECT_NE(out.status.phase, status::PodPhase::kFailed);
  EXPECT_EQ(runtime_.CallCount(CriCall::kCreateContainer), 2) << out.error;
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

// activeDeadlineSeconds counts from the pod's start time (statusd's, carried over a restart of
// podworkerd): before it the sync asks to run again at the deadline; past it the running
// containers are stopped with the grace period, the pod is finished and Failed with reason
// DeadlineExceeded (one Warning event), as the kubelet does.
TEST_F(PodSyncTest, ActiveDeadlineFailsThePodFromItsStartTime) {
  pod_.spec.restart_policy = "Always";
  pod_.spec.containers[0].command = {"sleep", "3600"};
  pod_.spec.active_deadline_seconds = 30;
  pod_.spec.termination_grace_period_seconds = 7;
  SyncOutcome first = syncer_.SyncPod(pod_, &record_);
  EXPECT_FALSE(first.pod_finished);
  ASSERT_TRUE(first.retry_at.has_value());
  EXPECT_LE(*first.retry_at, clock_.Now() + std::chrono::seconds(30));
  EXPECT_NE(first.status.reason, "DeadlineExceeded");
  auto list = runtime_.ListContainers({});
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  auto c = std::make_unique<ContainerRecordT>();
  c->id = (*list)[0].id();
  c->name = "app";
  c->state = ContainerState::Running;
  c->sandbox_id = record_.sandboxes[0]->id;
  c->spec_hash = pod::ContainerSpecHash(pod_.spec.containers[0]);
  record_.containers.push_back(std::move(c));

  // A podworkerd restarted 20 s later: the start time statusd kept, not its own first sync.
  clock_.Advance(std::chrono::seconds(20));
  PodSyncer restarted{runtime_, runtime_, clock_, CrashLoopPolicy{}, "/nonexistent-log-dir"};
  restarted.SeedStartTime(pod_.metadata.uid, clock_.WallSeconds() - 20);
  SyncOutcome before = restarted.SyncPod(pod_, &record_);
  EXPECT_FALSE(before.pod_finished);
  ASSERT_TRUE(before.retry_at.has_value());
  EXPECT_LE(*before.retry_at, clock_.Now() + std::chrono::seconds(10));
  clock_.Advance(std::chrono::seconds(10));
  SyncOutcome past = restarted.SyncPod(pod_, &record_);
  EXPECT_TRUE(past.pod_finished);
  EXPECT_EQ(past.status.phase, status::PodPhase::kFailed);
  EXPECT_EQ(past.status.reason, "DeadlineExceeded");
  EXPECT_EQ(past.status.message, "Pod was active on the node longer than the specified deadline");
  EXPECT_TRUE(HasEvent(past, "DeadlineExceeded"));
  EXPECT_EQ(runtime_.CallCount(CriCall::kStopContainer), 1);
  // Once failed it stays so, and the event is not repeated.
  SyncOutcome again = restarted.SyncPod(pod_, &record_);
  EXPECT_EQ(again.status.reason, "DeadlineExceeded");
  EXPECT_FALSE(HasEvent(again, "DeadlineExceeded"));
  EXPECT_EQ(restarted.BuildStatus(pod_, &record_, true).reason, "DeadlineExceeded");
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

// An image pull sends the pod's status when it begins: the container waits in
// ContainerCreating while the pull runs, as the kubelet shows it.
TEST_F(PodSyncTest, APullSendsContainerCreatingWhenItBegins) {
  std::vector<status::PodStatus> sent;
  syncer_.set_progress_status(
      [&](const pod::Pod&, status::PodStatus s) { sent.push_back(std::move(s)); });
  pod_.spec.containers[0].image = "reg.local/absent:1";
  SyncOutcome out = syncer_.SyncPod(pod_, &record_);
  EXPECT_TRUE(out.error.empty()) << out.error;
  EXPECT_EQ(runtime_.CallCount(CriCall::kPullImage), 1);
  ASSERT_EQ(sent.size(), 1u) << "one status, when the pull began";
  EXPECT_EQ(sent[0].phase, status::PodPhase::kPending);
  ASSERT_EQ(sent[0].container_statuses.size(), 1u);
  ASSERT_TRUE(sent[0].container_statuses[0].state.waiting.has_value());
  EXPECT_EQ(sent[0].container_statuses[0].state.waiting->reason, "ContainerCreating");

  // No pull (the image is there now): no status before the sync's own.
  sent.clear();
  pod_.metadata.uid = "uid-other";
  (void)syncer_.SyncPod(pod_, nullptr);
  EXPECT_TRUE(sent.empty());
}

// A container containerd lists as CONTAINER_UNKNOWN after a restart (its task could not be
// loaded) is never waited on: it is killed and a new instance started, even under Never.
TEST_F(PodSyncTest, AnUnknownContainerIsKilledAndStartedAgain) {
  ExitedBeforeRunning("", "");
  record_.containers[0]->state = ContainerState::Unknown;
  record_.containers[0]->id = "unknown-one";
  SyncOutcome out = syncer_.SyncPod(pod_, &record_);
  EXPECT_EQ(runtime_.CallCount(CriCall::kStopContainer), 1);
  EXPECT_EQ(runtime_.CallCount(CriCall::kCreateContainer), 1);
  EXPECT_EQ(runtime_.CallCount(CriCall::kStartContainer), 1);
  auto list = runtime_.ListContainers({});
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].metadata().attempt(), 1u);
  EXPECT_FALSE(out.pod_finished);
}

// An init container created but never started (its start lost to a runtime restart) is
// started, not waited on as if it ran.
TEST_F(PodSyncTest, ACreatedInitContainerIsStarted) {
  pod::Container init = pod_.spec.containers[0];
  init.name = "init";
  pod_.spec.init_containers.push_back(init);
  v1::ContainerConfig cc = MakeContainerConfig(pod_, init, 0);
  v1::PodSandboxConfig sbc = MakeSandboxConfig(pod_, 0, "/nonexistent-log-dir");
  auto cid = runtime_.CreateContainer(record_.sandboxes[0]->id, cc, sbc);
  ASSERT_TRUE(cid.ok());
  auto c = std::make_unique<ContainerRecordT>();
  c->id = *cid;
  c->name = "init";
  c->state = ContainerState::Created;
  c->sandbox_id = record_.sandboxes[0]->id;
  record_.containers.push_back(std::move(c));
  SyncOutcome out = syncer_.SyncPod(pod_, &record_);
  EXPECT_EQ(runtime_.CallCount(CriCall::kStartContainer), 1);
  EXPECT_EQ(runtime_.CallCount(CriCall::kCreateContainer), 1);  // the test's own
  auto st = runtime_.ContainerStatus(*cid, false);
  ASSERT_TRUE(st.ok());
  EXPECT_NE(st->status().state(), v1::CONTAINER_CREATED);
  EXPECT_TRUE(out.changed_runtime);
}

// preStop: stamped on the container at creation, read back by KillPod (which has no spec) and
// run before the container is stopped; a failed hook is reported and the container stopped all
// the same.
TEST_F(PodSyncTest, KillPodRunsThePreStopHookStampedOnTheContainerFirst) {
  pod::LifecycleHandler pre_stop;
  pre_stop.exec = pod::ExecAction{{"sh", "-c", "echo bye"}};
  pod_.spec.containers[0].lifecycle = pod::Lifecycle{std::nullopt, pre_stop};
  pod_.spec.containers[0].command = {"sleep", "3600"};
  std::vector<std::string> order;
  runtime_.SetExecHandler([&](const std::string&, const std::vector<std::string>& cmd) {
    order.push_back("exec " + cmd.back() + " after " +
                    std::to_string(runtime_.CallCount(CriCall::kStopContainer)) + " stops");
    v1::ExecSyncResponse r;
    r.set_exit_code(cmd.back() == "echo bye" ? 0 : 1);
    return r;
  });
  SyncOutcome out = syncer_.SyncPod(pod_, &record_);
  ASSERT_EQ(runtime_.CallCount(CriCall::kStartContainer), 1) << out.error;
  std::vector<std::string> failures;
  ASSERT_TRUE(syncer_.KillPod(pod_.metadata.uid, 10, &failures).ok());
  EXPECT_THAT(order, ::testing::ElementsAre("exec echo bye after 0 stops"));
  EXPECT_EQ(runtime_.CallCount(CriCall::kStopContainer), 1);
  EXPECT_TRUE(failures.empty());

  // A hook that fails: reported, and the container is stopped anyway.
  pre_stop.exec = pod::ExecAction{{"sh", "-c", "exit 1"}};
  pod_.spec.containers[0].lifecycle = pod::Lifecycle{std::nullopt, pre_stop};
  PodSyncer other{runtime_, runtime_, clock_, CrashLoopPolicy{}, "/nonexistent-log-dir"};
  pod_.metadata.uid = "uid-other";
  record_.sandboxes.clear();
  out = other.SyncPod(pod_, nullptr);
  ASSERT_EQ(runtime_.CallCount(CriCall::kStartContainer), 2) << out.error;
  ASSERT_TRUE(other.KillPod("uid-other", 10, &failures).ok());
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_THAT(failures[0], ::testing::HasSubstr("PreStopHook failed: command 'sh' exited with 1"));
  EXPECT_EQ(runtime_.CallCount(CriCall::kStopContainer), 2);
}

// postStart: a hook that fails kills the container it just started, with FailedPostStartHook.
TEST_F(PodSyncTest, AFailedPostStartHookKillsTheContainer) {
  pod::LifecycleHandler post_start;
  post_start.exec = pod::ExecAction{{"false"}};
  pod_.spec.containers[0].lifecycle = pod::Lifecycle{post_start, std::nullopt};
  pod_.spec.containers[0].command = {"sleep", "3600"};
  runtime_.SetExecHandler([&](const std::string&, const std::vector<std::string>&) {
    v1::ExecSyncResponse r;
    r.set_exit_code(1);
    return r;
  });
  SyncOutcome out = syncer_.SyncPod(pod_, &record_);
  EXPECT_EQ(runtime_.CallCount(CriCall::kStartContainer), 1);
  EXPECT_EQ(runtime_.CallCount(CriCall::kStopContainer), 1);
  std::vector<std::string> reasons;
  for (const auto& e : out.events) reasons.push_back(e.reason);
  EXPECT_THAT(reasons, ::testing::Contains("FailedPostStartHook"));
  EXPECT_THAT(out.error, ::testing::HasSubstr("postStart hook failed"));
}

// env valueFrom and envFrom are resolved at creation from the desired set's ConfigMaps; a missing
// one leaves the container waiting in CreateContainerConfigError.
TEST_F(PodSyncTest, EnvironmentIsResolvedFromTheConfigObjects) {
  pod::EnvVar level{"LEVEL", "", pod::EnvVarSource{}};
  level.value_from->config_map_key_ref = pod::KeySelector{"settings", "level", std::nullopt};
  pod_.spec.containers[0].env = {level, {"MSG", "at $(LEVEL)", std::nullopt}};
  pod_.spec.containers[0].command = {"sleep", "3600"};
  SyncOutcome out = syncer_.SyncPod(pod_, &record_);
  EXPECT_EQ(runtime_.CallCount(CriCall::kCreateContainer), 0);
  ASSERT_TRUE(out.status.container_statuses.at(0).state.waiting.has_value());
  EXPECT_EQ(out.status.container_statuses.at(0).state.waiting->reason,
            "CreateContainerConfigError");
  EXPECT_EQ(out.status.container_statuses.at(0).state.waiting->message,
            "configmap \"settings\" not found");

  auto objects = std::make_shared<EnvSources>();
  objects->config_maps["default/settings"] =
      pod::ConfigObject{"default", "settings", {{"level", "debug"}}};
  syncer_.SetConfigObjects(objects);
  out = syncer_.SyncPod(pod_, &record_);
  EXPECT_EQ(runtime_.CallCount(CriCall::kCreateContainer), 1) << out.error;
}

// The kubelet's NetworkNotReady: while the runtime's network is not ready, a pod-network pod
// is not synced (no sandbox call), waits with the runtime's reason in its status and a
// Warning event, and is synced once the network is ready; host-network pods run meanwhile.
TEST_F(PodSyncTest, PodNetworkPodsWaitForTheNetworkHostNetworkPodsDoNot) {
  syncer_.set_node_ip("192.0.2.2");
  runtime_.SetNetworkReady(false, "NetworkPluginNotReady", "cni plugin not initialized");
  pod::Pod web = pod_;
  web.metadata.name = "web";
  web.metadata.uid = "uid-web";
  web.spec.host_network = false;
  web.spec.restart_policy = "Always";
  SyncOutcome waiting = syncer_.SyncPod(web, nullptr);
  EXPECT_EQ(runtime_.CallCount(CriCall::kRunPodSandbox), 1);  // SetUp's only
  EXPECT_TRUE(HasEvent(waiting, "NetworkNotReady"));
  EXPECT_EQ(waiting.status.reason, "NetworkNotReady");
  EXPECT_THAT(waiting.status.message,
              ::testing::HasSubstr("NetworkReady=false reason:NetworkPluginNotReady message:cni "
                                   "plugin not initialized"));
  EXPECT_FALSE(waiting.error.empty());  // retried with the sync's back-off
  ASSERT_EQ(waiting.status.container_statuses.size(), 1u);
  ASSERT_TRUE(waiting.status.container_statuses[0].state.waiting.has_value());
  EXPECT_EQ(waiting.status.container_statuses[0].state.waiting->reason, "ContainerCreating");
  EXPECT_TRUE(waiting.status.pod_ip.empty());
  EXPECT_EQ(waiting.status.host_ip, "192.0.2.2");

  // The host-network pod is synced all the same, and its IP is the node's.
  SyncOutcome host = syncer_.SyncPod(pod_, &record_);
  EXPECT_EQ(runtime_.CallCount(CriCall::kStartContainer), 1) << host.error;
  EXPECT_EQ(host.status.pod_ip, "192.0.2.2");
  EXPECT_EQ(host.status.host_ip, "192.0.2.2");

  // The answer is cached for a second: then the pod gets its sandbox and the sandbox's IP.
  runtime_.SetNetworkReady(true);
  clock_.Advance(std::chrono::seconds(2));
  SyncOutcome synced = syncer_.SyncPod(web, nullptr);
  EXPECT_EQ(runtime_.CallCount(CriCall::kRunPodSandbox), 2) << synced.error;
  EXPECT_FALSE(HasEvent(synced, "NetworkNotReady"));
  auto list = runtime_.ListPodSandbox({});
  ASSERT_TRUE(list.ok());
  std::string id;
  for (const auto& sb : *list) {
    if (sb.metadata().uid() == "uid-web") id = sb.id();
  }
  auto st = runtime_.PodSandboxStatus(id, false);
  ASSERT_TRUE(st.ok());
  const std::string ip = st->status().network().ip();
  EXPECT_FALSE(ip.empty());
  // plegd's record of it carries the IP into the status.
  PodRecordT rec;
  rec.uid = "uid-web";
  auto sb = std::make_unique<SandboxRecordT>();
  sb->id = id;
  sb->state = SandboxState::Ready;
  sb->created_at_ns = 1;
  sb->ip = ip;
  sb->additional_ips = {"2001:db8::5"};
  rec.sandboxes.push_back(std::move(sb));
  status::PodStatus built = syncer_.BuildStatus(web, &rec, false);
  EXPECT_EQ(built.pod_ip, ip);
  EXPECT_THAT(built.pod_ips, ::testing::ElementsAre(ip, "2001:db8::5"));
}

}  // namespace
}  // namespace nodelet::podworkerd
