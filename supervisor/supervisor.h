// Supervisor: nodelet's main loop, the same in both modes. One thread runs an EventLoop
// (lib/service/event_loop.h) on the services' control socket (hello, heartbeats), signals
// (SIGTERM, SIGINT, SIGHUP), the operator's ctl socket, plegd's event stream and the sync loop's
// pod sources. The services themselves are the ServiceBackend's (service_backend.h) that
// --mode selects: spawned children (standalone) or systemd units (systemd), each backend with
// its own sources on the same loop. It reports the aggregate to its own NOTIFY_SOCKET: READY=1
// once every service ran, STATUS= whenever the summary changes, WATCHDOG=1 while the loop
// progresses, STOPPING=1 at shutdown.
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
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nodelet::supervisor
