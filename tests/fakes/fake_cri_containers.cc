// FakeCriRuntime's containers: create (reserved names, the image must be there), start, stop,
// remove, status and listing, ExecSync, Exec, Attach, ReopenContainerLog, ListContainerStats,
// and the knobs that change a container behind the client's back (its process exits, the exec
// handler, the exit code of a stop, its writable layer).
#include <cstdio>
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

Status FakeCriRuntime::ExitContainer(const std::string& container_id, int32_t exit_code,
                                     const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = containers_.find(container_id);
  if (it == containers_.end()) return NotFound("no container '" + container_id + "'");
  if (it->second.state != v1::CONTAINER_RUNNING) {
    return FailedPrecondition("container '" + container_id + "' is not running");
  }
  StopContainerLocked(it->second, exit_code, reason);
  return Status::Ok();
}

void FakeCriRuntime::SetExecHandler(ExecHandler handler) {
  std::lock_guard<std::mutex> lock(mu_);
  exec_handler_ = std::move(handler);
}

void FakeCriRuntime::SetStopExitCode(int32_t exit_code) {
  std::lock_guard<std::mutex> lock(mu_);
  stop_exit_code_ = exit_code;
}

std::vector<std::string> FakeCriRuntime::ContainerIds(const std::string& container_id) const {
  std::vector<std::string> ids{container_id};
  auto it = containers_.find(container_id);
  if (it != containers_.end()) ids.push_back(it->second.sandbox_id);
  return ids;
}

void FakeCriRuntime::StopContainerLocked(ContainerRecord& c, int32_t exit_code,
                                         const std::string& reason) {
  c.state = v1::CONTAINER_EXITED;
  c.exit_code = exit_code;
  c.reason = reason;
  c.finished_at = Tick();
}

v1::ContainerStatus FakeCriRuntime::BuildContainerStatus(const std::string& id,
                                                         const ContainerRecord& c) const {
  v1::ContainerStatus s;
  s.set_id(id);
  *s.mutable_metadata() = c.config.metadata();
  s.set_state(c.state);
  s.set_created_at(c.created_at);
  s.set_started_at(c.started_at);
  s.set_finished_at(c.finished_at);
  s.set_exit_code(c.exit_code);
  *s.mutable_image() = c.config.image();
  s.set_image_ref(c.image_id);
  s.set_image_id(c.image_id);
  s.set_reason(c.reason);
  *s.mutable_labels() = c.config.labels();
  *s.mutable_annotations() = c.config.annotations();
  *s.mutable_mounts() = c.config.mounts();
  s.set_log_path(c.log_path);
  return s;
}

Result<std::string> FakeCriRuntime::CreateContainer(const std::string& pod_sandbox_id,
                                                    const v1::ContainerConfig& config,
                                                    const v1::PodSandboxConfig& sandbox_config) {
  std::unique_lock<std::mutex> lock(mu_);
  if (Status s = Enter(lock, CriCall::kCreateContainer, {pod_sandbox_id}); !s.ok()) return s;
  auto sb = sandboxes_.find(pod_sandbox_id);
  if (sb == sandboxes_.end()) {
    return CallError(CriCall::kCreateContainer, StatusCode::kNotFound,
                     "failed to find sandbox id \"" + pod_sandbox_id + "\": not found");
  }
  if (sb->second.state != v1::SANDBOX_READY) {
    return CallError(CriCall::kCreateContainer, StatusCode::kFailedPrecondition,
                     "sandbox \"" + pod_sandbox_id + "\" is not running");
  }
  if (config.metadata().name().empty()) {
    return CallError(CriCall::kCreateContainer, StatusCode::kInvalidArgument,
                     "container config must include metadata");
  }
  const ImageRecord* image = FindImage(config.image().image());
  if (image == nullptr) {
    return CallError(CriCall::kCreateContainer, StatusCode::kNotFound,
                     "failed to get image \"" + config.image().image() + "\": not found");
  }
  for (const auto& [id, c] : containers_) {
    if (c.sandbox_id == pod_sandbox_id && c.config.metadata().name() == config.metadata().name() &&
        c.config.metadata().attempt() == config.metadata().attempt()) {
      return CallError(CriCall::kCreateContainer, StatusCode::kAlreadyExists,
                       "failed to reserve container name: name is reserved for \"" + id + "\"");
    }
  }
  std::string id = MakeId(next_id_++);
  ContainerRecord c;
  c.sandbox_id = pod_sandbox_id;
  c.config = config;
  c.image_id = image->id;
  c.created_at = Tick();
  if (!config.log_path().empty()) {
    c.log_path = sandbox_config.log_directory() + "/" + config.log_path();
  }
  containers_.emplace(id, std::move(c));
  return id;
}

