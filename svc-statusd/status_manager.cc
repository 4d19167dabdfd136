#include "svc-statusd/status_manager.h"

#include <algorithm>

namespace nodelet::statusd {
namespace {

using status::ContainerStateTerminated;
using status::ContainerStatus;
using status::IsTerminal;
using status::PhaseName;
using status::RestartPolicy;

std::string StateWord(const status::ContainerState& s) {
  if (s.running) return "running";
  if (s.terminated) return "terminated";
  return "waiting";
}

// The kubelet's checkContainerStateTransition, for one list of containers.
Status CheckContainers(const std::string& who, const char* list,
                       const std::vector<ContainerStatus>& old_list,
                       const std::vector<ContainerStatus>& new_list, RestartPolicy policy) {
  if (policy == RestartPolicy::kAlways) return Status::Ok();
  for (const auto& old : old_list) {
    if (!old.state.terminated) continue;
    int32_t exit_code = old.state.terminated->exit_code;
    // Under OnFailure, a container that failed may run again.
    if (policy == RestartPolicy::kOnFailure && exit_code != 0) continue;
    for (const auto& now : new_list) {
      if (now.name != old.name || now.state.terminated) continue;
      return FailedPrecondition(who + ": " + list + " '" + now.name +
                                "' terminated with exit code " + std::to_string(exit_code) +
                                " and restartPolicy is " + status::RestartPolicyName(policy) +
                                ": it cannot become " + StateWord(now.state) + " again");
    }
  }
  return Status::Ok();
}

void TerminateContainers(std::vector<ContainerStatus>& containers) {
  for (auto& c : containers) {
    if (c.state.terminated) continue;
    ContainerStateTerminated t;
    t.exit_code = status::kTerminatedUnknownExitCode;
    t.reason = status::kContainerStatusUnknown;
    t.message = "The container could not be located when the pod was terminated";
    c.state = status::ContainerState{};
    c.state.terminated = std::move(t);
    c.ready = false;
    c.started = false;
  }
}

}  // namespace

void StatusManager::Load(std::vector<PodStatusRecord> records) {
  pods_.clear();
  saved_.clear();
  for (auto& r : records) {
    std::string uid = r.pod.uid;
    pods_[uid] = std::move(r);
  }
}

void StatusManager::SetVersionFloor(const std::string& uid, uint64_t version) {
  uint64_t& floor = version_floor_[uid];
  floor = std::max(floor, version);
}

void StatusManager::Save(const std::string& uid) {
  if (!in_batch_ || saved_.count(uid)) return;
  auto it = pods_.find(uid);
  if (it == pods_.end()) {
    saved_.emplace(uid, std::nullopt);
  } else {
    saved_.emplace(uid, it->second);
  }
}

void StatusManager::BeginBatch() {
  in_batch_ = true;
  saved_.clear();
}

void StatusManager::CommitBatch() {
  in_batch_ = false;
  saved_.clear();
}

void StatusManager::RollbackBatch() {
  for (auto& [uid, before] : saved_) {
    if (before) {
      pods_[uid] = std::move(*before);
    } else {
      pods_.erase(uid);
    }
  }
  saved_.clear();
  in_batch_ = false;
}

Status StatusManager::CheckTransition(const PodStatusRecord& old, const PodIdentity& pod,
                                      const PodStatus& status) const {
  const std::string who = pod.Describe();
  if (IsTerminal(old.status.phase) && status.phase != old.status.phase) {
    return FailedPrecondition(who + ": phase cannot go from " + PhaseName(old.status.phase) +
                              " to " + PhaseName(status.phase) +
                              ": a terminal phase is final (stored version " +
                              std::to_string(old.version) + ")");
  }
  if (Status s = CheckContainers(who, "init container", old.status.init_container_statuses,
                                 status.init_container_statuses, pod.restart_policy);
      !s.ok()) {
    return s;
  }
  return CheckContainers(who, "container", old.status.container_statuses, status.container_statuses,
                         pod.restart_policy);
}

Result<SetOutcome> StatusManager::SetPodStatus(const PodIdentity& given, PodStatus status,
                                               std::vector<StatusChange>* changes) {
  if (Status s = status::ValidatePodStatus(given, status); !s.ok()) return s;
  const int64_t now = clock_.WallSeconds();
  auto it = pods_.find(given.uid);
  const PodStatusRecord* old = it == pods_.end() ? nullptr : &it->second;

  // The pod's creation time (kubectl's AGE): the earliest one given, else when statusd first
  // stored the pod; kept across restarts of every service (the record is durable).
  PodIdentity pod = given;
  const int64_t kept = old != nullptr ? old->pod.creation_time_unix_s : 0;
  if (kept != 0 && (pod.creation_time_unix_s == 0 || kept < pod.creation_time_unix_s)) {
    pod.creation_time_unix_s = kept;
  } else if (pod.creation_time_unix_s == 0) {
    pod.creation_time_unix_s = now;
  }

  // startTime: the first one stored is kept forever; statusd's now when nobody set one.
  if (old != nullptr && old->status.start_time_unix_s != 0) {
    status.start_time_unix_s = old->status.start_time_unix_s;
  } else if (status.start_time_unix_s == 0) {
    status.start_time_unix_s = now;
  }
  // lastTransitionTime: kept while the condition's status stays, now when it changes.
  for (auto& c : status.conditions) {
    const status::PodCondition* before = old ? old->status.FindCondition(c.type) : nullptr;
    c.last_transition_time_unix_s =
        before != nullptr && before->status == c.status ? before->last_transition_time_unix_s : now;
  }

  uint64_t base = 0;
  if (old != nullptr) {
    if (Status s = CheckTransition(*old, pod, status); !s.ok()) return s;
    if (old->pod == pod && old->status == status) return SetOutcome{old->version, false};
    base = old->version;
  } else if (auto f = version_floor_.find(pod.uid); f != version_floor_.end()) {
    base = f->second;
  }

  Save(pod.uid);
  PodStatusRecord& rec = pods_[pod.uid];
  rec.pod = pod;
  rec.status = std::move(status);
  rec.version = base + 1;
  rec.updated_at_unix_s = now;
  if (changes != nullptr) changes->push_back({StatusChange::Kind::kUpdated, rec});
  return SetOutcome{rec.version, true};
}

Result<SetOutcome> StatusManager::TerminatePod(const std::string& uid,
                                               std::vector<StatusChange>* changes) {
  auto it = pods_.find(uid);
  if (it == pods_.end()) {
    return NotFound("no status for pod uid '" + uid + "': it was never set or was removed");
  }
  PodStatus status = it->second.status;
  TerminateContainers(status.init_container_statuses);
  TerminateContainers(status.container_statuses);
  if (!IsTerminal(status.phase)) status.phase = status::PodPhase::kFailed;
  if (status == it->second.status) return SetOutcome{it->second.version, false};

  Save(uid);
  PodStatusRecord& rec = it->second;
  rec.status = std::move(status);
  rec.version += 1;
  rec.updated_at_unix_s = clock_.WallSeconds();
  if (changes != nullptr) changes->push_back({StatusChange::Kind::kUpdated, rec});
  return SetOutcome{rec.version, true};
}

std::vector<std::string> StatusManager::RemoveOrphans(const std::set<std::string>& keep,
                                                      std::vector<StatusChange>* changes) {
  std::vector<std::string> removed;
  for (const auto& [uid, rec] : pods_) {
    if (!keep.count(uid)) removed.push_back(uid);
  }
  std::sort(removed.begin(), removed.end());
  for (const auto& uid : removed) {
    Save(uid);
    auto node = pods_.extract(uid);
    if (changes != nullptr) {
      changes->push_back({StatusChange::Kind::kRemoved, std::move(node.mapped())});
    }
  }
  return removed;
}

const PodStatusRecord* StatusManager::Get(const std::string& uid) const {
  auto it = pods_.find(uid);
  return it == pods_.end() ? nullptr : &it->second;
}

std::vector<const PodStatusRecord*> StatusManager::List(const std::string& namespace_filter) const {
  std::vector<const PodStatusRecord*> out;
  out.reserve(pods_.size());
  for (const auto& [uid, rec] : pods_) {
    if (namespace_filter.empty() || rec.pod.namespace_ == namespace_filter) out.push_back(&rec);
  }
  std::sort(out.begin(), out.end(), [](const PodStatusRecord* a, const PodStatusRecord* b) {
    return std::tie(a->pod.namespace_, a->pod.name, a->pod.uid) <
           std::tie(b->pod.namespace_, b->pod.name, b->pod.uid);
  });
  return out;
}

}  // namespace nodelet::statusd
