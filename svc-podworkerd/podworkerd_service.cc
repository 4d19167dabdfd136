#include "svc-podworkerd/podworkerd_service.h"

#include <signal.h>
#include <unistd.h>

#include <set>

#include "lib/common/check.h"
#include "lib/common/fs.h"
#include "lib/common/logging.h"
#include "lib/common/node_ip.h"
#include "lib/ipc/endpoints.h"
#include "lib/ipc/message.h"
#include "lib/ipc/router_receive.h"
#include "lib/ipc/supervisor_peer.h"
#include "lib/pod/config_objects.h"
#include "lib/pod/downward_api.h"
#include "lib/pod/node_resources.h"
#include "lib/pod/pod_flatbuffers.h"
#include "lib/pod/rfc3339.h"
#include "lib/pod/static_pod.h"
#include "lib/service/cgroup_flags.h"
#include "lib/service/container_log_flags.h"
#include "lib/service/dns_flags.h"
#include "lib/status/status_client.h"
#include "svc-podworkerd/registry_credentials.h"
#include "volume_generated.h"

namespace nodelet::podworkerd {
namespace {

using ipc::podwork::Body;
using ipc::podwork::PodWorkMessage;

constexpr size_t kMaxWorkBytes = ipc::kPodWorkChannel.requests.max_message_bytes;
constexpr std::chrono::milliseconds kTick{100};
// The tick's period when nothing is parked, no status waits to be sent and no retry or resync is
// due sooner: an idle podworkerd at 100 pods spent a third of its CPU in ticks that found nothing
// to do. Whatever can bring work sooner (a worker's result, plegd's view, a desired set, a probe
// or volume change) pulls the tick in (WakeTick).
constexpr std::chrono::milliseconds kIdleTick{1000};

status::PodIdentity IdentityOf(const pod::Pod& p) {
  status::PodIdentity id;
  id.namespace_ = p.metadata.namespace_name;
  id.name = p.metadata.name;
  id.uid = p.metadata.uid;
  id.restart_policy =
      p.spec.restart_policy == pod::kRestartPolicyNever       ? status::RestartPolicy::kNever
      : p.spec.restart_policy == pod::kRestartPolicyOnFailure ? status::RestartPolicy::kOnFailure
                                                              : status::RestartPolicy::kAlways;
  // The manifest's creationTimestamp, else when the pod source first saw it (statusd keeps the
  // earliest it is given).
  id.creation_time_unix_s = p.metadata.creation_timestamp.value_or(0);
  if (id.creation_time_unix_s == 0) {
    auto seen = p.metadata.annotations.find(pod::kConfigSeenAnnotation);
    if (seen != p.metadata.annotations.end()) {
      if (auto t = pod::ParseRfc3339(seen->second)) id.creation_time_unix_s = t->seconds;
    }
  }
  id.container_count = static_cast<uint32_t>(p.spec.containers.size());
  id.init_container_count = static_cast<uint32_t>(p.spec.init_containers.size());
  return id;
}

}  // namespace

// ---- The dispatcher's view and effects -------------------------------------------------------

class PodworkerdService::MirrorView : public PodCacheView {
 public:
  explicit MirrorView(const pleg::PlegMirror& mirror) : mirror_(mirror) {}
  bool ready() const override { return mirror_.ready(); }
  int64_t relist_started_mono_ns() const override { return mirror_.relist_started_mono_ns(); }
  const std::map<std::string, ipc::pleg::PodRecordT>& pods() const override {
    return mirror_.pods();
  }

 private:
  const pleg::PlegMirror& mirror_;
};

class PodworkerdService::Effects : public DispatcherEffects {
 public:
  explicit Effects(PodworkerdService& s) : s_(s) {}
  void Run(DispatchedWork work) override { s_.RunWork(std::move(work)); }
  void ReportStatus(const pod::Pod& pod, const status::PodStatus& status) override {
    s_.status_->Send(IdentityOf(pod), status);
  }
  void ReportStoppingStatus(const pod::Pod& pod, const ipc::pleg::PodRecordT* record,
                            bool terminal) override {
    s_.status_->Send(IdentityOf(pod), s_.syncer_->BuildStatus(pod, record, terminal));
  }
  void SendEvents(std::vector<status::PodEvent> events) override {
    s_.status_->SendEvents(std::move(events));
  }
  void PodStopped(const pod::Pod& pod) override {
    s_.status_->SendEvents({s_.syncer_->MakeEvent(pod, "Normal", "Killing", "Stopping pod")});
  }
  void EnsureProbes(const std::string& uid, const pod::Pod& pod) override {
    s_.EnsureProbes(uid, pod);
  }
  void RemoveProbes(const std::string& uid) override { s_.probes_->RemovePod(uid); }
  void ForgetPod(const std::string& uid) override { s_.syncer_->ForgetPod(uid); }
  void CancelSync(const std::string& uid) override { s_.syncer_->CancelPulls(uid); }
  void SetGcDesired(std::set<std::string> uids, std::set<std::string> images) override {
    if (s_.container_logs_) s_.container_logs_->SetDesired(uids);
    {
      std::lock_guard<std::mutex> lock(s_.cgroup_mu_);
      s_.cgroup_desired_ = uids;
    }
    if (s_.gc_) s_.gc_->SetDesired(std::move(uids), std::move(images));
  }
  void RequestRelist(const std::string& uid) override {
    // Gathered and sent once the loop is done with what it is handling: one request for a
    // burst of syncs (plegd queues 16 requests per peer).
    s_.relist_pending_.insert(uid);
    if (!s_.relist_flush_.armed()) s_.relist_flush_.ArmAt(s_.ctx_.clock.Now());
  }

