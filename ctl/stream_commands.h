// `nodeletctl exec`, `attach` and `port-forward` (docs/operate.md): podworkerd finds the
// container (the sandbox) and asks the runtime for a session (podwork.fbs StreamRequest); the
// session then runs between nodeletctl and the runtime's streaming server (ctl/stream_client.h).
//
//   exec [-i] [-t] POD [-c CONTAINER] -- COMMAND...   exits with the command's exit code
//   attach [-i] [-t] POD [-c CONTAINER]               exits 0 when the container's output ends
//   port-forward POD [--address ADDR]... [LOCAL:]REMOTE...   until SIGINT or SIGTERM
//
// POD is NAME or NAMESPACE/NAME (as `nodeletctl pods` names it). Before a session: exit 4 when
// the pod or container does not exist or nodelet cannot be reached, 1 for any other refusal (not
// running, several containers and no -c), 2 for bad arguments. 127/126 when the command cannot
// be found or run, as a shell gives.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "lib/common/status.h"
#include "podwork_generated.h"

namespace nodelet::ctl {

struct StreamAskText {
  ipc::podwork::StreamKind kind = ipc::podwork::StreamKind::Exec;
  std::string pod;  // NAME or NAMESPACE/NAME
  std::string container;
  std::vector<std::string> cmd;
  bool stdin = false, tty = false;
  std::vector<int32_t> ports;
};

// Asks the supervisor (run_dir/ctl.sock), which asks podworkerd, for a session URL. Errors carry
// podworkerd's code (NotFound, FailedPrecondition, InvalidArgument), Unavailable when podworkerd
// or nodelet cannot be reached, DeadlineExceeded when podworkerd did not answer in time.
Result<std::string> RequestStreamUrl(const std::string& run_dir, const StreamAskText& ask,
                                     std::string* container = nullptr);

void AddStreamCommands(CLI::App& app, const std::string* run_dir, int* rc);

}  // namespace nodelet::ctl
