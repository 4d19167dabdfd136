// SupervisedServices: what the supervisor's loop needs from whoever keeps the services running,
// on top of the operator's ServiceControl. Two implementations: ProcessManager (standalone mode:
// spawns and restarts the services itself) and SystemdServiceControl (systemd mode: each service
// is a systemd unit; systemd restarts it, the supervisor watches and asks), each owned by the
// mode's ServiceBackend (service_backend.h). All calls run on the supervisor's loop thread.
#pragma once

#include <sys/types.h>

#include <string>

#include "control_generated.h"
#include "lib/common/clock.h"
#include "supervisor/service_control.h"

namespace nodelet::supervisor {

class SupervisedServices : public ServiceControl {
 public:
  // At supervisor start: spawn every service (standalone) or read every unit (systemd).
  virtual void StartAll() = 0;
  // At supervisor shutdown: stop every service (standalone); systemd's units stay as they are.
  virtual void StopAll() = 0;
  virtual bool AllStopped() const = 0;
  // A service said hello (or READY=1) with its pid; false when the name is not ours.
  virtual bool OnReady(const std::string& name, pid_t pid) = 0;
  virtual bool OnHeartbeat(const std::string& name, ipc::control::Health health,
                           const std::string& reason) = 0;
  // Timers (restarts, timeouts, refreshes) and when they want to run next.
  virtual void Tick() = 0;
  virtual MonoTime NextDeadline() const = 0;
  // "4/4 services running" or "plegd BACKOFF (exit 1), 3/4 running".
  virtual std::string Summary() const = 0;
  virtual bool AllRunning() const = 0;
};

}  // namespace nodelet::supervisor
