#include "svc-statusd/status_manager.h"

#include <gtest/gtest.h>

#include "tests/fakes/fake_clock.h"
#include "tests/unit/statusd/status_samples.h"

namespace nodelet::statusd {
namespace {

using namespace nodelet::statusd::testing;  // NOLINT
using nodelet::testing::FakeClock;

class StatusManagerTest : public ::testing::Test {
 protected:
  Result<SetOutcome> Set(const PodIdentity& pod, const PodStatus& status) {
    return manager_.SetPodStatus(pod, status, &changes_);
  }
  const PodStatusRecord& Stored(const std::string& uid) {
    const PodStatusRecord* r = manager_.Get(uid);
    EXPECT_NE(r, nullptr) << uid;
    static PodStatusRecord empty;
    return r ? *r : empty;
  }

  FakeClock clock_;
  StatusManager manager_{clock_};
  std::vector<StatusChange> changes_;
};

TEST_F(StatusManagerTest, VersionIncreasesByOneOnEveryChange) {
  auto pod = SamplePod("u1");
  for (int i = 1; i <= 5; ++i) {
    auto r = Set(pod, RunningStatus("m" + std::to_string(i)));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->changed);
    EXPECT_EQ(r->version, static_cast<uint64_t>(i));
  }
  EXPECT_EQ(Stored("u1").version, 5u);
  EXPECT_EQ(Stored("u1").status.message, "m5");
  ASSERT_EQ(changes_.size(), 5u);
  for (size_t i = 0; i < changes_.size(); ++i) EXPECT_EQ(changes_[i].record.version, i + 1);
}

TEST_F(StatusManagerTest, VersionsArePerPod) {
  ASSERT_EQ(Set(SamplePod("a"), RunningStatus("1"))->version, 1u);
  ASSERT_EQ(Set(SamplePod("a"), RunningStatus("2"))->version, 2u);
  ASSERT_EQ(Set(SamplePod("b"), RunningStatus("1"))->version, 1u);
}

TEST_F(StatusManagerTest, IdenticalStatusIsIgnored) {
  auto pod = SamplePod("u1");
  ASSERT_EQ(Set(pod, RunningStatus("same"))->version, 1u);
  changes_.clear();
  clock_.Advance(std::chrono::seconds(30));
  auto r = Set(pod, RunningStatus("same"));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->changed);
  EXPECT_EQ(r->version, 1u);
  EXPECT_TRUE(changes_.empty());
  // The stored record keeps its first acceptance time.
  EXPECT_EQ(Stored("u1").updated_at_unix_s, clock_.WallSeconds() - 30);
}

TEST_F(StatusManagerTest, IdentityChangeIsAChange) {
  auto pod = SamplePod("u1");
  ASSERT_EQ(Set(pod, RunningStatus())->version, 1u);
  pod.container_count = 2;
  auto r = Set(pod, RunningStatus());
  EXPECT_TRUE(r->changed);
  EXPECT_EQ(r->version, 2u);
}

