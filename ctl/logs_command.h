// `nodeletctl logs POD [-c CONTAINER] [--tail N]`: a pod's container log, as the runtime wrote
// it under the nodelet's log directory (pods/NAMESPACE_NAME_UID/CONTAINER/N.log, N the restart
// count; the newest is shown), with CRI's line prefix (time, stream, tag) stripped and partial
// lines joined. POD is NAME or NAMESPACE/NAME (the name as in `nodeletctl pods`). The log
// directory comes from the supervisor. Exit 0; 4 when nodelet, the pod or the container is
// unknown.
#pragma once

#include <ostream>
#include <string>

#include "ctl/service_commands.h"

namespace nodelet::ctl {

// The text of a CRI log file ("2024-05-01T12:00:00.1Z stdout F text"), last `tail` lines
// (all when < 0).
std::string CriLogText(const std::string& content, int tail);

int RunLogs(const CtlOptions& o, const std::string& pod, const std::string& container, int tail,
            std::ostream& out, std::ostream& err);

}  // namespace nodelet::ctl
