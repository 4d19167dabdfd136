#include "supervisor/supervisor.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include "lib/common/fs.h"
#include "lib/common/heap.h"
#include "lib/common/logging.h"
#include "lib/common/systemd_notify.h"
#include "lib/common/trusted_path.h"
#include "lib/cri/grpc_cri_client.h"
#include "lib/ipc/codec.h"
#include "lib/ipc/endpoints.h"
#include "lib/ipc/message.h"
#include "lib/pleg/pleg_mirror.h"
#include "lib/pod/static_pod.h"
#include "lib/service/event_loop.h"
#include "nodelet_version.h"
#include "supervisor/after_iteration_work.h"
#include "supervisor/child_process_backend.h"
#include "supervisor/ctl_server.h"
#include "supervisor/etcd_status_sink.h"
#include "supervisor/eviction_manager.h"
#include "supervisor/http_endpoint.h"
#include "supervisor/node_events.h"
#include "supervisor/node_status.h"
#include "supervisor/pleg_runtime_view.h"
#include "supervisor/pod_manager.h"
#include "supervisor/service_backend.h"
#include "supervisor/stats_collector.h"
#include "supervisor/status_sink.h"
#include "supervisor/stream_relay.h"
#include "supervisor/supervisor_reload.h"
#include "supervisor/systemd_bus.h"
#include "supervisor/systemd_unit_backend.h"

namespace nodelet::supervisor {
namespace {

using ipc::control::Body;
using ipc::control::ControlMessage;

std::string NameOf(ipc::ServiceId id) {
  switch (id) {
    case ipc::ServiceId::Plegd:
      return "plegd";
    case ipc::ServiceId::Statusd:
      return "statusd";
    case ipc::ServiceId::Volumed:
      return "volumed";
    case ipc::ServiceId::Podworkerd:
      return "podworkerd";
    default:
      return "";
  }
}

}  // namespace

class Supervisor::Impl {
 public:
  explicit Impl(SupervisorOptions o) : options_(std::move(o)) {}

  int Run() {
    if (Status s = Setup(); !s.ok()) {
      if (!lock_conflict_.empty()) {
        std::fprintf(stderr, "%s\n", lock_conflict_.c_str());
        return 1;
      }
      log_->error("Failed to start nodelet: {}", s.message());
      return 1;
    }
    return Loop();
  }

 private:
  Status Setup() {
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
      if (auto settings = ReadFileSettings(c.config_file, "supervisor", flags->app);
          settings.ok()) {
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
      lock_conflict_ =
          "nodelet: another nodelet (pid " + HolderPid(*lock) + ") holds " + c.root_dir;
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
    node_ = std::make_unique<NodeStatusManager>(clock_, node_opts, cri_client_.get(),
                                                cri_client_.get());
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
          *ctx_, clock_, c.run_dir, options_.http_address, node_.get(), HttpServerOptions{},
          options_.enable_debugging_handlers ? c.log_dir : "", usage_.get());
      http_->SetSnapshotSource(loop_, [this] { return HttpSnapshotNow(); });
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
  // statuses on its own thread, over a client made there.
  Status StartStatusSinks() {
    auto client = etcd::Client::Connect(options_.etcd.ToClientOptions(), clock_);
    if (!client.ok()) return client.status();
    EtcdSinkOptions sink;
    sink.prefix = options_.etcd.prefix;
    sink.node_name = options_.node_name;
    sink.lease_ttl = std::chrono::seconds(options_.etcd.lease_seconds);
    sink.lease_renew = std::chrono::seconds(options_.etcd.lease_seconds / 4);
    std::vector<std::unique_ptr<StatusSink>> sinks;
    sinks.push_back(std::make_unique<EtcdStatusSink>(std::move(*client), clock_, sink));
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
      // From the worker's thread: spdlog loggers are thread-safe.
      log->warn("Status sink '{}': {}", name, error.message());
    };
    sinks_ = std::make_unique<SinkWorker>(std::move(sinks), clock_, std::move(list), on_error);
    status_watch_ = std::make_unique<status::StatusWatcher>(*ctx_, options_.common.run_dir);
    if (Status s = status_watch_->Connect(); !s.ok()) return s;
    sources_.push_back(loop_.AddSocket(status_watch_->raw(), [this] { OnStatusWatch(); }));
    return Status::Ok();
  }

