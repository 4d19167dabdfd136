#include "lib/cri/grpc_cri_client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <utility>

#include "lib/cri/api.grpc.pb.h"
#include "lib/cri/grpc_deadline.h"

namespace nodelet::cri {
namespace {

using std::chrono::milliseconds;

// Longest grace period / exec timeout accepted (a day), so that deadlines never overflow.
constexpr int64_t kMaxExtraSeconds = 24 * 3600;
// gRPC reconnect backoff: quick, so a restarted runtime is seen again within about a second.
constexpr int kReconnectBackoffMinMs = 100;
constexpr int kReconnectBackoffMaxMs = 1000;

const char* GrpcCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

StatusCode MapGrpcCode(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return StatusCode::kOk;
    case grpc::StatusCode::CANCELLED:
      return StatusCode::kCancelled;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::OUT_OF_RANGE:
      return StatusCode::kInvalidArgument;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return StatusCode::kDeadlineExceeded;
    case grpc::StatusCode::NOT_FOUND:
      return StatusCode::kNotFound;
    case grpc::StatusCode::ALREADY_EXISTS:
      return StatusCode::kAlreadyExists;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return StatusCode::kResourceExhausted;
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::UNIMPLEMENTED:
      return StatusCode::kFailedPrecondition;
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::ABORTED:
      return StatusCode::kUnavailable;
    default:
      return StatusCode::kInternal;
  }
}

Status CallFailed(const std::string& call, const std::string& why) {
  return Internal("CRI " + call + " failed: " + why);
}

// Runs one unary call with a deadline `timeout` from now.
template <typename Fn>
Status Invoke(const char* call, milliseconds timeout, Fn&& fn, bool wait_for_ready = false) {
  grpc::ClientContext context;
  context.set_deadline(GrpcDeadline(timeout));
  context.set_wait_for_ready(wait_for_ready);
  grpc::Status status = fn(&context);
  if (!status.ok()) return StatusFromGrpc(call, status);
  return Status::Ok();
}

Result<milliseconds> WithExtraSeconds(const char* call, milliseconds base, int64_t seconds) {
  if (seconds < 0 || seconds > kMaxExtraSeconds) {
    return InvalidArgument(std::string("CRI ") + call + ": timeout " + std::to_string(seconds) +
                           " s is out of range [0, " + std::to_string(kMaxExtraSeconds) + "]");
  }
  return base + std::chrono::seconds(seconds);
}

}  // namespace

struct GrpcCriClient::Stubs {
  explicit Stubs(const std::shared_ptr<grpc::Channel>& channel)
      : runtime(v1::RuntimeService::NewStub(channel)), image(v1::ImageService::NewStub(channel)) {}
  std::unique_ptr<v1::RuntimeService::Stub> runtime;
  std::unique_ptr<v1::ImageService::Stub> image;
};

Result<std::string> ParseCriEndpoint(const std::string& endpoint) {
  static constexpr char kScheme[] = "unix://";
  if (endpoint.rfind(kScheme, 0) != 0) {
    return InvalidArgument("CRI endpoint '" + endpoint +
                           "': only unix:///ABSOLUTE/PATH is supported");
  }
  std::string path = endpoint.substr(sizeof(kScheme) - 1);
  if (path.empty() || path[0] != '/') {
    return InvalidArgument("CRI endpoint '" + endpoint + "': the socket path must be absolute");
  }
  // sockaddr_un.sun_path holds 108 bytes including the terminating NUL.
  if (path.size() > 107) {
    return InvalidArgument("CRI endpoint '" + endpoint +
                           "': the socket path is longer than 107 bytes");
  }
  return path;
}

Status GrpcCallStatus(const std::string& what, const grpc::Status& status) {
  if (status.ok()) return Status::Ok();
  return Status(
      MapGrpcCode(status.error_code()),
      what + " failed: " + GrpcCodeName(status.error_code()) + ": " + status.error_message());
}

Status StatusFromGrpc(const std::string& call, const grpc::Status& status) {
  return GrpcCallStatus("CRI " + call, status);
}