Status FakeCriRuntime::StartContainer(const std::string& container_id) {
  std::unique_lock<std::mutex> lock(mu_);
  if (Status s = Enter(lock, CriCall::kStartContainer, ContainerIds(container_id)); !s.ok())
    return s;
  auto it = containers_.find(container_id);
  if (it == containers_.end()) {
    return CallError(
        CriCall::kStartContainer, StatusCode::kNotFound,
        "an error occurred when try to find container \"" + container_id + "\": not found");
  }
  if (it->second.state != v1::CONTAINER_CREATED) {
    return CallError(CriCall::kStartContainer, StatusCode::kFailedPrecondition,
                     "container is in " + v1::ContainerState_Name(it->second.state) +
                         " state, not CONTAINER_CREATED");
  }
  it->second.state = v1::CONTAINER_RUNNING;
  it->second.started_at = Tick();
  return Status::Ok();
}

Status FakeCriRuntime::StopContainer(const std::string& container_id, int64_t timeout_seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  if (Status s = Enter(lock, CriCall::kStopContainer, ContainerIds(container_id)); !s.ok())
    return s;
  auto it = containers_.find(container_id);
  if (it == containers_.end()) {
    return CallError(
        CriCall::kStopContainer, StatusCode::kNotFound,
        "an error occurred when try to find container \"" + container_id + "\": not found");
  }
  if (it->second.state == v1::CONTAINER_RUNNING) {
    StopContainerLocked(it->second, stop_exit_code_, "Error");
  }
  return Status::Ok();  // already stopped: idempotent
}

Status FakeCriRuntime::RemoveContainer(const std::string& container_id) {
  std::unique_lock<std::mutex> lock(mu_);
  if (Status s = Enter(lock, CriCall::kRemoveContainer, ContainerIds(container_id)); !s.ok())
    return s;
  if (containers_.erase(container_id) > 0) Tick();
  return Status::Ok();  // idempotent
}

Result<std::vector<v1::Container>> FakeCriRuntime::ListContainers(
    const v1::ContainerFilter& filter) {
  std::unique_lock<std::mutex> lock(mu_);
  if (Status s = Enter(lock, CriCall::kListContainers, {}); !s.ok()) return s;
  std::vector<v1::Container> out;
  for (const auto& [id, c] : containers_) {
    if (!filter.id().empty() && !HasPrefix(id, filter.id())) continue;
    if (!filter.pod_sandbox_id().empty() && !HasPrefix(c.sandbox_id, filter.pod_sandbox_id()))
      continue;
    if (filter.has_state() && filter.state().state() != c.state) continue;
    if (!LabelsMatch(c.config.labels(), filter.label_selector())) continue;
    v1::Container item;
    item.set_id(id);
    item.set_pod_sandbox_id(c.sandbox_id);
    *item.mutable_metadata() = c.config.metadata();
    *item.mutable_image() = c.config.image();
    item.set_image_ref(c.image_id);
    item.set_image_id(c.image_id);
    item.set_state(c.state);
    item.set_created_at(c.created_at);
    *item.mutable_labels() = c.config.labels();
    *item.mutable_annotations() = c.config.annotations();
    out.push_back(std::move(item));
  }
  return out;
}

Result<v1::ContainerStatusResponse> FakeCriRuntime::ContainerStatus(const std::string& container_id,
                                                                    bool verbose) {
  std::unique_lock<std::mutex> lock(mu_);
  if (Status s = Enter(lock, CriCall::kContainerStatus, ContainerIds(container_id)); !s.ok())
    return s;
  auto it = containers_.find(container_id);
  if (it == containers_.end()) {
    return CallError(
        CriCall::kContainerStatus, StatusCode::kNotFound,
        "an error occurred when try to find container \"" + container_id + "\": not found");
  }
  v1::ContainerStatusResponse r;
  *r.mutable_status() = BuildContainerStatus(container_id, it->second);
  if (verbose) (*r.mutable_info())["info"] = "{\"sandboxID\":\"" + it->second.sandbox_id + "\"}";
  return r;
}

