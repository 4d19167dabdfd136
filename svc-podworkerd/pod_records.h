// What PodSyncer reads from plegd's records of a pod, shared by its files (pod_sync*.cc): the
// newest sandbox, each container's last instance, whether an exit was a run at all, whether a
// container restarts, and a container's status from its record.
#pragma once

#include <map>
#include <set>
#include <string>

#include "lib/pod/pod.h"
#include "lib/status/pod_status.h"
#include "pleg_generated.h"

namespace nodelet::podworkerd {

// The message of a pod failed by activeDeadlineSeconds (status and event), as the kubelet's.
inline constexpr char kDeadlineMessage[] =
    "Pod was active on the node longer than the specified deadline";

using ipc::pleg::ContainerRecordT;
using ipc::pleg::ContainerState;
using ipc::pleg::PodRecordT;
using ipc::pleg::SandboxRecordT;

// The newest sandbox of the pod (by creation time), or nullptr.
inline const SandboxRecordT* NewestSandbox(const PodRecordT* rec) {
  if (rec == nullptr) return nullptr;
  const SandboxRecordT* best = nullptr;
  for (const auto& s : rec->sandboxes) {
    if (best == nullptr || s->created_at_ns > best->created_at_ns) best = s.get();
  }
  return best;
}

// The last instance of each container name (highest attempt, then newest), optionally only
// those in `sandbox_id`.
inline std::map<std::string, const ContainerRecordT*> Latest(
    const PodRecordT* rec, const std::string* sandbox_id = nullptr) {
  std::map<std::string, const ContainerRecordT*> out;
  if (rec == nullptr) return out;
  for (const auto& c : rec->containers) {
    if (sandbox_id != nullptr && c->sandbox_id != *sandbox_id) continue;
    auto& slot = out[c->name];
    if (slot == nullptr || c->attempt > slot->attempt ||
        (c->attempt == slot->attempt && c->created_at_ns > slot->created_at_ns)) {
      slot = c.get();
    }
  }
  return out;
}

// A start that never ran the container because the caller went away mid-call: containerd
// marks a StartContainer whose request context was cancelled (podworkerd SIGKILLed while the
// call was in flight closes its connection) as exited with reason StartError, exit code 128 and
// the context error as the message, and the process never started (no start time). That is not
// a run of the container, so it is started again whatever the restartPolicy, and without
// crash-loop backoff: a fault in podworkerd must not fail a restartPolicy Never pod. When the
// call is cancelled while containerd runs the shim's start command, containerd kills that
// command with the call's context and the message says so instead: "failed to start shim:
// start failed: : signal: killed" (the shim never served the container either).
// `cut`: containers whose StartContainer the runtime cut off (PodSyncer::cut_starts_).
inline bool InterruptedStart(const ContainerRecordT& c, const std::set<std::string>& cut) {
  if (c.state != ContainerState::Exited || c.started_at_ns != 0) return false;
  if (cut.count(c.id) > 0) return true;
  if (c.reason != "StartError") return false;
  const auto has = [&c](const char* text) { return c.message.find(text) != std::string::npos; };
  return has("context canceled") || (has("failed to start shim") && has("signal: killed"));
}

inline bool ShouldRestart(const pod::Pod& pod, const ContainerRecordT& exited,
                          const std::set<std::string>& cut) {
  if (InterruptedStart(exited, cut)) return true;
  if (pod.spec.restart_policy == pod::kRestartPolicyNever) return false;
  if (pod.spec.restart_policy == pod::kRestartPolicyOnFailure) return exited.exit_code != 0;
  return true;
}

inline int64_t GraceSeconds(const pod::Pod& pod) {
  return pod.spec.termination_grace_period_seconds.value_or(
      pod::kDefaultTerminationGracePeriodSeconds);
}

inline status::RestartPolicy ToStatusPolicy(const std::string& p) {
  if (p == pod::kRestartPolicyNever) return status::RestartPolicy::kNever;
  if (p == pod::kRestartPolicyOnFailure) return status::RestartPolicy::kOnFailure;
  return status::RestartPolicy::kAlways;
}

inline status::ContainerState FromRecord(const ContainerRecordT& c,
                                         const std::set<std::string>& cut) {
  status::ContainerState s;
  if (InterruptedStart(c, cut)) {
    // Not a run: the container is being created again (not a terminated state that would make
    // a restartPolicy Never pod Failed for a moment).
    s.waiting = status::ContainerStateWaiting{"ContainerCreating", ""};
    return s;
  }
  switch (c.state) {
    case ContainerState::Running:
      s.running = status::ContainerStateRunning{c.started_at_ns / 1000000000};
      break;
    case ContainerState::Exited: {
      status::ContainerStateTerminated t;
      t.exit_code = c.exit_code;
      t.reason = !c.reason.empty() ? c.reason : (c.exit_code == 0 ? "Completed" : "Error");
      t.message = c.message;
      t.started_at_unix_s = c.started_at_ns / 1000000000;
      t.finished_at_unix_s = c.finished_at_ns / 1000000000;
      t.container_id = "containerd://" + c.id;
      s.terminated = t;
      break;
    }
    default:
      s.waiting = status::ContainerStateWaiting{"ContainerCreating", ""};
  }
  return s;
}

}  // namespace nodelet::podworkerd