std::shared_ptr<grpc::Channel> RuntimeChannel(const std::string& socket_path,
                                              int max_message_bytes) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(max_message_bytes);
  args.SetMaxSendMessageSize(max_message_bytes);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, kReconnectBackoffMinMs);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kReconnectBackoffMinMs);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kReconnectBackoffMaxMs);
  // A local socket has no bandwidth-delay product to measure: without the probe, a reply no
  // longer brings an HTTP/2 ping and its round of wake-ups in gRPC's threads.
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  return grpc::CreateCustomChannel("unix://" + socket_path, grpc::InsecureChannelCredentials(),
                                   args);
}

Result<std::unique_ptr<GrpcCriClient>> GrpcCriClient::Create(const std::string& endpoint,
                                                             CriTimeouts timeouts) {
  auto path = ParseCriEndpoint(endpoint);
  if (!path.ok()) return path.status();
  if (timeouts.call.count() <= 0 || timeouts.query.count() <= 0) {
    return InvalidArgument("CRI timeouts must be positive");
  }
  auto channel = RuntimeChannel(*path);
  if (channel == nullptr)
    return Internal("CRI endpoint '" + endpoint + "': cannot create a gRPC channel");
  return std::unique_ptr<GrpcCriClient>(new GrpcCriClient(endpoint, timeouts, std::move(channel)));
}

GrpcCriClient::GrpcCriClient(std::string endpoint, CriTimeouts timeouts,
                             std::shared_ptr<grpc::Channel> channel)
    : endpoint_(std::move(endpoint)),
      timeouts_(timeouts),
      channel_(std::move(channel)),
      stubs_(std::make_unique<Stubs>(channel_)) {}

GrpcCriClient::~GrpcCriClient() = default;

Result<v1::VersionResponse> GrpcCriClient::WaitForReady(milliseconds timeout) {
  v1::VersionRequest request;
  request.set_version(kCriApiVersion);
  v1::VersionResponse response;
  Status s = Invoke(
      "Version", timeout,
      [&](grpc::ClientContext* c) { return stubs_->runtime->Version(c, request, &response); },
      /*wait_for_ready=*/true);
  if (!s.ok()) return s;
  return response;
}

Result<v1::VersionResponse> GrpcCriClient::Version() {
  v1::VersionRequest request;
  request.set_version(kCriApiVersion);
  v1::VersionResponse response;
  Status s = Invoke("Version", timeouts_.query, [&](grpc::ClientContext* c) {
    return stubs_->runtime->Version(c, request, &response);
  });
  if (!s.ok()) return s;
  return response;
}

Result<v1::StatusResponse> GrpcCriClient::RuntimeStatus(bool verbose) {
  v1::StatusRequest request;
  request.set_verbose(verbose);
  v1::StatusResponse response;
  Status s = Invoke("Status", timeouts_.query, [&](grpc::ClientContext* c) {
    return stubs_->runtime->Status(c, request, &response);
  });
  if (!s.ok()) return s;
  if (!response.has_status()) return CallFailed("Status", "the runtime returned no status");
  return response;
}

Result<std::string> GrpcCriClient::RunPodSandbox(const v1::PodSandboxConfig& config,
                                                 const std::string& runtime_handler) {
  v1::RunPodSandboxRequest request;
  *request.mutable_config() = config;
  request.set_runtime_handler(runtime_handler);
  v1::RunPodSandboxResponse response;
  Status s = Invoke("RunPodSandbox", timeouts_.call, [&](grpc::ClientContext* c) {
    return stubs_->runtime->RunPodSandbox(c, request, &response);
  });
  if (!s.ok()) return s;
  if (response.pod_sandbox_id().empty()) {
    return CallFailed("RunPodSandbox", "the runtime returned an empty sandbox id");
  }
  return std::move(*response.mutable_pod_sandbox_id());
}

Status GrpcCriClient::StopPodSandbox(const std::string& pod_sandbox_id) {
  v1::StopPodSandboxRequest request;
  request.set_pod_sandbox_id(pod_sandbox_id);
  v1::StopPodSandboxResponse response;
  return Invoke("StopPodSandbox", timeouts_.call, [&](grpc::ClientContext* c) {
    return stubs_->runtime->StopPodSandbox(c, request, &response);
  });
}

