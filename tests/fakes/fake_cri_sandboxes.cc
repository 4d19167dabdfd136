// FakeCriRuntime's sandboxes: RunPodSandbox (reserved names, a pod-network IP, NetworkReady),
// stop, remove, status and listing, PortForward, and the knobs that change a sandbox behind the
// client's back (its state, hidden from the listing).
#include <string>
#include <utility>
#include <vector>

#include "tests/fakes/fake_cri_internal.h"
#include "tests/fakes/fake_cri_runtime.h"

namespace nodelet::testing {

using fake_cri_internal::CallError;
using fake_cri_internal::HasPrefix;
using fake_cri_internal::LabelsMatch;
using fake_cri_internal::MakeId;

Status FakeCriRuntime::SetSandboxState(const std::string& pod_sandbox_id,
                                       v1::PodSandboxState state) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sandboxes_.find(pod_sandbox_id);
  if (it == sandboxes_.end()) return NotFound("no sandbox '" + pod_sandbox_id + "'");
  it->second.state = state;
  Tick();
  return Status::Ok();
}

Result<std::string> FakeCriRuntime::RunPodSandbox(const v1::PodSandboxConfig& config,
                                                  const std::string& runtime_handler) {
  std::unique_lock<std::mutex> lock(mu_);
  if (Status s = Enter(lock, CriCall::kRunPodSandbox, {config.metadata().uid()}); !s.ok()) return s;
  const auto& md = config.metadata();
  if (md.name().empty() || md.uid().empty() || md.namespace_().empty()) {
    return CallError(CriCall::kRunPodSandbox, StatusCode::kInvalidArgument,
                     "sandbox config must include metadata name, uid and namespace");
  }
  for (const auto& [id, sb] : sandboxes_) {
    const auto& other = sb.config.metadata();
    if (other.name() == md.name() && other.namespace_() == md.namespace_() &&
        other.uid() == md.uid() && other.attempt() == md.attempt()) {
      return CallError(CriCall::kRunPodSandbox, StatusCode::kAlreadyExists,
                       "failed to reserve sandbox name: name is reserved for \"" + id + "\"");
    }
  }
  const bool pod_network =
      !config.has_linux() || !config.linux().has_security_context() ||
      config.linux().security_context().namespace_options().network() != v1::NODE;
  if (pod_network && !network_ready_) {
    return CallError(CriCall::kRunPodSandbox, StatusCode::kInternal,
                     "failed to setup network for sandbox: " + network_message_);
  }
  std::string id = MakeId(next_id_++);
  Sandbox sb;
  sb.config = config;
  if (pod_network) sb.ip = "198.19.255." + std::to_string(next_ip_++ % 250 + 2);
  sb.created_at = Tick();
  sb.runtime_handler = runtime_handler;
  sandboxes_.emplace(id, std::move(sb));
  return id;
}

Status FakeCriRuntime::StopPodSandbox(const std::string& pod_sandbox_id) {
  std::unique_lock<std::mutex> lock(mu_);
  if (Status s = Enter(lock, CriCall::kStopPodSandbox, {pod_sandbox_id}); !s.ok()) return s;
  auto it = sandboxes_.find(pod_sandbox_id);
  if (it == sandboxes_.end()) {
    return CallError(
        CriCall::kStopPodSandbox, StatusCode::kNotFound,
        "an error occurred when try to find sandbox \"" + pod_sandbox_id + "\": not found");
  }
  for (auto& [id, c] : containers_) {
    if (c.sandbox_id == pod_sandbox_id && c.state == v1::CONTAINER_RUNNING) {
      StopContainerLocked(c, stop_exit_code_, "Error");
    }
  }
  it->second.state = v1::SANDBOX_NOTREADY;
  Tick();
  return Status::Ok();
}

