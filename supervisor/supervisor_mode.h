// SupervisorMode: how nodelet keeps its four services running, chosen once by `--mode` (or
// `mode:` in the config file's supervisor section). Each mode has its own ServiceBackend
// (service_backend.h); nothing else in the supervisor asks which mode it runs in.
#pragma once

#include <string>
#include <string_view>

#include "lib/common/status.h"

namespace nodelet::supervisor {

enum class SupervisorMode {
  // "standalone": nodelet spawns the services as its children and restarts them itself.
  kStandalone,
  // "systemd": each service is a systemd unit; nodelet watches and asks systemd over D-Bus.
  kSystemd,
};

// "standalone" or "systemd" (the flag's values); InvalidArgument naming both otherwise.
Result<SupervisorMode> ParseSupervisorMode(std::string_view text);
// The flag's value for `mode`.
std::string_view SupervisorModeName(SupervisorMode mode);

}  // namespace nodelet::supervisor
