#include "supervisor/supervisor_mode.h"

namespace nodelet::supervisor {

Result<SupervisorMode> ParseSupervisorMode(std::string_view text) {
  if (text == "standalone") return SupervisorMode::kStandalone;
  if (text == "systemd") return SupervisorMode::kSystemd;
  return InvalidArgument("unknown mode '" + std::string(text) +
                         "' (standalone: spawn the services; systemd: watch their units)");
}

std::string_view SupervisorModeName(SupervisorMode mode) {
  switch (mode) {
    case SupervisorMode::kStandalone:
      return "standalone";
    case SupervisorMode::kSystemd:
      return "systemd";
  }
  return "standalone";  // not reached: every enumerator is handled above
}

}  // namespace nodelet::supervisor