Status GrpcCriClient::RemovePodSandbox(const std::string& pod_sandbox_id) {
  v1::RemovePodSandboxRequest request;
  request.set_pod_sandbox_id(pod_sandbox_id);
  v1::RemovePodSandboxResponse response;
  return Invoke("RemovePodSandbox", timeouts_.call, [&](grpc::ClientContext* c) {
    return stubs_->runtime->RemovePodSandbox(c, request, &response);
  });
}

Result<v1::PodSandboxStatusResponse> GrpcCriClient::PodSandboxStatus(
    const std::string& pod_sandbox_id, bool verbose) {
  v1::PodSandboxStatusRequest request;
  request.set_pod_sandbox_id(pod_sandbox_id);
  request.set_verbose(verbose);
  v1::PodSandboxStatusResponse response;
  Status s = Invoke("PodSandboxStatus", timeouts_.query, [&](grpc::ClientContext* c) {
    return stubs_->runtime->PodSandboxStatus(c, request, &response);
  });
  if (!s.ok()) return s;
  if (!response.has_status() || response.status().id().empty() ||
      !response.status().has_metadata()) {
    return CallFailed(
        "PodSandboxStatus",
        "the runtime returned a status without id or metadata for '" + pod_sandbox_id + "'");
  }
  return response;
}

Result<std::vector<v1::PodSandbox>> GrpcCriClient::ListPodSandbox(
    const v1::PodSandboxFilter& filter) {
  v1::ListPodSandboxRequest request;
  *request.mutable_filter() = filter;
  v1::ListPodSandboxResponse response;
  Status s = Invoke("ListPodSandbox", timeouts_.query, [&](grpc::ClientContext* c) {
    return stubs_->runtime->ListPodSandbox(c, request, &response);
  });
  if (!s.ok()) return s;
  std::vector<v1::PodSandbox> items;
  items.reserve(static_cast<size_t>(response.items_size()));
  for (auto& item : *response.mutable_items()) items.push_back(std::move(item));
  return items;
}

Result<std::string> GrpcCriClient::CreateContainer(const std::string& pod_sandbox_id,
                                                   const v1::ContainerConfig& config,
                                                   const v1::PodSandboxConfig& sandbox_config) {
  v1::CreateContainerRequest request;
  request.set_pod_sandbox_id(pod_sandbox_id);
  *request.mutable_config() = config;
  *request.mutable_sandbox_config() = sandbox_config;
  v1::CreateContainerResponse response;
  Status s = Invoke("CreateContainer", timeouts_.call, [&](grpc::ClientContext* c) {
    return stubs_->runtime->CreateContainer(c, request, &response);
  });
  if (!s.ok()) return s;
  if (response.container_id().empty()) {
    return CallFailed("CreateContainer", "the runtime returned an empty container id");
  }
  return std::move(*response.mutable_container_id());
}

Status GrpcCriClient::StartContainer(const std::string& container_id) {
  v1::StartContainerRequest request;
  request.set_container_id(container_id);
  v1::StartContainerResponse response;
  return Invoke("StartContainer", timeouts_.call, [&](grpc::ClientContext* c) {
    return stubs_->runtime->StartContainer(c, request, &response);
  });
}

Status GrpcCriClient::StopContainer(const std::string& container_id, int64_t timeout_seconds) {
  auto deadline = WithExtraSeconds("StopContainer", timeouts_.call, timeout_seconds);
  if (!deadline.ok()) return deadline.status();
  v1::StopContainerRequest request;
  request.set_container_id(container_id);
  request.set_timeout(timeout_seconds);
  v1::StopContainerResponse response;
  return Invoke("StopContainer", *deadline, [&](grpc::ClientContext* c) {
    return stubs_->runtime->StopContainer(c, request, &response);
  });
}

