// nodeletctl's service commands, in the style of supervisorctl: status, start, stop, restart,
// pid, version, tail. Each returns the process exit code:
//   status: 0 all RUNNING, 3 some not running, 4 unknown name or no connection (LSB, as
//           supervisorctl);
//   start/stop/restart: 0 all done, 1 some failed, 4 unknown name or no connection;
//   pid/version/tail: 0, or 4 when the supervisor cannot be reached or the name is unknown.
#pragma once

#include <chrono>
#include <ostream>
#include <string>
#include <vector>

#include "ctl_generated.h"
#include "lib/common/clock.h"
#include "lib/common/status.h"

namespace nodelet::ctl {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitNotRunning = 3;
inline constexpr int kExitUnknown = 4;

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
// The JSON form of `status --json`.
std::string FormatStatusJson(
    const std::vector<std::unique_ptr<ipc::ctl::ServiceStatusT>>& services);

int RunStatus(const CtlOptions& o, const std::vector<std::string>& names, bool json,
              std::ostream& out, std::ostream& err);
// kind: Start, Stop or Restart.
int RunAction(const CtlOptions& o, ipc::ctl::RequestKind kind,
              const std::vector<std::string>& names, std::ostream& out, std::ostream& err);
int RunPid(const CtlOptions& o, const std::vector<std::string>& names, std::ostream& out,
           std::ostream& err);
int RunVersion(const CtlOptions& o, std::ostream& out, std::ostream& err);
// Prints the last `lines` lines of the service's log; with `follow`, keeps printing what is
// appended (reopening the file when it is rotated) until interrupted.
int RunTail(const CtlOptions& o, const std::string& name, int lines, bool follow, std::ostream& out,
            std::ostream& err);

// `runtime`: plegd's view of the runtime through the supervisor: one line per pod (sandbox
// state, foreign pods marked), one indented line per container. 0, or 4 when unreachable.
int RunRuntime(const CtlOptions& o, bool json, std::ostream& out, std::ostream& err);

// `node [--json]`: the node's status (conditions, capacity/allocatable, versions, images count)
// or, with --json, the v1 Node object. 0, or 4 when nodelet is unreachable or has no runtime.
int RunNode(const CtlOptions& o, bool json, std::ostream& out, std::ostream& err);
std::string FormatRuntime(const ipc::ctl::CtlReplyT& reply);

// The last `lines` lines of a file (read from its end, bounded).
std::string LastLines(const std::string& path, int lines);

}  // namespace nodelet::ctl
