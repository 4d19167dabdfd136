#include "lib/service/service_runtime.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "lib/common/fs.h"
#include "lib/common/heap.h"
#include "lib/common/logging.h"
#include "lib/common/systemd_notify.h"
#include "lib/common/trusted_path.h"
#include "lib/ipc/endpoints.h"
#include "lib/ipc/message.h"
#include "lib/service/config_reload.h"
#include "nodelet_version.h"

namespace nodelet {
namespace {

using ipc::control::Body;
using ipc::control::ControlMessage;

// Blocks the signals the loop handles through its signalfd. Must run before any thread starts
// (ZeroMQ's I/O threads inherit the mask), so it is the first thing RunService does.
void BlockServiceSignals() {
  EventLoop::BlockSignals({SIGTERM, SIGINT, SIGHUP});
  // A dead supervisor must not kill us through SIGPIPE on a log pipe; writes fail instead.
  signal(SIGPIPE, SIG_IGN);
}

class Runtime {
 public:
  Runtime(const ServiceSpec& spec, const CommonOptions& opts, const CLI::App& app,
          std::vector<std::string> argv)
      : ipc_(),
        spec_(spec),
        opts_(opts),
        app_(app),
        argv_(std::move(argv)),
        log_level_(opts.log_level),
        incarnation_(ipc::NewIncarnation()),
        envelope_(spec.id, incarnation_),
        control_(ipc_, ipc::kControlChannel),
        log_(GetLogger(spec.name)),
        watchdog_(notifier_, clock_, WatchdogInterval()),
        loop_(clock_),
        ctx_{opts_, ipc_, clock_, incarnation_, loop_} {}

  int Run() {
    // What the config file gave at start (it parsed a moment ago), for reloads to compare with.
    if (auto settings = ReadFileSettings(opts_.config_file, spec_.name, app_); settings.ok()) {
      file_settings_ = std::move(*settings);
    }
    const auto policy = ipc::PeerPolicy::ForThisProcess(opts_.admin_group);
    // The directories this service uses, as the supervisor checks them (lib/common/trusted_path.h):
    // before the run directory is made or fixed, and after.
    const std::vector<std::pair<std::string, std::string>> trusted = {
        {"--root-dir", opts_.root_dir}, {"--run-dir", opts_.run_dir}, {"--log-dir", opts_.log_dir}};
    const auto trust = TrustPolicy::ForThisProcess(opts_.admin_group);
    if (Status s = CheckTrustedPaths(trusted, trust); !s.ok()) {
      log_->error("Refusing to start: {}", s.message());
      return 1;
    }
    if (Status s = ipc::PrepareRunDirectory(opts_.run_dir, policy); !s.ok()) {
      log_->error("Failed to prepare the run directory: {}", s.message());
      return 1;
    }
    if (Status s = CheckTrustedPaths(trusted, trust); !s.ok()) {
      log_->error("Refusing to start: {}", s.message());
      return 1;
    }
    // Before the service binds anything: every socket it binds checks its peers.
    // (RealClock::Get(): the gate lives in ipc_, which outlives clock_.)
    if (Status s = ipc_.RequirePeerPolicy(policy, RealClock::Get()); !s.ok()) {
      log_->error("{}", s.message());
      return 1;
    }
    std::vector<EventLoop::Handle> sources;
    for (int signo : {SIGTERM, SIGINT, SIGHUP}) {
      sources.push_back(loop_.AddSignal(
          signo, [this](const signalfd_siginfo& info) { HandleSignal(info.ssi_signo); }));
    }
    auto service = spec_.create(ctx_);
    if (!service.ok()) {
      log_->error("Failed to start {}: {}", spec_.name, service.status().message());
      return 1;
    }
    service_ = std::move(service).value();
    if (Status s = control_.Connect(ipc::kControlEndpoint.Uri(opts_.run_dir)); !s.ok()) {
      log_->error("Failed to connect to the supervisor: {}", s.message());
      StopService();
      return 1;
    }
    sources.push_back(loop_.AddSocket(control_.raw(), [this] { HandleControl(); }));
    EventLoop::Timer heartbeat = loop_.AddTimer([this] { SendHeartbeat(); });
    heartbeat.ArmRepeating(std::chrono::milliseconds(opts_.heartbeat_interval_ms));
    EventLoop::Timer release_heap = loop_.AddTimer(ReleaseFreeHeap);
    release_heap.ArmRepeating(kHeapReleasePeriod);
    loop_.SetWatchdog(&watchdog_);
    started_ = clock_.Now();
    SendHello();
    notifier_.Notify("READY=1\nSTATUS=running\nMAINPID=" + std::to_string(getpid()));
    log_->info("{} {} started (pid {}, incarnation {:016x})", spec_.name, NODELET_VERSION, getpid(),
               incarnation_);
    SendHeartbeat();

    Status run = loop_.Run();
    if (!run.ok()) {
      log_->error("{}", run.message());
      StopService();
      return 1;
    }
    notifier_.Notify("STOPPING=1");
    log_->info("{} stopping", spec_.name);
    StopService();
    return 0;
  }

