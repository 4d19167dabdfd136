#include "svc-podworkerd/pod_phase.h"

#include <algorithm>

namespace nodelet::podworkerd {
namespace {

using status::ConditionStatus;
using status::ContainerStatus;
using status::PodPhase;

const ContainerStatus* Find(const std::vector<ContainerStatus>* statuses, const std::string& name) {
  if (statuses == nullptr) return nullptr;
  for (const auto& s : *statuses) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

struct InitSummary {
  int pending = 0;
  int failed = 0;
};

InitSummary SummarizeInit(const PhaseInput& in) {
  InitSummary sum;
  for (const auto& name : in.init_containers) {
    const ContainerStatus* s = Find(in.init_statuses, name);
    if (s == nullptr || s->state.running) {
      ++sum.pending;
    } else if (s->state.terminated) {
      if (s->state.terminated->exit_code != 0) ++sum.failed;
    } else if (s->last_state.terminated) {
      // Waiting to be restarted after it ran.
      if (s->last_state.terminated->exit_code != 0) ++sum.failed;
    } else {
      ++sum.pending;
    }
  }
  return sum;
}

}  // namespace

PodPhase ComputePhase(const PhaseInput& in) {
  InitSummary init = SummarizeInit(in);
  int unknown = 0, running = 0, waiting = 0, stopped = 0, succeeded = 0;
  for (const auto& name : in.containers) {
    const ContainerStatus* s = Find(in.statuses, name);
    if (s == nullptr) {
      ++unknown;
    } else if (s->state.running) {
      ++running;
    } else if (s->state.terminated) {
      ++stopped;
      if (s->state.terminated->exit_code == 0) ++succeeded;
    } else if (s->last_state.terminated) {
      ++stopped;  // waiting to restart after it ran
    } else {
      ++waiting;
    }
  }
  if (init.failed > 0 && in.restart_policy == status::RestartPolicy::kNever) {
    return PodPhase::kFailed;
  }
  if (init.pending > 0 && !in.pod_is_terminal) return PodPhase::kPending;
  if (waiting > 0) return PodPhase::kPending;
  if (running > 0 && unknown == 0) return PodPhase::kRunning;
  if (running == 0 && stopped > 0 && unknown == 0) {
    if (in.pod_is_terminal) return stopped == succeeded ? PodPhase::kSucceeded : PodPhase::kFailed;
    if (in.restart_policy == status::RestartPolicy::kAlways) return PodPhase::kRunning;
    if (stopped == succeeded) return PodPhase::kSucceeded;
    if (in.restart_policy == status::RestartPolicy::kNever) return PodPhase::kFailed;
    return PodPhase::kRunning;
  }
  if (in.pod_is_terminal && unknown > 0 && running == 0) return PodPhase::kFailed;
  return PodPhase::kPending;
}

std::vector<status::PodCondition> ComputeConditions(
    const PhaseInput& in, PodPhase phase, const std::vector<status::PodCondition>& previous,
    int64_t now_unix_s) {
  auto make = [&](const std::string& type, bool value, const std::string& reason,
                  const std::string& message) {
    status::PodCondition c;
    c.type = type;
    c.status = value ? ConditionStatus::kTrue : ConditionStatus::kFalse;
    c.reason = value ? "" : reason;
    c.message = value ? "" : message;
    c.last_transition_time_unix_s = now_unix_s;
    for (const auto& p : previous) {
      if (p.type == type && p.status == c.status)
        c.last_transition_time_unix_s = p.last_transition_time_unix_s;
    }
    return c;
  };

  std::vector<std::string> unfinished_init;
  for (const auto& name : in.init_containers) {
    const ContainerStatus* s = Find(in.init_statuses, name);
    if (s == nullptr || !s->state.terminated || s->state.terminated->exit_code != 0) {
      unfinished_init.push_back(name);
    }
  }
  std::vector<std::string> unready;
  for (const auto& name : in.containers) {
    const ContainerStatus* s = Find(in.statuses, name);
    if (s == nullptr || !s->ready) unready.push_back(name);
  }
  auto join = [](const std::vector<std::string>& v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? " " : "") + v[i];
    return out + "]";
  };
  // A pod that completed has its init containers done by definition.
  bool initialized = unfinished_init.empty() || phase == PodPhase::kSucceeded;
  bool terminal = phase == PodPhase::kSucceeded || phase == PodPhase::kFailed;
  bool containers_ready = unready.empty() && !terminal;
  std::string not_ready_reason = terminal ? "PodCompleted" : "ContainersNotReady";
  std::string not_ready_msg = terminal ? "" : "containers with unready status: " + join(unready);
  return {
      make("PodScheduled", true, "", ""),
      make("Initialized", initialized, "ContainersNotInitialized",
           "containers with incomplete status: " + join(unfinished_init)),
      make("ContainersReady", containers_ready, not_ready_reason, not_ready_msg),
      make("Ready", containers_ready, not_ready_reason, not_ready_msg),
  };
}

}  // namespace nodelet::podworkerd
