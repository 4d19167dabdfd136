#include "svc-podworkerd/grpc_probe.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <optional>
#include <vector>

#include "lib/cri/grpc_deadline.h"

namespace nodelet::podworkerd {
namespace {

constexpr char kCheckMethod[] = "/grpc.health.v1.Health/Check";

// HealthCheckResponse.ServingStatus names, by value.
std::string StatusName(uint64_t v) {
  switch (v) {
    case 0:
      return "UNKNOWN";
    case 1:
      return "SERVING";
    case 2:
      return "NOT_SERVING";
    case 3:
      return "SERVICE_UNKNOWN";
  }
  return std::to_string(v);
}

void PutVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

std::optional<uint64_t> GetVarint(const std::string& in, size_t& pos) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64 && pos < in.size(); shift += 7) {
    uint8_t b = static_cast<uint8_t>(in[pos++]);
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return v;
  }
  return std::nullopt;
}

// The status field of a HealthCheckResponse (0 when absent, as proto3 says); nullopt for bytes
// that are not a protobuf message.
std::optional<uint64_t> ResponseStatus(const std::string& in) {
  uint64_t status = 0;
  size_t pos = 0;
  while (pos < in.size()) {
    auto key = GetVarint(in, pos);
    if (!key) return std::nullopt;
    const uint64_t field = *key >> 3, wire = *key & 7;
    if (wire == 0) {  // varint
      auto v = GetVarint(in, pos);
      if (!v) return std::nullopt;
      if (field == 1) status = *v;
    } else if (wire == 2) {  // length-delimited: skipped
      auto len = GetVarint(in, pos);
      if (!len || *len > in.size() - pos) return std::nullopt;
      pos += *len;
    } else if (wire == 1 || wire == 5) {  // fixed 64 / 32: skipped
      size_t n = wire == 1 ? 8 : 4;
      if (n > in.size() - pos) return std::nullopt;
      pos += n;
    } else {
      return std::nullopt;
    }
  }
  return status;
}

}  // namespace

ProbeOutcome GrpcProbe(const std::string& host, int port, const std::string& service,
                       std::chrono::milliseconds timeout) {
  const bool v6 = host.find(':') != std::string::npos;
  const std::string target = (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);  // the pod is reached directly, never by proxy
  args.SetMaxReceiveMessageSize(static_cast<int>(kMaxGrpcProbeResponseBytes));
  auto channel = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(cri::GrpcDeadline(timeout));
  context.set_wait_for_ready(true);  // connecting counts against the same deadline

  std::string request;
  if (!service.empty()) {
    request.push_back(0x0a);  // field 1, length-delimited
    PutVarint(request, service.size());
    request += service;
  }
  grpc::Slice slice(request);
  grpc::ByteBuffer request_buffer(&slice, 1);
  grpc::CompletionQueue cq;
  auto call = stub.PrepareUnaryCall(&context, kCheckMethod, request_buffer, &cq);
  if (!call) return {false, "failed to set up the health check call to " + target};
  call->StartCall();
  grpc::ByteBuffer response;
  grpc::Status status;
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  // The context's deadline ends the call; the queue is drained before it goes.
  cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  if (!status.ok()) {
    if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      return {false, "timeout: health rpc did not complete within " +
                         std::to_string(timeout.count()) + "ms"};
    }
    return {false, "error: health rpc probe failed: " + status.error_message() + " (code " +
                       std::to_string(static_cast<int>(status.error_code())) + ")"};
  }
  std::vector<grpc::Slice> slices;
  std::string body;
  if (response.Dump(&slices).ok()) {
    for (const auto& s : slices) {
      body.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  auto serving = ResponseStatus(body);
  if (!serving) return {false, "error: health rpc probe failed: the response does not parse"};
  if (*serving != 1) {
    return {false, "service unhealthy (responded with \"" + StatusName(*serving) + "\")"};
  }
  return {true, ""};
}

}  // namespace nodelet::podworkerd
