#include "ctl/stream_commands.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <iostream>
#include <memory>

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

using ipc::podwork::Body;
using ipc::podwork::PodWorkMessage;
using ipc::podwork::StreamKind;

Result<const PodWorkMessage*> Decode(const ipc::Frame& frame) {
  return ipc::DecodeMessage<PodWorkMessage>(frame.data(), frame.size(),
                                            ipc::podwork::PodWorkMessageIdentifier());
}

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
    std::cerr << "nodeletctl: unable to use a TTY: stdin is not a terminal\n";
    ask.tty = false;
  }
  std::string container;
  auto url = RequestStreamUrl(run_dir, ask, &container);
  if (!url.ok()) {
    std::cerr << "nodeletctl: " << url.status().message() << "\n";
    return RefusalExit(url.status());
  }
  RemoteCommandOptions options;
  options.stdin = ask.stdin;
  options.tty = ask.tty;
  auto outcome = RunRemoteCommand(*url, options);
  if (!outcome.ok()) {
    std::cerr << "nodeletctl: " << outcome.status().message() << "\n";
    return kExitFailed;
  }
  if (!outcome->message.empty()) std::cerr << "nodeletctl: " << outcome->message << "\n";
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
      std::cerr << "nodeletctl: " << pair.status().message() << "\n";
      return 2;
    }
    options.ports.push_back(*pair);
    ask.ports.push_back(pair->remote);
  }
  // The pod must exist and run before anything listens (the URL is not used: it expires).
  if (auto first = RequestStreamUrl(run_dir, ask); !first.ok()) {
    std::cerr << "nodeletctl: " << first.status().message() << "\n";
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
  options.on_error = [](const std::string& message) {
    std::cerr << "nodeletctl: " << message << std::endl;
  };
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  options.stop = [] { return g_stop_signal.load() != 0; };
  Status s = RunPortForward(options);
  if (!s.ok()) {
    std::cerr << "nodeletctl: " << s.message() << "\n";
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
  ipc::RequestClient client(ctx, ipc::kPodWorkerEndpoint.Uri(run_dir), ipc::kPodWorkChannel);
  if (Status s = client.Connect(); !s.ok()) {
    return Unavailable("podworkerd cannot be reached at " + run_dir + ": " + s.message());
  }
  flatbuffers::FlatBufferBuilder fbb(512);
  std::vector<flatbuffers::Offset<flatbuffers::String>> cmd;
  for (const auto& arg : ask.cmd) cmd.push_back(fbb.CreateString(arg));
  auto request = ipc::podwork::CreateStreamRequestDirect(
      fbb, ask.kind, ns.c_str(), name.c_str(), ask.container.c_str(), &cmd, ask.stdin,
      /*stdout=*/true, /*stderr=*/!ask.tty, ask.tty, &ask.ports);
  ipc::EnvelopeWriter envelope(ipc::ServiceId::Ctl, 0);
  ipc::FinishMessage(fbb, envelope, Body::StreamRequest, request.Union());
  auto frame = client.Call(fbb.GetBufferPointer(), fbb.GetSize(), std::chrono::milliseconds(3000),
                           std::chrono::milliseconds(6000), [](const ipc::Frame& f) {
                             auto m = Decode(f);
                             return m.ok() && (*m)->body_as_StreamReply() != nullptr;
                           });
  if (!frame.ok()) {
    return Unavailable("podworkerd did not answer at " + run_dir + ": " + frame.status().message());
  }
  auto m = Decode(*frame);
  if (!m.ok()) return m.status();
  const auto* reply = (*m)->body_as_StreamReply();
  if (container != nullptr && reply->container()) *container = reply->container()->str();
  if (reply->error() && reply->error()->size() > 0) {
    return Status(static_cast<StatusCode>(reply->code()), reply->error()->str());
  }
  if (!reply->url() || reply->url()->size() == 0) return Internal("podworkerd sent no URL");
  return reply->url()->str();
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