TEST_F(StatusManagerTest, StartTimeNeverChangesOnceSet) {
  auto pod = SamplePod("u1");
  PodStatus s = RunningStatus();
  s.start_time_unix_s = 1'700'000'050;
  ASSERT_TRUE(Set(pod, s).ok());
  s.start_time_unix_s = 1'700'009'999;
  s.message = "later";
  ASSERT_TRUE(Set(pod, s).ok());
  EXPECT_EQ(Stored("u1").status.start_time_unix_s, 1'700'000'050);
  s.start_time_unix_s = 0;
  s.message = "cleared";
  ASSERT_TRUE(Set(pod, s).ok());
  EXPECT_EQ(Stored("u1").status.start_time_unix_s, 1'700'000'050);
}

// kubectl's AGE: the earliest creation time given, else when statusd first stored the pod;
// a later one (a pod source that saw the manifest again after a restart) does not move it.
TEST_F(StatusManagerTest, CreationTimeIsTheEarliestOrFirstStored) {
  auto pod = SamplePod("u1");
  pod.creation_time_unix_s = 0;
  ASSERT_TRUE(Set(pod, RunningStatus("a")).ok());
  const int64_t first = clock_.WallSeconds();
  EXPECT_EQ(Stored("u1").pod.creation_time_unix_s, first);
  clock_.Advance(std::chrono::seconds(100));
  ASSERT_TRUE(Set(pod, RunningStatus("b")).ok());
  EXPECT_EQ(Stored("u1").pod.creation_time_unix_s, first);
  pod.creation_time_unix_s = first + 50;
  ASSERT_TRUE(Set(pod, RunningStatus("c")).ok());
  EXPECT_EQ(Stored("u1").pod.creation_time_unix_s, first);
  pod.creation_time_unix_s = first - 500;
  ASSERT_TRUE(Set(pod, RunningStatus("d")).ok());
  EXPECT_EQ(Stored("u1").pod.creation_time_unix_s, first - 500);
}

TEST_F(StatusManagerTest, StartTimeDefaultsToNowWhenNeverSet) {
  PodStatus s = RunningStatus();
  s.start_time_unix_s = 0;
  ASSERT_TRUE(Set(SamplePod("u1"), s).ok());
  EXPECT_EQ(Stored("u1").status.start_time_unix_s, clock_.WallSeconds());
}

TEST_F(StatusManagerTest, LastTransitionTimeChangesOnlyWithStatus) {
  auto pod = SamplePod("u1");
  PodStatus s = RunningStatus();
  s.conditions = {{"Ready", ConditionStatus::kFalse, 0, 0, "ContainersNotReady", ""}};
  ASSERT_TRUE(Set(pod, s).ok());
  const int64_t t0 = clock_.WallSeconds();
  EXPECT_EQ(Stored("u1").status.FindCondition("Ready")->last_transition_time_unix_s, t0);

  // Same status, another message, and a sender-supplied time: the time stays.
  clock_.Advance(std::chrono::seconds(10));
  s.conditions[0].message = "still waiting";
  s.conditions[0].last_transition_time_unix_s = 42;
  auto r = Set(pod, s);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->changed);
  EXPECT_EQ(Stored("u1").status.FindCondition("Ready")->last_transition_time_unix_s, t0);

  // The status flips: the time moves to now.
  clock_.Advance(std::chrono::seconds(10));
  s.conditions[0].status = ConditionStatus::kTrue;
  ASSERT_TRUE(Set(pod, s).ok());
  const int64_t t1 = clock_.WallSeconds();
  EXPECT_EQ(Stored("u1").status.FindCondition("Ready")->last_transition_time_unix_s, t1);

  // A new condition appears: its own time is now; the old one keeps t1.
  clock_.Advance(std::chrono::seconds(10));
  s.conditions.push_back({"Initialized", ConditionStatus::kTrue, 0, 0, "", ""});
  ASSERT_TRUE(Set(pod, s).ok());
  EXPECT_EQ(Stored("u1").status.FindCondition("Ready")->last_transition_time_unix_s, t1);
  EXPECT_EQ(Stored("u1").status.FindCondition("Initialized")->last_transition_time_unix_s,
            clock_.WallSeconds());

  // Only a sender's time differs: identical after normalization, so ignored.
  s.conditions[1].last_transition_time_unix_s = 7;
  auto same = Set(pod, s);
  EXPECT_FALSE(same->changed);
}

TEST_F(StatusManagerTest, TerminalPhaseIsFinal) {
  for (PodPhase terminal : {PodPhase::kSucceeded, PodPhase::kFailed}) {
    std::string uid = "u-" + PhaseName(terminal);
    PodStatus s = RunningStatus();
    s.phase = terminal;
    ASSERT_TRUE(Set(SamplePod(uid), s).ok());
    for (PodPhase back :
         {PodPhase::kPending, PodPhase::kRunning, PodPhase::kUnknown,
          terminal == PodPhase::kFailed ? PodPhase::kSucceeded : PodPhase::kFailed}) {
      s.phase = back;
      auto r = Set(SamplePod(uid), s);
      ASSERT_FALSE(r.ok()) << PhaseName(terminal) << " -> " << PhaseName(back);
      EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
      EXPECT_NE(r.status().message().find("phase cannot go from " + PhaseName(terminal) + " to " +
                                          PhaseName(back)),
                std::string::npos)
          << r.status().message();
      EXPECT_EQ(Stored(uid).status.phase, terminal);
      EXPECT_EQ(Stored(uid).version, 1u);
    }
    // Other fields of a terminal pod may still change.
    s.phase = terminal;
    s.message = "final words";
    auto r = Set(SamplePod(uid), s);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->version, 2u);
  }
}

