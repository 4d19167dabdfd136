#include "lib/service/service_runtime.h"

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "lib/common/fs.h"
#include "lib/common/logging.h"
#include "lib/common/systemd_notify.h"
#include "lib/ipc/endpoints.h"
#include "nodelet_version.h"

namespace nodelet {
namespace {

using ipc::control::Body;
using ipc::control::ControlMessage;

// Blocks the signals we handle through a signalfd. Must run before any thread starts (ZeroMQ's
// I/O threads inherit the mask), so it is the first thing RunService does.
int MakeSignalFd() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  // A dead supervisor must not kill us through SIGPIPE on a log pipe; writes fail instead.
  signal(SIGPIPE, SIG_IGN);
  return signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
}

class Runtime {
 public:
  Runtime(const ServiceSpec& spec, const CommonOptions& opts, std::unique_ptr<ServiceHooks> hooks,
          int signal_fd)
      : ipc_(),
        spec_(spec),
        opts_(opts),
        hooks_(std::move(hooks)),
        signal_fd_(signal_fd),
        incarnation_(ipc::NewIncarnation()),
        envelope_(spec.id, incarnation_),
        control_(ipc_, ipc::kControlChannel),
        log_(GetLogger(spec.name)),
        watchdog_(notifier_, clock_, WatchdogInterval()) {}

  int Run() {
    if (Status s = EnsureDirectory(opts_.run_dir, 0700); !s.ok()) {
      log_->error("Failed to prepare the run directory: {}", s.message());
      return 1;
    }
    ServiceContext ctx{opts_, ipc_, clock_, incarnation_};
    if (Status s = hooks_->Start(ctx); !s.ok()) {
      log_->error("Failed to start {}: {}", spec_.name, s.message());
      return 1;
    }
    if (Status s = control_.Connect(ipc::kControlEndpoint.Uri(opts_.run_dir)); !s.ok()) {
      log_->error("Failed to connect to the supervisor: {}", s.message());
      return 1;
    }
    started_ = clock_.Now();
    SendHello();
    notifier_.Notify("READY=1\nSTATUS=running\nMAINPID=" + std::to_string(getpid()));
    log_->info("{} {} started (pid {}, incarnation {:016x})", spec_.name, NODELET_VERSION, getpid(),
               incarnation_);
    SendHeartbeat();

    while (!stop_) {
      watchdog_.Tick();
      std::vector<zmq::pollitem_t> items;
      items.push_back(control_.PollItem());
      items.push_back(zmq::pollitem_t{nullptr, signal_fd_, ZMQ_POLLIN, 0});
      auto service_items = hooks_->PollItems();
      items.insert(items.end(), service_items.begin(), service_items.end());

      MonoTime next = std::min({next_heartbeat_, watchdog_.NextDue(), hooks_->NextTimer()});
      long timeout = MillisUntil(clock_, next, 1000);
      try {
        zmq::poll(items.data(), items.size(), std::chrono::milliseconds(timeout));
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) {
          log_->error("poll failed: {}", e.what());
          return 1;
        }
      }
      if (items[1].revents & ZMQ_POLLIN) HandleSignals();
      if (items[0].revents & ZMQ_POLLIN) HandleControl();
      if (!service_items.empty()) {
        std::vector<zmq::pollitem_t> mine(items.begin() + 2, items.end());
        hooks_->OnPoll(mine);
      }
      auto now = clock_.Now();
      if (hooks_->NextTimer() <= now) hooks_->OnTimer(now);
      if (now >= next_heartbeat_) SendHeartbeat();
    }
    notifier_.Notify("STOPPING=1");
    log_->info("{} stopping", spec_.name);
    hooks_->Stop();
    return 0;
  }

 private:
  void HandleSignals() {
    signalfd_siginfo info{};
    while (read(signal_fd_, &info, sizeof info) == sizeof info) {
      if (info.ssi_signo == SIGHUP) {
        (void)Reload();  // Reload logs its own failure; the service goes on.
      } else {
        log_->info("received {}, stopping", strsignal(static_cast<int>(info.ssi_signo)));
        stop_ = true;
      }
    }
  }

  Status Reload() {
    auto config = LoadYamlFile(opts_.config_file);
    if (!config.ok()) {
      log_->error("Failed to reload config: {}", config.status().message());
      return config.status();
    }
    Status s = hooks_->Reload(*config);
    if (!s.ok()) log_->error("Failed to apply config: {}", s.message());
    return s;
  }

