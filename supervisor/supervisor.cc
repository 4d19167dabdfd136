#include "supervisor/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "lib/common/fs.h"
#include "lib/common/logging.h"
#include "lib/common/systemd_notify.h"
#include "lib/cri/grpc_cri_client.h"
#include "lib/ipc/codec.h"
#include "lib/ipc/endpoints.h"
#include "lib/pleg/pleg_mirror.h"
#include "lib/pod/static_pod.h"
#include "lib/service/event_loop.h"
#include "nodelet_version.h"
#include "supervisor/ctl_server.h"
#include "supervisor/http_endpoint.h"
#include "supervisor/node_status.h"
#include "supervisor/pleg_runtime_view.h"
#include "supervisor/pod_manager.h"
#include "supervisor/systemd_service_control.h"

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

struct Supervisor::Impl {
  explicit Impl(SupervisorOptions o) : options(std::move(o)) {}

  SupervisorOptions options;
  int lock_fd = -1;           // ROOT-DIR/nodelet.lock, flocked for the process's lifetime
  std::string lock_conflict;  // set when another nodelet holds the lock
  std::shared_ptr<spdlog::logger> log = GetLogger("supervisor");
  RealClock& clock = RealClock::Get();
  // Before every component that registers on it, so it is destroyed after them.
  EventLoop loop{clock};
  std::unique_ptr<ipc::Context> ctx;
  std::unique_ptr<ChildLauncher> launcher;
  // Standalone mode: the launcher and the process manager. systemd mode: the bus and the
  // unit monitor. `services` is whichever of the two runs.
  std::unique_ptr<ProcessManager> manager;
  std::unique_ptr<SystemdBus> bus;
  std::unique_ptr<SystemdServiceControl> units;
  SupervisedServices* services = nullptr;
  std::set<std::string> hello_seen;
  std::unique_ptr<ipc::RouterServer> control;
  std::unique_ptr<CtlServer> ctl;
  std::unique_ptr<pleg::PlegMirror> mirror;
  std::unique_ptr<PlegRuntimeView> runtime_view;
  std::unique_ptr<PodManager> pods;
  std::unique_ptr<cri::GrpcCriClient> cri_client;
  std::unique_ptr<NodeStatusManager> node;
  std::unique_ptr<HttpEndpoint> http;
  std::map<std::string, std::map<std::string, uint64_t>> service_counters;
  std::map<std::string, uint64_t> service_messages;
  std::unique_ptr<ipc::EnvelopeWriter> envelope;
  SystemdNotifierImpl notifier;
  uint64_t incarnation = ipc::NewIncarnation();
  std::string last_summary;
  bool ready_sent = false;
  bool stopping = false;
  uint64_t bad_control = 0;
  bool bad_control_logged = false;
  // The loop's sources (declared last: removed before what their callbacks use goes). The
  // children's notify sockets and log pipes, and the pod manager's sockets and fds, change as
  // children restart; they are matched to what exists after every iteration.
  std::vector<EventLoop::Handle> sources;
  std::map<std::tuple<int, std::string, bool>, EventLoop::Handle> child_sources;
  std::map<std::pair<void*, int>, EventLoop::Handle> pod_sources;
  EventLoop::Timer deadline;

