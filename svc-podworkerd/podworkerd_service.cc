#include "svc-podworkerd/podworkerd_service.h"

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
#include "svc-podworkerd/registry_credentials.h"
#include "volume_generated.h"

namespace nodelet::podworkerd {
namespace {

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
      if (auto t = ParseRfc3339(seen->second)) id.creation_time_unix_s = t->seconds;
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
  if (tasks_) InstallRuntimeRepairs();
  // Probe results that changed are taken on the loop (where the manager records them).
  probes_ = std::make_unique<ProbeManager>(ctx.loop, *counting_, [this] {
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
  status_ = std::make_unique<StatusSender>(ctx.loop, ctx.ipc, ctx.options.run_dir);
  volume_events_ = std::make_unique<ipc::Subscriber>(ctx.ipc, ipc::kVolumeEvents);
  if (Status s = volume_events_->Connect(ipc::kVolumeEventsEndpoint.Uri(ctx.options.run_dir));
      !s.ok()) {
    return s;
  }
  config_.gc.containers.max_per_pod_container = config_.max_dead_per_container;
  gc_ = std::make_unique<GarbageCollector>(
      ctx.loop, *counting_, *counting_, fs_stats_, config_.gc,
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
        ctx.loop, *counting_, ctx.options.log_dir, config_.container_logs);
    gc_->set_on_container_removed([log_dir = ctx.options.log_dir](const std::string& id) {
      (void)RemoveContainerLogSymlinks(log_dir, id);
    });
    container_logs_->Start();
  }
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

}  // namespace nodelet::podworkerd
