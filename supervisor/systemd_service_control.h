// SystemdServiceControl: the supervisor's systemd mode (`nodelet --mode systemd`). Each service
// is its own systemd unit (PREFIX<service>.service, deploy/); systemd starts it, restarts it
// (Restart=on-failure) and detects hangs (WatchdogSec). The supervisor spawns nothing: it reads
// each unit's ActiveState, SubState, MainPID, NRestarts and timestamps over D-Bus (SystemdBus),
// re-reads a unit when systemd signals a change (and every refresh period regardless), still
// takes the services' hellos and heartbeats, and turns the operator's start, stop and restart
// into unit jobs, answered once the job is removed and, for a start, once the new main process
// said hello, or when the deadline passes.
//
// Unit states map onto the supervisord states that `nodeletctl status` shows in both modes:
// active → RUNNING, activating → STARTING (activating/auto-restart → BACKOFF), deactivating →
// STOPPING, failed → FATAL (BACKOFF while an automatic restart is pending), inactive → STOPPED.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "lib/common/clock.h"
#include "lib/common/status.h"
#include "supervisor/supervised_services.h"
#include "supervisor/systemd_bus.h"

namespace nodelet::supervisor {

struct SystemdModeOptions {
  std::string unit_prefix = "nodelet-";
  // A start, stop or restart must be complete (job removed, new process said hello) by then.
  std::chrono::milliseconds job_timeout{30000};
  // Every unit is re-read at least this often, signals or not.
  std::chrono::milliseconds refresh_period{5000};
  // Heartbeats older than this show as `failing` health; systemd's watchdog does the killing.
  std::chrono::milliseconds heartbeat_deadline{5000};
};

// The supervisord state for a unit's state (see the header comment).
ProcessState MapUnitState(const UnitStatus& status);
// Why a unit is down, from its Result and main process: "exit 1", "signal 9 (Killed)",
// "watchdog timeout (signal 6 (Aborted))", "start limit hit"; "" when it did not fail.
std::string DescribeUnitFailure(const UnitStatus& status);

class SystemdServiceControl : public SupervisedServices, private SystemdBus::Listener {
 public:
  SystemdServiceControl(const Clock& clock, SystemdBus& bus, SystemdModeOptions options,
                        std::vector<std::string> names);
  // Subscribes to systemd's signals and reads every unit; an error here means no systemd mode.
  Status Watch();
  // "nodelet-plegd.service" for "plegd".
  std::string UnitName(const std::string& name) const;
  // Re-reads the units that systemd signalled as changed; call after SystemdBus::Process().
  void RefreshChanged();

  // SupervisedServices.
  void StartAll() override;
  void StopAll() override;
  bool AllStopped() const override { return stopping_; }
  bool OnReady(const std::string& name, pid_t pid) override;
  bool OnHeartbeat(const std::string& name, ipc::control::Health health,
                   const std::string& reason) override;
  void Tick() override;
  MonoTime NextDeadline() const override;
  std::string Summary() const override;
  bool AllRunning() const override;

  // ServiceControl.
  std::vector<ServiceInfo> List() const override;
  bool Has(const std::string& name) const override;
  void Start(const std::string& name, DoneCallback done) override;
  void Stop(const std::string& name, DoneCallback done) override;
  void Restart(const std::string& name, DoneCallback done) override;

 private:
  enum class OpKind { kStart, kStop, kRestart };
  struct Op {
    OpKind kind;
    std::string job;  // the job's object path
    bool job_done = false;
    pid_t old_pid = 0;
    MonoTime deadline;
    DoneCallback done;
  };
  struct Unit {
    std::string name;  // "plegd"
    std::string unit;  // "nodelet-plegd.service"
    UnitStatus status;
    bool have_status = false;
    std::string error;  // the last failed read, "" when the status is current
    bool changed = false;
    pid_t hello_pid = 0;
    bool heard = false;
    MonoTime last_heartbeat{};
    ipc::control::Health health = ipc::control::Health::Ok;
    std::string health_reason;
    std::vector<Op> ops;
  };

  void OnJobRemoved(const std::string& job_path, const std::string& unit,
                    const std::string& result) override;
  void OnUnitChanged(const std::string& unit) override;

  Unit* Find(const std::string& name);
  ProcessState StateOf(const Unit& u) const;
  void Refresh(Unit& u);
  void RefreshAll();
  // Completes the operations whose job is done and whose outcome the unit's state now shows.
  void Settle(Unit& u);
  // Queues a job and records the operation; answers at once when the job cannot be queued.
  void Enqueue(Unit& u, OpKind kind, DoneCallback done);
  std::string Describe(const Unit& u) const;

  const Clock& clock_;
  SystemdBus& bus_;
  SystemdModeOptions options_;
  std::vector<Unit> units_;
  MonoTime next_refresh_{};
  bool stopping_ = false;
};

}  // namespace nodelet::supervisor