Status GrpcCriClient::RemoveContainer(const std::string& container_id) {
  v1::RemoveContainerRequest request;
  request.set_container_id(container_id);
  v1::RemoveContainerResponse response;
  return Invoke("RemoveContainer", timeouts_.call, [&](grpc::ClientContext* c) {
    return stubs_->runtime->RemoveContainer(c, request, &response);
  });
}

Result<std::vector<v1::Container>> GrpcCriClient::ListContainers(
    const v1::ContainerFilter& filter) {
  v1::ListContainersRequest request;
  *request.mutable_filter() = filter;
  v1::ListContainersResponse response;
  Status s = Invoke("ListContainers", timeouts_.query, [&](grpc::ClientContext* c) {
    return stubs_->runtime->ListContainers(c, request, &response);
  });
  if (!s.ok()) return s;
  std::vector<v1::Container> items;
  items.reserve(static_cast<size_t>(response.containers_size()));
  for (auto& item : *response.mutable_containers()) items.push_back(std::move(item));
  return items;
}

Result<v1::ContainerStatusResponse> GrpcCriClient::ContainerStatus(const std::string& container_id,
                                                                   bool verbose) {
  v1::ContainerStatusRequest request;
  request.set_container_id(container_id);
  request.set_verbose(verbose);
  v1::ContainerStatusResponse response;
  Status s = Invoke("ContainerStatus", timeouts_.query, [&](grpc::ClientContext* c) {
    return stubs_->runtime->ContainerStatus(c, request, &response);
  });
  if (!s.ok()) return s;
  if (!response.has_status() || response.status().id().empty() ||
      !response.status().has_metadata()) {
    return CallFailed(
        "ContainerStatus",
        "the runtime returned a status without id or metadata for '" + container_id + "'");
  }
  return response;
}

Result<v1::ExecSyncResponse> GrpcCriClient::ExecSync(const std::string& container_id,
                                                     const std::vector<std::string>& cmd,
                                                     int64_t timeout_seconds) {
  auto deadline = WithExtraSeconds("ExecSync", timeouts_.call, timeout_seconds);
  if (!deadline.ok()) return deadline.status();
  if (cmd.empty()) return InvalidArgument("CRI ExecSync: empty command");
  v1::ExecSyncRequest request;
  request.set_container_id(container_id);
  for (const auto& arg : cmd) request.add_cmd(arg);
  request.set_timeout(timeout_seconds);
  v1::ExecSyncResponse response;
  Status s = Invoke("ExecSync", *deadline, [&](grpc::ClientContext* c) {
    return stubs_->runtime->ExecSync(c, request, &response);
  });
  if (!s.ok()) return s;
  return response;
}

Result<std::string> GrpcCriClient::Exec(const v1::ExecRequest& request) {
  if (request.cmd_size() == 0) return InvalidArgument("CRI Exec: empty command");
  v1::ExecResponse response;
  Status s = Invoke("Exec", timeouts_.call, [&](grpc::ClientContext* c) {
    return stubs_->runtime->Exec(c, request, &response);
  });
  if (!s.ok()) return s;
  return response.url();
}

Result<std::string> GrpcCriClient::Attach(const v1::AttachRequest& request) {
  v1::AttachResponse response;
  Status s = Invoke("Attach", timeouts_.call, [&](grpc::ClientContext* c) {
    return stubs_->runtime->Attach(c, request, &response);
  });
  if (!s.ok()) return s;
  return response.url();
}

Result<std::string> GrpcCriClient::PortForward(const v1::PortForwardRequest& request) {
  v1::PortForwardResponse response;
  Status s = Invoke("PortForward", timeouts_.call, [&](grpc::ClientContext* c) {
    return stubs_->runtime->PortForward(c, request, &response);
  });
  if (!s.ok()) return s;
  return response.url();
}

Status GrpcCriClient::ReopenContainerLog(const std::string& container_id) {
  v1::ReopenContainerLogRequest request;
  request.set_container_id(container_id);
  v1::ReopenContainerLogResponse response;
  return Invoke("ReopenContainerLog", timeouts_.call, [&](grpc::ClientContext* c) {
    return stubs_->runtime->ReopenContainerLog(c, request, &response);
  });
}

