#include "tests/fakes/fake_cri_runtime.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <utility>

namespace nodelet::testing {
namespace {

Status CallError(CriCall call, StatusCode code, const std::string& message) {
  return Status(code, std::string("CRI ") + CriCallName(call) + " failed: " + StatusCodeName(code) +
                          ": " + message);
}

bool HasPrefix(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

template <typename Map>
bool LabelsMatch(const Map& labels,
                 const google::protobuf::Map<std::string, std::string>& selector) {
  for (const auto& [k, v] : selector) {
    auto it = labels.find(k);
    if (it == labels.end() || it->second != v) return false;
  }
  return true;
}

// "busybox" -> "busybox:latest"; refs with a tag or digest are kept.
std::string NormalizeRef(const std::string& ref) {
  if (HasPrefix(ref, "sha256:")) return ref;
  auto slash = ref.rfind('/');
  auto tail = slash == std::string::npos ? ref : ref.substr(slash + 1);
  if (tail.find(':') != std::string::npos || tail.find('@') != std::string::npos) return ref;
  return ref + ":latest";
}

// 64 hex digits that look random (ids differ from the first digit on, like containerd's),
// deterministic for a given counter value.
std::string MakeId(uint64_t counter) {
  std::string id;
  uint64_t x = counter * 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < 4; ++i) {
    // splitmix64
    x += 0x9E3779B97F4A7C15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    char part[17];
    std::snprintf(part, sizeof part, "%016" PRIx64, z);
    id += part;
  }
  return id;
}

}  // namespace

const char* CriCallName(CriCall call) {
  switch (call) {
    case CriCall::kVersion:
      return "Version";
    case CriCall::kStatus:
      return "Status";
    case CriCall::kRunPodSandbox:
      return "RunPodSandbox";
    case CriCall::kStopPodSandbox:
      return "StopPodSandbox";
    case CriCall::kRemovePodSandbox:
      return "RemovePodSandbox";
    case CriCall::kPodSandboxStatus:
      return "PodSandboxStatus";
    case CriCall::kListPodSandbox:
      return "ListPodSandbox";
    case CriCall::kCreateContainer:
      return "CreateContainer";
    case CriCall::kStartContainer:
      return "StartContainer";
    case CriCall::kStopContainer:
      return "StopContainer";
    case CriCall::kRemoveContainer:
      return "RemoveContainer";
    case CriCall::kListContainers:
      return "ListContainers";
    case CriCall::kContainerStatus:
      return "ContainerStatus";
    case CriCall::kExecSync:
      return "ExecSync";
    case CriCall::kExec:
      return "Exec";
    case CriCall::kAttach:
      return "Attach";
    case CriCall::kPortForward:
      return "PortForward";
    case CriCall::kReopenContainerLog:
      return "ReopenContainerLog";
    case CriCall::kListImages:
      return "ListImages";
    case CriCall::kImageStatus:
      return "ImageStatus";
    case CriCall::kPullImage:
      return "PullImage";
    case CriCall::kRemoveImage:
      return "RemoveImage";
    case CriCall::kListContainerStats:
      return "ListContainerStats";
    case CriCall::kImageFsInfo:
      return "ImageFsInfo";
  }
  return "Unknown";
}

FakeCriRuntime::FakeCriRuntime() = default;

FakeCriRuntime::~FakeCriRuntime() {
  std::unique_lock<std::mutex> lock(mu_);
  destroying_ = true;
  hang_rules_.clear();
  ++hang_generation_;
  hang_cv_.notify_all();
  // Calls still inside must leave before the members go away.
  state_cv_.wait(lock, [&] { return hung_ == 0; });
}

// ---- Knobs -------------------------------------------------------------------------------------

void FakeCriRuntime::FailCall(CriCall call, Status status, int times, const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_rules_.push_back(FailRule{call, id, std::move(status), times});
}

void FakeCriRuntime::ClearFailures() {
  std::lock_guard<std::mutex> lock(mu_);
  fail_rules_.clear();
}

void FakeCriRuntime::HangCall(CriCall call, const std::string& id, bool fail_when_released) {
  std::lock_guard<std::mutex> lock(mu_);
  hang_rules_.push_back(HangRule{call, id, fail_when_released});
}

void FakeCriRuntime::ReleaseHangs() {
  std::lock_guard<std::mutex> lock(mu_);
  hang_rules_.clear();
  ++hang_generation_;
  hang_cv_.notify_all();
}

bool FakeCriRuntime::WaitForHungCalls(int count, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return state_cv_.wait_for(lock, timeout, [&] { return hung_ >= count; });
}

bool FakeCriRuntime::WaitForHungCallsAtMost(int count, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return state_cv_.wait_for(lock, timeout, [&] { return hung_ <= count; });
}

int FakeCriRuntime::hung_calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hung_;
}

