// PodSyncer's sandboxes: creation (cgroups, DNS, ports, the sandbox config) and its config.
#include <algorithm>
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
#include "svc-podworkerd/side_by_side.h"
#include "svc-podworkerd/termination_message.h"

namespace nodelet::podworkerd {
namespace {

namespace v1 = cri::v1;

}  // namespace

Result<std::string> PodSyncer::CreateSandbox(const pod::Pod& pod, const PodRecordT* rec,
                                             SandboxDecision& decision, int64_t grace,
                                             SyncOutcome& out) {
  // plegd's record may be older or less complete than the runtime (a relist that ran while the
  // runtime was restarting, a pod inspected by a plegd that just started). The runtime's own
  // listing of this pod's sandboxes is checked first, before anything is killed: a ready
  // sandbox that the record does not show as ready means the record is stale, so nothing is
  // done and the sync waits for plegd to report it; sandboxes the record missed count for the
  // attempt, so the new sandbox's name cannot collide with one containerd still holds.
  v1::PodSandboxFilter filter;
  (*filter.mutable_label_selector())[kPodUidLabel] = pod.metadata.uid;
  auto listed = runtime_.ListPodSandbox(filter);
  if (!listed.ok()) {
    out.error = "create sandbox: list the pod's sandboxes: " + listed.status().message();
    return listed.status();
  }
  std::set<std::string> known_ready;
  for (const auto& s : SandboxViews(rec)) {
    if (s.ready) known_ready.insert(s.id);
  }
  for (const auto& s : *listed) {
    if (s.state() == v1::SANDBOX_READY && known_ready.count(s.id()) == 0) {
      out.changed_runtime = true;  // the next sync waits for a relist newer than this one
      out.error = "the runtime lists sandbox " + s.id().substr(0, 12) +
                  " of the pod as ready, which plegd has not reported yet; waiting for it";
      return FailedPrecondition(out.error);
    }
    decision.attempt = std::max(decision.attempt, s.metadata().attempt() + 1);
  }
  if (!decision.reason.empty()) {
    // The kubelet's KillPod before a new sandbox: every container, then the sandboxes.
    out.events.push_back(MakeEvent(
        pod, "Normal", "SandboxChanged",
        "Pod sandbox changed, it will be killed and re-created (" + decision.reason + ")"));
    std::vector<const ContainerRecordT*> running;
    for (const auto& c : rec->containers) {
      if (c->state != ContainerState::Running && c->state != ContainerState::Created) continue;
      running.push_back(c.get());
    }
    std::vector<StopResult> results(running.size());
    RunSideBySide(running.size(), [&](size_t i) {
      const ContainerRecordT& c = *running[i];
      results[i] = StopContainerGracefully(c.id, c.name, nullptr, grace,
                                           [&] { return SandboxHost(c.sandbox_id); });
    });
    for (const StopResult& r : results) {
      if (!r.hook_error.empty()) {
        out.events.push_back(MakeEvent(pod, "Warning", "FailedPreStopHook", r.hook_error));
      }
    }
    out.changed_runtime = true;
  }
  // Every old sandbox is stopped: the ready ones being replaced, and the not-ready ones too (one
  // the runtime could not load after a restart is listed as not ready while its shim may still
  // run; stopping a stopped sandbox does nothing).
  if (auto dir = PodLogDirectory(log_dir_, pod); !dir.ok()) {
    out.error = "pod log directory: " + dir.status().message();
    return InvalidArgument(out.error);
  }
  // The hostname and DNS (the kubelet's generatePodSandboxConfig): an error fails the creation
  // before anything is stopped; the DNS events are recorded with the sandbox's creation.
  std::vector<DnsEvent> dns_events;
  auto network = MakeSandboxNetwork(pod, dns_, &dns_events);
  if (!network.ok()) {
    out.error = "sandbox config: " + network.status().message();
    out.events.push_back(MakeEvent(pod, "Warning", "FailedCreatePodSandBox",
                                   "Failed to create pod sandbox: " + network.status().message()));
    return InvalidArgument(out.error);
  }
  for (const auto& e : dns_events)
    out.events.push_back(MakeEvent(pod, e.type, e.reason, e.message));
  for (const auto& s : *listed) (void)runtime_.StopPodSandbox(s.id());
  // The pod's cgroup, before its sandbox (pod_cgroups.h), as the kubelet's EnsureExists.
  if (pod_cgroups_.enabled) {
    auto name = PodCgroupName(pod_cgroups_, pod);
    Status made = name.ok() ? EnsurePodCgroup(pod_cgroups_, *name, PodLimits(pod)) : name.status();
    if (!made.ok()) {
      out.error = "pod cgroup: " + made.message();
      out.events.push_back(MakeEvent(pod, "Warning", "FailedCreatePodSandBox",
                                     "Failed to create the pod's cgroup: " + made.message()));
      return made;
    }
  }
  out.changed_runtime = true;
  auto created = runtime_.RunPodSandbox(SandboxConfig(pod, decision.attempt, &*network),
                                        pod.spec.runtime_class_name);
  if (!created.ok()) {
    // The name is still held by a sandbox the listing did not show (the runtime answered before
    // it had loaded every sandbox): step over the holder's attempt and try once more.
    const std::string holder = SandboxNameHolder(created.status().message());
    if (!holder.empty()) {
      auto held = runtime_.PodSandboxStatus(holder, false);
      if (held.ok() && held->status().state() == v1::SANDBOX_READY) {
        out.error = "sandbox " + holder.substr(0, 12) +
                    " holds the pod's sandbox name and is ready; waiting for plegd to report it";
        return FailedPrecondition(out.error);
      }
      if (held.ok()) {
        (void)runtime_.StopPodSandbox(holder);
        decision.attempt = std::max(decision.attempt, held->status().metadata().attempt() + 1);
        created = runtime_.RunPodSandbox(SandboxConfig(pod, decision.attempt, &*network),
                                         pod.spec.runtime_class_name);
      }
    }
  }
  if (!created.ok()) {
    out.error = "create sandbox: " + created.status().message();
    out.events.push_back(MakeEvent(pod, "Warning", "FailedCreatePodSandBox",
                                   "Failed to create pod sandbox: " + created.status().message()));
    return created.status();
  }
  return *created;
}

v1::PodSandboxConfig PodSyncer::SandboxConfig(const pod::Pod& pod, uint32_t attempt,
                                              const SandboxNetwork* network) const {
  v1::PodSandboxConfig config = MakeSandboxConfig(pod, attempt, log_dir_, network);
  if (pod_cgroups_.enabled) {
    if (auto name = PodCgroupName(pod_cgroups_, pod); name.ok()) {
      config.mutable_linux()->set_cgroup_parent(*name);
    }
  }
  return config;
}

}  // namespace nodelet::podworkerd