  Status Setup() {
    // Signals first: ZeroMQ's I/O threads inherit the mask.
    EventLoop::BlockSignals({SIGCHLD, SIGTERM, SIGINT, SIGHUP});
    signal(SIGPIPE, SIG_IGN);
    for (int signo : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) {
      sources.push_back(loop.AddSignal(
          signo, [this](const signalfd_siginfo& info) { HandleSignal(info.ssi_signo); }));
    }
    // Orphaned grandchildren are ours to reap.
    prctl(PR_SET_CHILD_SUBREAPER, 1);

    const auto& c = options.common;
    if (Status s = EnsureDirectory(c.run_dir, 0700); !s.ok()) return s;
    if (Status s = EnsureDirectory(c.log_dir, 0750); !s.ok()) return s;
    if (Status s = EnsureDirectory(c.root_dir, 0700); !s.ok()) return s;
    // One nodelet per root dir, taken before anything is bound or spawned; it ends with the
    // process. One per run dir comes from the sockets: each is bound only under its own lock
    // (LockSocketPath), so only a socket's holder ever unlinks it, in either mode.
    auto lock = TryPidLock(c.root_dir + "/nodelet.lock");
    if (!lock.ok()) return lock.status();
    if (lock->fd < 0) {
      lock_conflict = "nodelet: another nodelet (pid " + HolderPid(*lock) + ") holds " + c.root_dir;
      return FailedPrecondition(lock_conflict);
    }
    lock_fd = lock->fd;
    // The kubelet's setupDataDirs: pod directories (volumes), plugins, container logs.
    for (auto [dir, mode] :
         {std::pair{c.root_dir + "/pods", 0750}, std::pair{c.root_dir + "/plugins", 0750},
          std::pair{c.log_dir + "/pods", 0755}}) {
      if (Status s = EnsureDirectory(dir, static_cast<mode_t>(mode)); !s.ok()) return s;
    }

    ctx = std::make_unique<ipc::Context>();
    if (options.mode == SupervisorMode::kSystemd) {
      if (Status s = SetupSystemdMode(); !s.ok()) return s;
    } else {
      launcher = std::make_unique<ChildLauncher>(c.run_dir, c.log_dir, options.log_max_bytes,
                                                 options.log_backups);
      std::vector<std::string> names;
      for (auto& spec : BuildChildSpecs(options)) {
        names.push_back(spec.name);
        if (Status s = launcher->Add(std::move(spec)); !s.ok()) return s;
      }
      manager = std::make_unique<ProcessManager>(clock, *launcher, options.policy, names);
      services = manager.get();
    }
    control = std::make_unique<ipc::RouterServer>(*ctx, ipc::kControlChannel);
    if (Status s = control->Bind(ipc::kControlEndpoint.Uri(c.run_dir)); !s.ok()) return s;
    envelope = std::make_unique<ipc::EnvelopeWriter>(ipc::ServiceId::Supervisor, incarnation);

    mirror = std::make_unique<pleg::PlegMirror>(*ctx, clock, c.run_dir, ipc::ServiceId::Supervisor);
    if (Status s = mirror->Connect(loop); !s.ok()) return s;
    runtime_view = std::make_unique<PlegRuntimeView>(*mirror);

    // The node status (and the runtime-up check) needs the runtime.
    NodeStatusOptions node_opts;
    node_opts.node_name = options.node_name;
    node_opts.root_dir = c.root_dir;
    node_opts.max_pods = options.max_pods;
    node_opts.version = NODELET_VERSION;
    for (auto [text, out] : {std::pair{&options.system_reserved, &node_opts.system_reserved},
                             std::pair{&options.kube_reserved, &node_opts.kube_reserved}}) {
      auto r = ParseReservation(*text);
      if (!r.ok()) return r.status();
      *out = *r;
    }
    if (!options.runtime_endpoint.empty()) {
      cri::CriTimeouts timeouts;
      timeouts.query = std::chrono::seconds(2);
      auto client = cri::GrpcCriClient::Create(options.runtime_endpoint, timeouts);
      if (!client.ok()) return client.status();
      cri_client = std::move(*client);
    }
    node_opts.publish = MakeNodeStatusPublisher(*ctx, c.run_dir);
    node =
        std::make_unique<NodeStatusManager>(clock, node_opts, cri_client.get(), cri_client.get());
    node->Start();

    PodManagerOptions pod_opts;
    pod_opts.run_dir = c.run_dir;
    pod_opts.manifest_dir = options.pod_manifest_path;
    pod_opts.manifest_url = options.manifest_url;
    pod_opts.manifest_url_ca = options.manifest_url_ca;
    pod_opts.manifest_url_period = *ParseDuration(options.http_check_frequency);
    for (const auto& h : options.manifest_url_headers) {
      auto parsed = ParseHeaderFlag(h);
      if (!parsed.ok()) return parsed.status();
      pod_opts.manifest_url_headers.push_back(*parsed);
    }
    pod_opts.node_name = options.node_name;
    pod_opts.max_pods = options.max_pods;
    NodeResourceList alloc = node->Allocatable();
    pod_opts.allocatable = NodeResources{alloc.cpu_milli, alloc.memory_bytes};
    pod_opts.on_url_snapshot = [this] { loop.Post([this] { pods->OnReadable(); }); };
    pods = std::make_unique<PodManager>(*ctx, clock, pod_opts);
    if (Status s = pods->Start(); !s.ok()) return s;

    if (!options.http_address.empty()) {
      http =
          std::make_unique<HttpEndpoint>(*ctx, clock, c.run_dir, options.http_address, node.get());
      // Not fatal: the node keeps running its pods without the endpoint.
      if (Status s = http->Start(); !s.ok()) {
        log->error("HTTP endpoint disabled: {}", s.message());
        http.reset();
      } else {
        log->info("HTTP endpoint on {} (/healthz, /pods, /metrics)", options.http_address);
      }
    }

    CtlServerOptions ctl_opts{c.run_dir,       options.ctl_group,  getpid(),
                              NODELET_VERSION, runtime_view.get(), node.get()};
    ctl = std::make_unique<CtlServer>(*ctx, *services, clock, ctl_opts);
    return ctl->Bind();
  }

