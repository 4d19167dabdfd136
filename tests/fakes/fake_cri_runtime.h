// FakeCriRuntime: an in-memory CRI runtime (RuntimeService + ImageService) for unit tests, in
// the spirit of the kubelet's FakeRuntimeService. It keeps sandboxes, containers and images with
// containerd's semantics (ids, states, filters, NOT_FOUND, idempotent Stop/Remove, "name
// reserved"), and has knobs to inject errors and hangs per call (and per sandbox/container id),
// to count calls, and to change state behind the client's back (a container's process dies).
// Thread-safe: plegd inspects pods from several threads.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "lib/cri/runtime_service.h"

namespace nodelet::testing {

namespace v1 = ::runtime::v1;

enum class CriCall {
  kVersion,
  kStatus,
  kRunPodSandbox,
  kStopPodSandbox,
  kRemovePodSandbox,
  kPodSandboxStatus,
  kListPodSandbox,
  kCreateContainer,
  kStartContainer,
  kStopContainer,
  kRemoveContainer,
  kListContainers,
  kContainerStatus,
  kExecSync,
  kExec,
  kAttach,
  kPortForward,
  kReopenContainerLog,
  kListImages,
  kImageStatus,
  kPullImage,
  kRemoveImage,
  kImageFsInfo,
  kListContainerStats,
};

// The CRI method name ("RunPodSandbox", ...).
const char* CriCallName(CriCall call);

class FakeCriRuntime : public cri::RuntimeService, public cri::ImageService {
 public:
  using ExecHandler = std::function<v1::ExecSyncResponse(const std::string& container_id,
                                                         const std::vector<std::string>& cmd)>;

  FakeCriRuntime();
  // Releases every hung call first (a test that fails midway never deadlocks).
  ~FakeCriRuntime() override;
  FakeCriRuntime(const FakeCriRuntime&) = delete;
  FakeCriRuntime& operator=(const FakeCriRuntime&) = delete;

  // ---- Knobs ----------------------------------------------------------------------------------
  // The target of a call, used to match `id` below: the sandbox id (sandbox calls; the pod uid
  // for RunPodSandbox), the container id or its sandbox's id (container calls), or the image ref
  // (image calls). Version, Status and the List calls have no target: only rules with an empty
  // `id` match them. Empty `id` matches every call of that kind.

  // The next `times` matching calls (every one while times < 0) fail with `status`, before doing
  // anything. The status is returned as a real client would: its message gets the prefix
  // "CRI <call> failed: <CODE>: ".
  void FailCall(CriCall call, Status status, int times = -1, const std::string& id = "");
  void ClearFailures();

  // ListPodSandbox leaves this sandbox out (as containerd's listing right after a restart, taken
  // before it loaded every sandbox, would); every other call still sees it.
  void HideFromListing(const std::string& sandbox_id);

  // Matching calls block until ReleaseHangs() (or destruction). After the release, a hung call
  // fails with DEADLINE_EXCEEDED (as the client's deadline would have made it) when
  // `fail_when_released`, or else goes on normally.
  void HangCall(CriCall call, const std::string& id = "", bool fail_when_released = true);
  // Removes every hang rule and wakes every blocked call.
  void ReleaseHangs();
  // Waits (real time, on a condition variable) until at least `count` calls are blocked.
  bool WaitForHungCalls(int count, std::chrono::milliseconds timeout);
  // Waits until at most `count` calls are blocked (a cancelled one has returned).
  bool WaitForHungCallsAtMost(int count, std::chrono::milliseconds timeout);
  int hung_calls() const;

  // How many times `call` was made (including failed and hung ones).
  int CallCount(CriCall call) const;

