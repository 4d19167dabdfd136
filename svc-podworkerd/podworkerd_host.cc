// What podworkerd keeps right on the host beside CRI: the kubepods and QoS cgroups, pod cgroups
// that no pod owns any more, containerd tasks and shims that nothing reaches (docs/podworkerd.md).
#include <signal.h>
#include <unistd.h>

#include <set>

#include "lib/common/check.h"
#include "lib/common/fs.h"
#include "lib/common/logging.h"
#include "lib/common/node_ip.h"
#include "lib/common/rfc3339.h"
#include "lib/ipc/endpoints.h"
#include "lib/ipc/message.h"
#include "lib/ipc/router_receive.h"
#include "lib/ipc/supervisor_peer.h"
#include "lib/pod/config_objects.h"
#include "lib/pod/downward_api.h"
#include "lib/pod/node_resources.h"
#include "lib/pod/pod_flatbuffers.h"
#include "lib/pod/static_pod.h"
#include "lib/service/cgroup_flags.h"
#include "lib/service/container_log_flags.h"
#include "lib/service/dns_flags.h"
#include "lib/status/status_client.h"
#include "svc-podworkerd/podworkerd_service.h"
#include "svc-podworkerd/registry_credentials.h"
#include "volume_generated.h"

namespace nodelet::podworkerd {

void PodworkerdService::InstallRuntimeRepairs() {
  // A StopPodSandbox cancelled by podworkerd's death can leave the sandbox's task (and its
  // shim) in containerd after CRI removed the sandbox: nothing in CRI reaches it any more.
  // Or the shim alone, the task already deleted: containerd does not know it any more, and
  // only its pid reaches it (orphan_shims.h).
  std::string socket = config_.runtime_endpoint;
  if (socket.rfind("unix://", 0) == 0) socket = socket.substr(7);
  counting_->set_after_sandbox_removal([this, socket](const std::vector<std::string>& ids) {
    const std::vector<ShimProcess> shims = ListShims(socket);  // once for all the ids
    for (const auto& id : ids) {
      bool existed = false;
      Status s = tasks_->KillAndDelete(id, &existed);
      if (existed) {
        GetLogger("podworkerd")
            ->warn("Removed the task {} that containerd kept after removing its sandbox: {}", id,
                   s.ok() ? "deleted" : s.message());
      }
      for (const auto& shim : shims) {
        if (shim.id != id) continue;
        GetLogger("podworkerd")
            ->warn(
                "Ending containerd shim pid {} of removed sandbox {}: containerd no longer knows "
                "it",
                shim.pid, id);
        if (Status e = EndShimTree(ctx_.clock, shim, std::chrono::seconds(10)); !e.ok()) {
          GetLogger("podworkerd")
              ->error("Shim {} of removed sandbox {}: {}", shim.pid, id, e.message());
        }
      }
    }
  });
  // Shims that nothing reaches any more, however they were left (orphan_shims.h).
  orphan_shims_ = std::make_unique<OrphanShimSweeper>(
      "k8s.io",
      OrphanSweepDeps{[socket] { return ListShims(socket); },
                      [this]() -> Result<std::set<std::string>> {
                        auto sandboxes = cri_.ListPodSandbox({});
                        if (!sandboxes.ok()) return sandboxes.status();
                        auto containers = cri_.ListContainers({});
                        if (!containers.ok()) return containers.status();
                        std::set<std::string> ids;
                        for (const auto& sb : *sandboxes) ids.insert(sb.id());
                        for (const auto& c : *containers) ids.insert(c.id());
                        return ids;
                      },
                      [this](const std::string& id) { return tasks_->ContainerKnown(id); },
                      [this](const ShimProcess& shim) {
                        return EndShimTree(ctx_.clock, shim, std::chrono::seconds(10));
                      }});
  // containerd (runc) can leave a removed container's empty cgroups after a cancelled start.
  counting_->set_sweep_leftover_cgroups("/sys/fs/cgroup", [](const std::string& path, int dirs) {
    GetLogger("podworkerd")
        ->warn(
            "Removed the cgroup {} ({} hierarchies) that the runtime left of a removed container",
            path, dirs);
  });
  counting_->set_stuck_task_repair([this](const std::string& id) {
    GetLogger("podworkerd")
        ->warn(
            "Container {}: containerd kept its task after a cancelled start and refuses to "
            "remove "
            "it; killing and deleting the task through containerd's task service",
            id);
    Status s = tasks_->KillAndDelete(id);
    if (!s.ok()) GetLogger("podworkerd")->error("Container {}: {}", id, s.message());
    return s;
  });
}

void PodworkerdService::SweepOrphanShims(bool final_sweep) {
  OrphanSweepResult r = orphan_shims_->Sweep(final_sweep);
  auto log = GetLogger("podworkerd");
  for (const auto& shim : r.ended) {
    log->warn(
        "Ended containerd shim pid {} of {}: neither CRI nor containerd knows the id (a "
        "creation or removal cancelled midway left it)",
        shim.pid, shim.id);
  }
  for (const auto& [shim, status] : r.failed) {
    log->error("Could not end orphaned containerd shim pid {} of {}: {}", shim.pid, shim.id,
               status.message());
  }
  orphan_shims_ended_ += r.ended.size();
}

Status PodworkerdService::EnforceKubepods(const std::string& root_dir) {
  const pod::NodeAllocatable node = pod::ReadNodeAllocatable(root_dir.empty() ? "/" : root_dir);
  pod::NodeResourceList allocatable;
  allocatable.cpu_milli = node.cpu_milli;
  allocatable.memory_bytes = node.memory_bytes;
  if (config_.enforce_pods_allocatable) {
    // Checked when the flags were read.
    const pod::NodeResourceList system = *pod::ParseReservation(config_.system_reserved);
    const pod::NodeResourceList kube = *pod::ParseReservation(config_.kube_reserved);
    allocatable = pod::AllocatableFrom(allocatable, system, kube, {});
  }
  const PodCgroupLimits limits = KubepodsLimits(allocatable);
  const std::string name = KubepodsName(config_.pod_cgroups);
  if (Status s = EnsurePodCgroup(config_.pod_cgroups, name, limits); !s.ok()) {
    return Status(s.code(), "the kubepods cgroup " + name + ": " + s.message());
  }
  GetLogger("podworkerd")
      ->info(
          "kubepods cgroup {}: cpu shares {}, memory limit {} bytes ({})", name, limits.cpu_shares,
          limits.memory_bytes.value_or(-1),
          config_.enforce_pods_allocatable ? "node allocatable enforced" : "the node's capacity");
  return Status::Ok();
}

void PodworkerdService::UpdateQosCgroups(const std::vector<std::shared_ptr<const pod::Pod>>& pods,
                                         const std::set<std::string>& evicted) {
  if (!config_.pod_cgroups.enabled) return;
  std::vector<const pod::Pod*> active;
  for (const auto& p : pods) {
    if (evicted.count(p->metadata.uid) == 0 && !p->metadata.deletion_timestamp) {
      active.push_back(p.get());
    }
  }
  WriteQosCgroups(BurstableCpuRequests(active));
}

void PodworkerdService::WriteQosCgroups(int64_t burstable) {
  if (!config_.pod_cgroups.enabled) return;
  // Written when the figure changes, and again every minute (the kubelet's periodic update),
  // which also repairs a cgroup someone else changed.
  const MonoTime now = ctx_.clock.Now();
  if (qos_burstable_milli_ == burstable && now < qos_next_update_) return;
  qos_next_update_ = now + std::chrono::minutes(1);
  if (Status s = EnsureQosCgroups(config_.pod_cgroups, burstable); !s.ok()) {
    if (qos_burstable_milli_ != burstable || !qos_failed_) {
      GetLogger("podworkerd")->warn("QoS cgroups not updated: {}", s.message());
    }
    qos_failed_ = true;
    qos_burstable_milli_ = burstable;
    return;
  }
  qos_failed_ = false;
  qos_burstable_milli_ = burstable;
}

void PodworkerdService::SweepPodCgroups() {
  if (!config_.pod_cgroups.enabled) return;
  // In this order: a cgroup listed here was made before the desired set read next, so its pod
  // is in that set (the set is updated before a new pod's sync can make its cgroup).
  std::set<std::string> uids = PodCgroupUids(config_.pod_cgroups);
  if (uids.empty()) return;
  // UIDs as the cgroups name them (PodCgroupKey).
  std::set<std::string> keep;
  {
    std::lock_guard<std::mutex> lock(cgroup_mu_);
    if (!cgroup_desired_) return;  // no desired set yet: nothing is known to be gone
    for (const auto& uid : *cgroup_desired_) keep.insert(PodCgroupKey(config_.pod_cgroups, uid));
  }
  auto sandboxes = cri_.ListPodSandbox({});
  if (!sandboxes.ok()) return;
  for (const auto& s : *sandboxes) {
    auto it = s.labels().find(kPodUidLabel);
    if (it != s.labels().end()) keep.insert(PodCgroupKey(config_.pod_cgroups, it->second));
  }
  auto log = GetLogger("podworkerd");
  for (const auto& uid : uids) {
    if (keep.count(uid) > 0) continue;
    Status s = RemovePodCgroup(config_.pod_cgroups, uid);
    if (s.ok()) {
      log->info("Removed the cgroup of pod {}: no desired pod and no sandbox has it", uid);
      cgroup_sweep_warned_.erase(uid);
    } else if (cgroup_sweep_warned_.insert(uid).second) {
      log->warn("The cgroup of removed pod {} stays for now: {}", uid, s.message());
    }
  }
}

}  // namespace nodelet::podworkerd
