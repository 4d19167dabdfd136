// The kubelet's rules for a pod's phase and conditions, from its spec (container names,
// restart policy) and its container statuses. Pure functions; podworkerd calls them after each
// sync to build the v1 PodStatus it sends to statusd.
#pragma once

#include <string>
#include <vector>

#include "lib/status/pod_status.h"

namespace nodelet::podworkerd {

struct PhaseInput {
  status::RestartPolicy restart_policy = status::RestartPolicy::kAlways;
  std::vector<std::string> init_containers;  // names, in spec order
  std::vector<std::string> containers;
  const std::vector<status::ContainerStatus>* init_statuses = nullptr;
  const std::vector<status::ContainerStatus>* statuses = nullptr;
  // The pod worker has terminated the pod (deleted, or finished for good).
  bool pod_is_terminal = false;
};

// Pending, Running, Succeeded or Failed, by the kubelet's getPhase rules:
// - an init container that failed under restartPolicy Never fails the pod;
// - init containers still to run (or running) keep the pod Pending;
// - any app container waiting without having run keeps it Pending;
// - any running (and none unknown) makes it Running;
// - all stopped: Succeeded if every one exited 0, else Failed under Never, else (OnFailure,
//   Always) Running, because they will be restarted; a terminal pod is Succeeded or Failed.
status::PodPhase ComputePhase(const PhaseInput& in);

// The four pod conditions, keeping lastTransitionTime from `previous` when a condition's status
// did not change: PodScheduled (always True on a node), Initialized (every init container
// exited 0), ContainersReady (every app container ready), Ready (ContainersReady, and the pod is
// not terminal).
std::vector<status::PodCondition> ComputeConditions(
    const PhaseInput& in, status::PodPhase phase, const std::vector<status::PodCondition>& previous,
    int64_t now_unix_s);

}  // namespace nodelet::podworkerd
