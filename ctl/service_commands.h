// nodeletctl's service commands, in the style of supervisorctl: status, start, stop, restart,
// pid, version, tail. Each returns the process exit code (ctl/cli_output.h):
//   status: 0 all RUNNING, 3 some not running, 4 unknown name or no connection (LSB, as
//           supervisorctl);
//   start/stop/restart: 0 all done, 1 some failed, 4 unknown name or no connection;
//   pid/version/tail: 0, or 4 when the supervisor cannot be reached or the name is unknown.
#pragma once

#include <chrono>
#include <ostream>
#include <string>
#include <vector>

#include "ctl/cli_output.h"
#include "ctl_generated.h"
#include "lib/common/clock.h"
#include "lib/common/status.h"

namespace nodelet::ctl {

struct CtlOptions {
  std::string run_dir = "/run/nodelet";
  std::chrono::milliseconds timeout{5000};          // status, pid, version, tail
  std::chrono::milliseconds action_timeout{90000};  // start, stop, restart
  // Measures the deadlines: the process's clock unless a test gives another.
  const Clock* clock = &RealClock::Get();
};

// Prints that nodelet cannot be reached at o.run_dir (and why) and returns kExitUnknown.
int Unreachable(const CtlOptions& o, const Status& s, std::ostream& err);

// "0:01:02", "1 day, 2:03:04" (supervisorctl's uptime).
std::string FormatUptime(uint64_t uptime_ms);
// supervisorctl's status lines: name padded to max(30, longest)+3, state padded to 10, then
// "pid N, uptime H:MM:SS" for RUNNING or the supervisor's description otherwise.
std::string FormatStatus(const std::vector<std::unique_ptr<ipc::ctl::ServiceStatusT>>& services);
// The document of `status -o json` (`--json`).
nlohmann::json StatusJson(const std::vector<std::unique_ptr<ipc::ctl::ServiceStatusT>>& services);

// -o wide adds RESTARTS and HEALTH; -o name prints the services' names.
int RunStatus(const CtlOptions& o, const std::vector<std::string>& names, OutputFormat format,
              std::ostream& out, std::ostream& err);
// supervisorctl's lines with RESTARTS and HEALTH after the state (-o wide).
std::string FormatStatusWide(
    const std::vector<std::unique_ptr<ipc::ctl::ServiceStatusT>>& services);
// kind: Start, Stop or Restart.
int RunAction(const CtlOptions& o, ipc::ctl::RequestKind kind,
              const std::vector<std::string>& names, std::ostream& out, std::ostream& err);
int RunPid(const CtlOptions& o, const std::vector<std::string>& names, std::ostream& out,
           std::ostream& err);
// `version`: nodeletctl's own version first, always ("Client Version: V", as kubectl), then the
// running nodelet's ("Server Version: V"); with `client_only` nothing is asked. 4 when nodelet
// cannot be reached (the client's line is printed all the same).
int RunVersion(const CtlOptions& o, bool client_only, std::ostream& out, std::ostream& err);
// Prints the last `lines` lines of the service's log; with `follow`, keeps printing what is
// appended (reopening the file when it is rotated) until interrupted.
int RunTail(const CtlOptions& o, const std::string& name, int lines, bool follow, std::ostream& out,
            std::ostream& err);

// `runtime`: plegd's view of the runtime through the supervisor: one line per pod (sandbox
// state, foreign pods marked), one indented line per container. 0, or 4 when unreachable.
int RunRuntime(const CtlOptions& o, OutputFormat format, std::ostream& out, std::ostream& err);

// `node`: the node's status (conditions, capacity/allocatable, versions, images count) or, with
// -o json|yaml (--json), the v1 Node object; -o name prints node/NAME. 0, or 4 when nodelet is
// unreachable or has no runtime.
int RunNode(const CtlOptions& o, OutputFormat format, std::ostream& out, std::ostream& err);
std::string FormatRuntime(const ipc::ctl::CtlReplyT& reply);

// The last `lines` lines of a file (read from its end, bounded).
std::string LastLines(const std::string& path, int lines);

}  // namespace nodelet::ctl
