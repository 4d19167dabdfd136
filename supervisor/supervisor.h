// Supervisor: nodelet's main loop, in both modes (in systemd mode the units replace the spawned
// children: see systemd_service_control.h). One thread runs an EventLoop
// (lib/service/event_loop.h) on the services' control socket (hello, heartbeats), their notify
// sockets (READY=1), their log pipes, signals (SIGCHLD, SIGTERM, SIGINT, SIGHUP), the operator's
// ctl socket and plegd's event stream, and drives the ProcessManager's timers. It reports the
// aggregate to its own NOTIFY_SOCKET: READY=1 once every service ran, STATUS= whenever the summary
// changes, WATCHDOG=1 while the loop progresses, STOPPING=1 at shutdown.
#pragma once

#include <memory>

#include "supervisor/supervisor_options.h"

namespace nodelet::supervisor {

class Supervisor {
 public:
  explicit Supervisor(SupervisorOptions options);
  ~Supervisor();
  // Runs until SIGTERM/SIGINT, then stops every service; returns the exit code.
  int Run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nodelet::supervisor