TEST_F(StatusManagerTest, TerminatedContainerStaysTerminatedUnderNever) {
  auto pod = SamplePod("u1", RestartPolicy::kNever);
  PodStatus s = RunningStatus();
  s.container_statuses = {TerminatedContainer("app", 1)};
  ASSERT_TRUE(Set(pod, s).ok());
  s.container_statuses = {RunningContainer("app")};
  auto r = Set(pod, s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("container 'app' terminated with exit code 1 and "
                                      "restartPolicy is Never: it cannot become running again"),
            std::string::npos)
      << r.status().message();
  // Waiting is refused as well.
  s.container_statuses = {WaitingContainer("app", "ContainerCreating")};
  EXPECT_EQ(Set(pod, s).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Stored("u1").status.container_statuses[0].state.terminated.has_value());
  EXPECT_EQ(Stored("u1").version, 1u);
}

TEST_F(StatusManagerTest, OnFailureRefusesRestartAfterSuccessOnly) {
  auto pod = SamplePod("ok", RestartPolicy::kOnFailure);
  PodStatus s = RunningStatus();
  s.container_statuses = {TerminatedContainer("app", 0)};
  ASSERT_TRUE(Set(pod, s).ok());
  s.container_statuses = {RunningContainer("app")};
  auto r = Set(pod, s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("exit code 0 and restartPolicy is OnFailure"),
            std::string::npos);

  auto failed = SamplePod("failed", RestartPolicy::kOnFailure);
  s.container_statuses = {TerminatedContainer("app", 2)};
  ASSERT_TRUE(Set(failed, s).ok());
  s.container_statuses = {RunningContainer("app")};
  auto again = Set(failed, s);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->version, 2u);
}

TEST_F(StatusManagerTest, AlwaysLetsTerminatedContainersRunAgain) {
  auto pod = SamplePod("u1", RestartPolicy::kAlways);
  PodStatus s = RunningStatus();
  s.container_statuses = {TerminatedContainer("app", 0)};
  ASSERT_TRUE(Set(pod, s).ok());
  s.container_statuses = {RunningContainer("app")};
  s.container_statuses[0].restart_count = 1;
  EXPECT_TRUE(Set(pod, s).ok());
}

TEST_F(StatusManagerTest, InitContainersAreGuardedToo) {
  auto pod = SamplePod("u1", RestartPolicy::kNever);
  PodStatus s = RunningStatus();
  s.phase = PodPhase::kPending;
  s.init_container_statuses = {TerminatedContainer("init", 0)};
  s.container_statuses = {WaitingContainer("app", "PodInitializing")};
  ASSERT_TRUE(Set(pod, s).ok());
  s.init_container_statuses = {RunningContainer("init")};
  auto r = Set(pod, s);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("init container 'init'"), std::string::npos);
}

