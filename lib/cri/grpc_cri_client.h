// GrpcCriClient: RuntimeService and ImageService over CRI v1 gRPC on the runtime's unix socket
// (containerd's CRI plugin). Every call carries a deadline; gRPC failures become Statuses that
// keep the gRPC code name and message.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "lib/common/status.h"
#include "lib/cri/runtime_service.h"

namespace grpc {
class Channel;
class Status;
}  // namespace grpc

namespace nodelet::cri {

// Per-call deadlines. The kubelet gives every CRI call 2 minutes; calls that only read
// (Version, Status, List*, *Status) get a much shorter one here, so that a hung runtime is
// noticed quickly by whoever relists it.
struct CriTimeouts {
  // RunPodSandbox, Stop/Remove*, CreateContainer, StartContainer, RemoveImage; also
  // the base of StopContainer's (plus its grace period) and ExecSync's (plus its timeout).
  std::chrono::milliseconds call{std::chrono::minutes(2)};
  // Version, Status, ListPodSandbox, PodSandboxStatus, ListContainers, ContainerStatus,
  // ListImages, ImageStatus, ImageFsInfo, ListContainerStats.
  std::chrono::milliseconds query{std::chrono::seconds(10)};
};

// The largest response accepted from the runtime (the kubelet's limit).
inline constexpr int kCriMaxMessageBytes = 16 * 1024 * 1024;

// The unix socket path of a "unix:///abs/path" endpoint, or INVALID_ARGUMENT naming the endpoint
// and what is wrong with it.
Result<std::string> ParseCriEndpoint(const std::string& endpoint);

// The gRPC channel to the runtime's socket (a path, from ParseCriEndpoint) that every client of
// it uses, CRI and containerd's own services alike: messages up to kCriMaxMessageBytes, and a
// reconnect back-off of 100 ms to 1 s, so that a restarted runtime is reached again within about
// a second (gRPC's default grows to two minutes while the socket is away). nullptr when gRPC
// cannot make one. (The tests' CRI fault proxy passes a larger `max_message_bytes`, so that only
// the client's own limit is tested.)
std::shared_ptr<grpc::Channel> RuntimeChannel(const std::string& socket_path,
                                              int max_message_bytes = kCriMaxMessageBytes);

// "CRI <call> failed: <GRPC_CODE>: <message>", with the gRPC code mapped onto StatusCode
// (NOT_FOUND -> kNotFound, DEADLINE_EXCEEDED -> kDeadlineExceeded, UNAVAILABLE -> kUnavailable,
// ...; codes without a counterpart map to kInternal or kFailedPrecondition).
Status StatusFromGrpc(const std::string& call, const grpc::Status& status);
// The same for any gRPC call: "<what> failed: <GRPC_CODE>: <message>".
Status GrpcCallStatus(const std::string& what, const grpc::Status& status);

class GrpcCriClient final : public RuntimeService, public ImageService {
 public:
  // Validates the endpoint and builds the channel; does not connect (the first call does, and
  // gRPC reconnects by itself after the runtime restarts).
  static Result<std::unique_ptr<GrpcCriClient>> Create(const std::string& endpoint,
                                                       CriTimeouts timeouts = {});
  ~GrpcCriClient() override;

  const std::string& endpoint() const { return endpoint_; }
  const CriTimeouts& timeouts() const { return timeouts_; }

  // Calls Version with gRPC's wait-for-ready: the call waits (up to `timeout`) for the socket to
  // appear and the runtime to answer, instead of failing at once while it starts.
  Result<v1::VersionResponse> WaitForReady(std::chrono::milliseconds timeout);

  // RuntimeService.
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
  Result<std::string> Exec(const v1::ExecRequest& request) override;
  Result<std::string> Attach(const v1::AttachRequest& request) override;
  Result<std::string> PortForward(const v1::PortForwardRequest& request) override;
  Status ReopenContainerLog(const std::string& container_id) override;
  Result<std::vector<v1::ContainerStats>> ListContainerStats(
      const v1::ContainerStatsFilter& filter) override;

  // ImageService.
  Result<std::vector<v1::Image>> ListImages(const v1::ImageFilter& filter) override;
  Result<v1::ImageStatusResponse> ImageStatus(const v1::ImageSpec& image, bool verbose) override;
  Result<std::string> PullImage(const v1::ImageSpec& image, const v1::AuthConfig* auth,
                                const v1::PodSandboxConfig* sandbox_config,
                                CallCancel* cancel) override;
  Status RemoveImage(const v1::ImageSpec& image) override;
  Result<v1::ImageFsInfoResponse> ImageFsInfo() override;

 private:
  struct Stubs;
  GrpcCriClient(std::string endpoint, CriTimeouts timeouts, std::shared_ptr<grpc::Channel> channel);

  std::string endpoint_;
  CriTimeouts timeouts_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<Stubs> stubs_;
};

}  // namespace nodelet::cri
