// GrpcProbe: one grpc probe attempt, as the kubelet's prober makes it (pkg/probe/grpc): a
// grpc.health.v1.Health/Check call on HOST:PORT over plaintext HTTP/2 with the probe's service
// name, under one deadline (timeoutSeconds) for connecting and the call. SERVING is a success;
// any other answer, an error status or the deadline is a failure whose message says which.
//
// The request and response are two one-field protobuf messages (HealthCheckRequest.service = 1,
// a string; HealthCheckResponse.status = 1, an enum), encoded and decoded here by hand through
// gRPC's generic stub, so no generated code is needed. A container's server is hostile input:
// the response is capped (kMaxGrpcProbeResponseBytes) and any malformed bytes are a failure.
#pragma once

#include <chrono>
#include <string>

#include "svc-podworkerd/probe_manager.h"

namespace nodelet::podworkerd {

inline constexpr size_t kMaxGrpcProbeResponseBytes = 64 * 1024;

ProbeOutcome GrpcProbe(const std::string& host, int port, const std::string& service,
                       std::chrono::milliseconds timeout);

}  // namespace nodelet::podworkerd