TEST_F(StatusManagerTest, InvalidStatusesAreRefusedWithTheField) {
  struct Case {
    std::function<void(PodIdentity&, PodStatus&)> mutate;
    std::string needle;
  };
  std::vector<Case> cases = {
      {[](PodIdentity& p, PodStatus&) { p.uid.clear(); }, "uid is empty"},
      {[](PodIdentity& p, PodStatus&) { p.name.clear(); }, "name is empty"},
      {[](PodIdentity& p, PodStatus&) { p.namespace_.clear(); }, "namespace is empty"},
      {[](PodIdentity&, PodStatus& s) { s.phase = static_cast<PodPhase>(77); }, "unknown phase 77"},
      {[](PodIdentity& p, PodStatus&) { p.restart_policy = static_cast<RestartPolicy>(9); },
       "unknown restartPolicy 9"},
      {[](PodIdentity&, PodStatus& s) { s.conditions.push_back(s.conditions[0]); },
       "condition 'Ready' appears twice"},
      {[](PodIdentity&, PodStatus& s) { s.conditions[0].status = static_cast<ConditionStatus>(5); },
       "unknown status 5"},
      {[](PodIdentity&, PodStatus& s) { s.container_statuses.push_back(RunningContainer("app")); },
       "'app' appears twice"},
      {[](PodIdentity&, PodStatus& s) { s.container_statuses[0].name.clear(); },
       "containerStatuses[0].name is empty"},
      {[](PodIdentity&, PodStatus& s) { s.container_statuses[0].restart_count = -1; },
       "restartCount is negative"},
      {[](PodIdentity&, PodStatus& s) {
         s.container_statuses[0].state.waiting = ContainerStateWaiting{"x", ""};
       },
       "at most one is allowed"},
  };
  for (const auto& c : cases) {
    PodIdentity pod = SamplePod("bad");
    PodStatus s = RunningStatus();
    c.mutate(pod, s);
    auto r = Set(pod, s);
    ASSERT_FALSE(r.ok()) << c.needle;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.needle;
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos) << r.status().message();
  }
  EXPECT_EQ(manager_.size(), 0u);
  EXPECT_TRUE(changes_.empty());
}

TEST_F(StatusManagerTest, TerminatePodTerminatesEveryRunningContainer) {
  auto pod = SamplePod("u1", RestartPolicy::kAlways);
  PodStatus s = RunningStatus();
  s.init_container_statuses = {TerminatedContainer("init", 0)};
  s.container_statuses = {RunningContainer("app"), WaitingContainer("side", "CrashLoopBackOff"),
                          TerminatedContainer("done", 3)};
  ASSERT_TRUE(Set(pod, s).ok());
  auto r = manager_.TerminatePod("u1", &changes_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->changed);
  EXPECT_EQ(r->version, 2u);
  const auto& st = Stored("u1").status;
  EXPECT_EQ(st.phase, PodPhase::kFailed);
  for (const char* name : {"app", "side"}) {
    const ContainerStatus* c = nullptr;
    for (const auto& cs : st.container_statuses) {
      if (cs.name == name) c = &cs;
    }
    ASSERT_NE(c, nullptr);
    ASSERT_TRUE(c->state.terminated.has_value()) << name;
    EXPECT_FALSE(c->state.running.has_value());
    EXPECT_FALSE(c->state.waiting.has_value());
    EXPECT_EQ(c->state.terminated->exit_code, 137);
    EXPECT_EQ(c->state.terminated->reason, "ContainerStatusUnknown");
    EXPECT_FALSE(c->ready);
  }
  // Already terminated containers keep their real end.
  EXPECT_EQ(st.container_statuses[2].state.terminated->exit_code, 3);
  EXPECT_EQ(st.init_container_statuses[0].state.terminated->exit_code, 0);
  EXPECT_EQ(st.init_container_statuses[0].state.terminated->reason, "Completed");

  // Idempotent: a second TerminatePod changes nothing.
  auto again = manager_.TerminatePod("u1", &changes_);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->changed);
  EXPECT_EQ(again->version, 2u);
}

TEST_F(StatusManagerTest, TerminatePodKeepsATerminalPhase) {
  PodStatus s = RunningStatus();
  s.phase = PodPhase::kSucceeded;
  s.container_statuses = {RunningContainer("app")};
  ASSERT_TRUE(Set(SamplePod("u1"), s).ok());
  ASSERT_TRUE(manager_.TerminatePod("u1", &changes_).ok());
  EXPECT_EQ(Stored("u1").status.phase, PodPhase::kSucceeded);
  EXPECT_EQ(Stored("u1").status.container_statuses[0].state.terminated->exit_code, 137);
}

TEST_F(StatusManagerTest, TerminatePodOfAnUnknownPodIsNotFound) {
  auto r = manager_.TerminatePod("nope", &changes_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("'nope'"), std::string::npos);
}