Result<v1::ExecSyncResponse> FakeCriRuntime::ExecSync(const std::string& container_id,
                                                      const std::vector<std::string>& cmd,
                                                      int64_t timeout_seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  if (Status s = Enter(lock, CriCall::kExecSync, ContainerIds(container_id)); !s.ok()) return s;
  auto it = containers_.find(container_id);
  if (it == containers_.end()) {
    return CallError(
        CriCall::kExecSync, StatusCode::kNotFound,
        "an error occurred when try to find container \"" + container_id + "\": not found");
  }
  if (it->second.state != v1::CONTAINER_RUNNING) {
    return CallError(CriCall::kExecSync, StatusCode::kFailedPrecondition,
                     "container " + container_id + " is not running");
  }
  ExecHandler handler = exec_handler_;
  lock.unlock();  // the handler may call back into the fake
  if (!handler) return v1::ExecSyncResponse();
  return handler(container_id, cmd);
}

Result<std::string> FakeCriRuntime::Exec(const v1::ExecRequest& request) {
  std::unique_lock<std::mutex> lock(mu_);
  if (Status s = Enter(lock, CriCall::kExec, ContainerIds(request.container_id())); !s.ok()) {
    return s;
  }
  if (Status s = RunningContainer(CriCall::kExec, request.container_id()); !s.ok()) return s;
  return "fake://exec/" + request.container_id();
}

Result<std::string> FakeCriRuntime::Attach(const v1::AttachRequest& request) {
  std::unique_lock<std::mutex> lock(mu_);
  if (Status s = Enter(lock, CriCall::kAttach, ContainerIds(request.container_id())); !s.ok()) {
    return s;
  }
  if (Status s = RunningContainer(CriCall::kAttach, request.container_id()); !s.ok()) return s;
  return "fake://attach/" + request.container_id();
}

Status FakeCriRuntime::ReopenContainerLog(const std::string& container_id) {
  std::unique_lock<std::mutex> lock(mu_);
  if (Status s = Enter(lock, CriCall::kReopenContainerLog, ContainerIds(container_id)); !s.ok()) {
    return s;
  }
  if (Status s = RunningContainer(CriCall::kReopenContainerLog, container_id); !s.ok()) return s;
  ++reopened_logs_[container_id];
  // As containerd: the log path is opened again (created when it was renamed away).
  const std::string& path = containers_.at(container_id).log_path;
  if (!path.empty()) {
    if (FILE* f = std::fopen(path.c_str(), "a")) std::fclose(f);
  }
  return Status::Ok();
}

int FakeCriRuntime::ReopenedLogs(const std::string& container_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = reopened_logs_.find(container_id);
  return it == reopened_logs_.end() ? 0 : it->second;
}

Status FakeCriRuntime::RunningContainer(CriCall call, const std::string& container_id) const {
  auto it = containers_.find(container_id);
  if (it == containers_.end()) {
    return CallError(
        call, StatusCode::kNotFound,
        "an error occurred when try to find container \"" + container_id + "\": not found");
  }
  if (it->second.state != v1::CONTAINER_RUNNING) {
    return CallError(call, StatusCode::kFailedPrecondition,
                     "container " + container_id + " is not running");
  }
  return Status::Ok();
}

void FakeCriRuntime::SetWritableLayer(const std::string& container_id, uint64_t used_bytes,
                                      uint64_t inodes) {
  std::lock_guard<std::mutex> lock(mu_);
  writable_layers_[container_id] = {used_bytes, inodes};
}

Result<std::vector<v1::ContainerStats>> FakeCriRuntime::ListContainerStats(
    const v1::ContainerStatsFilter& filter) {
  std::unique_lock<std::mutex> lock(mu_);
  if (Status s = Enter(lock, CriCall::kListContainerStats, {filter.id()}); !s.ok()) return s;
  std::vector<v1::ContainerStats> out;
  for (const auto& [id, layer] : writable_layers_) {
    if (!filter.id().empty() && filter.id() != id) continue;
    v1::ContainerStats st;
    st.mutable_attributes()->set_id(id);
    st.mutable_writable_layer()->set_timestamp(now_ns_);
    st.mutable_writable_layer()->mutable_used_bytes()->set_value(layer.first);
    st.mutable_writable_layer()->mutable_inodes_used()->set_value(layer.second);
    out.push_back(std::move(st));
  }
  return out;
}

}  // namespace nodelet::testing