  // Hands what statusd published to the sinks' worker (a gap makes it list again).
  void OnStatusWatch() {
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
  Result<std::unique_ptr<ServiceBackend>> CreateBackend() {
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

  SupervisedServices& services() { return backend_->services(); }

  void HandleSignal(uint32_t signo) {
    if (signo == SIGHUP) {
      Reload();
      return;
    }
    if (!stopping_) {
      log_->info("received {}, stopping every service", strsignal(static_cast<int>(signo)));
      stopping_ = true;
      notifier_.Notify("STOPPING=1\nSTATUS=stopping");
      backend_->StopServices();
      // Its runtime calls end within their timeout while the services stop.
      node_->RequestStop();
      eviction_->RequestStop();
    }
  }

  void SendCommand(const std::string& peer, ipc::control::CommandKind kind,
                   const std::string& log_level = "") {
    static uint64_t next_id = 1;
    flatbuffers::FlatBufferBuilder fbb(128);
    auto level = log_level.empty() ? 0 : fbb.CreateString(log_level);
    auto cmd = ipc::control::CreateCommand(fbb, next_id++, kind, level);
    // A full queue means the service is away; it says hello again when it is back.
    (void)ipc::SendMessage(*control_, peer, fbb, *envelope_, Body::Command, cmd.Union());
  }

  // SIGHUP: reads the config file again and applies what can change while nodelet runs (the log
  // level, the manifest sources, the eviction settings); names what needs a restart. Then each
  // service is asked to reload too, with the supervisor's log level (in standalone mode its
  // command line holds the level the supervisor gave it). A file that does not parse, or a new
  // value that is invalid, is refused whole and logged; nothing changes.
  void Reload() {
    notifier_.Notify("RELOADING=1\nSTATUS=reloading the configuration");
    const std::string& file = options_.common.config_file;
    Status result = ReloadFile();
    if (!result.ok()) {
      log_->error("Reload of {} refused, nothing changed: {}",
                  file.empty() ? "(no --config)" : file, result.message());
    }
    notifier_.Notify("READY=1\nSTATUS=running");
  }

  Status ReloadFile() {
    SupervisorOptions scratch;
    auto flags = MakeSupervisorFlags(&scratch);
    auto after = ReadFileSettings(options_.common.config_file, "supervisor", flags->app);
    if (!after.ok()) return after.status();
    ReloadPlan plan = PlanReload(file_settings_, *after, SupervisorLiveKeys(), options_.argv);
    SupervisorOptions next;
    auto reload = ParseSupervisorReload(plan, *after, flags->app, options_, next);
    if (!reload.ok()) return reload.status();
    if (Status s = ApplySupervisorReload(*reload, *pods_, *node_, *eviction_); !s.ok()) return s;
    options_ = std::move(next);
    file_settings_ = SettingsAfterReload(file_settings_, *after, plan);
    log_->info("Reloaded {}: {}", options_.common.config_file, plan.Summary());
    ++reloads_;
    for (const auto& [name, peer] : peers_) SendReload(name, peer);
    return Status::Ok();
  }

  // The services are asked to reload once per reload of the supervisor's: those it knows now at
  // once, the others (a hello lost at start, a service restarted since) at their next message.
  void SendReload(const std::string& name, const std::string& peer) {
    if (reloads_ == 0 || reloaded_[name] == reloads_) return;
    SendCommand(peer, ipc::control::CommandKind::ReloadConfig, options_.common.log_level);
    reloaded_[name] = reloads_;
  }

  void HandleControl() {
    for (int i = 0; i < 256 && control_->Readable(); ++i) {
      auto in = control_->Receive(std::chrono::milliseconds(0));
      if (!in.ok()) continue;
      auto msg = ipc::DecodeMessage<ControlMessage>(in->payload.data(), in->payload.size(),
                                                    ipc::control::ControlMessageIdentifier());
      if (!msg.ok()) {
        if (bad_control_.Count()) {
          log_->warn("Dropping a bad control message: {}", msg.status().message());
        }
        continue;
      }
      const ControlMessage* m = *msg;
      std::string name = NameOf(m->header()->sender());
      if (name.empty() || !services().Has(name)) continue;
      const bool new_peer = peers_[name] != in->peer;
      peers_[name] = in->peer;
      ++service_messages_[name];
      if (const auto* hello = m->body_as_Hello()) {
        hello_seen_.insert(in->peer);
        // A new process: it started with the command line of nodelet's start.
        reloaded_.erase(name);
        services().OnReady(name, hello->pid());
        // Its health from the start: until its first heartbeat a service that is not yet
        // fine (podworkerd without plegd's cache) must not show as Ok.
        services().OnHeartbeat(name, hello->health(),
                               hello->reason() ? hello->reason()->str() : "");
        if (name == "podworkerd" || name == "volumed") pods_->OnPodworkerdReady();
        flatbuffers::FlatBufferBuilder fbb(128);
        auto w = ipc::control::CreateWelcome(fbb, incarnation_, 0);
        // Lost only with the peer, whose next hello is welcomed again.
        (void)ipc::SendMessage(*control_, in->peer, fbb, *envelope_, Body::Welcome, w.Union());
      } else if (const auto* hb = m->body_as_Heartbeat()) {
        services().OnHeartbeat(name, hb->health(), hb->reason() ? hb->reason()->str() : "");
        // A service that outlived a supervisor restart (systemd mode) has not said hello to
        // this incarnation: ask it to, so its pid is known.
        if (new_peer && hello_seen_.count(in->peer) == 0)
          SendCommand(in->peer, ipc::control::CommandKind::Hello);
        if (hb->counters()) {
          auto& mine = service_counters_[name];
          mine.clear();
          for (const auto* counter : *hb->counters()) {
            if (counter->name()) mine[counter->name()->str()] = counter->value();
          }
        }
      }
      SendReload(name, in->peer);
    }
  }

  void Report() {
    std::string summary = stopping_ ? "stopping" : services().Summary();
    if (summary != last_summary_) {
      last_summary_ = summary;
      log_->info("{}", summary);
      notifier_.Notify("STATUS=" + summary);
    }
    if (!ready_sent_ && !stopping_ && services().AllRunning()) {
      // Sending never blocks; READY=1 that found the queue full is sent again next iteration.
      ready_sent_ =
          notifier_.Notify("READY=1\nSTATUS=" + summary) || std::getenv("NOTIFY_SOCKET") == nullptr;
    }
  }

  // Registers `item` (a socket or an fd) on the loop.
  EventLoop::Handle Watch(const zmq::pollitem_t& item, EventLoop::Callback callback) {
    if (item.socket != nullptr) {
      return loop_.AddSocket(zmq::socket_ref(zmq::from_handle, item.socket), std::move(callback));
    }
    return loop_.AddFd(item.fd, std::move(callback));
  }

  // What /healthz and /metrics show, taken on the loop's thread when a request comes.
  HttpSnapshot HttpSnapshotNow() {
    HttpSnapshot snap{services().List(), service_counters_, service_messages_,
                      bad_control_.count()};
    snap.source_failures = pods_->source_failures();
    if (eviction_) snap.evictions = eviction_->evictions_by_signal();
    return snap;
  }

  // What the loop runs after every iteration, after the backend's own after-iteration work
  // (reaping or reading the bus, the services' timers): the pod manager's timers, what the
  // stats and the node status read, the summary. (The HTTP endpoint's snapshot is taken when a
  // request asks for it: HttpSnapshotNow.)
  void AfterIteration() {
    if (!stopping_) pods_->Tick();
    stats_->UpdateFromPleg(*mirror_);
    node_->SetServices(services().AllRunning(), services().Summary());
    for (auto& e :
         service_events_.Observe(services().List(), options_.node_name, clock_.WallSeconds())) {
      pods_->RecordNodeEvent(std::move(e));
    }
    after_.WakeAt(pods_->NextTick());
    Report();
    if (stopping_ && services().AllStopped()) loop_.Stop();
  }

  int Loop() {
    WatchdogPinger watchdog(notifier_, clock_, WatchdogInterval());
    loop_.SetWatchdog(&watchdog);
    backend_->StartServices();
    after_ = AfterIterationWork(loop_, [this] { AfterIteration(); });
    after_.WakeAt(pods_->NextTick());
    EventLoop::Timer release_heap = loop_.AddTimer(ReleaseFreeHeap);
    release_heap.ArmRepeating(kHeapReleasePeriod);
    Report();
    Status run = loop_.Run();
    loop_.SetWatchdog(nullptr);
    if (!run.ok()) {
      log_->critical("{}", run.message());
      return 1;
    }
    log_->info("every service stopped; exiting");
    return 0;
  }

  SupervisorOptions options_;
  FileSettings file_settings_;  // the config file as nodelet runs it (reloads compare with it)
  uint64_t reloads_ = 0;        // reloads applied
  std::map<std::string, uint64_t> reloaded_;  // service -> the reload it was last asked for
  int lock_fd_ = -1;           // ROOT-DIR/nodelet.lock, flocked for the process's lifetime
  std::string lock_conflict_;  // set when another nodelet holds the lock
  std::shared_ptr<spdlog::logger> log_ = GetLogger("supervisor");
  RealClock& clock_ = RealClock::Get();
  // Before every component that registers on it, so it is destroyed after them.
  EventLoop loop_{clock_};
  std::unique_ptr<ipc::Context> ctx_;
  // The mode's backend: the services, spawned (standalone) or systemd's units (systemd).
  std::unique_ptr<ServiceBackend> backend_;
  std::unique_ptr<ipc::RouterServer> control_;
  std::unique_ptr<ipc::EnvelopeWriter> envelope_;
  uint64_t incarnation_ = ipc::NewIncarnation();
  std::map<std::string, std::string> peers_;  // service name -> control routing id
  std::set<std::string> hello_seen_;
  std::map<std::string, std::map<std::string, uint64_t>> service_counters_;
  std::map<std::string, uint64_t> service_messages_;
  ipc::BadMessageCounter bad_control_;
  // Before ctl_, which uses it: destroyed after it.
  std::unique_ptr<StreamRelay> streams_;
  std::unique_ptr<CtlServer> ctl_;
  std::unique_ptr<pleg::PlegMirror> mirror_;
  std::unique_ptr<PlegRuntimeView> runtime_view_;
  std::unique_ptr<PodManager> pods_;
  std::unique_ptr<cri::GrpcCriClient> cri_client_;
  // The fleet's status sinks and the watch stream that feeds them (with --etcd-endpoints);
  // before the node status, whose thread hands them the node's: destroyed after it.
  std::unique_ptr<SinkWorker> sinks_;
  std::unique_ptr<status::StatusWatcher> status_watch_;
  std::unique_ptr<NodeStatusManager> node_;
  // Node pressure as the eviction manager holds it, read by the node status and admission.
  std::shared_ptr<NodePressure> pressure_ = std::make_shared<NodePressure>();
  std::unique_ptr<StatsCollector> stats_;
  std::unique_ptr<UsageSampler> usage_;  // over stats_; used by eviction_ and http_
  // After the pod manager, the mirror and the stats it uses: destroyed before them.
  std::unique_ptr<EvictionManager> eviction_;
  ServiceEventWatcher service_events_;  // ServiceRestarted, ServiceFatal node events
  // After the usage sampler it reads: destroyed first.
  std::unique_ptr<HttpEndpoint> http_;
  SystemdNotifierImpl notifier_;
  std::string last_summary_;
  bool ready_sent_ = false;
  bool stopping_ = false;
  // The loop's sources (declared last: removed before what their callbacks use goes).
  std::vector<EventLoop::Handle> sources_;
  AfterIterationWork after_;
};

Supervisor::Supervisor(SupervisorOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
Supervisor::~Supervisor() = default;

int Supervisor::Run() { return impl_->Run(); }

}  // namespace nodelet::supervisor