 private:
  void HandleSignal(uint32_t signo) {
    if (signo == SIGHUP) {
      (void)Reload("");  // Reload logs its own failure; the service goes on.
    } else {
      log_->info("received {}, stopping", strsignal(static_cast<int>(signo)));
      loop_.Stop();
    }
  }

  // Stops and destroys the service while the loop it registered on still exists.
  void StopService() {
    if (!service_) return;
    service_->Stop();
    // What it did, for whoever reads the log after it is gone (a bench, an operator after a
    // restart): its counters as the last heartbeat would have sent them.
    std::string counters;
    for (const auto& [name, value] : service_->Counters()) {
      counters += (counters.empty() ? "" : " ") + name + "=" + std::to_string(value);
    }
    log_->info("{} counters at stop: {}", spec_.name, counters);
    service_.reset();
  }

  // SIGHUP, or the supervisor's ReloadConfig with its log level (`supervisor_level`, empty when
  // none): reads the config file again and applies what changed and can change live (the log
  // level); names what needs a restart. A file that does not parse, or an invalid level, is
  // refused whole. The service's own Reload then gets the file.
  Status Reload(const std::string& supervisor_level) {
    notifier_.Notify("RELOADING=1\nSTATUS=reloading the configuration");
    Status s = ReloadFile(supervisor_level);
    if (!s.ok()) {
      log_->error("Reload of {} refused, nothing changed: {}",
                  opts_.config_file.empty() ? "(no --config)" : opts_.config_file, s.message());
    }
    notifier_.Notify("READY=1\nSTATUS=running");
    return s;
  }

  Status ReloadFile(const std::string& supervisor_level) {
    auto after = ReadFileSettings(opts_.config_file, spec_.name, app_);
    if (!after.ok()) return after.status();
    ReloadPlan plan = PlanReload(file_settings_, *after, {"log-level"}, argv_);
    std::string level = log_level_;
    if (Applies(plan, "log-level")) level = SettingOr(*after, "log-level", "info");
    if (!supervisor_level.empty()) {
      // The supervisor's level wins over the --log-level it put on this command line.
      std::erase(plan.overridden, "log-level");
      level = supervisor_level;
    }
    if (!IsLogLevel(level)) {
      return InvalidArgument(opts_.config_file + ": log-level: '" + level +
                             "' is not one of trace, debug, info, warn, error, critical, off");
    }
    auto config = LoadYamlFile(opts_.config_file);
    if (!config.ok()) return config.status();
    if (Status s = service_->Reload(*config); !s.ok()) return s;
    std::string summary = plan.Summary();
    if (level != log_level_) {
      SetLogLevel(level);
      if (!supervisor_level.empty() && !Applies(plan, "log-level")) {
        const std::string taken = "log level " + level + ", the supervisor's";
        summary = plan.empty() ? taken : summary + "; " + taken;
      }
      log_level_ = level;
    }
    file_settings_ = SettingsAfterReload(file_settings_, *after, plan);
    log_->info("Reloaded {}: {}", opts_.config_file.empty() ? "(no --config)" : opts_.config_file,
               summary);
    return Status::Ok();
  }

  void HandleControl() {
    // Drain everything queued so a burst never delays heartbeats.
    for (int i = 0; i < 64 && control_.Readable(); ++i) {
      auto frame = control_.Receive(std::chrono::milliseconds(0));
      if (!frame.ok()) break;
      auto msg = ipc::DecodeMessage<ControlMessage>(frame->data(), frame->size(),
                                                    ipc::control::ControlMessageIdentifier());
      if (!msg.ok()) {
        if (bad_messages_.Count()) {
          log_->warn("Dropping a bad control message: {}", msg.status().message());
        }
        continue;
      }
      ++control_messages_;
      const ControlMessage* m = *msg;
      if (m->body_type() == Body::Welcome) {
        uint64_t sup = m->body_as_Welcome()->supervisor_incarnation();
        if (supervisor_incarnation_ != 0 && sup != supervisor_incarnation_) {
          log_->info("supervisor restarted (incarnation {:016x})", sup);
        }
        supervisor_incarnation_ = sup;
      } else if (m->body_type() == Body::Command) {
        HandleCommand(*m->body_as_Command());
      }
    }
  }

  void HandleCommand(const ipc::control::Command& cmd) {
    Status result;
    switch (cmd.kind()) {
      case ipc::control::CommandKind::Stop:
        log_->info("stop requested by the supervisor");
        loop_.Stop();
        break;
      case ipc::control::CommandKind::ReloadConfig:
        result = Reload(cmd.log_level() != nullptr ? cmd.log_level()->str() : "");
        break;
      case ipc::control::CommandKind::Hello:
        SendHello();
        break;
    }
    flatbuffers::FlatBufferBuilder fbb(256);
    auto err = fbb.CreateString(result.message());
    auto reply = ipc::control::CreateReply(fbb, cmd.id(), result.ok(), err);
    Send(fbb, Body::Reply, reply.Union());
  }