 private:
  PodworkerdService& s_;
};

// ---- PodworkerdService -----------------------------------------------------------------------

Result<PodworkerdRuntime> ConnectRuntime(const PodworkerdConfig& config, const Clock& clock) {
  auto client = cri::GrpcCriClient::Create(config.runtime_endpoint, config.cri_timeouts);
  if (!client.ok()) return client.status();
  struct Owned {
    std::unique_ptr<cri::GrpcCriClient> cri;
    std::unique_ptr<cri::ContainerdTasks> tasks;
  };
  auto owned = std::make_shared<Owned>();
  owned->cri = std::move(*client);
  if (auto tasks = cri::ContainerdTasks::Create(config.runtime_endpoint, clock); tasks.ok()) {
    owned->tasks = std::move(*tasks);
  }
  PodworkerdRuntime runtime;
  runtime.runtime = owned->cri.get();
  runtime.images = owned->cri.get();
  runtime.tasks = owned->tasks.get();
  runtime.owner = std::move(owned);
  return runtime;
}

Result<std::unique_ptr<PodworkerdService>> PodworkerdService::Create(ServiceContext& ctx,
                                                                     PodworkerdConfig config) {
  // A bad configuration is refused before the runtime is dialled.
  if (Status s = ValidateImagePullerConfig(config.image_pulls); !s.ok()) return s;
  if (Status s = ValidateImageGcPolicy(config.gc.image); !s.ok()) return s;
  auto runtime = ConnectRuntime(config, ctx.clock);
  if (!runtime.ok()) return runtime.status();
  return Create(ctx, std::move(config), std::move(*runtime));
}

Result<std::unique_ptr<PodworkerdService>> PodworkerdService::Create(ServiceContext& ctx,
                                                                     PodworkerdConfig config,
                                                                     PodworkerdRuntime runtime) {
  NODELET_CHECK(runtime.runtime != nullptr && runtime.images != nullptr);
  std::unique_ptr<PodworkerdService> service(
      new PodworkerdService(ctx, std::move(config), std::move(runtime)));
  if (Status s = service->Start(); !s.ok()) return s;
  service->Register();
  return service;
}

PodworkerdService::PodworkerdService(ServiceContext& ctx, PodworkerdConfig config,
                                     PodworkerdRuntime runtime)
    : ctx_(ctx),
      config_(std::move(config)),
      runtime_(std::move(runtime)),
      cri_(*runtime_.runtime),
      tasks_(runtime_.tasks) {}

PodworkerdService::~PodworkerdService() { Stop(); }

Status PodworkerdService::Start() {
  ServiceContext& ctx = ctx_;
  if (Status s = ValidateImagePullerConfig(config_.image_pulls); !s.ok()) return s;
  if (Status s = ValidateImageGcPolicy(config_.gc.image); !s.ok()) return s;
  std::string run_dir = ctx.options.run_dir;
  counting_ = std::make_unique<CountingRuntime>(*runtime_.runtime, *runtime_.images);
  if (tasks_) {
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
  // Probe results that changed are taken on the loop.
  probes_ = std::make_unique<ProbeManager>(*counting_, ctx.clock, [this] {
    ctx_.loop.Post([this] {
      dispatcher_->SyncChanged(probes_->TakeChanged());
      WakeTick();
    });
  });
  syncer_ = std::make_unique<PodSyncer>(
      *counting_, *counting_, ctx.clock, config_.backoff, ctx.options.log_dir,
      [volumes = std::make_shared<volume::VolumeClient>(ctx.ipc, run_dir)](const std::string& uid) {
        return volumes->PodVolumes(uid);
      },
      probes_.get());
  syncer_->set_max_dead_per_container(config_.max_dead_per_container);
  syncer_->set_root_dir(ctx.options.root_dir);
  syncer_->set_pod_cgroups(config_.pod_cgroups);
  if (config_.pod_cgroups.enabled) {
    if (Status s = EnforceKubepods(ctx.options.root_dir); !s.ok()) return s;
  }
  // Chosen here when the config came without one (NodeIP("") always has an answer).
  syncer_->set_node_ip(config_.node_ip.empty() ? NodeIP("").value() : config_.node_ip);
  syncer_->set_dns_settings(config_.dns);
  // Sent from the main loop, which owns the status sender.
  syncer_->set_progress_events([this](std::vector<status::PodEvent> events) {
    ctx_.loop.Post([this, shared = std::make_shared<std::vector<status::PodEvent>>(
                              std::move(events))] { status_->SendEvents(std::move(*shared)); });
  });
  syncer_->set_progress_status([this](const pod::Pod& pod, status::PodStatus status) {
    ctx_.loop.Post([this, id = IdentityOf(pod),
                    shared = std::make_shared<status::PodStatus>(std::move(status))] {
      status_->Send(id, *shared);
    });
  });
  ImagePullerConfig pulls = config_.image_pulls;
  pulls.docker_config_paths = DockerConfigPaths(ctx.options.root_dir);
  syncer_->set_image_puller_config(pulls);
  router_ = std::make_unique<ipc::RouterServer>(ctx.ipc, ipc::kPodWorkChannel);
  if (Status s = router_->Bind(ipc::kPodWorkerEndpoint.Uri(ctx.options.run_dir)); !s.ok()) {
    return s;
  }
  envelope_ = std::make_unique<ipc::EnvelopeWriter>(ipc::ServiceId::Podworkerd, ctx.incarnation);
  mirror_ = std::make_unique<pleg::PlegMirror>(ctx.ipc, ctx.clock, ctx.options.run_dir,
                                               ipc::ServiceId::Podworkerd);
  mirror_->on_event = [this](const ipc::pleg::Event& e, const ipc::pleg::PodRecordT&) {
    if (e.pod_uid()) mirror_changed_.insert(e.pod_uid()->str());
  };
  mirror_view_ = std::make_unique<MirrorView>(*mirror_);
  effects_ = std::make_unique<Effects>(*this);
  dispatcher_ =
      std::make_unique<PodDispatcher>(ctx.clock, *mirror_view_, *effects_, config_.resync_period);
  mirror_->on_resync = [this] { mirror_resynced_ = true; };
  mirror_->on_applied = [this] {
    std::set<std::string> changed;
    changed.swap(mirror_changed_);
    if (std::exchange(mirror_resynced_, false)) {
      changed.merge(dispatcher_->Known());
    }
    // The log manager's running containers follow plegd's view (only when it changed).
    if (container_logs_ && !changed.empty()) {
      container_logs_->SetRunning(RunningContainers(mirror_->pods()));
    }
    dispatcher_->SyncChanged(changed);
    ReportInUse();  // containers that stopped may free their pods
    WakeTick();
  };
  if (Status s = mirror_->Connect(ctx.loop); !s.ok()) return s;
  status_ = std::make_unique<StatusSender>(ctx.ipc, ctx.options.run_dir);
  volume_events_ = std::make_unique<ipc::Subscriber>(ctx.ipc, ipc::kVolumeEvents);
  if (Status s = volume_events_->Connect(ipc::kVolumeEventsEndpoint.Uri(ctx.options.run_dir));
      !s.ok()) {
    return s;
  }
  config_.gc.containers.max_per_pod_container = config_.max_dead_per_container;
  gc_ = std::make_unique<GarbageCollector>(
      *counting_, *counting_, fs_stats_, ctx.clock, config_.gc,
      [sender = status_.get()](status::PodEvent e) { sender->SendEvents({std::move(e)}); });
  if (orphan_shims_ || config_.pod_cgroups.enabled) {
    gc_->set_periodic_sweep(config_.orphan_shim_period, [this] {
      if (orphan_shims_) SweepOrphanShims(false);
      SweepPodCgroups();
    });
  }
  if (!ctx.options.log_dir.empty()) {
    // LOG-DIR/containers holds the log symlinks (container_log_manager.h).
    if (Status s = EnsureDirectory(ctx.options.log_dir + "/containers", 0755); !s.ok()) return s;
    container_logs_ = std::make_unique<ContainerLogManager>(
        *counting_, ctx.clock, ctx.options.log_dir, config_.container_logs);
    gc_->set_on_container_removed([log_dir = ctx.options.log_dir](const std::string& id) {
      (void)RemoveContainerLogSymlinks(log_dir, id);
    });
    container_logs_->Start();
  }
  gc_->Start();
  pool_ = std::make_unique<WorkerPool>(config_.workers);
  GetLogger("podworkerd")
      ->info("pod workers ready ({} threads, runtime {})", config_.workers,
             config_.runtime_endpoint);
  return Status::Ok();
}

void PodworkerdService::Stop() {
  if (stopped_) return;
  stopped_ = true;
  // A pull has no deadline: it is ended, so that the worker waiting for it returns.
  if (syncer_) syncer_->CancelAllPulls();
  if (pool_) pool_->Stop();
  gc_.reset();
  container_logs_.reset();
  // No CRI call of this podworkerd is in flight any more: whatever shim is orphaned now stays
  // so (a RunPodSandbox cancelled by an earlier podworkerd's death), so it is ended at once.
  if (orphan_shims_) SweepOrphanShims(true);
  probes_.reset();
  status_.reset();
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

void PodworkerdService::Register() {
  router_source_ = ctx_.loop.AddSocket(router_->raw(), [this] {
    HandleWork();
    dispatcher_->RunParked();
    WakeTick();
  });
  volume_source_ = ctx_.loop.AddSocket(volume_events_->raw(), [this] { HandleVolumeEvents(); });
  tick_ = ctx_.loop.AddTimer([this] { OnTick(); });
  tick_at_ = ctx_.clock.Now();
  tick_.ArmAt(tick_at_);  // the first pass at once, then as NextTickAt says
  relist_flush_ = ctx_.loop.AddTimer([this] { FlushRelistRequests(); });
}

void PodworkerdService::FlushRelistRequests() {
  while (!relist_pending_.empty()) {
    // plegd takes at most 1024 pods per request.
    std::vector<std::string> uids;
    for (auto it = relist_pending_.begin(); it != relist_pending_.end() && uids.size() < 512;
         ++it) {
      uids.push_back(*it);
    }
    if (!mirror_->RequestRelist(uids).ok()) {
      // plegd away or its queue full: again shortly (the full relist covers the pods anyway).
      relist_flush_.ArmAfter(std::chrono::milliseconds(50));
      return;
    }
    for (const auto& uid : uids) relist_pending_.erase(uid);
  }
}

void PodworkerdService::HandleVolumeEvents() {
  // volumed: a pod's volumes became ready (or changed): sync it now.
  std::set<std::string> changed;
  for (int i = 0; i < 256 && volume_events_->Readable(); ++i) {
    auto frame = volume_events_->Receive(std::chrono::milliseconds(0));
    if (!frame.ok()) break;
    auto m = ipc::DecodeMessage<ipc::volume::VolumeMessage>(frame->data(), frame->size(),
                                                            ipc::volume::VolumeMessageIdentifier());
    if (!m.ok()) {
      bad_messages_.CountSilently();
      continue;
    }
    if (const auto* ev = (*m)->body_as_VolumesChanged(); ev && ev->pod_uid()) {
      changed.insert(ev->pod_uid()->str());
    }
  }
  dispatcher_->SyncChanged(changed);
  WakeTick();
}

void PodworkerdService::OnTick() {
  dispatcher_->OnTick();
  // The pods in use change only with what wakes the tick (work done, plegd's view, probes, the
  // desired pods) and as statuses are sent: an idle tick does not compute them again.
  if (in_use_stale_ || statuses_waiting_) ReportInUse();
  tick_at_ = NextTickAt();
  tick_.ArmAt(tick_at_);
}

MonoTime PodworkerdService::NextTickAt() const {
  const MonoTime now = ctx_.clock.Now();
  // Parked syncs, and statuses not yet sent (the in-use set shrinks once they are): soon.
  if (dispatcher_->parked() != 0 || (status_ && !status_->Idle())) return now + kTick;
  MonoTime next = now + kIdleTick;
  if (auto due = dispatcher_->NextDue(); due && *due < next) next = std::max(*due, now + kTick);
  return next;
}

void PodworkerdService::WakeTick() {
  in_use_stale_ = true;
  const MonoTime at = NextTickAt();
  if (at < tick_at_) {
    tick_at_ = at;
    tick_.ArmAt(at);
  }
}

std::set<std::string> PodworkerdService::InUse() const {
  std::set<std::string> uids = dispatcher_->InUse();
  uids.merge(status_->Unsent());
  // And every pod of nodelet's whose container the runtime last showed as not exited: a pod
  // whose kill failed (the runtime was down) and that the dispatcher then forgot is in use
  // until a relist shows its containers stopped, whatever the dispatcher knows.
  uids.merge(PodsWithLiveContainers(mirror_->pods()));
  return uids;
}

std::set<std::string> PodsWithLiveContainers(
    const std::map<std::string, ipc::pleg::PodRecordT>& pods) {
  std::set<std::string> uids;
  for (const auto& [uid, rec] : pods) {
    if (rec.foreign || rec.removed) continue;
    for (const auto& c : rec.containers) {
      if (c->state != ipc::pleg::ContainerState::Exited) {
        uids.insert(uid);
        break;
      }
    }
  }
  return uids;
}

std::set<std::string> RunningContainers(const std::map<std::string, ipc::pleg::PodRecordT>& pods) {
  std::set<std::string> ids;
  for (const auto& [uid, rec] : pods) {
    if (rec.foreign || rec.removed) continue;
    for (const auto& c : rec.containers) {
      if (c->state == ipc::pleg::ContainerState::Running) ids.insert(c->id);
    }
  }
  return ids;
}

void PodworkerdService::SendAck(const std::string& peer, const std::set<std::string>& in_use) {
  flatbuffers::FlatBufferBuilder fbb(256 + 48 * in_use.size());
  std::vector<flatbuffers::Offset<flatbuffers::String>> uids;
  for (const auto& uid : in_use) uids.push_back(fbb.CreateString(uid));
  const bool complete = dispatcher_->known_complete();
  auto ack =
      ipc::podwork::CreateWorkAck(fbb, generation_, static_cast<uint32_t>(dispatcher_->workers()),
                                  0, fbb.CreateVector(uids), complete);
  Reply(peer, fbb, Body::WorkAck, ack.Union());
  acked_in_use_ = in_use;
  acked_complete_ = complete;
}

void PodworkerdService::ReportInUse() {
  in_use_stale_ = false;
  statuses_waiting_ = status_ && !status_->Idle();
  if (work_peer_.empty()) return;
  std::set<std::string> in_use = InUse();
  if (in_use == acked_in_use_ && dispatcher_->known_complete() == acked_complete_) return;
  SendAck(work_peer_, in_use);
}

void PodworkerdService::Reply(const std::string& peer, flatbuffers::FlatBufferBuilder& fbb,
                              Body type, flatbuffers::Offset<void> body) {
  // A peer that went away takes its reply with it; the supervisor sends the desired pods again.
  (void)ipc::SendMessage(*router_, peer, fbb, *envelope_, type, body);
}

void PodworkerdService::HandleWork() {
  for (int i = 0; i < 64 && router_->Readable(); ++i) {
    std::optional<ipc::PeerCredentials> sender;
    auto in = ipc::ReceiveWithCredentials(*router_, std::chrono::milliseconds(0), &sender);
    if (!in.ok()) break;
    auto msg =
        ipc::DecodeMessage<PodWorkMessage>(in->payload.data(), in->payload.size(),
                                           ipc::podwork::PodWorkMessageIdentifier(), kMaxWorkBytes);
    flatbuffers::FlatBufferBuilder fbb(256);
    if (msg.ok() && (*msg)->body_type() == Body::StreamRequest) {
      const auto& request = *(*msg)->body_as_StreamRequest();
      // Sessions only for the supervisor, as the desired set: nodeletctl asks on the ctl socket.
      if (auto from = ipc::CheckSupervisorPeer(ipc::SupervisorPeerCheck::ForThisProcess(), sender);
          !from.allowed) {
        const std::string why =
            "stream sessions are opened only for the supervisor (nodeletctl asks it on its ctl "
            "socket): " +
            from.reason;
        if (foreign_streams_.Count()) GetLogger("podworkerd")->warn("Refused: {}", why);
        auto body = ipc::podwork::CreateStreamReplyDirect(
            fbb, "", "", why.c_str(), static_cast<uint8_t>(StatusCode::kPermissionDenied),
            request.request_id());
        Reply(in->peer, fbb, Body::StreamReply, body.Union());
        continue;
      }
      HandleStreamRequest(in->peer, request);
      continue;
    }
    if (!msg.ok() || (*msg)->body_type() != Body::DesiredPods) {
      std::string why = msg.ok() ? "expected DesiredPods" : msg.status().message();
      if (bad_messages_.Count()) {
        GetLogger("podworkerd")->warn("Refusing a bad work message: {}", why);
      }
      auto err = ipc::podwork::CreateErrorReplyDirect(fbb, 0, why.c_str());
      Reply(in->peer, fbb, Body::ErrorReply, err.Union());
      continue;
    }
    // The desired set only from the supervisor (lib/ipc/supervisor_peer.h): any other peer
    // that the socket lets in is refused, counted and named once in the log.
    if (auto from = ipc::CheckSupervisorPeer(ipc::SupervisorPeerCheck::ForThisProcess(), sender);
        !from.allowed) {
      const std::string why = "DesiredPods is taken only from the supervisor: " + from.reason;
      if (foreign_desired_.Count()) GetLogger("podworkerd")->warn("Refused: {}", why);
      auto err = ipc::podwork::CreateErrorReplyDirect(fbb, 0, why.c_str());
      Reply(in->peer, fbb, Body::ErrorReply, err.Union());
      continue;
    }
    const auto* desired = (*msg)->body_as_DesiredPods();
    // The supervisor sends its desired set every 2 s whether or not it changed. A set this
    // podworkerd has applied already (the same sender incarnation and generation, with the same
    // sources-ready and reclaim figures, which change without a new generation) is not decoded
    // and applied again (at 100 pods that was most of an idle podworkerd's CPU); only the
    // housekeeping that depends on plegd's view runs.
    const AppliedSet key{(*msg)->header() ? (*msg)->header()->incarnation() : 0,
                         desired->generation(), desired->sources_ready(),
                         desired->reclaim_requests()};
    std::string error;
    if (!applied_ || !(*applied_ == key)) {
      error = ApplyDesired(*desired);
      if (error.empty()) {
        applied_ = key;
      } else {
        applied_.reset();
      }
    } else {
      ++desired_unchanged_;
      dispatcher_->Housekeep();  // orphans plegd has found since
      if (qos_burstable_milli_) WriteQosCgroups(*qos_burstable_milli_);  // the minute's rewrite
    }
    generation_ = desired->generation();
    if (!error.empty()) {
      auto err = ipc::podwork::CreateErrorReplyDirect(fbb, generation_, error.c_str());
      Reply(in->peer, fbb, Body::ErrorReply, err.Union());
      continue;
    }
    work_peer_ = in->peer;
    SendAck(in->peer, InUse());
  }
}

void PodworkerdService::HandleStreamRequest(const std::string& peer,
                                            const ipc::podwork::StreamRequest& request) {
  StreamAsk ask = DecodeStreamAsk(request);
  auto reply = [this, peer, id = request.request_id()](
                   const std::string& url, const std::string& container, const Status& error) {
    flatbuffers::FlatBufferBuilder fbb(256 + url.size());
    auto body = ipc::podwork::CreateStreamReplyDirect(fbb, url.c_str(), container.c_str(),
                                                      error.message().c_str(),
                                                      static_cast<uint8_t>(error.code()), id);
    Reply(peer, fbb, Body::StreamReply, body.Union());
  };
  auto target = FindStreamTarget(mirror_->pods(), ask);
  if (!target.ok()) {
    reply("", ask.container, target.status());
    return;
  }
  // The runtime call runs on a worker thread (a slow runtime never stalls the loop); the reply
  // goes out from the loop, which owns the socket.
  pool_->Submit([this, ask, t = *target, reply] {
    auto url = OpenStream(cri_, ask, t);
    GetLogger("podworkerd")
        ->info("{} session for {}/{} container {}: {}", ipc::podwork::EnumNameStreamKind(ask.kind),
               ask.namespace_name, ask.pod_name, t.container,
               url.ok() ? std::string("opened") : url.status().message());
    ctx_.loop.Post([reply, container = t.container, url] {
      reply(url.ok() ? *url : std::string(), container, url.ok() ? Status::Ok() : url.status());
    });
  });
}

std::string PodworkerdService::ApplyDesired(const ipc::podwork::DesiredPods& desired) {
  std::string error;
  std::vector<std::shared_ptr<const pod::Pod>> pods;
  std::set<std::string> evicted;
  if (desired.pods()) {
    for (const auto* dp : *desired.pods()) {
      auto decoded = dp->pod() ? pod::PodFromFlatBuffer(dp->pod())
                               : Result<pod::Pod>(InvalidArgument("no pod"));
      if (!decoded.ok() || decoded->metadata.uid.empty()) {
        bad_messages_.CountSilently();
        error = "undecodable desired pod: " +
                (decoded.ok() ? std::string("no uid") : decoded.status().message());
        continue;
      }
      if (dp->eviction_message() && dp->eviction_message()->size() > 0) {
        syncer_->MarkEvicted(decoded->metadata.uid, dp->eviction_message()->str(),
                             dp->eviction_grace_seconds());
        evicted.insert(decoded->metadata.uid);
      }
      pods.push_back(std::make_shared<const pod::Pod>(std::move(*decoded)));
    }
  }
  // A raised count asks for the eviction manager's node-level reclaim (the first value seen in
  // this incarnation is only taken as the baseline).
  if (reclaim_seen_ && desired.reclaim_requests() > *reclaim_seen_ && gc_) {
    gc_->RequestReclaim();
  }
  reclaim_seen_ = desired.reclaim_requests();
  auto objects = std::make_shared<EnvSources>();
  objects->config_maps = pod::DecodeConfigObjects(desired.config_maps());
  objects->secrets = pod::DecodeConfigObjects(desired.secrets());
  syncer_->SetConfigObjects(std::move(objects));
  dispatcher_->ApplyDesired(pods, desired.sources_ready(), evicted);
  UpdateQosCgroups(pods, evicted);
  return error;
}

void PodworkerdService::RunWork(DispatchedWork dispatched) {
  const uint64_t arrival = dispatched.arrival;
  auto job = [this, d = std::move(dispatched)]() {
    const Work<pod::Pod>& work = d.work;
    WorkDone done;
    done.uid = work.uid;
    done.kind = work.kind;
    const MonoTime began = ctx_.clock.Now();
    switch (work.kind) {
      case WorkKind::kSync:
        if (d.seed_readiness) SeedReadiness(work.uid);
        done.outcome = syncer_->SyncPod(*work.pod, d.record ? &*d.record : nullptr);
        break;
      case WorkKind::kTerminating: {
        std::vector<std::string> hook_failures;
        done.error =
            syncer_->KillPod(work.uid, work.pod ? work.grace_period_seconds : -1, &hook_failures);
        for (const auto& why : hook_failures) {
          if (work.pod) {
            done.outcome.events.push_back(
                syncer_->MakeEvent(*work.pod, "Warning", "FailedPreStopHook", why));
          }
        }
        break;
      }
      case WorkKind::kTerminated:
        if (!d.desired) done.error = syncer_->RemovePod(work.uid);
        break;
    }
    done.completed_mono_ns = ctx_.clock.MonoNanos();
    done.took = std::chrono::duration_cast<std::chrono::microseconds>(ctx_.clock.Now() - began);
    // Shared: a posted callback must be copyable.
    ctx_.loop.Post([this, result = std::make_shared<WorkDone>(std::move(done))] {
      dispatcher_->HandleDone(*result);
      dispatcher_->RunParked();
      WakeTick();
    });
  };
  // Before the work of pods that came later; stream requests (priority 0) go first of all.
  pool_->Submit(std::move(job), arrival);
}

void PodworkerdService::EnsureProbes(const std::string& uid, const pod::Pod& p) {
  auto rec = mirror_->pods().find(uid);
  if (rec == mirror_->pods().end()) return;
  // Host-network pods are probed on 127.0.0.1 (docs/network.md says why).
  std::string host = "127.0.0.1";
  if (!p.spec.host_network && !rec->second.sandboxes.empty() &&
      !rec->second.sandboxes[0]->ip.empty()) {
    host = rec->second.sandboxes[0]->ip;
  }
  for (const auto& c : p.spec.containers) {
    if (!c.liveness_probe && !c.readiness_probe && !c.startup_probe) continue;
    for (const auto& r : rec->second.containers) {
      if (r->name == c.name && r->state == ipc::pleg::ContainerState::Running) {
        probes_->Ensure(uid, p, c, r->id, host);
      }
    }
  }
}

void PodworkerdService::SeedReadiness(const std::string& uid) {
  // One client for every worker thread, used by one at a time (a ZeroMQ socket may move between
  // threads across the lock's barrier): each connection costs both sides buffers, about 100 KiB,
  // and a client per thread was 16 of them.
  Result<status::PodStatusRecord> prior = Unavailable("statusd not connected");
  {
    std::lock_guard<std::mutex> lock(seed_mu_);
    if (!seed_client_) {
      status::StatusClientOptions opts;
      opts.sender = ipc::ServiceId::Podworkerd;
      opts.attempt_timeout = std::chrono::milliseconds(300);
      opts.deadline = std::chrono::milliseconds(600);
      auto client = std::make_unique<status::StatusClient>(ctx_.ipc, ctx_.options.run_dir, opts);
      if (!client->Connect().ok()) return;
      seed_client_ = std::move(client);
    }
    prior = seed_client_->GetPodStatus(uid);
  }
  if (!prior.ok()) return;
  // activeDeadlineSeconds counts from the start time statusd kept, across restarts.
  syncer_->SeedStartTime(uid, prior->status.start_time_unix_s);
  for (const auto& cs : prior->status.container_statuses) {
    const std::string prefix = "containerd://";
    if (cs.container_id.rfind(prefix, 0) != 0) continue;
    probes_->SeedReady(cs.container_id.substr(prefix.size()), cs.ready);
  }
}

HealthReport PodworkerdService::Health() const {
  if (!mirror_->ready()) {
    return {ipc::control::Health::Degraded, "waiting for plegd's pod cache"};
  }
  return {};
}

CounterList PodworkerdService::Counters() const {
  CounterList c;
  const DispatcherCounters& d = dispatcher_->counters();
  c.emplace_back("pods", dispatcher_->pods());
  c.emplace_back("syncs", d.syncs);
  c.emplace_back("desired_unchanged", desired_unchanged_);
  c.emplace_back("sync_errors", d.sync_errors);
  c.emplace_back("kills", d.kills);
  c.emplace_back("orphans_killed", d.orphans_killed);
  c.emplace_back("orphan_shims_ended", orphan_shims_ended_.load());
  c.emplace_back("bad_messages", bad_messages_.count());
  c.emplace_back("desired_refused", foreign_desired_.count());
  c.emplace_back("streams_refused", foreign_streams_.count());
  c.emplace_back("parked", dispatcher_->parked());
  if (container_logs_) {
    for (const auto& [name, value] : container_logs_->Counters()) c.emplace_back(name, value);
  }
  if (gc_) {
    uint64_t node_wide = 0;
    for (const auto& [name, value] : gc_->Counters()) {
      if (name == "containers_garbage_collected_node") node_wide = value;
      c.emplace_back(name, value);
    }
    // Removed by pod syncs and by the node-wide pass alike.
    c.emplace_back("containers_garbage_collected", d.containers_gc + node_wide);
  } else {
    c.emplace_back("containers_garbage_collected", d.containers_gc);
  }
  if (probes_) {
    for (auto& kv : probes_->Counters()) c.push_back(std::move(kv));
  }
  for (const auto& [type, n] : d.container_starts) c.emplace_back("started_containers:" + type, n);
  for (const auto& [key, n] : d.container_start_errors) {
    c.emplace_back("started_containers_errors:" + key.first + ":" + key.second, n);
  }
  syncer_->ExportPullDurations(c);
  dispatcher_->pod_start().Export("pod_start_duration_seconds", c);
  dispatcher_->worker_duration().Export("pod_worker_duration_seconds", c);
  if (counting_) {
    for (const auto& [op, n] : counting_->Snapshot()) {
      c.emplace_back("runtime_operations:" + op, n.first);
      c.emplace_back("runtime_operations_errors:" + op, n.second);
    }
  }
  if (status_) {
    c.emplace_back("statuses_sent", status_->sent());
    c.emplace_back("status_failures", status_->failed());
  }
  return c;
}

ServiceSpec MakeSpec() {
  auto config = std::make_shared<PodworkerdConfig>();
  auto timeout = std::make_shared<std::string>("2m");
  auto initial = std::make_shared<std::string>("10s");
  auto max = std::make_shared<std::string>("5m");
  auto resync = std::make_shared<std::string>("1m");
  auto pull_initial = std::make_shared<std::string>("10s");
  auto pull_max = std::make_shared<std::string>("5m");
  auto container_gc_period = std::make_shared<std::string>("1m");
  auto image_gc_period = std::make_shared<std::string>("5m");
  auto image_min_age = std::make_shared<std::string>("2m");
  auto orphan_shim_period = std::make_shared<std::string>("1m");
  auto container_logs = std::make_shared<ContainerLogFlags>();
  auto cgroups = std::make_shared<CgroupFlags>();
  ServiceSpec spec;
  spec.name = "podworkerd";
  spec.id = ipc::ServiceId::Podworkerd;
  spec.description = "nodelet-podworkerd: one serialized worker per pod, the podKiller";
  spec.add_flags = [=](CLI::App& app) {
    app.add_option("--runtime-endpoint,--container-runtime-endpoint", config->runtime_endpoint,
                   "CRI endpoint of the container runtime")
        ->capture_default_str();
    app.add_option("--node-ip", config->node_ip,
                   "The node's IP: every pod's hostIP, the podIP of host-network pods (default: "
                   "the address of the default route's interface)");
    AddDnsOptions(app, config->dns.cluster_dns, config->dns.cluster_domain,
                  config->dns.resolv_conf);
    AddContainerLogOptions(app, *container_logs);
    AddCgroupOptions(app, *cgroups);
    app.add_option("--system-reserved", config->system_reserved,
                   "Resources kept for the system, e.g. cpu=100m,memory=256Mi (left out of the "
                   "kubepods cgroup's limits)");
    app.add_option("--kube-reserved", config->kube_reserved,
                   "Resources kept for nodelet itself (same syntax)");
    app.add_option("--runtime-request-timeout", *timeout,
                   "Deadline of CRI calls that change state, but not of PullImage, which has "
                   "none (as the kubelet's)")
        ->check(DurationValidator())
        ->capture_default_str();
    app.add_option("--crashloop-initial", *initial, "First crash-loop back-off delay")
        ->check(DurationValidator())
        ->capture_default_str();
    app.add_option("--crashloop-max", *max, "Longest crash-loop back-off delay")
        ->check(DurationValidator())
        ->capture_default_str();
    app.add_option("--pod-workers", config->workers, "Threads that run pod work")
        ->capture_default_str();
    app.add_option("--maximum-dead-containers-per-container", config->max_dead_per_container,
                   "Dead instances kept per container of a pod (at least 1)")
        ->capture_default_str();
    app.add_option("--maximum-dead-containers", config->gc.containers.max_containers,
                   "Dead containers kept on the node (-1: no limit); the newest instance of a "
                   "running pod's container always stays")
        ->capture_default_str();
    app.add_option("--orphan-shim-period", *orphan_shim_period,
                   "How often shims of the runtime that neither CRI nor containerd knows are "
                   "looked for; one found in two sweeps in a row is ended")
        ->check(DurationValidator())
        ->capture_default_str();
    app.add_option("--container-gc-period", *container_gc_period,
                   "How often the node-wide dead-container pass runs")
        ->check(DurationValidator())
        ->capture_default_str();
    app.add_option("--image-gc-high-threshold", config->gc.image.high_threshold_percent,
                   "Image filesystem usage (percent) at which image GC runs; 100 disables it")
        ->check(CLI::Range(0, 100))
        ->capture_default_str();
    app.add_option("--image-gc-low-threshold", config->gc.image.low_threshold_percent,
                   "Image filesystem usage (percent) image GC frees down to")
        ->check(CLI::Range(0, 100))
        ->capture_default_str();
    app.add_option("--image-minimum-gc-age,--minimum-image-ttl-duration", *image_min_age,
                   "Minimum age of an unused image before it may be removed")
        ->check(DurationValidator())
        ->capture_default_str();
    app.add_option("--image-gc-period", *image_gc_period, "How often image GC checks the usage")
        ->check(DurationValidator())
        ->capture_default_str();
    app.add_option("--pod-infra-container-image", config->gc.pod_infra_container_image,
                   "The sandbox image, never removed by image GC (default: the runtime's)")
        ->capture_default_str();
    app.add_option("--resync-period,--sync-frequency", *resync,
                   "Each pod is synced at least this often")
        ->check(DurationValidator())
        ->capture_default_str();
    app.add_option("--serialize-image-pulls", config->image_pulls.serialize,
                   "Pull one image at a time (true/false)")
        ->default_str("true");
    app.add_option("--max-parallel-image-pulls", config->image_pulls.max_parallel,
                   "Most image pulls at once without serialization (0: no limit)")
        ->capture_default_str();
    app.add_option("--image-pull-backoff-initial", *pull_initial,
                   "First back-off delay after a failed image pull")
        ->check(DurationValidator())
        ->capture_default_str();
    app.add_option("--image-pull-backoff-max", *pull_max,
                   "Longest back-off delay after failed image pulls")
        ->check(DurationValidator())
        ->capture_default_str();
  };
  spec.create = [=](ServiceContext& ctx) -> Result<std::unique_ptr<Service>> {
    PodworkerdConfig c = *config;
    c.cri_timeouts.call = *ParseDuration(*timeout);
    c.backoff.initial = *ParseDuration(*initial);
    c.backoff.max = *ParseDuration(*max);
    c.resync_period = *ParseDuration(*resync);
    c.image_pulls.backoff_initial = *ParseDuration(*pull_initial);
    c.image_pulls.backoff_max = *ParseDuration(*pull_max);
    c.gc.container_gc_period =
        std::max(*ParseDuration(*container_gc_period), std::chrono::milliseconds(100));
    c.gc.image_gc_period =
        std::max(*ParseDuration(*image_gc_period), std::chrono::milliseconds(100));
    c.gc.image.minimum_age = *ParseDuration(*image_min_age);
    c.orphan_shim_period =
        std::max(*ParseDuration(*orphan_shim_period), std::chrono::milliseconds(100));
    c.workers = std::max(1, c.workers);
    c.container_logs.max_size_bytes = *ParseContainerLogMaxSize(container_logs->max_size);
    c.container_logs.max_files = container_logs->max_files;
    c.container_logs.monitor_interval =
        std::max(*ParseDuration(container_logs->monitor_interval), std::chrono::milliseconds(100));
    c.pod_cgroups.enabled = cgroups->per_qos;
    c.pod_cgroups.root = cgroups->root;
    c.pod_cgroups.systemd = cgroups->driver == "systemd";
    if (c.pod_cgroups.enabled && c.pod_cgroups.systemd) {
      // As the kubelet: with the systemd driver systemd must be there to make the slices.
      auto slices = OpenSystemdSlices(ctx.clock, std::chrono::seconds(10));
      if (!slices.ok()) {
        return FailedPrecondition("--cgroup-driver systemd needs systemd on the system bus: " +
                                  slices.status().message());
      }
      c.pod_cgroups.slices = *slices;
    }
    c.enforce_pods_allocatable = cgroups->EnforcePods();
    if (c.enforce_pods_allocatable && !c.pod_cgroups.enabled) {
      return InvalidArgument(
          "--enforce-node-allocatable=pods needs --cgroups-per-qos=true (as the kubelet); give "
          "--enforce-node-allocatable=none with --cgroups-per-qos=false");
    }
    for (const std::string* text : {&c.system_reserved, &c.kube_reserved}) {
      if (auto r = pod::ParseReservation(*text); !r.ok()) return r.status();
    }
    auto node_ip = NodeIP(c.node_ip);
    if (!node_ip.ok()) return node_ip.status();
    c.node_ip = *node_ip;
    auto service = PodworkerdService::Create(ctx, c);
    if (!service.ok()) return service.status();
    return std::unique_ptr<Service>(std::move(service).value());
  };
  return spec;
}

}  // namespace nodelet::podworkerd