  // ---- State changes behind the client's back -------------------------------------------------
  // Adds an image (tags as given, e.g. "nodelet.local/busybox:1.0"); returns its id ("sha256:...").
  std::string AddImage(const std::string& ref, uint64_t size_bytes = 1 << 20);
  // Marks an image (by tag or id) pinned: ListImages and ImageStatus report `pinned`.
  Status SetImagePinned(const std::string& ref, bool pinned);
  // The image filesystem's mountpoint that ImageFsInfo reports (default "/fake/imagefs"); its
  // used bytes are the sum of the images' sizes.
  void SetImageFsMountpoint(const std::string& mountpoint);
  // The writable layer ListContainerStats reports for a container (none set: not reported).
  void SetWritableLayer(const std::string& container_id, uint64_t used_bytes, uint64_t inodes);
  // A running container's process exits: state EXITED with this exit code and reason.
  // NOT_FOUND when there is no such container; FAILED_PRECONDITION when it is not running.
  Status ExitContainer(const std::string& container_id, int32_t exit_code,
                       const std::string& reason = "Error");
  // The sandbox's state changes (e.g. its pause process died: SANDBOX_NOTREADY).
  Status SetSandboxState(const std::string& pod_sandbox_id, v1::PodSandboxState state);
  // What ExecSync answers; the default echoes nothing and exits 0.
  void SetExecHandler(ExecHandler handler);
  // The exit code StopContainer gives a running container (default 137, killed).
  void SetStopExitCode(int32_t exit_code);
  // Timestamps (created_at, started_at, finished_at) come from a fake wall clock in nanoseconds
  // that advances by 1 ms at every state change; tests may set it.
  void SetNowNanos(int64_t now_ns);
  // What Status reports as NetworkReady (default true); RunPodSandbox of a pod-network sandbox
  // fails while it is false, as containerd's does without a CNI configuration.
  void SetNetworkReady(bool ready, const std::string& reason = "NetworkPluginNotReady",
                       const std::string& message = "cni plugin not initialized");
  int64_t NowNanos() const;

  // ---- RuntimeService -------------------------------------------------------------------------
  Result<v1::VersionResponse> Version() override;
  Result<v1::StatusResponse> RuntimeStatus(bool verbose) override;
  Result<std::string> RunPodSandbox(const v1::PodSandboxConfig& config,
                                    const std::string& runtime_handler) override;
  Status StopPodSandbox(const std::string& pod_sandbox_id) override;
  Status RemovePodSandbox(const std::string& pod_sandbox_id) override;
  Result<v1::PodSandboxStatusResponse> PodSandboxStatus(const std::string& pod_sandbox_id,
                                                        bool verbose) override;
  Result<std::vector<v1::PodSandbox>> ListPodSandbox(const v1::PodSandboxFilter& filter) override;
  Result<std::string> CreateContainer(const std::string& pod_sandbox_id,
                                      const v1::ContainerConfig& config,
                                      const v1::PodSandboxConfig& sandbox_config) override;
  Status StartContainer(const std::string& container_id) override;
  Status StopContainer(const std::string& container_id, int64_t timeout_seconds) override;
  Status RemoveContainer(const std::string& container_id) override;
  Result<std::vector<v1::Container>> ListContainers(const v1::ContainerFilter& filter) override;
  Result<v1::ContainerStatusResponse> ContainerStatus(const std::string& container_id,
                                                      bool verbose) override;
  Result<v1::ExecSyncResponse> ExecSync(const std::string& container_id,
                                        const std::vector<std::string>& cmd,
                                        int64_t timeout_seconds) override;
  // Exec, Attach, PortForward answer "fake://exec/CONTAINER_ID" (attach/, portforward/
  // SANDBOX_ID?ports=P,...); the container must be running (the sandbox ready).
  Result<std::string> Exec(const v1::ExecRequest& request) override;
  Result<std::string> Attach(const v1::AttachRequest& request) override;
  Result<std::string> PortForward(const v1::PortForwardRequest& request) override;
  // Counts the reopen (ReopenedLogs) and, as containerd, opens the container's log path again
  // (creating it when missing); the container must be running.
  Status ReopenContainerLog(const std::string& container_id) override;
  // How many times ReopenContainerLog succeeded for the container.
  int ReopenedLogs(const std::string& container_id) const;
  // The running containers with a writable layer set (SetWritableLayer); filters by id only.
  Result<std::vector<v1::ContainerStats>> ListContainerStats(
      const v1::ContainerStatsFilter& filter) override;

