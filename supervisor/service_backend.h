// ServiceBackend: how the supervisor keeps its four services running, one implementation per
// SupervisorMode. ChildProcessBackend (standalone, child_process_backend.h) spawns them as its
// children and restarts them; SystemdUnitBackend (systemd, systemd_unit_backend.h) watches
// their systemd units over D-Bus and asks systemd for jobs. A backend is created with what it
// needs, the supervisor's EventLoop included, owns every member it uses, and registers its own
// sources on the loop (its timers and an after-iteration callback among them, added before the
// supervisor core's, so the core reads states the backend has just brought up to date). The core
// (control socket, ctl server, sync loop, HTTP endpoint, health to systemd) sees the services
// only through this interface.
#pragma once

#include "supervisor/supervised_services.h"

namespace nodelet::supervisor {

class ServiceBackend {
 public:
  virtual ~ServiceBackend() = default;
  // The services' states, the hellos and heartbeats the control socket receives, and the
  // operator's start, stop and restart. Their StartAll and StopAll are the backend's to call
  // (StartServices, StopServices).
  virtual SupervisedServices& services() = 0;
  // At supervisor start, once, before the loop runs: spawns every service (standalone) or reads
  // every unit (systemd).
  virtual void StartServices() = 0;
  // At supervisor shutdown (SIGTERM, SIGINT): stops every service (standalone); systemd's
  // units keep running. services().AllStopped() says when the loop may end.
  virtual void StopServices() = 0;
};

}  // namespace nodelet::supervisor