TEST_F(StatusManagerTest, AfterTerminatePodTheGuardsHold) {
  auto pod = SamplePod("u1", RestartPolicy::kNever);
  ASSERT_TRUE(Set(pod, RunningStatus()).ok());
  ASSERT_TRUE(manager_.TerminatePod("u1", &changes_).ok());
  auto r = Set(pod, RunningStatus());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(StatusManagerTest, RemoveOrphansKeepsOnlyTheGivenUids) {
  for (const char* uid : {"a", "b", "c", "d"})
    ASSERT_TRUE(Set(SamplePod(uid), RunningStatus()).ok());
  changes_.clear();
  auto removed = manager_.RemoveOrphans({"b", "d", "zzz"}, &changes_);
  EXPECT_EQ(removed, (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(manager_.size(), 2u);
  EXPECT_EQ(manager_.Get("a"), nullptr);
  ASSERT_EQ(changes_.size(), 2u);
  EXPECT_EQ(changes_[0].kind, StatusChange::Kind::kRemoved);
  EXPECT_EQ(changes_[0].record.pod.uid, "a");
  EXPECT_EQ(changes_[0].record.version, 1u);
}

TEST_F(StatusManagerTest, ListIsSortedAndFiltered) {
  ASSERT_TRUE(Set(SamplePod("1", RestartPolicy::kAlways, "zeta"), RunningStatus()).ok());
  ASSERT_TRUE(Set(SamplePod("2", RestartPolicy::kAlways, "alpha"), RunningStatus()).ok());
  auto other = SamplePod("3", RestartPolicy::kAlways, "beta");
  other.namespace_ = "kube-system";
  ASSERT_TRUE(Set(other, RunningStatus()).ok());
  auto all = manager_.List();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0]->pod.name, "alpha");
  EXPECT_EQ(all[1]->pod.name, "zeta");
  EXPECT_EQ(all[2]->pod.name, "beta");
  auto sys = manager_.List("kube-system");
  ASSERT_EQ(sys.size(), 1u);
  EXPECT_EQ(sys[0]->pod.uid, "3");
}

TEST_F(StatusManagerTest, RollbackRestoresTheBatch) {
  ASSERT_TRUE(Set(SamplePod("keep"), RunningStatus("v1")).ok());
  ASSERT_TRUE(Set(SamplePod("gone"), RunningStatus("v1")).ok());
  manager_.BeginBatch();
  ASSERT_TRUE(Set(SamplePod("keep"), RunningStatus("v2")).ok());
  ASSERT_TRUE(Set(SamplePod("keep"), RunningStatus("v3")).ok());
  ASSERT_TRUE(Set(SamplePod("new"), RunningStatus("v1")).ok());
  manager_.RemoveOrphans({"keep", "new"}, &changes_);
  EXPECT_TRUE(manager_.TouchedInBatch("keep"));
  EXPECT_TRUE(manager_.TouchedInBatch("gone"));
  manager_.RollbackBatch();
  EXPECT_EQ(Stored("keep").version, 1u);
  EXPECT_EQ(Stored("keep").status.message, "v1");
  EXPECT_EQ(Stored("gone").version, 1u);
  EXPECT_EQ(manager_.Get("new"), nullptr);
  // And versions continue from the restored state.
  EXPECT_EQ(Set(SamplePod("keep"), RunningStatus("v2"))->version, 2u);
}

TEST_F(StatusManagerTest, LoadedVersionsContinueAndFloorsApply) {
  PodStatusRecord rec;
  rec.pod = SamplePod("u1");
  rec.status = RunningStatus("old");
  rec.status.start_time_unix_s = 1'700'000'001;
  rec.version = 41;
  manager_.Load({rec});
  manager_.SetVersionFloor("lost", 9);
  EXPECT_EQ(Set(SamplePod("u1"), RunningStatus("new"))->version, 42u);
  EXPECT_EQ(Stored("u1").status.start_time_unix_s, 1'700'000'001);
  EXPECT_EQ(Set(SamplePod("lost"), RunningStatus())->version, 10u);
}

}  // namespace
}  // namespace nodelet::statusd
