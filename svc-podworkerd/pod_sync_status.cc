// PodSyncer's v1 pod status, built from plegd's records, the waiting reasons and termination
// messages.
#include <algorithm>
#include <future>
#include <set>
#include <vector>

#include "lib/common/fs.h"
#include "lib/common/logging.h"
#include "lib/common/utf8.h"
#include "lib/pod/canonical.h"
#include "lib/pod/qos.h"
#include "lib/pod/security.h"
#include "svc-podworkerd/container_log_manager.h"
#include "svc-podworkerd/cri_configs.h"
#include "svc-podworkerd/lifecycle_hooks.h"
#include "svc-podworkerd/pod_phase.h"
#include "svc-podworkerd/pod_records.h"
#include "svc-podworkerd/pod_sync.h"
#include "svc-podworkerd/pull_secrets.h"
#include "svc-podworkerd/termination_message.h"

namespace nodelet::podworkerd {
namespace {

namespace v1 = cri::v1;

}  // namespace

status::PodStatus PodSyncer::BuildStatus(const pod::Pod& pod, const PodRecordT* record,
                                         bool terminal) const {
  return MakeStatus(pod, record, {}, terminal);
}

void PodSyncer::AddTerminationMessage(const pod::Pod& pod, const pod::Container& c,
                                      const ContainerRecordT& record,
                                      status::ContainerState& state) const {
  if (!state.terminated || root_dir_.empty()) return;
  std::string message;
  if (!c.termination_message_path.empty()) {
    auto file = TerminationMessagePath(root_dir_, pod.metadata.uid, c.name, record.attempt);
    if (file.ok()) message = ReadTerminationMessage(*file);
  }
  if (message.empty() && record.exit_code != 0 &&
      c.termination_message_policy == pod::kTerminationMessageFallbackToLogsOnError) {
    if (auto dir = PodLogDirectory(log_dir_, pod); dir.ok()) {
      message =
          ReadLastLogLines(*dir + "/" + c.name + "/" + std::to_string(record.attempt) + ".log");
    }
  }
  if (message.empty()) return;
  std::string& m = state.terminated->message;
  m += (m.empty() ? "" : ": ") + message;
  // The pod's messages together stay within 12 KiB, each keeping its start as the kubelet's
  // status manager does, cut on a character boundary.
  const size_t cap =
      TerminationMessageCap(pod.spec.containers.size() + pod.spec.init_containers.size());
  m = std::string(CutUtf8(ValidUtf8(m), cap));
}

status::PodStatus PodSyncer::MakeStatus(const pod::Pod& pod, const PodRecordT* rec,
                                        const WaitingMap& waiting, bool terminal) const {
  status::PodStatus st;
  const std::set<std::string> cut = CutStarts();
  const auto latest = Latest(rec);
  // Previous instance of each name (for lastState).
  auto previous = [&](const std::string& name, const ContainerRecordT* current) {
    const ContainerRecordT* best = nullptr;
    if (rec == nullptr || current == nullptr) return best;
    for (const auto& c : rec->containers) {
      if (c->name != name || c.get() == current || c->attempt >= current->attempt) continue;
      if (best == nullptr || c->attempt > best->attempt) best = c.get();
    }
    return best;
  };
  auto one = [&](const pod::Container& c) {
    status::ContainerStatus cs;
    cs.name = c.name;
    cs.image = c.image;
    auto it = latest.find(c.name);
    const ContainerRecordT* cur = it == latest.end() ? nullptr : it->second;
    if (cur != nullptr) {
      cs.container_id = "containerd://" + cur->id;
      cs.image_id = cur->image_ref;
      cs.restart_count = static_cast<int32_t>(cur->attempt);
      cs.state = FromRecord(*cur, cut);
      AddTerminationMessage(pod, c, *cur, cs.state);
      cs.ready = cur->state == ContainerState::Running &&
                 (probes_ == nullptr || probes_->Ready(cur->id, c.readiness_probe.has_value(),
                                                       c.startup_probe.has_value()));
      cs.started = cur->state == ContainerState::Running;
      if (const auto* prev = previous(c.name, cur)) {
        cs.last_state = FromRecord(*prev, cut);
        AddTerminationMessage(pod, c, *prev, cs.last_state);
      }
    }
    auto w = waiting.find(c.name);
    if (w != waiting.end()) {
      // Waiting to (re)start: the exited instance moves to lastState.
      if (cs.state.terminated) cs.last_state = cs.state;
      cs.state = status::ContainerState{};
      cs.state.waiting = status::ContainerStateWaiting{w->second.reason, w->second.message};
      cs.ready = false;
      cs.started = false;
    } else if (cs.state.empty()) {
      cs.state.waiting = status::ContainerStateWaiting{"ContainerCreating", ""};
    }
    return cs;
  };
  for (const auto& c : pod.spec.init_containers) st.init_container_statuses.push_back(one(c));
  for (const auto& c : pod.spec.containers) st.container_statuses.push_back(one(c));

  PhaseInput in;
  in.restart_policy = ToStatusPolicy(pod.spec.restart_policy);
  for (const auto& c : pod.spec.init_containers) in.init_containers.push_back(c.name);
  for (const auto& c : pod.spec.containers) in.containers.push_back(c.name);
  in.init_statuses = &st.init_container_statuses;
  in.statuses = &st.container_statuses;
  in.pod_is_terminal = terminal;
  st.phase = ComputePhase(in);
  const bool past_deadline = DeadlineExceeded(pod.metadata.uid);
  const auto evicted = EvictionOf(pod.metadata.uid);
  if (past_deadline || evicted) st.phase = status::PodPhase::kFailed;
  const int64_t now_s = clock_.WallSeconds();
  st.conditions = ComputeConditions(in, st.phase, {}, now_s);
  if (past_deadline) {
    st.reason = "DeadlineExceeded";
    st.message = kDeadlineMessage;
  }
  if (evicted) {
    // The kubelet's eviction: Failed, reason Evicted, and the DisruptionTarget condition.
    st.reason = "Evicted";
    st.message = evicted->message;
    status::PodCondition disruption;
    disruption.type = "DisruptionTarget";
    disruption.status = status::ConditionStatus::kTrue;
    disruption.last_transition_time_unix_s = evicted->at_unix_s;
    disruption.reason = "TerminationByKubelet";
    disruption.message = evicted->message;
    st.conditions.push_back(std::move(disruption));
  }
  const SandboxRecordT* sandbox = NewestSandbox(rec);
  if (sandbox != nullptr) {
    st.start_time_unix_s = sandbox->created_at_ns / 1000000000;
    st.pod_ip = sandbox->ip;
    if (!st.pod_ip.empty()) st.pod_ips = {st.pod_ip};
    for (const auto& ip : sandbox->additional_ips) {
      if (!st.pod_ip.empty() && ip != st.pod_ip) st.pod_ips.push_back(ip);
    }
  }
  // As the kubelet: a host-network pod's IP is the node's; a pod-network pod has none until
  // its sandbox has one.
  if (pod.spec.host_network) {
    st.pod_ip = node_ip_;
    st.pod_ips = {st.pod_ip};
  }
  st.host_ip = node_ip_;
  st.host_ips = {st.host_ip};
  st.qos_class = std::string(pod::QosClassName(pod::PodQos(pod)));
  return st;
}

}  // namespace nodelet::podworkerd