  void HandleControl() {
    // Drain everything queued so a burst never delays heartbeats.
    for (int i = 0; i < 64 && control_.Readable(); ++i) {
      auto frame = control_.Receive(std::chrono::milliseconds(0));
      if (!frame.ok()) break;
      auto msg = ipc::DecodeMessage<ControlMessage>(frame->data(), frame->size(),
                                                    ipc::control::ControlMessageIdentifier());
      if (!msg.ok()) {
        ++bad_messages_;
        if (!bad_logged_) {
          log_->warn("Dropping a bad control message: {}", msg.status().message());
          bad_logged_ = true;
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
        stop_ = true;
        break;
      case ipc::control::CommandKind::ReloadConfig:
        result = Reload();
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
    auto header = envelope_.Write(fbb);
    fbb.Finish(ipc::control::CreateControlMessage(fbb, header, type, body),
               ipc::control::ControlMessageIdentifier());
    // A full queue means the supervisor is away; heartbeats are not worth queueing.
    (void)control_.Send(fbb.GetBufferPointer(), fbb.GetSize());
  }

  void SendHello() {
    flatbuffers::FlatBufferBuilder fbb(256);
    auto hello =
        ipc::control::CreateHelloDirect(fbb, spec_.name.c_str(), getpid(), NODELET_VERSION,
                                        static_cast<uint32_t>(opts_.heartbeat_interval_ms));
    Send(fbb, Body::Hello, hello.Union());
  }

  void SendHeartbeat() {
    HealthReport health = hooks_->Health();
    CounterList counters = hooks_->Counters();
    counters.emplace_back("ipc_control_messages", control_messages_);
    counters.emplace_back("ipc_bad_messages", bad_messages_);
    std::sort(counters.begin(), counters.end());
    flatbuffers::FlatBufferBuilder fbb(512);
    std::vector<flatbuffers::Offset<ipc::control::Counter>> offs;
    offs.reserve(counters.size());
    for (const auto& [name, value] : counters) {
      offs.push_back(ipc::control::CreateCounterDirect(fbb, name.c_str(), value));
    }
    auto uptime = std::chrono::duration_cast<std::chrono::milliseconds>(clock_.Now() - started_);
    auto hb = ipc::control::CreateHeartbeat(fbb, health.health, fbb.CreateString(health.reason),
                                            static_cast<uint64_t>(uptime.count()),
                                            fbb.CreateVector(offs));
    Send(fbb, Body::Heartbeat, hb.Union());
    next_heartbeat_ = clock_.Now() + std::chrono::milliseconds(opts_.heartbeat_interval_ms);
  }

  // First member, so it is destroyed last: zmq_ctx_term waits for every socket, including the
  // hooks' own, to be closed.
  ipc::Context ipc_;
  const ServiceSpec& spec_;
  const CommonOptions& opts_;
  std::unique_ptr<ServiceHooks> hooks_;
  int signal_fd_;
  RealClock clock_;
  uint64_t incarnation_;
  ipc::EnvelopeWriter envelope_;
  ipc::DealerClient control_;
  std::shared_ptr<spdlog::logger> log_;
  SystemdNotifierImpl notifier_;
  WatchdogPinger watchdog_;
  MonoTime started_{};
  MonoTime next_heartbeat_{};
  uint64_t supervisor_incarnation_ = 0;
  uint64_t control_messages_ = 0;
  uint64_t bad_messages_ = 0;
  bool bad_logged_ = false;
  bool stop_ = false;
};

}  // namespace

int RunService(const ServiceSpec& spec, int argc, char** argv) {
  int signal_fd = MakeSignalFd();
  if (signal_fd < 0) {
    fprintf(stderr, "nodelet-%s: signalfd: %s\n", spec.name.c_str(), strerror(errno));
    return 1;
  }
  CLI::App app{spec.description, "nodelet-" + spec.name};
  CommonOptions opts;
  AddCommonOptions(app, opts, spec.name);
  if (spec.add_flags) spec.add_flags(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  opts.config_file = app.get_config_ptr()->as<std::string>();
  InitLogging(spec.name, opts.log_level);
  auto hooks = spec.make_hooks(opts);
  Runtime runtime(spec, opts, std::move(hooks), signal_fd);
  int rc = runtime.Run();
  close(signal_fd);
  return rc;
}

}  // namespace nodelet
