// SystemdBus: the little of systemd's D-Bus API (org.freedesktop.systemd1) that the supervisor's
// systemd mode uses: read a unit's state, start/stop/restart it as a job, and hear when a job
// ends or a unit's properties change. SystemdBusImpl speaks it through libsystemd's sd-bus on
// the system bus, every call bounded by a timeout; tests use a fake.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "lib/common/status.h"

namespace nodelet::supervisor {

// A unit's properties (org.freedesktop.systemd1.Unit and .Service) that map to a ServiceInfo.
struct UnitStatus {
  std::string load_state;  // "loaded", "not-found", "masked", ...
  std::string
      active_state;  // "active", "activating", "deactivating", "inactive", "failed", "reloading"
  std::string
      sub_state;       // "running", "auto-restart", "dead", "failed", "start", "stop-sigterm", ...
  std::string result;  // Service.Result: "success", "exit-code", "signal", "watchdog",
                       // "start-limit-hit", ...
  pid_t main_pid = 0;
  uint32_t n_restarts = 0;                   // automatic restarts since the unit was loaded
  uint64_t active_enter_monotonic_usec = 0;  // CLOCK_MONOTONIC µs when it last became active
  uint64_t state_change_usec = 0;            // CLOCK_REALTIME µs of the last state change
  int32_t exec_main_code = 0;                // CLD_EXITED (1), CLD_KILLED (2), CLD_DUMPED (3)
  int32_t exec_main_status = 0;              // exit code or signal number
};

class SystemdBus {
 public:
  // Receives the signals that Process() dispatches.
  class Listener {
   public:
    virtual ~Listener() = default;
    // Manager.JobRemoved: a job ended with `result` ("done", "canceled", "timeout", "failed",
    // "dependency", "skipped").
    virtual void OnJobRemoved(const std::string& job_path, const std::string& unit,
                              const std::string& result) = 0;
    // PropertiesChanged on one of the watched units.
    virtual void OnUnitChanged(const std::string& unit) = 0;
  };

  virtual ~SystemdBus() = default;
  // Subscribes to systemd's signals (Manager.Subscribe, JobRemoved, PropertiesChanged on each
  // unit's object) and sends them to `listener` from Process().
  virtual Status Watch(const std::vector<std::string>& units, Listener* listener) = 0;
  virtual Result<UnitStatus> GetUnitStatus(const std::string& unit) = 0;
  // Queue a job in "replace" mode; returns the job's object path.
  virtual Result<std::string> StartUnit(const std::string& unit) = 0;
  virtual Result<std::string> StopUnit(const std::string& unit) = 0;
  virtual Result<std::string> RestartUnit(const std::string& unit) = 0;
  // Clears a failed state and the start-limit counter (systemctl reset-failed).
  virtual Status ResetFailedUnit(const std::string& unit) = 0;
  // For the supervisor's poll loop: the bus fd with the events it waits for.
  virtual zmq::pollitem_t PollItem() = 0;
  // Reads and dispatches whatever is queued, without blocking.
  virtual void Process() = 0;
};

// Opens the system bus ($DBUS_SYSTEM_BUS_ADDRESS or /run/dbus/system_bus_socket).
// `call_timeout` bounds every method call.
Result<std::unique_ptr<SystemdBus>> OpenSystemdBus(std::chrono::milliseconds call_timeout);

}  // namespace nodelet::supervisor