Status FakeCriRuntime::RemovePodSandbox(const std::string& pod_sandbox_id) {
  std::unique_lock<std::mutex> lock(mu_);
  if (Status s = Enter(lock, CriCall::kRemovePodSandbox, {pod_sandbox_id}); !s.ok()) return s;
  if (sandboxes_.erase(pod_sandbox_id) == 0) return Status::Ok();  // idempotent
  std::erase_if(containers_,
                [&](const auto& kv) { return kv.second.sandbox_id == pod_sandbox_id; });
  Tick();
  return Status::Ok();
}

Result<v1::PodSandboxStatusResponse> FakeCriRuntime::PodSandboxStatus(
    const std::string& pod_sandbox_id, bool verbose) {
  std::unique_lock<std::mutex> lock(mu_);
  if (Status s = Enter(lock, CriCall::kPodSandboxStatus, {pod_sandbox_id}); !s.ok()) return s;
  auto it = sandboxes_.find(pod_sandbox_id);
  if (it == sandboxes_.end()) {
    return CallError(CriCall::kPodSandboxStatus, StatusCode::kNotFound,
                     "an error occurred when try to find sandbox: not found");
  }
  const Sandbox& sb = it->second;
  v1::PodSandboxStatusResponse r;
  auto* s = r.mutable_status();
  s->set_id(pod_sandbox_id);
  *s->mutable_metadata() = sb.config.metadata();
  s->set_state(sb.state);
  s->set_created_at(sb.created_at);
  s->mutable_network()->set_ip(sb.ip);  // empty for the host network
  if (sb.config.has_linux() && sb.config.linux().has_security_context()) {
    *s->mutable_linux()->mutable_namespaces()->mutable_options() =
        sb.config.linux().security_context().namespace_options();
  }
  *s->mutable_labels() = sb.config.labels();
  *s->mutable_annotations() = sb.config.annotations();
  s->set_runtime_handler(sb.runtime_handler);
  if (verbose) (*r.mutable_info())["info"] = "{}";
  r.set_timestamp(now_ns_);
  return r;
}

void FakeCriRuntime::HideFromListing(const std::string& sandbox_id) {
  std::lock_guard<std::mutex> lock(mu_);
  hidden_sandboxes_.insert(sandbox_id);
}

Result<std::vector<v1::PodSandbox>> FakeCriRuntime::ListPodSandbox(
    const v1::PodSandboxFilter& filter) {
  std::unique_lock<std::mutex> lock(mu_);
  if (Status s = Enter(lock, CriCall::kListPodSandbox, {}); !s.ok()) return s;
  std::vector<v1::PodSandbox> out;
  for (const auto& [id, sb] : sandboxes_) {
    if (hidden_sandboxes_.count(id) != 0) continue;
    if (!filter.id().empty() && !HasPrefix(id, filter.id())) continue;
    if (filter.has_state() && filter.state().state() != sb.state) continue;
    if (!LabelsMatch(sb.config.labels(), filter.label_selector())) continue;
    v1::PodSandbox p;
    p.set_id(id);
    *p.mutable_metadata() = sb.config.metadata();
    p.set_state(sb.state);
    p.set_created_at(sb.created_at);
    *p.mutable_labels() = sb.config.labels();
    *p.mutable_annotations() = sb.config.annotations();
    p.set_runtime_handler(sb.runtime_handler);
    out.push_back(std::move(p));
  }
  return out;
}

Result<std::string> FakeCriRuntime::PortForward(const v1::PortForwardRequest& request) {
  std::unique_lock<std::mutex> lock(mu_);
  if (Status s = Enter(lock, CriCall::kPortForward, {}); !s.ok()) return s;
  auto it = sandboxes_.find(request.pod_sandbox_id());
  if (it == sandboxes_.end() || it->second.state != v1::SANDBOX_READY) {
    return CallError(CriCall::kPortForward, StatusCode::kNotFound,
                     "sandbox " + request.pod_sandbox_id() + " not found or not ready");
  }
  std::string url = "fake://portforward/" + request.pod_sandbox_id() + "?ports=";
  for (int i = 0; i < request.port_size(); ++i) {
    url += (i > 0 ? "," : "") + std::to_string(request.port(i));
  }
  return url;
}

}  // namespace nodelet::testing
