// PodSyncer on the fake runtime: what a sync decides from a pod cache record when podworkerd
// comes back after dying in the middle of a StartContainer call.
#include "svc-podworkerd/pod_sync.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
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

constexpr char kSyncImage[] = "nodelet.local/busybox:1.0";

class PodSyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    runtime_.AddImage(kSyncImage);
    pod_.metadata.name = "job";
    pod_.metadata.namespace_name = "default";
    pod_.metadata.uid = "uid-job";
    pod_.spec.restart_policy = "Never";
    pod_.spec.host_network = true;
    pod::Container c;
    c.name = "app";
    c.image = kSyncImage;
    c.image_pull_policy = "IfNotPresent";
    c.command = {"sh", "-c", "exit 0"};
    pod_.spec.containers.push_back(c);
    // The pod's sandbox, ready, as plegd reports it.
    v1::PodSandboxConfig sb = MakeSandboxConfig(pod_, 0, "/nonexistent-log-dir");
    auto id = runtime_.RunPodSandbox(sb, "");
    ASSERT_TRUE(id.ok());
    record_.uid = pod_.metadata.uid;
    record_.name = pod_.metadata.name;
    record_.namespace_ = pod_.metadata.namespace_name;
    auto s = std::make_unique<SandboxRecordT>();
    s->id = *id;
    s->state = SandboxState::Ready;
    s->created_at_ns = 1;
    s->host_network = true;
    record_.sandboxes.push_back(std::move(s));
  }

  // A sandbox of the pod made behind plegd's back (not in record_), with `attempt`.
  std::string UnseenSandbox(uint32_t attempt, bool ready) {
    v1::PodSandboxConfig sb = MakeSandboxConfig(pod_, attempt, "/nonexistent-log-dir");
    auto id = runtime_.RunPodSandbox(sb, "");
    EXPECT_TRUE(id.ok());
    if (!ready) {
      EXPECT_TRUE(runtime_.StopPodSandbox(*id).ok());
    }
    return id.ok() ? *id : "";
  }

  // The attempts of the pod's sandboxes in the runtime, by id.
  std::map<std::string, std::pair<uint32_t, bool>> RuntimeSandboxes() {
    std::map<std::string, std::pair<uint32_t, bool>> out;
    auto list = runtime_.ListPodSandbox({});
    EXPECT_TRUE(list.ok());
    if (!list.ok()) return out;
    for (const auto& s : *list) {
      out[s.id()] = {s.metadata().attempt(), s.state() == v1::SANDBOX_READY};
    }
    return out;
  }

  bool HasEvent(const SyncOutcome& out, const std::string& reason) {
    for (const auto& e : out.events) {
      if (e.reason == reason) return true;
    }
    return false;
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

namespace nodelet::podworkerd {
namespace {

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
