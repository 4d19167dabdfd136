// FakeCriRuntime's core: the CRI method names, the failure and hang rules every call passes
// through (Enter), the call counts, the fake clock, and the runtime's Version and Status.
#include "tests/fakes/fake_cri_runtime.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <utility>

#include "tests/fakes/fake_cri_internal.h"

namespace nodelet::testing {
namespace fake_cri_internal {

Status CallError(CriCall call, StatusCode code, const std::string& message) {
  return Status(code, std::string("CRI ") + CriCallName(call) + " failed: " + StatusCodeName(code) +
                          ": " + message);
}

bool HasPrefix(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

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

}  // namespace fake_cri_internal

using fake_cri_internal::CallError;

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

}  // namespace nodelet::testing
