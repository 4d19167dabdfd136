// CtlClient: nodeletctl's end of the operator API (ipc-schemas/ctl.fbs). One request, one
// verified reply, within a deadline. An absent or dead supervisor is told apart from a slow one
// by connecting to the socket file first.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "ctl_generated.h"
#include "lib/common/clock.h"
#include "lib/common/status.h"

namespace nodelet::ctl {

// Checks that something accepts connections on the ctl socket of `run_dir`; Unavailable with
// the path and errno text otherwise ("No such file or directory", "Connection refused"), and
// PermissionDenied "permission denied: PATH (needs root or group X)" when the file system does not
// let this user connect.
Status ProbeCtlSocket(const std::string& run_dir);

// Sends one request and returns the unpacked reply. PermissionDenied when this user may not
// connect (the file system, or nodelet's check of the peer's credentials, refuses it);
// Unavailable when the supervisor cannot be reached, DeadlineExceeded when it does not answer
// within `deadline`, InvalidArgument for a reply that fails verification. `clock` measures the
// deadline.
Result<ipc::ctl::CtlReplyT> CtlRequest(const Clock& clock, const std::string& run_dir,
                                       ipc::ctl::RequestKind kind,
                                       const std::vector<std::string>& services,
                                       std::chrono::milliseconds deadline);

// As CtlRequest, for any request (a stream request carries the session asked for).
Result<ipc::ctl::CtlReplyT> CtlCall(const Clock& clock, const std::string& run_dir,
                                    const ipc::ctl::CtlRequestT& request,
                                    std::chrono::milliseconds deadline);

}  // namespace nodelet::ctl
