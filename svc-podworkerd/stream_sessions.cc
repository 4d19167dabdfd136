#include "svc-podworkerd/stream_sessions.h"

#include <algorithm>
#include <set>

namespace nodelet::podworkerd {
namespace {

using ipc::pleg::ContainerRecordT;
using ipc::pleg::PodRecordT;
using ipc::podwork::StreamKind;

bool HasReadySandbox(const PodRecordT& r) {
  return std::any_of(r.sandboxes.begin(), r.sandboxes.end(),
                     [](const auto& s) { return s && s->state == ipc::pleg::SandboxState::Ready; });
}

std::string PodName(const StreamAsk& ask) { return ask.namespace_name + "/" + ask.pod_name; }

}  // namespace

StreamAsk DecodeStreamAsk(const ipc::podwork::StreamRequest& request) {
  StreamAsk ask;
  ask.kind = request.kind();
  if (request.namespace_name()) ask.namespace_name = request.namespace_name()->str();
  if (ask.namespace_name.empty()) ask.namespace_name = "default";
  if (request.pod_name()) ask.pod_name = request.pod_name()->str();
  if (request.container()) ask.container = request.container()->str();
  if (request.cmd()) {
    for (const auto* arg : *request.cmd()) ask.cmd.push_back(arg ? arg->str() : std::string());
  }
  ask.stdin = request.stdin();
  ask.stdout = request.stdout();
  ask.stderr = request.stderr();
  ask.tty = request.tty();
  if (request.ports()) ask.ports.assign(request.ports()->begin(), request.ports()->end());
  return ask;
}

Result<StreamTarget> FindStreamTarget(const std::map<std::string, PodRecordT>& pods,
                                      const StreamAsk& ask) {
  if (ask.pod_name.empty()) return InvalidArgument("no pod named");
  if (ask.kind == StreamKind::Exec && ask.cmd.empty()) {
    return InvalidArgument("no command to run (give it after --)");
  }
  if (ask.kind == StreamKind::PortForward) {
    if (ask.ports.empty()) return InvalidArgument("no port to forward");
    for (int32_t p : ask.ports) {
      if (p < 1 || p > 65535) {
        return InvalidArgument("port " + std::to_string(p) + " is not in 1-65535");
      }
    }
  }
  // The pod's records (a pod recreated under the same name has a new UID: the one with a ready
  // sandbox is the live one).
  const PodRecordT* chosen = nullptr;
  for (const auto& [uid, r] : pods) {
    if (r.removed || r.foreign || r.name != ask.pod_name || r.namespace_ != ask.namespace_name) {
      continue;
    }
    if (chosen == nullptr || (HasReadySandbox(r) && !HasReadySandbox(*chosen))) chosen = &r;
  }
  if (chosen == nullptr) return NotFound("pod " + PodName(ask) + " not found");

  StreamTarget target;
  if (ask.kind == StreamKind::PortForward) {
    for (const auto& s : chosen->sandboxes) {
      if (s && s->state == ipc::pleg::SandboxState::Ready) target.sandbox_id = s->id;
    }
    if (target.sandbox_id.empty()) {
      return FailedPrecondition("pod " + PodName(ask) + " has no running sandbox");
    }
    return target;
  }

  std::set<std::string> names;
  for (const auto& c : chosen->containers) {
    if (c) names.insert(c->name);
  }
  target.container = ask.container;
  if (target.container.empty()) {
    if (names.size() != 1) {
      std::string list;
      for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
      if (names.empty()) return NotFound("pod " + PodName(ask) + " has no container yet");
      return InvalidArgument("pod " + PodName(ask) +
                             " has several containers, choose one with -c: " + list);
    }
    target.container = *names.begin();
  }
  // The newest instance of the container (the highest attempt).
  const ContainerRecordT* latest = nullptr;
  for (const auto& c : chosen->containers) {
    if (c && c->name == target.container && (latest == nullptr || c->attempt > latest->attempt)) {
      latest = c.get();
    }
  }
  if (latest == nullptr) {
    return NotFound("container " + target.container + " not found in pod " + PodName(ask));
  }
  if (latest->state != ipc::pleg::ContainerState::Running) {
    return FailedPrecondition("container " + target.container + " of pod " + PodName(ask) +
                              " is not running (" +
                              ipc::pleg::EnumNameContainerState(latest->state) + ")");
  }
  target.container_id = latest->id;
  target.sandbox_id = latest->sandbox_id;
  return target;
}

Result<std::string> OpenStream(cri::RuntimeService& runtime, const StreamAsk& ask,
                               const StreamTarget& target) {
  switch (ask.kind) {
    case StreamKind::Exec: {
      cri::v1::ExecRequest r;
      r.set_container_id(target.container_id);
      for (const auto& arg : ask.cmd) r.add_cmd(arg);
      r.set_tty(ask.tty);
      r.set_stdin(ask.stdin);
      r.set_stdout(ask.stdout);
      // With a terminal, stderr is the terminal's (the CRI refuses both).
      r.set_stderr(ask.stderr && !ask.tty);
      return runtime.Exec(r);
    }
    case StreamKind::Attach: {
      cri::v1::AttachRequest r;
      r.set_container_id(target.container_id);
      r.set_stdin(ask.stdin);
      r.set_tty(ask.tty);
      r.set_stdout(ask.stdout);
      r.set_stderr(ask.stderr && !ask.tty);
      return runtime.Attach(r);
    }
    case StreamKind::PortForward: {
      cri::v1::PortForwardRequest r;
      r.set_pod_sandbox_id(target.sandbox_id);
      for (int32_t p : ask.ports) r.add_port(p);
      return runtime.PortForward(r);
    }
  }
  return InvalidArgument("unknown session kind");
}

}  // namespace nodelet::podworkerd