int FakeCriRuntime::CallCount(CriCall call) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = call_counts_.find(call);
  return it == call_counts_.end() ? 0 : it->second;
}

Status FakeCriRuntime::Enter(std::unique_lock<std::mutex>& lock, CriCall call,
                             const std::vector<std::string>& ids, const cri::CallCancel* cancel) {
  ++call_counts_[call];
  auto matches = [&](CriCall rule_call, const std::string& rule_id) {
    if (rule_call != call) return false;
    return rule_id.empty() || std::find(ids.begin(), ids.end(), rule_id) != ids.end();
  };
  for (const auto& rule : hang_rules_) {
    if (!matches(rule.call, rule.id)) continue;
    bool fail = rule.fail_when_released;
    uint64_t generation = hang_generation_;
    ++hung_;
    state_cv_.notify_all();
    auto cancelled = [&] { return cancel != nullptr && cancel->cancelled(); };
    hang_cv_.wait(lock, [&] { return hang_generation_ != generation || cancelled(); });
    --hung_;
    state_cv_.notify_all();
    if (cancelled()) return CallError(call, StatusCode::kCancelled, "context canceled");
    if (fail || destroying_) {
      return CallError(call, StatusCode::kDeadlineExceeded, "context deadline exceeded");
    }
    break;
  }
  for (auto it = fail_rules_.begin(); it != fail_rules_.end(); ++it) {
    if (!matches(it->call, it->id)) continue;
    Status status = CallError(call, it->status.code(), it->status.message());
    if (it->times > 0 && --it->times == 0) fail_rules_.erase(it);
    return status;
  }
  return Status::Ok();
}

std::string FakeCriRuntime::AddImage(const std::string& ref, uint64_t size_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string normalized = NormalizeRef(ref);
  for (auto& image : images_) {
    if (std::find(image.tags.begin(), image.tags.end(), normalized) != image.tags.end()) {
      return image.id;
    }
  }
  std::string id = "sha256:" + MakeId(next_id_++);
  images_.push_back(ImageRecord{id, {normalized}, size_bytes});
  return id;
}

Status FakeCriRuntime::SetImagePinned(const std::string& ref, bool pinned) {
  std::lock_guard<std::mutex> lock(mu_);
  const ImageRecord* found = FindImage(ref);
  if (found == nullptr) return NotFound("no image '" + ref + "'");
  const_cast<ImageRecord*>(found)->pinned = pinned;
  return Status::Ok();
}

void FakeCriRuntime::SetImageFsMountpoint(const std::string& mountpoint) {
  std::lock_guard<std::mutex> lock(mu_);
  image_fs_mountpoint_ = mountpoint;
}

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

Status FakeCriRuntime::SetSandboxState(const std::string& pod_sandbox_id,
                                       v1::PodSandboxState state) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sandboxes_.find(pod_sandbox_id);
  if (it == sandboxes_.end()) return NotFound("no sandbox '" + pod_sandbox_id + "'");
  it->second.state = state;
  Tick();
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

void FakeCriRuntime::SetNowNanos(int64_t now_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  now_ns_ = now_ns;
}

int64_t FakeCriRuntime::NowNanos() const {
  std::lock_guard<std::mutex> lock(mu_);
  return now_ns_;
}

int64_t FakeCriRuntime::Tick() {
  now_ns_ += 1'000'000;
  return now_ns_;
}

std::vector<std::string> FakeCriRuntime::ContainerIds(const std::string& container_id) const {
  std::vector<std::string> ids{container_id};
  auto it = containers_.find(container_id);
  if (it != containers_.end()) ids.push_back(it->second.sandbox_id);
  return ids;
}

