#include "ctl/stream_commands.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <iostream>
#include <memory>

#include "ctl/ctl_client.h"
#include "ctl/service_commands.h"
#include "ctl/stream_client.h"
#include "ctl/stream_target.h"
#include "lib/ipc/channel_limits.h"
#include "lib/ipc/codec.h"
#include "lib/ipc/endpoints.h"
#include "lib/ipc/message.h"
#include "lib/ipc/sockets.h"
#include "lib/status/status_client.h"

namespace nodelet::ctl {
namespace {

using ipc::podwork::StreamKind;

// The exit code for a refusal before any session.
int RefusalExit(const Status& s) {
  return s.code() == StatusCode::kNotFound || s.code() == StatusCode::kUnavailable ||
                 s.code() == StatusCode::kDeadlineExceeded
             ? kExitUnknown
             : kExitFailed;
}

std::atomic<int> g_stop_signal{0};
extern "C" void OnStopSignal(int signo) { g_stop_signal = signo; }

int RunExecOrAttach(const std::string& run_dir, const StreamAskText& given) {
  StreamAskText ask = given;
  if (ask.tty && !isatty(STDIN_FILENO)) {
    Error(std::cerr) << "unable to use a TTY: stdin is not a terminal\n";
    ask.tty = false;
  }
  std::string container;
  auto url = RequestStreamUrl(run_dir, ask, &container);
  if (!url.ok()) {
    Error(std::cerr) << url.status().message() << "\n";
    return RefusalExit(url.status());
  }
  RemoteCommandOptions options;
  options.stdin = ask.stdin;
  options.tty = ask.tty;
  auto outcome = RunRemoteCommand(*url, options);
  if (!outcome.ok()) {
    Error(std::cerr) << outcome.status().message() << "\n";
    return kExitFailed;
  }
  if (!outcome->message.empty()) Error(std::cerr) << outcome->message << "\n";
  return outcome->exit_code;
}

int RunPortForwardCommand(const std::string& run_dir, const std::string& pod,
                          const std::vector<std::string>& addresses,
                          const std::vector<std::string>& mappings) {
  PortForwardOptions options;
  options.addresses = addresses.empty() ? std::vector<std::string>{"127.0.0.1"} : addresses;
  StreamAskText ask;
  ask.kind = StreamKind::PortForward;
  ask.pod = pod;
  for (const auto& m : mappings) {
    auto pair = ParsePortPair(m);
    if (!pair.ok()) {
      Error(std::cerr) << pair.status().message() << "\n";
      return kExitUsage;
    }
    options.ports.push_back(*pair);
    ask.ports.push_back(pair->remote);
  }
  // The pod must exist and run before anything listens (the URL is not used: it expires).
  if (auto first = RequestStreamUrl(run_dir, ask); !first.ok()) {
    Error(std::cerr) << first.status().message() << "\n";
    return RefusalExit(first.status());
  }
  options.open_url = [&](uint16_t remote) {
    StreamAskText one = ask;
    one.ports = {remote};
    return RequestStreamUrl(run_dir, one);
  };
  options.on_listen = [](const std::string& address, uint16_t local, uint16_t remote) {
    std::cout << "Forwarding from " << address << ":" << local << " -> " << remote << std::endl;
  };
  options.on_error = [](const std::string& message) { Error(std::cerr) << message << std::endl; };
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  options.stop = [] { return g_stop_signal.load() != 0; };
  Status s = RunPortForward(options);
  if (!s.ok()) {
    Error(std::cerr) << s.message() << "\n";
    return kExitFailed;
  }
  return kExitOk;
}

}  // namespace

Result<std::string> RequestStreamUrl(const std::string& run_dir, const StreamAskText& ask,
                                     std::string* container) {
  ipc::Context ctx;
  // NAME alone: the pod's namespace from statusd's list, as `logs` finds it (a name in several
  // namespaces is refused). Without statusd, NAME is default/NAME.
  std::vector<status::PodStatusRecord> pods;
  if (ask.pod.find('/') == std::string::npos) {
    status::StatusClientOptions copts;
    copts.sender = ipc::ServiceId::Ctl;
    copts.deadline = std::chrono::milliseconds(3000);
    copts.attempt_timeout = std::chrono::milliseconds(1000);
    status::StatusClient statusd(ctx, run_dir, copts);
    if (statusd.Connect().ok()) {
      if (auto list = statusd.ListPodStatuses(); list.ok()) pods = std::move(list->records);
    }
  }
  auto target = ResolveStreamTarget(pods, ask.pod);
  if (!target.ok()) return target.status();
  const std::string& ns = target->namespace_name;
  const std::string& name = target->name;
  // Through the supervisor's ctl socket: podworkerd opens sessions only for the supervisor.
  ipc::ctl::CtlRequestT request;
  request.kind = ipc::ctl::RequestKind::Stream;
  request.stream = std::make_unique<ipc::podwork::StreamRequestT>();
  auto& stream = *request.stream;
  stream.kind = ask.kind;
  stream.namespace_name = ns;
  stream.pod_name = name;
  stream.container = ask.container;
  stream.cmd = ask.cmd;
  stream.stdin = ask.stdin;
  stream.stdout = true;
  stream.stderr = !ask.tty;
  stream.tty = ask.tty;
  stream.ports = ask.ports;
  // Longer than the supervisor's wait for podworkerd (5 s), whose answer says what failed.
  auto reply = CtlCall(RealClock::Get(), run_dir, request, std::chrono::milliseconds(8000));
  if (!reply.ok()) {
    if (reply.status().code() == StatusCode::kPermissionDenied) return reply.status();
    return Status(reply.status().code(),
                  "asking nodelet at " + run_dir + " for the session: " + reply.status().message());
  }
  if (!reply->stream_reply) return Internal("nodelet sent no stream reply");
  const auto& r = *reply->stream_reply;
  if (container != nullptr) *container = r.container;
  if (!r.error.empty()) return Status(static_cast<StatusCode>(r.code), r.error);
  if (r.url.empty()) return Internal("podworkerd sent no URL");
  return r.url;
}

void AddStreamCommands(CLI::App& app, const std::string* run_dir, int* rc) {
  auto exec = std::make_shared<StreamAskText>();
  auto* e = app.add_subcommand("exec", "Run a command in a container (exit code passed through)");
  e->add_flag("-i,--stdin", exec->stdin, "Pass stdin to the command");
  e->add_flag("-t,--tty", exec->tty, "Run the command in a terminal (stdin must be one)");
  e->add_option("-c,--container", exec->container, "Container (required when several)");
  e->add_option("pod", exec->pod, "Pod name (NAME or NAMESPACE/NAME)")->required();
  e->add_option("command", exec->cmd, "The command and its arguments (after --)")->required();
  e->callback([=] { *rc = RunExecOrAttach(*run_dir, *exec); });

  auto attach = std::make_shared<StreamAskText>();
  attach->kind = StreamKind::Attach;
  auto* a = app.add_subcommand("attach", "Attach to a running container's output (and stdin)");
  a->add_flag("-i,--stdin", attach->stdin, "Pass stdin to the container (it needs stdin: true)");
  a->add_flag("-t,--tty", attach->tty, "The container's terminal (it needs tty: true)");
  a->add_option("-c,--container", attach->container, "Container (required when several)");
  a->add_option("pod", attach->pod, "Pod name (NAME or NAMESPACE/NAME)")->required();
  a->callback([=] { *rc = RunExecOrAttach(*run_dir, *attach); });

  auto pf_pod = std::make_shared<std::string>();
  auto pf_addresses = std::make_shared<std::vector<std::string>>();
  auto pf_ports = std::make_shared<std::vector<std::string>>();
  auto* p = app.add_subcommand(
      "port-forward", "Forward local ports to a pod's ports ([LOCAL:]REMOTE; LOCAL empty: any)");
  p->add_option("--address", *pf_addresses,
                "Addresses to listen on (default 127.0.0.1; repeat or comma-separate)")
      ->delimiter(',');
  p->add_option("pod", *pf_pod, "Pod name (NAME or NAMESPACE/NAME)")->required();
  p->add_option("ports", *pf_ports, "[LOCAL:]REMOTE port pairs")->required();
  p->callback([=] { *rc = RunPortForwardCommand(*run_dir, *pf_pod, *pf_addresses, *pf_ports); });
}

}  // namespace nodelet::ctl