  // systemd mode: each service is a unit that systemd runs; we watch them over D-Bus.
  Status SetupSystemdMode() {
    auto opened = OpenSystemdBus(std::chrono::milliseconds(2000));
    if (!opened.ok()) return Unavailable("systemd mode: " + opened.status().message());
    bus = std::move(*opened);
    SystemdModeOptions sd;
    sd.unit_prefix = options.unit_prefix;
    sd.job_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
        options.policy.start_timeout + options.policy.stop_timeout);
    sd.heartbeat_deadline = options.policy.heartbeat_deadline;
    std::vector<std::string> names;
    for (const auto& svc : options.services) names.push_back(svc.name);
    units = std::make_unique<SystemdServiceControl>(clock, *bus, sd, names);
    if (Status s = units->Watch(); !s.ok()) return Unavailable("systemd mode: " + s.message());
    services = units.get();
    return Status::Ok();
  }

  void HandleSignal(uint32_t signo) {
    if (signo == SIGCHLD) return;  // reaped after every iteration
    if (signo == SIGHUP) {
      log->info("SIGHUP: asking services to reload their configuration");
      SendCommandToAll(ipc::control::CommandKind::ReloadConfig);
      return;
    }
    if (!stopping) {
      log->info("received {}, stopping every service", strsignal(static_cast<int>(signo)));
      stopping = true;
      notifier.Notify("STOPPING=1\nSTATUS=stopping");
      services->StopAll();
      // Its runtime calls end within their timeout while the services stop.
      node->RequestStop();
    }
  }

  void Reap() {
    for (;;) {
      int st = 0;
      pid_t pid = waitpid(-1, &st, WNOHANG);
      if (pid <= 0) break;
      const std::string* name = manager ? manager->NameOf(pid) : nullptr;
      if (name != nullptr) {
        std::string n = *name;
        launcher->PumpLog(n);
        log->log(stopping ? spdlog::level::info : spdlog::level::warn, "{} (pid {}) exited: {}", n,
                 pid, DescribeWaitStatus(st));
      }
      if (manager) manager->OnExit(pid, st);
    }
  }

  std::map<std::string, std::string> peers;  // service name -> control routing id

  void SendCommand(const std::string& peer, ipc::control::CommandKind kind) {
    static uint64_t next_id = 1;
    flatbuffers::FlatBufferBuilder fbb(128);
    auto cmd = ipc::control::CreateCommand(fbb, next_id++, kind);
    auto header = envelope->Write(fbb);
    fbb.Finish(ipc::control::CreateControlMessage(fbb, header, Body::Command, cmd.Union()),
               ipc::control::ControlMessageIdentifier());
    (void)control->Send(peer, fbb.GetBufferPointer(), fbb.GetSize());
  }

  void SendCommandToAll(ipc::control::CommandKind kind) {
    for (const auto& [name, peer] : peers) SendCommand(peer, kind);
  }

  void HandleControl() {
    for (int i = 0; i < 256 && control->Readable(); ++i) {
      auto in = control->Receive(std::chrono::milliseconds(0));
      if (!in.ok()) continue;
      auto msg = ipc::DecodeMessage<ControlMessage>(in->payload.data(), in->payload.size(),
                                                    ipc::control::ControlMessageIdentifier());
      if (!msg.ok()) {
        ++bad_control;
        if (!bad_control_logged) {
          log->warn("Dropping a bad control message: {}", msg.status().message());
          bad_control_logged = true;
        }
        continue;
      }
      const ControlMessage* m = *msg;
      std::string name = NameOf(m->header()->sender());
      if (name.empty() || !services->Has(name)) continue;
      const bool new_peer = peers[name] != in->peer;
      peers[name] = in->peer;
      ++service_messages[name];
      if (const auto* hello = m->body_as_Hello()) {
        hello_seen.insert(in->peer);
        services->OnReady(name, hello->pid());
        if (name == "podworkerd" || name == "volumed") pods->OnPodworkerdReady();
        flatbuffers::FlatBufferBuilder fbb(128);
        auto w = ipc::control::CreateWelcome(fbb, incarnation, 0);
        auto header = envelope->Write(fbb);
        fbb.Finish(ipc::control::CreateControlMessage(fbb, header, Body::Welcome, w.Union()),
                   ipc::control::ControlMessageIdentifier());
        (void)control->Send(in->peer, fbb.GetBufferPointer(), fbb.GetSize());
      } else if (const auto* hb = m->body_as_Heartbeat()) {
        services->OnHeartbeat(name, hb->health(), hb->reason() ? hb->reason()->str() : "");
        // A service that outlived a supervisor restart (systemd mode) has not said hello to
        // this incarnation: ask it to, so its pid is known.
        if (new_peer && hello_seen.count(in->peer) == 0)
          SendCommand(in->peer, ipc::control::CommandKind::Hello);
        if (hb->counters()) {
          auto& mine = service_counters[name];
          mine.clear();
          for (const auto* counter : *hb->counters()) {
            if (counter->name()) mine[counter->name()->str()] = counter->value();
          }
        }
      }
    }
  }

  void HandleNotify(const std::string& name) {
    NotifySocket* sock = launcher->Notify(name);
    std::string text;
    pid_t sender = 0;
    for (int i = 0; i < 64 && sock->Receive(&text, &sender); ++i) {
      std::istringstream lines(text);
      std::string line;
      while (std::getline(lines, line)) {
        if (line == "READY=1") services->OnReady(name, sender);
      }
    }
  }

  void Report() {
    std::string summary = stopping ? "stopping" : services->Summary();
    if (summary != last_summary) {
      last_summary = summary;
      log->info("{}", summary);
      notifier.Notify("STATUS=" + summary);
    }
    if (!ready_sent && !stopping && services->AllRunning()) {
      // Sending never blocks; READY=1 that found the queue full is sent again next iteration.
      ready_sent =
          notifier.Notify("READY=1\nSTATUS=" + summary) || std::getenv("NOTIFY_SOCKET") == nullptr;
    }
  }

  // Registers `item` (a socket or an fd) on the loop.
  EventLoop::Handle Watch(const zmq::pollitem_t& item, EventLoop::Callback callback) {
    if (item.socket != nullptr) {
      return loop.AddSocket(zmq::socket_ref(zmq::from_handle, item.socket), std::move(callback));
    }
    return loop.AddFd(item.fd, std::move(callback));
  }

  // Matches the loop's sources to the children's notify sockets and log pipes and to the pod
  // manager's sockets and fds as they are now.
  void WatchChangingSources() {
    std::set<std::tuple<int, std::string, bool>> children;
    for (const auto& p :
         launcher ? launcher->Pollables() : std::vector<ChildLauncher::Pollable>{}) {
      auto key = std::make_tuple(p.fd, p.name, p.is_notify);
      children.insert(key);
      if (child_sources.count(key) != 0) continue;
      std::string name = p.name;
      EventLoop::Callback cb;
      if (p.is_notify) {
        cb = [this, name] { HandleNotify(name); };
      } else {
        cb = [this, name] { launcher->PumpLog(name); };
      }
      child_sources[key] = loop.AddFd(p.fd, std::move(cb));
    }
    std::erase_if(child_sources, [&](const auto& kv) { return children.count(kv.first) == 0; });
    std::set<std::pair<void*, int>> pod_items;
    for (const auto& item : pods->PollItems()) {
      auto key = std::make_pair(item.socket, item.fd);
      pod_items.insert(key);
      if (pod_sources.count(key) == 0) {
        pod_sources[key] = Watch(item, [this] { pods->OnReadable(); });
      }
    }
    std::erase_if(pod_sources, [&](const auto& kv) { return pod_items.count(kv.first) == 0; });
  }

  // What the loop runs after every iteration: reaping, the process manager's and the pod
  // manager's timers, the snapshots the HTTP endpoint and the node status read, the summary.
  void AfterIteration() {
    Reap();
    if (bus) {
      // Signals read while a method call waited are queued in sd-bus, not on the fd.
      bus->Process();
      units->RefreshChanged();
    }
    services->Tick();
    if (!stopping) pods->Tick();
    if (http) {
      HttpSnapshot snap{services->List(), service_counters, service_messages, bad_control};
      snap.source_failures = pods->source_failures();
      http->Update(std::move(snap));
    }
    node->SetServices(services->AllRunning(), services->Summary());
    WatchChangingSources();
    MonoTime next = std::min(services->NextDeadline(), pods->NextTick());
    // sd-bus has output it could not write yet: the loop watches its fd for input only, so come
    // back at once to flush it (the socket is normally writable again right away).
    if (bus && (bus->PollItem().events & ZMQ_POLLOUT)) next = clock.Now();
    deadline.ArmAt(next);
    Report();
    if (stopping && services->AllStopped()) loop.Stop();
  }

  int Loop() {
    WatchdogPinger watchdog(notifier, clock, WatchdogInterval());
    loop.SetWatchdog(&watchdog);
    services->StartAll();
    if (units) {
      log->info("nodelet {} monitoring {} systemd units ({}<service>.service, run dir {})",
                NODELET_VERSION, options.services.size(), options.unit_prefix,
                options.common.run_dir);
    } else {
      log->info("nodelet {} supervising {} services (run dir {})", NODELET_VERSION,
                options.services.size(), options.common.run_dir);
    }
    // In this order within an iteration (the signals come first).
    sources.push_back(loop.AddSocket(control->raw(), [this] { HandleControl(); }));
    if (bus) {
      // Before the ctl socket, so a status request sees what systemd just signalled.
      sources.push_back(Watch(bus->PollItem(), [this] {
        bus->Process();
        units->RefreshChanged();
      }));
    }
    sources.push_back(Watch(ctl->PollItem(), [this] { ctl->OnReadable(); }));
    // Nothing to do when it fires: it only wakes the loop for AfterIteration.
    deadline = loop.AddTimer([] {});
    sources.push_back(loop.AddAfterIteration([this] { AfterIteration(); }));
    WatchChangingSources();
    deadline.ArmAt(std::min(services->NextDeadline(), pods->NextTick()));
    Report();
    Status run = loop.Run();
    loop.SetWatchdog(nullptr);
    if (!run.ok()) {
      log->critical("{}", run.message());
      return 1;
    }
    // Every service is gone; reap any descendant left over (we are a subreaper).
    for (;;) {
      int st = 0;
      if (waitpid(-1, &st, WNOHANG) <= 0) break;
    }
    log->info("every service stopped; exiting");
    return 0;
  }
};

Supervisor::Supervisor(SupervisorOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
Supervisor::~Supervisor() = default;

int Supervisor::Run() {
  if (Status s = impl_->Setup(); !s.ok()) {
    if (!impl_->lock_conflict.empty()) {
      std::fprintf(stderr, "%s\n", impl_->lock_conflict.c_str());
      return 1;
    }
    impl_->log->error("Failed to start nodelet: {}", s.message());
    return 1;
  }
  return impl_->Loop();
}

}  // namespace nodelet::supervisor
