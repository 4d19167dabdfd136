#include "svc-podworkerd/pod_phase.h"

#include <gtest/gtest.h>

namespace nodelet::podworkerd {
namespace {

using status::ContainerStatus;
using status::PodPhase;
using status::RestartPolicy;

ContainerStatus Running(const std::string& name, bool ready = true) {
  ContainerStatus s;
  s.name = name;
  s.state.running = status::ContainerStateRunning{100};
  s.ready = ready;
  return s;
}
ContainerStatus Exited(const std::string& name, int code) {
  ContainerStatus s;
  s.name = name;
  s.state.terminated = status::ContainerStateTerminated{};
  s.state.terminated->exit_code = code;
  return s;
}
ContainerStatus Waiting(const std::string& name, bool ran_before = false, int last_code = 1) {
  ContainerStatus s;
  s.name = name;
  s.state.waiting = status::ContainerStateWaiting{"CrashLoopBackOff", ""};
  if (ran_before) {
    s.last_state.terminated = status::ContainerStateTerminated{};
    s.last_state.terminated->exit_code = last_code;
  }
  return s;
}

struct Case {
  RestartPolicy policy;
  std::vector<ContainerStatus> init;
  std::vector<ContainerStatus> app;
  bool terminal;
  PodPhase want;
};

PodPhase Phase(const Case& c, std::vector<std::string> init_names = {},
               std::vector<std::string> names = {"a"}) {
  PhaseInput in;
  in.restart_policy = c.policy;
  in.init_containers = std::move(init_names);
  in.containers = std::move(names);
  in.init_statuses = &c.init;
  in.statuses = &c.app;
  in.pod_is_terminal = c.terminal;
  return ComputePhase(in);
}

TEST(PodPhaseTest, AppContainers) {
  EXPECT_EQ(Phase({RestartPolicy::kAlways, {}, {}, false, {}}), PodPhase::kPending);
  EXPECT_EQ(Phase({RestartPolicy::kAlways, {}, {Running("a")}, false, {}}), PodPhase::kRunning);
  EXPECT_EQ(Phase({RestartPolicy::kAlways, {}, {Waiting("a")}, false, {}}), PodPhase::kPending);
  // Crash looping under Always: Running.
  EXPECT_EQ(Phase({RestartPolicy::kAlways, {}, {Waiting("a", true)}, false, {}}),
            PodPhase::kRunning);
  EXPECT_EQ(Phase({RestartPolicy::kAlways, {}, {Exited("a", 1)}, false, {}}), PodPhase::kRunning);
  EXPECT_EQ(Phase({RestartPolicy::kOnFailure, {}, {Exited("a", 0)}, false, {}}),
            PodPhase::kSucceeded);
  EXPECT_EQ(Phase({RestartPolicy::kOnFailure, {}, {Exited("a", 1)}, false, {}}),
            PodPhase::kRunning);
  EXPECT_EQ(Phase({RestartPolicy::kNever, {}, {Exited("a", 1)}, false, {}}), PodPhase::kFailed);
  EXPECT_EQ(Phase({RestartPolicy::kNever, {}, {Exited("a", 0)}, false, {}}), PodPhase::kSucceeded);
  // A terminal pod (deleted) with all exited: by exit codes.
  EXPECT_EQ(Phase({RestartPolicy::kAlways, {}, {Exited("a", 137)}, true, {}}), PodPhase::kFailed);
  EXPECT_EQ(Phase({RestartPolicy::kAlways, {}, {Exited("a", 0)}, true, {}}), PodPhase::kSucceeded);
}

TEST(PodPhaseTest, InitContainersBlockAndFail) {
  // Init still running: Pending.
  EXPECT_EQ(Phase({RestartPolicy::kAlways, {Running("i")}, {}, false, {}}, {"i"}),
            PodPhase::kPending);
  // Init failed under Never: Failed.
  EXPECT_EQ(Phase({RestartPolicy::kNever, {Exited("i", 1)}, {}, false, {}}, {"i"}),
            PodPhase::kFailed);
  // Init failed under Always (it will be retried): Pending, the app never started.
  EXPECT_EQ(Phase({RestartPolicy::kAlways, {Waiting("i", true, 1)}, {}, false, {}}, {"i"}),
            PodPhase::kPending);
  // Init done, app running.
  EXPECT_EQ(Phase({RestartPolicy::kAlways, {Exited("i", 0)}, {Running("a")}, false, {}}, {"i"}),
            PodPhase::kRunning);
}

TEST(PodPhaseTest, ConditionsAndTransitionTimes) {
  std::vector<ContainerStatus> init = {Exited("i", 0)};
  std::vector<ContainerStatus> app = {Running("a", false), Running("b", true)};
  PhaseInput in;
  in.init_containers = {"i"};
  in.containers = {"a", "b"};
  in.init_statuses = &init;
  in.statuses = &app;
  auto c1 = ComputeConditions(in, PodPhase::kRunning, {}, 1000);
  ASSERT_EQ(c1.size(), 4u);
  EXPECT_EQ(c1[0].type, "PodScheduled");
  EXPECT_EQ(c1[1].status, status::ConditionStatus::kTrue);   // Initialized
  EXPECT_EQ(c1[2].status, status::ConditionStatus::kFalse);  // ContainersReady
  EXPECT_EQ(c1[2].reason, "ContainersNotReady");
  EXPECT_EQ(c1[2].message, "containers with unready status: [a]");
  EXPECT_EQ(c1[3].status, status::ConditionStatus::kFalse);
  // Same statuses later: transition times kept.
  auto c2 = ComputeConditions(in, PodPhase::kRunning, c1, 2000);
  EXPECT_EQ(c2[3].last_transition_time_unix_s, 1000);
  // Ready flips: its transition time moves, Initialized's does not.
  app[0].ready = true;
  auto c3 = ComputeConditions(in, PodPhase::kRunning, c2, 3000);
  EXPECT_EQ(c3[3].status, status::ConditionStatus::kTrue);
  EXPECT_EQ(c3[3].last_transition_time_unix_s, 3000);
  EXPECT_EQ(c3[1].last_transition_time_unix_s, 1000);
  // A completed pod is not ready, reason PodCompleted.
  auto c4 = ComputeConditions(in, PodPhase::kSucceeded, c3, 4000);
  EXPECT_EQ(c4[3].status, status::ConditionStatus::kFalse);
  EXPECT_EQ(c4[3].reason, "PodCompleted");
}

}  // namespace
}  // namespace nodelet::podworkerd