Result<std::vector<v1::ContainerStats>> GrpcCriClient::ListContainerStats(
    const v1::ContainerStatsFilter& filter) {
  v1::ListContainerStatsRequest request;
  *request.mutable_filter() = filter;
  v1::ListContainerStatsResponse response;
  Status s = Invoke("ListContainerStats", timeouts_.query, [&](grpc::ClientContext* c) {
    return stubs_->runtime->ListContainerStats(c, request, &response);
  });
  if (!s.ok()) return s;
  std::vector<v1::ContainerStats> items;
  items.reserve(static_cast<size_t>(response.stats_size()));
  for (auto& item : *response.mutable_stats()) items.push_back(std::move(item));
  return items;
}

Result<std::vector<v1::Image>> GrpcCriClient::ListImages(const v1::ImageFilter& filter) {
  v1::ListImagesRequest request;
  *request.mutable_filter() = filter;
  v1::ListImagesResponse response;
  Status s = Invoke("ListImages", timeouts_.query, [&](grpc::ClientContext* c) {
    return stubs_->image->ListImages(c, request, &response);
  });
  if (!s.ok()) return s;
  std::vector<v1::Image> items;
  items.reserve(static_cast<size_t>(response.images_size()));
  for (auto& item : *response.mutable_images()) items.push_back(std::move(item));
  return items;
}

Result<v1::ImageStatusResponse> GrpcCriClient::ImageStatus(const v1::ImageSpec& image,
                                                           bool verbose) {
  v1::ImageStatusRequest request;
  *request.mutable_image() = image;
  request.set_verbose(verbose);
  v1::ImageStatusResponse response;
  Status s = Invoke("ImageStatus", timeouts_.query, [&](grpc::ClientContext* c) {
    return stubs_->image->ImageStatus(c, request, &response);
  });
  if (!s.ok()) return s;
  if (response.has_image() && response.image().id().empty()) {
    return CallFailed("ImageStatus",
                      "the runtime returned an image without id for '" + image.image() + "'");
  }
  return response;
}

Result<std::string> GrpcCriClient::PullImage(const v1::ImageSpec& image, const v1::AuthConfig* auth,
                                             const v1::PodSandboxConfig* sandbox_config,
                                             CallCancel* cancel) {
  v1::PullImageRequest request;
  *request.mutable_image() = image;
  if (auth != nullptr) *request.mutable_auth() = *auth;
  if (sandbox_config != nullptr) *request.mutable_sandbox_config() = *sandbox_config;
  v1::PullImageResponse response;
  // No deadline, as the kubelet's pulls have none (its --runtime-request-timeout does not bound
  // them): a large image on a slow registry takes what it takes. The caller ends it by `cancel`
  // (podworkerd: the pod is being stopped, or podworkerd is).
  grpc::ClientContext context;
  grpc::Status status;
  {
    CallCancelScope bound(cancel, [&context] { context.TryCancel(); });
    status = stubs_->image->PullImage(&context, request, &response);
  }
  if (!status.ok()) return StatusFromGrpc("PullImage", status);
  if (response.image_ref().empty()) {
    return CallFailed("PullImage",
                      "the runtime returned an empty image ref for '" + image.image() + "'");
  }
  return std::move(*response.mutable_image_ref());
}

Status GrpcCriClient::RemoveImage(const v1::ImageSpec& image) {
  v1::RemoveImageRequest request;
  *request.mutable_image() = image;
  v1::RemoveImageResponse response;
  return Invoke("RemoveImage", timeouts_.call, [&](grpc::ClientContext* c) {
    return stubs_->image->RemoveImage(c, request, &response);
  });
}

Result<v1::ImageFsInfoResponse> GrpcCriClient::ImageFsInfo() {
  v1::ImageFsInfoRequest request;
  v1::ImageFsInfoResponse response;
  Status s = Invoke("ImageFsInfo", timeouts_.query, [&](grpc::ClientContext* c) {
    return stubs_->image->ImageFsInfo(c, request, &response);
  });
  if (!s.ok()) return s;
  return response;
}

}  // namespace nodelet::cri
