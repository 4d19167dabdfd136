#include "lib/status/pod_status.h"

#include <set>

namespace nodelet::status {

std::string PhaseName(PodPhase phase) {
  switch (phase) {
    case PodPhase::kPending:
      return "Pending";
    case PodPhase::kRunning:
      return "Running";
    case PodPhase::kSucceeded:
      return "Succeeded";
    case PodPhase::kFailed:
      return "Failed";
    case PodPhase::kUnknown:
      return "Unknown";
  }
  return "Phase(" + std::to_string(static_cast<int>(phase)) + ")";
}

std::string ConditionStatusName(ConditionStatus status) {
  switch (status) {
    case ConditionStatus::kUnknown:
      return "Unknown";
    case ConditionStatus::kTrue:
      return "True";
    case ConditionStatus::kFalse:
      return "False";
  }
  return "ConditionStatus(" + std::to_string(static_cast<int>(status)) + ")";
}

std::string RestartPolicyName(RestartPolicy policy) {
  switch (policy) {
    case RestartPolicy::kAlways:
      return "Always";
    case RestartPolicy::kOnFailure:
      return "OnFailure";
    case RestartPolicy::kNever:
      return "Never";
  }
  return "RestartPolicy(" + std::to_string(static_cast<int>(policy)) + ")";
}

bool IsTerminal(PodPhase phase) {
  return phase == PodPhase::kSucceeded || phase == PodPhase::kFailed;
}

const PodCondition* PodStatus::FindCondition(const std::string& type) const {
  for (const auto& c : conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

std::string PodIdentity::Describe() const {
  return "pod '" + namespace_ + "/" + name + "' (uid '" + uid + "')";
}

namespace {

Status CheckState(const std::string& where, const ContainerState& state) {
  int set = (state.waiting ? 1 : 0) + (state.running ? 1 : 0) + (state.terminated ? 1 : 0);
  if (set > 1) {
    return InvalidArgument(where + " has " + std::to_string(set) +
                           " of waiting/running/terminated set; at most one is allowed");
  }
  return Status::Ok();
}

Status CheckContainers(const std::string& list, const std::vector<ContainerStatus>& containers) {
  std::set<std::string> names;
  for (size_t i = 0; i < containers.size(); ++i) {
    const ContainerStatus& c = containers[i];
    std::string where = list + "[" + std::to_string(i) + "]";
    if (c.name.empty()) return InvalidArgument(where + ".name is empty");
    if (!names.insert(c.name).second) {
      return InvalidArgument(where + ".name '" + c.name + "' appears twice");
    }
    where = list + "['" + c.name + "']";
    if (c.restart_count < 0) {
      return InvalidArgument(where + ".restartCount is negative (" +
                             std::to_string(c.restart_count) + ")");
    }
    if (Status s = CheckState(where + ".state", c.state); !s.ok()) return s;
    if (Status s = CheckState(where + ".lastState", c.last_state); !s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace

Status ValidatePodStatus(const PodIdentity& pod, const PodStatus& status) {
  if (pod.uid.empty()) return InvalidArgument("pod identity: uid is empty");
  if (pod.name.empty())
    return InvalidArgument("pod identity: name is empty (uid '" + pod.uid + "')");
  if (pod.namespace_.empty()) {
    return InvalidArgument("pod identity: namespace is empty (uid '" + pod.uid + "')");
  }
  const std::string who = pod.Describe() + ": ";
  if (static_cast<uint8_t>(pod.restart_policy) > kMaxRestartPolicy) {
    return InvalidArgument(who + "unknown restartPolicy " +
                           std::to_string(static_cast<int>(pod.restart_policy)));
  }
  if (static_cast<uint8_t>(status.phase) > kMaxPodPhase) {
    return InvalidArgument(who + "unknown phase " + std::to_string(static_cast<int>(status.phase)) +
                           " (known: Pending, Running, Succeeded, Failed, Unknown)");
  }
  std::set<std::string> types;
  for (size_t i = 0; i < status.conditions.size(); ++i) {
    const PodCondition& c = status.conditions[i];
    if (c.type.empty()) {
      return InvalidArgument(who + "conditions[" + std::to_string(i) + "].type is empty");
    }
    if (!types.insert(c.type).second) {
      return InvalidArgument(who + "condition '" + c.type + "' appears twice");
    }
    if (static_cast<uint8_t>(c.status) > kMaxConditionStatus) {
      return InvalidArgument(who + "condition '" + c.type + "' has unknown status " +
                             std::to_string(static_cast<int>(c.status)));
    }
  }
  if (Status s = CheckContainers("initContainerStatuses", status.init_container_statuses);
      !s.ok()) {
    return InvalidArgument(who + s.message());
  }
  if (Status s = CheckContainers("containerStatuses", status.container_statuses); !s.ok()) {
    return InvalidArgument(who + s.message());
  }
  return Status::Ok();
}

}  // namespace nodelet::status
