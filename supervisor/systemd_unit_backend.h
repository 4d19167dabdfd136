// SystemdUnitBackend: the systemd mode's ServiceBackend (`nodelet --mode systemd`). Each service
// is a systemd unit that systemd starts, restarts and watches; nodelet spawns nothing. It owns
// the connection to systemd (SystemdBus) and the SystemdServiceControl that maps the units'
// states onto the supervisord states and turns the operator's requests into unit jobs, and its
// sources on the supervisor's loop: the bus fd (registered at creation, so before the ctl socket:
// a status request sees what systemd just signalled), a timer at the next refresh or job
// deadline, and an after-iteration callback that dispatches what sd-bus queued while a method
// call waited and runs the refreshes and deadlines.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "lib/common/logging.h"
#include "lib/common/status.h"
#include "lib/service/event_loop.h"
#include "supervisor/after_iteration_work.h"
#include "supervisor/service_backend.h"
#include "supervisor/systemd_bus.h"
#include "supervisor/systemd_service_control.h"

namespace nodelet::supervisor {

struct SystemdUnitBackendOptions {
  SystemdModeOptions units;        // the unit prefix, job timeout, refresh period, heartbeats
  std::vector<std::string> names;  // the services, in the order they are listed
  std::string run_dir;             // for the start message
};

class SystemdUnitBackend : public ServiceBackend {
 public:
  // Subscribes to systemd's signals on `bus`, reads every unit and registers the backend's
  // sources on `loop`. Unavailable ("systemd mode: why") when a unit cannot be read.
  static Result<std::unique_ptr<SystemdUnitBackend>> Create(EventLoop& loop,
                                                            std::unique_ptr<SystemdBus> bus,
                                                            SystemdUnitBackendOptions options);

  SupervisedServices& services() override { return *units_; }
  void StartServices() override;
  void StopServices() override { units_->StopAll(); }

 private:
  SystemdUnitBackend(EventLoop& loop, std::unique_ptr<SystemdBus> bus,
                     SystemdUnitBackendOptions options);
  void Register();
  // Reads what the bus has queued and re-reads the units it signalled as changed.
  void ProcessBus();
  void AfterIteration();
  void ArmWake();

  EventLoop& loop_;
  SystemdUnitBackendOptions options_;
  std::shared_ptr<spdlog::logger> log_ = GetLogger("supervisor");
  std::unique_ptr<SystemdBus> bus_;
  std::unique_ptr<SystemdServiceControl> units_;
  // The loop's sources, last: removed before what their callbacks use.
  std::vector<EventLoop::Handle> sources_;
  AfterIterationWork after_;
};

}  // namespace nodelet::supervisor
