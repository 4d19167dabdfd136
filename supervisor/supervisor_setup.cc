// The supervisor's start: the run and data directories and the lock, the mode's service backend,
// the sockets, then each part (node status, pod manager, ctl server, stats, eviction manager,
// HTTP endpoint, the fleet's status sinks), made, registered on the loop and started.
#include <signal.h>
#include <unistd.h>

#include "lib/common/fs.h"
#include "lib/common/trusted_path.h"
#include "lib/ipc/endpoints.h"
#include "lib/ipc/peer_access.h"
#include "nodelet_version.h"
#include "supervisor/child_process_backend.h"
#include "supervisor/etcd_status_sink.h"
#include "supervisor/supervisor_impl.h"
#include "supervisor/supervisor_reload.h"
#include "supervisor/systemd_bus.h"
#include "supervisor/systemd_unit_backend.h"

namespace nodelet::supervisor {

Status Supervisor::Impl::Setup() {
  // Signals first: ZeroMQ's I/O threads inherit the mask. SIGCHLD is the standalone
  // backend's (it reaps); it is blocked here, before any thread, in both modes.
  EventLoop::BlockSignals({SIGCHLD, SIGTERM, SIGINT, SIGHUP});
  signal(SIGPIPE, SIG_IGN);
  for (int signo : {SIGTERM, SIGINT, SIGHUP}) {
    sources_.push_back(loop_.AddSignal(
        signo, [this](const signalfd_siginfo& info) { HandleSignal(info.ssi_signo); }));
  }

  const auto& c = options_.common;
  // What the config file gave at start, for the reloads to compare with (it parsed a moment
  // ago, with the same table).
  {
    SupervisorOptions scratch;
    auto flags = MakeSupervisorFlags(&scratch);
    if (auto settings = ReadFileSettings(c.config_file, "supervisor", flags->app); settings.ok()) {
      file_settings_ = std::move(*settings);
    }
  }
  const auto policy = ipc::PeerPolicy::ForThisProcess(c.admin_group);
  // Only directories that root and nodelet's own user alone can change (and no link another
  // user owns): before anything is made in them, and again once they are made.
  const std::vector<std::pair<std::string, std::string>> trusted = {
      {"--root-dir", c.root_dir},
      {"--run-dir", c.run_dir},
      {"--log-dir", c.log_dir},
      {"--pod-manifest-path", options_.pod_manifest_path}};
  const auto trust = TrustPolicy::ForThisProcess(c.admin_group);
  if (Status s = CheckTrustedPaths(trusted, trust); !s.ok()) return s;
  if (Status s = ipc::PrepareRunDirectory(c.run_dir, policy); !s.ok()) return s;
  if (Status s = EnsureDirectory(c.log_dir, 0750); !s.ok()) return s;
  if (Status s = EnsureDirectory(c.root_dir, 0700); !s.ok()) return s;
  if (Status s = CheckTrustedPaths(trusted, trust); !s.ok()) return s;
  // One nodelet per root dir, taken before anything is bound or spawned; it ends with the
  // process. One per run dir comes from the sockets: each is bound only under its own lock
  // (LockSocketPath), so only a socket's holder ever unlinks it, in either mode.
  auto lock = TryPidLock(c.root_dir + "/nodelet.lock");
  if (!lock.ok()) return lock.status();
  if (lock->fd < 0) {
    lock_conflict_ = "nodelet: another nodelet (pid " + HolderPid(*lock) + ") holds " + c.root_dir;
    return FailedPrecondition(lock_conflict_);
  }
  lock_fd_ = lock->fd;
  // The kubelet's setupDataDirs: pod directories (volumes), plugins, container logs.
  for (auto [dir, mode] :
       {std::pair{c.root_dir + "/pods", 0750}, std::pair{c.root_dir + "/plugins", 0750},
        std::pair{c.log_dir + "/pods", 0755}}) {
    if (Status s = EnsureDirectory(dir, static_cast<mode_t>(mode)); !s.ok()) return s;
  }

  ctx_ = std::make_unique<ipc::Context>();
  // Before anything is bound: every socket the supervisor binds checks its peers.
  if (Status s = ctx_->RequirePeerPolicy(policy); !s.ok()) return s;
  auto backend = CreateBackend();
  if (!backend.ok()) return backend.status();
  backend_ = std::move(*backend);
  control_ = std::make_unique<ipc::RouterServer>(*ctx_, ipc::kControlChannel);
  if (Status s = control_->Bind(ipc::kControlEndpoint.Uri(c.run_dir)); !s.ok()) return s;
  envelope_ = std::make_unique<ipc::EnvelopeWriter>(ipc::ServiceId::Supervisor, incarnation_);

  mirror_ =
      std::make_unique<pleg::PlegMirror>(*ctx_, clock_, c.run_dir, ipc::ServiceId::Supervisor);
  if (Status s = mirror_->Connect(loop_); !s.ok()) return s;
  runtime_view_ = std::make_unique<PlegRuntimeView>(*mirror_);

  // The node status (and the runtime-up check) needs the runtime.
  NodeStatusOptions node_opts;
  node_opts.node_name = options_.node_name;
  node_opts.node_ip = options_.node_ip;
  node_opts.root_dir = c.root_dir;
  node_opts.max_pods = options_.max_pods;
  node_opts.version = NODELET_VERSION;
  for (auto [text, out] : {std::pair{&options_.system_reserved, &node_opts.system_reserved},
                           std::pair{&options_.kube_reserved, &node_opts.kube_reserved}}) {
    auto r = ParseReservation(*text);
    if (!r.ok()) return r.status();
    *out = *r;
  }
  // As the kubelet, and before podworkerd would refuse it on its own.
  if (options_.cgroups.EnforcePods() && !options_.cgroups.per_qos) {
    return InvalidArgument(
        "--enforce-node-allocatable=pods needs --cgroups-per-qos=true (as the kubelet); give "
        "--enforce-node-allocatable=none with --cgroups-per-qos=false");
  }
  if (!options_.runtime_endpoint.empty()) {
    cri::CriTimeouts timeouts;
    timeouts.query = std::chrono::seconds(2);
    auto client = cri::GrpcCriClient::Create(options_.runtime_endpoint, timeouts);
    if (!client.ok()) return client.status();
    cri_client_ = std::move(*client);
  }
  // The eviction manager's thresholds (refused here, with the flag named, when malformed).
  auto thresholds = EvictionThresholdsFromFlags(options_.eviction_hard, options_.eviction_soft,
                                                options_.eviction_soft_grace_period,
                                                options_.eviction_minimum_reclaim);
  if (!thresholds.ok()) return thresholds.status();
  node_opts.hard_eviction.clear();
  for (const auto& t : *thresholds) {
    if (t.hard) node_opts.hard_eviction.push_back(t);
  }
  node_opts.pressure = [p = pressure_](std::string_view c) { return p->Get(c); };
  // The fleet's status sink (docs/fleet.md): statusd's statuses and the node's go to etcd.
  if (options_.etcd.enabled()) {
    if (Status s = StartStatusSinks(); !s.ok()) return s;
  }
  NodeStoredCallback stored;
  if (sinks_) stored = [w = sinks_.get()](const status::NodeStatusRecord& n) { w->PushNode(n); };
  node_opts.publish = MakeNodeStatusPublisher(*ctx_, c.run_dir, std::move(stored));
  node_opts.on_transition =
      NodeConditionEventsTo(loop_, clock_, options_.node_name, [this](status::PodEvent e) {
        if (pods_) pods_->RecordNodeEvent(e);
      });
  node_ =
      std::make_unique<NodeStatusManager>(loop_, node_opts, cri_client_.get(), cri_client_.get());
  node_->Start();

  // The pod manager is made before the ctl server (which reports its manifests) and started
  // after it.
  PodManagerOptions pod_opts;
  pod_opts.run_dir = c.run_dir;
  pod_opts.manifest_dir = options_.pod_manifest_path;
  pod_opts.manifest_url = options_.manifest_url;
  pod_opts.manifest_url_ca = options_.manifest_url_ca;
  pod_opts.manifest_url_period = *ParseDuration(options_.http_check_frequency);
  for (const auto& h : options_.manifest_url_headers) {
    auto parsed = ParseHeaderFlag(h);
    if (!parsed.ok()) return parsed.status();
    pod_opts.manifest_url_headers.push_back(*parsed);
  }
  pod_opts.node_name = options_.node_name;
  if (options_.etcd.enabled()) {
    pod_opts.etcd = options_.etcd.ToClientOptions();
    pod_opts.etcd_prefix = options_.etcd.prefix;
    pod_opts.etcd_cache_file = c.root_dir + "/etcd-pods.json";
  }
  pod_opts.max_pods = options_.max_pods;
  if (!options_.resync_period.empty()) pod_opts.resync = *ParseDuration(options_.resync_period);
  pod_opts.allowed_unsafe_sysctls = options_.allowed_unsafe_sysctls;
  NodeResourceList alloc = node_->Allocatable();
  pod_opts.allocatable = NodeResources{alloc.cpu_milli, alloc.memory_bytes};
  pod_opts.admit_under_pressure = [p = pressure_](const pod::Pod& pod) { return p->Admit(pod); };
  pods_ = std::make_unique<PodManager>(*ctx_, loop_, clock_, pod_opts);

  // Streaming sessions for nodeletctl, asked of podworkerd on a DEALER of their own.
  streams_ = std::make_unique<StreamRelay>(
      *ctx_, loop_, StreamRelayOptions{ipc::kPodWorkerEndpoint.Uri(c.run_dir)});
  if (Status s = streams_->Start(); !s.ok()) return s;
  CtlServerOptions ctl_opts{c.run_dir,   getpid(),    NODELET_VERSION, runtime_view_.get(),
                            node_.get(), pods_.get(), streams_.get()};
  ctl_ = std::make_unique<CtlServer>(*ctx_, backend_->services(), clock_, ctl_opts);
  if (Status s = ctl_->Bind(); !s.ok()) return s;
  // Readers run in the order added: the backend's (added when it was created, so the systemd
  // bus comes first), the control socket, the ctl socket, then the pod manager's (registered
  // by its Start).
  sources_.push_back(loop_.AddSocket(control_->raw(), [this] { HandleControl(); }));
  sources_.push_back(Watch(ctl_->PollItem(), [this] { ctl_->OnReadable(); }));

  if (Status s = pods_->Start(); !s.ok()) return s;

  // What the node and its pods use: for the eviction manager, /stats/summary and top.
  StatsCollectorOptions stats_opts;
  stats_opts.node_name = options_.node_name;
  stats_opts.root_dir = c.root_dir;
  stats_opts.log_dir = c.log_dir;
  stats_opts.cgroup_root = options_.cgroups.root;
  stats_opts.cgroup_systemd = options_.cgroups.driver == "systemd";
  stats_ =
      std::make_unique<StatsCollector>(clock_, stats_opts, cri_client_.get(), cri_client_.get());
  // One sampler for the eviction manager and the HTTP endpoint: pods are read only when one
  // of them needs their figures (stats_summary.h).
  usage_ = std::make_unique<UsageSampler>(clock_, *stats_);
  EvictionManagerOptions eviction_opts;
  eviction_opts.thresholds = *thresholds;
  eviction_opts.pressure_transition_period =
      *ParseDuration(options_.eviction_pressure_transition_period);
  eviction_opts.max_pod_grace_seconds = options_.eviction_max_pod_grace_period;
  eviction_opts.monitoring_period = *ParseDuration(options_.eviction_monitoring_period);
  eviction_opts.records_path = c.root_dir + "/evictions";
  eviction_ = std::make_unique<EvictionManager>(loop_, clock_, eviction_opts, *usage_, *pods_,
                                                *runtime_view_, pressure_);
  if (Status s = eviction_->Start(); !s.ok()) return s;

  if (!options_.http_address.empty()) {
    http_ = std::make_unique<HttpEndpoint>(
        *ctx_, loop_, c.run_dir, options_.http_address, node_.get(), HttpServerOptions{},
        options_.enable_debugging_handlers ? c.log_dir : "", usage_.get());
    http_->SetSnapshotSource([this] { return HttpSnapshotNow(); });
    // Not fatal: the node keeps running its pods without the endpoint.
    if (Status s = http_->Start(); !s.ok()) {
      log_->error("HTTP endpoint disabled: {}", s.message());
      http_.reset();
    } else {
      log_->info("HTTP endpoint on {} (/healthz, /pods, /node, /metrics, /stats/summary{})",
                 options_.http_address,
                 options_.enable_debugging_handlers ? ", /containerLogs" : "");
    }
  }
  return Status::Ok();
}

// The status sinks' worker, fed with statusd's watch stream from the loop; it lists statusd's
// statuses on a thread of its executor, over a client made there.
Status Supervisor::Impl::StartStatusSinks() {
  auto client = etcd::Client::Connect(options_.etcd.ToClientOptions(), clock_);
  if (!client.ok()) return client.status();
  EtcdSinkOptions sink;
  sink.prefix = options_.etcd.prefix;
  sink.node_name = options_.node_name;
  sink.lease_ttl = std::chrono::seconds(options_.etcd.lease_seconds);
  sink.lease_renew = std::chrono::seconds(options_.etcd.lease_seconds / 4);
  std::vector<std::unique_ptr<StatusSink>> sinks;
  sinks.push_back(std::make_unique<EtcdStatusSink>(loop_, std::move(*client), sink));
  auto list =
      [ctx = ctx_.get(), run_dir = options_.common.run_dir,
       statusd =
           std::shared_ptr<status::StatusClient>()]() mutable -> Result<status::PodStatusList> {
    if (!statusd) {
      status::StatusClientOptions opts;
      opts.sender = ipc::ServiceId::Supervisor;
      auto made = std::make_shared<status::StatusClient>(*ctx, run_dir, opts);
      if (Status s = made->Connect(); !s.ok()) return s;
      statusd = std::move(made);
    }
    return statusd->ListPodStatuses();
  };
  auto on_error = [log = log_](const std::string& name, const Status& error) {
    // On the loop's thread.
    log->warn("Status sink '{}': {}", name, error.message());
  };
  sinks_ = std::make_unique<SinkWorker>(loop_, std::move(sinks), std::move(list), on_error);
  status_watch_ = std::make_unique<status::StatusWatcher>(*ctx_, options_.common.run_dir);
  if (Status s = status_watch_->Connect(); !s.ok()) return s;
  sources_.push_back(loop_.AddSocket(status_watch_->raw(), [this] { OnStatusWatch(); }));
  return Status::Ok();
}

// Hands what statusd published to the sinks' worker (a gap makes it list again).
void Supervisor::Impl::OnStatusWatch() {
  for (int i = 0; i < 256; ++i) {
    auto event = status_watch_->Next(std::chrono::milliseconds(0));
    if (event.ok()) {
      sinks_->Push(*event);
    } else if (event.status().code() == StatusCode::kDeadlineExceeded) {
      return;
    } else {
      // Unreadable, so dropped: what it said comes with the next list.
      log_->warn("{}", event.status().message());
      sinks_->RequestList();
    }
  }
}

// The mode's backend, which registers its own sources on the loop.
Result<std::unique_ptr<ServiceBackend>> Supervisor::Impl::CreateBackend() {
  switch (options_.mode) {
    case SupervisorMode::kStandalone: {
      ChildProcessBackendOptions o;
      o.run_dir = options_.common.run_dir;
      o.log_dir = options_.common.log_dir;
      o.log_max_bytes = options_.log_max_bytes;
      o.log_backups = options_.log_backups;
      o.policy = options_.policy;
      o.children = BuildChildSpecs(options_);
      auto backend = ChildProcessBackend::Create(loop_, std::move(o));
      if (!backend.ok()) return backend.status();
      return std::unique_ptr<ServiceBackend>(std::move(*backend));
    }
    case SupervisorMode::kSystemd: {
      // Each service is a unit that systemd runs; we watch them over D-Bus.
      auto bus = OpenSystemdBus(std::chrono::milliseconds(2000));
      if (!bus.ok()) return Unavailable("systemd mode: " + bus.status().message());
      SystemdUnitBackendOptions o;
      o.units.unit_prefix = options_.unit_prefix;
      o.units.job_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
          options_.policy.start_timeout + options_.policy.stop_timeout);
      o.units.heartbeat_deadline = options_.policy.heartbeat_deadline;
      for (const auto& svc : options_.services) o.names.push_back(svc.name);
      o.run_dir = options_.common.run_dir;
      auto backend = SystemdUnitBackend::Create(loop_, std::move(*bus), std::move(o));
      if (!backend.ok()) return backend.status();
      return std::unique_ptr<ServiceBackend>(std::move(*backend));
    }
  }
  return InvalidArgument("unknown supervisor mode");  // not reached: every mode is above
}

// Registers `item` (a socket or an fd) on the loop.
EventLoop::Handle Supervisor::Impl::Watch(const zmq::pollitem_t& item,
                                          EventLoop::Callback callback) {
  if (item.socket != nullptr) {
    return loop_.AddSocket(zmq::socket_ref(zmq::from_handle, item.socket), std::move(callback));
  }
  return loop_.AddFd(item.fd, std::move(callback));
}

}  // namespace nodelet::supervisor
