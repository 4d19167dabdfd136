// GrpcDeadline: the deadline of every gRPC call nodelet makes (CRI and containerd's own API).
#pragma once

#include <grpc/support/time.h>

#include <chrono>

namespace nodelet::cri {

// `timeout` from the moment the call starts, as a relative time (GPR_TIMESPAN) that gRPC adds to
// its own monotonic clock. grpc::ClientContext::set_deadline otherwise wants an absolute
// std::chrono::system_clock time point, which would put the wall clock (and its steps) into
// every deadline; this form reads no clock at all. A Clock cannot drive it either way: gRPC
// waits in real time.
inline gpr_timespec GrpcDeadline(std::chrono::milliseconds timeout) {
  return gpr_time_from_millis(timeout.count(), GPR_TIMESPAN);
}

}  // namespace nodelet::cri