  // ---- ImageService ---------------------------------------------------------------------------
  Result<std::vector<v1::Image>> ListImages(const v1::ImageFilter& filter) override;
  Result<v1::ImageStatusResponse> ImageStatus(const v1::ImageSpec& image, bool verbose) override;
  // Each PullImage call's credentials, "USER:PASSWORD" ("" without any), in order.
  std::vector<std::string> PullAuths() const {
    std::lock_guard<std::mutex> lock(mu_);
    return pull_auths_;
  }
  Result<std::string> PullImage(const v1::ImageSpec& image, const v1::AuthConfig* auth,
                                const v1::PodSandboxConfig* sandbox_config,
                                cri::CallCancel* cancel) override;
  Status RemoveImage(const v1::ImageSpec& image) override;
  Result<v1::ImageFsInfoResponse> ImageFsInfo() override;

 private:
  struct Sandbox {
    v1::PodSandboxConfig config;
    v1::PodSandboxState state = v1::SANDBOX_READY;
    int64_t created_at = 0;
    std::string runtime_handler;
    std::string ip;  // pod-network sandboxes: 198.19.255.N
  };
  struct ContainerRecord {
    std::string sandbox_id;
    v1::ContainerConfig config;
    std::string image_id;
    v1::ContainerState state = v1::CONTAINER_CREATED;
    int64_t created_at = 0;
    int64_t started_at = 0;
    int64_t finished_at = 0;
    int32_t exit_code = 0;
    std::string reason;
    std::string log_path;
  };
  struct ImageRecord {
    std::string id;
    std::vector<std::string> tags;
    uint64_t size = 0;
    bool pinned = false;
  };
  struct FailRule {
    CriCall call;
    std::string id;
    Status status;
    int times;
  };
  struct HangRule {
    CriCall call;
    std::string id;
    bool fail_when_released;
  };

  // Counts the call, applies hang and failure rules. Takes and returns with `lock` held.
  // `ids` are the targets the rules may match. Returns non-OK when the call must fail. A hung
  // call with `cancel` also ends when it is cancelled (CANCELLED), as a real client's does.
  Status Enter(std::unique_lock<std::mutex>& lock, CriCall call,
               const std::vector<std::string>& ids, const cri::CallCancel* cancel = nullptr);
  int64_t Tick();  // advances the fake clock by 1 ms; returns the new time
  std::vector<std::string> ContainerIds(const std::string& container_id) const;
  // OK when the container exists and runs; the CRI's NOT_FOUND / FAILED_PRECONDITION otherwise.
  Status RunningContainer(CriCall call, const std::string& container_id) const;
  const ImageRecord* FindImage(const std::string& ref) const;
  v1::ContainerStatus BuildContainerStatus(const std::string& id, const ContainerRecord& c) const;
  void StopContainerLocked(ContainerRecord& c, int32_t exit_code, const std::string& reason);

  mutable std::mutex mu_;
  std::vector<std::string> pull_auths_;
  std::condition_variable hang_cv_;   // hung calls wait here
  std::condition_variable state_cv_;  // WaitForHungCalls waits here
  uint64_t hang_generation_ = 0;      // bumped by ReleaseHangs
  int hung_ = 0;
  bool destroying_ = false;

  std::vector<FailRule> fail_rules_;
  std::set<std::string> hidden_sandboxes_;
  std::vector<HangRule> hang_rules_;
  std::map<CriCall, int> call_counts_;

  std::map<std::string, Sandbox> sandboxes_;
  std::map<std::string, ContainerRecord> containers_;
  std::vector<ImageRecord> images_;
  std::string image_fs_mountpoint_ = "/fake/imagefs";
  std::map<std::string, std::pair<uint64_t, uint64_t>> writable_layers_;  // id -> bytes, inodes
  ExecHandler exec_handler_;
  std::map<std::string, int> reopened_logs_;
  int32_t stop_exit_code_ = 137;
  bool network_ready_ = true;
  std::string network_reason_, network_message_;
  int next_ip_ = 2;
  int64_t now_ns_ = 1'700'000'000'000'000'000;
  uint64_t next_id_ = 1;
};

}  // namespace nodelet::testing
