// RuntimeService and ImageService: nodelet's view of a CRI v1 container runtime (containerd).
//
// The interfaces take and return the CRI messages themselves (runtime::v1, generated from
// lib/cri/api.proto), as the kubelet's internal CRI API does: configs and statuses have dozens
// of fields that every caller would otherwise need mirrored in hand-written structs. Only ids,
// image refs and "no payload" results are plain C++ types.
//
// Semantics follow the CRI: Stop* and Remove* are idempotent (removing what is already gone is
// OK; stopping an unknown id is NOT_FOUND), *Status of an unknown id is NOT_FOUND, and
// ImageStatus of an absent image is OK with no `image` set. Every implementation is safe to call
// from several threads at once. Errors are Statuses whose message names the call and carries the
// runtime's code and text ("CRI RunPodSandbox failed: UNAVAILABLE: connection refused").
//
// Implementations: GrpcCriClient (lib/cri/grpc_cri_client.h) and, for unit tests,
// FakeCriRuntime (tests/fakes/fake_cri_runtime.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lib/common/status.h"
#include "lib/cri/api.pb.h"
#include "lib/cri/call_cancel.h"

namespace nodelet::cri {

namespace v1 = ::runtime::v1;

// The runtime API version nodelet speaks (sent in VersionRequest).
inline constexpr char kCriApiVersion[] = "v1";

class RuntimeService {
 public:
  virtual ~RuntimeService() = default;

  // Version: the runtime's name and versions; the cheapest "is it there" call.
  virtual Result<v1::VersionResponse> Version() = 0;
  // The CRI `Status` call (named RuntimeStatus here so it does not hide nodelet::Status in
  // classes that implement this interface): RuntimeReady / NetworkReady conditions.
  virtual Result<v1::StatusResponse> RuntimeStatus(bool verbose) = 0;

  // Pod sandboxes.
  // Creates and starts a sandbox; returns its id.
  virtual Result<std::string> RunPodSandbox(const v1::PodSandboxConfig& config,
                                            const std::string& runtime_handler) = 0;
  virtual Status StopPodSandbox(const std::string& pod_sandbox_id) = 0;
  virtual Status RemovePodSandbox(const std::string& pod_sandbox_id) = 0;
  virtual Result<v1::PodSandboxStatusResponse> PodSandboxStatus(const std::string& pod_sandbox_id,
                                                                bool verbose) = 0;
  // An empty filter (default-constructed) lists every sandbox.
  virtual Result<std::vector<v1::PodSandbox>> ListPodSandbox(
      const v1::PodSandboxFilter& filter) = 0;

  // Containers.
  // Creates a container in a sandbox; returns its id. `sandbox_config` is the config the sandbox
  // was created with.
  virtual Result<std::string> CreateContainer(const std::string& pod_sandbox_id,
                                              const v1::ContainerConfig& config,
                                              const v1::PodSandboxConfig& sandbox_config) = 0;
  virtual Status StartContainer(const std::string& container_id) = 0;
  // Stops with a grace period: SIGTERM (or the image's stop signal), SIGKILL after
  // `timeout_seconds` (0: at once). The client's deadline for this call is the grace period plus
  // its ordinary call deadline.
  virtual Status StopContainer(const std::string& container_id, int64_t timeout_seconds) = 0;
  virtual Status RemoveContainer(const std::string& container_id) = 0;
  // An empty filter (default-constructed) lists every container.
  virtual Result<std::vector<v1::Container>> ListContainers(const v1::ContainerFilter& filter) = 0;
  virtual Result<v1::ContainerStatusResponse> ContainerStatus(const std::string& container_id,
                                                              bool verbose) = 0;
  // Runs `cmd` in the container and waits for it (at most `timeout_seconds` in the runtime; 0
  // means no runtime-side limit, the client's deadline still applies). A command that exits
  // non-zero is not an error: read exit_code in the response.
  virtual Result<v1::ExecSyncResponse> ExecSync(const std::string& container_id,
                                                const std::vector<std::string>& cmd,
                                                int64_t timeout_seconds) = 0;

  // Streaming sessions (CRI Exec, Attach, PortForward): each answers the URL of one session on
  // the runtime's streaming server (containerd's: http://127.0.0.1:PORT/exec/TOKEN), which the
  // client then opens itself, within about a minute, once. The runtime checks the container
  // (the sandbox, for PortForward) exists; Exec and Attach need it running.
  virtual Result<std::string> Exec(const v1::ExecRequest& request) = 0;
  virtual Result<std::string> Attach(const v1::AttachRequest& request) = 0;
  virtual Result<std::string> PortForward(const v1::PortForwardRequest& request) = 0;
  // Makes the runtime reopen a running container's log file (after it was renamed by log
  // rotation); an error when the container is not running.
  virtual Status ReopenContainerLog(const std::string& container_id) = 0;
  // The running containers' stats (the writable layer's use, for ephemeral storage); an empty
  // filter lists every one. Not every implementation answers it.
  virtual Result<std::vector<v1::ContainerStats>> ListContainerStats(
      const v1::ContainerStatsFilter& filter) {
    (void)filter;
    return Status(StatusCode::kFailedPrecondition, "ListContainerStats is not implemented here");
  }
};

class ImageService {
 public:
  virtual ~ImageService() = default;

  // An empty filter (default-constructed) lists every image.
  virtual Result<std::vector<v1::Image>> ListImages(const v1::ImageFilter& filter) = 0;
  // OK with `has_image() == false` when the image is not present.
  virtual Result<v1::ImageStatusResponse> ImageStatus(const v1::ImageSpec& image, bool verbose) = 0;
  // Pulls the image; returns its reference (image id or digest). `auth` and `sandbox_config`
  // may be null. No deadline (a pull takes as long as the image needs, as the kubelet's); with
  // `cancel`, CallCancel::Cancel() ends it (CANCELLED).
  virtual Result<std::string> PullImage(const v1::ImageSpec& image, const v1::AuthConfig* auth,
                                        const v1::PodSandboxConfig* sandbox_config,
                                        CallCancel* cancel) = 0;
  virtual Status RemoveImage(const v1::ImageSpec& image) = 0;
  // The filesystem(s) that hold images: mountpoint and the bytes the images use there.
  virtual Result<v1::ImageFsInfoResponse> ImageFsInfo() = 0;
};

// The kubelet's words for a runtime whose NetworkReady condition is false.
inline std::string NetworkNotReadyMessage(const std::string& reason, const std::string& message) {
  return "container runtime network not ready: NetworkReady=false reason:" + reason +
         " message:" + message;
}

// Why the runtime's network is not ready, from a CRI Status answer; "" when NetworkReady is
// true. A runtime that does not report the condition has no network.
inline std::string NetworkError(const v1::StatusResponse& status) {
  for (const auto& c : status.status().conditions()) {
    if (c.type() == "NetworkReady") {
      return c.status() ? std::string() : NetworkNotReadyMessage(c.reason(), c.message());
    }
  }
  return NetworkNotReadyMessage("", "the runtime reports no NetworkReady condition");
}

}  // namespace nodelet::cri