const FakeCriRuntime::ImageRecord* FakeCriRuntime::FindImage(const std::string& ref) const {
  std::string normalized = NormalizeRef(ref);
  for (const auto& image : images_) {
    if (image.id == ref) return &image;
    if (std::find(image.tags.begin(), image.tags.end(), normalized) != image.tags.end())
      return &image;
  }
  return nullptr;
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

// ---- RuntimeService ----------------------------------------------------------------------------

Result<v1::VersionResponse> FakeCriRuntime::Version() {
  std::unique_lock<std::mutex> lock(mu_);
  if (Status s = Enter(lock, CriCall::kVersion, {}); !s.ok()) return s;
  v1::VersionResponse r;
  r.set_version("0.1.0");
  r.set_runtime_name("fake");
  r.set_runtime_version("0.1.0");
  r.set_runtime_api_version(cri::kCriApiVersion);
  return r;
}

void FakeCriRuntime::SetNetworkReady(bool ready, const std::string& reason,
                                     const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  network_ready_ = ready;
  network_reason_ = reason;
  network_message_ = message;
}

Result<v1::StatusResponse> FakeCriRuntime::RuntimeStatus(bool verbose) {
  std::unique_lock<std::mutex> lock(mu_);
  if (Status s = Enter(lock, CriCall::kStatus, {}); !s.ok()) return s;
  v1::StatusResponse r;
  for (const char* type : {"RuntimeReady", "NetworkReady"}) {
    auto* condition = r.mutable_status()->add_conditions();
    condition->set_type(type);
    condition->set_status(std::string(type) == "RuntimeReady" || network_ready_);
    if (!condition->status()) {
      condition->set_reason(network_reason_);
      condition->set_message(network_message_);
    }
  }
  if (verbose) (*r.mutable_info())["config"] = "{}";
  return r;
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

// ---- ImageService ------------------------------------------------------------------------------

Result<std::vector<v1::Image>> FakeCriRuntime::ListImages(const v1::ImageFilter& filter) {
  std::unique_lock<std::mutex> lock(mu_);
  if (Status s = Enter(lock, CriCall::kListImages, {}); !s.ok()) return s;
  std::vector<v1::Image> out;
  const ImageRecord* only = nullptr;
  if (!filter.image().image().empty()) {
    only = FindImage(filter.image().image());
    if (only == nullptr) return out;
  }
  for (const auto& image : images_) {
    if (only != nullptr && only != &image) continue;
    v1::Image item;
    item.set_id(image.id);
    for (const auto& tag : image.tags) item.add_repo_tags(tag);
    item.set_size(image.size);
    item.set_pinned(image.pinned);
    item.mutable_spec()->set_image(image.id);
    out.push_back(std::move(item));
  }
  return out;
}

Result<v1::ImageStatusResponse> FakeCriRuntime::ImageStatus(const v1::ImageSpec& image,
                                                            bool verbose) {
  std::unique_lock<std::mutex> lock(mu_);
  if (Status s = Enter(lock, CriCall::kImageStatus, {image.image()}); !s.ok()) return s;
  v1::ImageStatusResponse r;
  const ImageRecord* found = FindImage(image.image());
  if (found == nullptr) return r;  // absent: OK without an image
  auto* item = r.mutable_image();
  item->set_id(found->id);
  for (const auto& tag : found->tags) item->add_repo_tags(tag);
  item->set_size(found->size);
  item->set_pinned(found->pinned);
  item->mutable_spec()->set_image(found->id);
  if (verbose) (*r.mutable_info())["info"] = "{}";
  return r;
}

Result<std::string> FakeCriRuntime::PullImage(const v1::ImageSpec& image,
                                              const v1::AuthConfig* auth,
                                              const v1::PodSandboxConfig* sandbox_config,
                                              cri::CallCancel* cancel) {
  // Bound before the lock is taken: a canceller cancelled already runs the action at once.
  cri::CallCancelScope bound(cancel, [this] {
    std::lock_guard<std::mutex> lock(mu_);
    hang_cv_.notify_all();
  });
  {
    std::unique_lock<std::mutex> lock(mu_);
    // Recorded before the failure rules apply: a refused credential was sent all the same.
    pull_auths_.push_back(auth == nullptr ? "" : auth->username() + ":" + auth->password());
    if (Status s = Enter(lock, CriCall::kPullImage, {image.image()}, cancel); !s.ok()) return s;
    if (image.image().empty()) {
      return CallError(CriCall::kPullImage, StatusCode::kInvalidArgument,
                       "image reference is empty");
    }
  }
  // The fake registry has every image.
  return AddImage(image.image());
}

Status FakeCriRuntime::RemoveImage(const v1::ImageSpec& image) {
  std::unique_lock<std::mutex> lock(mu_);
  if (Status s = Enter(lock, CriCall::kRemoveImage, {image.image()}); !s.ok()) return s;
  const ImageRecord* found = FindImage(image.image());
  if (found == nullptr) return Status::Ok();  // idempotent
  std::string id = found->id;
  std::erase_if(images_, [&](const ImageRecord& r) { return r.id == id; });
  return Status::Ok();
}

Result<v1::ImageFsInfoResponse> FakeCriRuntime::ImageFsInfo() {
  std::unique_lock<std::mutex> lock(mu_);
  if (Status s = Enter(lock, CriCall::kImageFsInfo, {}); !s.ok()) return s;
  uint64_t used = 0;
  for (const auto& image : images_) used += image.size;
  v1::ImageFsInfoResponse r;
  auto* fs = r.add_image_filesystems();
  fs->set_timestamp(now_ns_);
  fs->mutable_fs_id()->set_mountpoint(image_fs_mountpoint_);
  fs->mutable_used_bytes()->set_value(used);
  fs->mutable_inodes_used()->set_value(images_.size());
  return r;
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
