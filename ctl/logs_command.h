// `nodeletctl logs POD [-c CONTAINER] [-f] [--previous] [--since D] [--timestamps] [--tail N]
// [--all-containers]`: a pod's container log as `kubectl logs` shows it, read from the files the
// runtime writes under the nodelet's log directory (pods/NAMESPACE_NAME_UID/CONTAINER/N.log, N
// the restart count) with CRI's line prefix stripped and partial lines joined (lib/logs). POD is
// NAME or NAMESPACE/NAME (the name as in `nodeletctl pods`); the pod, its containers and their
// states come from statusd, the log directory from the supervisor. -f follows the file across
// rotations and ends when the container ends; --previous is the instance before the current
// one. Exit 0; 2 bad flags; 4 when nodelet, the pod, the container or the instance is unknown.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "ctl/service_commands.h"

namespace nodelet::ctl {

// The text of a CRI log file ("2024-05-01T12:00:00.1Z stdout F text"), last `tail` lines
// (all when < 0).
std::string CriLogText(const std::string& content, int tail);

struct LogsRequest {
  std::string pod;
  std::string container;  // "": the pod's only container
  bool follow = false;
  bool previous = false;
  bool timestamps = false;
  bool all_containers = false;
  std::string since;  // a Go duration ("5s", "2m", "1h"); "": all
  int64_t tail = -1;  // lines; < 0: all
};

int RunLogs(const CtlOptions& o, const LogsRequest& r, std::ostream& out, std::ostream& err);

}  // namespace nodelet::ctl