  void Send(flatbuffers::FlatBufferBuilder& fbb, Body type, flatbuffers::Offset<void> body) {
    // A full queue means the supervisor is away; heartbeats are not worth queueing.
    (void)ipc::SendMessage(control_, fbb, envelope_, type, body);
  }

  void SendHello() {
    beats_to_counters_ = 0;  // a new supervisor has none of them yet
    const HealthReport health = service_->Health();
    flatbuffers::FlatBufferBuilder fbb(256);
    auto hello = ipc::control::CreateHelloDirect(fbb, spec_.name.c_str(), getpid(), NODELET_VERSION,
                                                 static_cast<uint32_t>(opts_.heartbeat_interval_ms),
                                                 health.health, health.reason.c_str());
    Send(fbb, Body::Hello, hello.Union());
  }

  // The counters go with the first heartbeat after each hello and then with every
  // kCountersEvery-th one: /metrics shows them at most that many intervals late, and an idle
  // service does not export its histograms every second (at 100 idle pods that was about a
  // seventh of podworkerd's and plegd's CPU). Health goes with every heartbeat. A heartbeat
  // without counters leaves the supervisor's copy as it was.
  static constexpr int kCountersEvery = 5;

  void SendHeartbeat() {
    HealthReport health = service_->Health();
    flatbuffers::FlatBufferBuilder fbb(512);
    flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<ipc::control::Counter>>> offs_vec;
    if (beats_to_counters_ <= 0) {
      beats_to_counters_ = kCountersEvery;
      CounterList counters = service_->Counters();
      counters.emplace_back("ipc_control_messages", control_messages_);
      counters.emplace_back("ipc_bad_messages", bad_messages_.count());
      if (const ipc::PeerGate* gate = ipc_.gate()) {
        counters.emplace_back("ipc_refused_peers", gate->refused());
      }
      std::sort(counters.begin(), counters.end());
      std::vector<flatbuffers::Offset<ipc::control::Counter>> offs;
      offs.reserve(counters.size());
      for (const auto& [name, value] : counters) {
        offs.push_back(ipc::control::CreateCounterDirect(fbb, name.c_str(), value));
      }
      offs_vec = fbb.CreateVector(offs);
    }
    --beats_to_counters_;
    auto uptime = std::chrono::duration_cast<std::chrono::milliseconds>(clock_.Now() - started_);
    auto hb = ipc::control::CreateHeartbeat(fbb, health.health, fbb.CreateString(health.reason),
                                            static_cast<uint64_t>(uptime.count()), offs_vec);
    Send(fbb, Body::Heartbeat, hb.Union());
  }

  // First member, so it is destroyed last: zmq_ctx_term waits for every socket, including the
  // service's own, to be closed.
  ipc::Context ipc_;
  const ServiceSpec& spec_;
  const CommonOptions& opts_;
  const CLI::App& app_;            // RunService's, which outlives the runtime
  std::vector<std::string> argv_;  // the command line without argv[0]
  std::string log_level_;          // the level logging runs at
  RealClock clock_;
  uint64_t incarnation_;
  ipc::EnvelopeWriter envelope_;
  ipc::DealerClient control_;
  std::shared_ptr<spdlog::logger> log_;
  SystemdNotifierImpl notifier_;
  WatchdogPinger watchdog_;
  EventLoop loop_;
  ServiceContext ctx_;
  FileSettings file_settings_;  // the config file as the service runs it
  // Destroyed before the loop its sources are registered on.
  std::unique_ptr<Service> service_;
  MonoTime started_{};
  uint64_t supervisor_incarnation_ = 0;
  uint64_t control_messages_ = 0;
  int beats_to_counters_ = 0;  // heartbeats until the next one with the counters
  ipc::BadMessageCounter bad_messages_;
};

}  // namespace

std::unique_ptr<CLI::App> MakeServiceApp(const ServiceSpec& spec, CommonOptions& opts) {
  auto app = std::make_unique<CLI::App>(spec.description, "nodelet-" + spec.name);
  AddCommonOptions(*app, opts, spec.name);
  if (spec.add_flags) spec.add_flags(*app);
  return app;
}

int RunService(const ServiceSpec& spec, int argc, char** argv) {
  UseOneMallocArena();
  BlockServiceSignals();
  CommonOptions opts;
  auto app_ptr = MakeServiceApp(spec, opts);
  CLI::App& app = *app_ptr;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return ExitOnParseError(app, e);
  }
  opts.config_file = app.get_config_ptr()->as<std::string>();
  if (Status s = ResolveCommonOptions(opts); !s.ok()) {
    std::fprintf(stderr, "nodelet-%s: %s\n", spec.name.c_str(), s.message().c_str());
    return 2;
  }
  InitLogging(spec.name, opts.log_level, opts.log_format);
  Runtime runtime(spec, opts, app, std::vector<std::string>(argv + std::min(argc, 1), argv + argc));
  return runtime.Run();
}

}  // namespace nodelet
