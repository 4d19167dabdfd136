// ProcessManager: the supervisord state machine for nodelet's services, without I/O.
//
// Each service moves through STOPPED, STARTING, RUNNING, BACKOFF, STOPPING, EXITED and FATAL.
// STARTING becomes RUNNING only when the child says READY=1 (or Hello) within the start
// timeout. An unexpected exit, a start timeout, heartbeats that stop (a hang, a SIGSTOP) or a
// health that stays `failing` past its grace period lead to BACKOFF and a restart after an
// exponential delay (100 ms doubling to 10 s, reset after 60 s of good running); more than 10
// restarts within 60 s is FATAL, which, unlike supervisord, is retried after a cooldown (5 min)
// or at once on an operator's start. Operator restarts do not count toward that limit.
//
// Processes are started and signalled through a ProcessLauncher (fork/exec in production, a
// fake in tests) and time comes from a Clock, so every rule is unit-tested without sleeping.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "control_generated.h"
#include "lib/common/clock.h"
#include "lib/common/status.h"
#include "supervisor/supervised_services.h"

namespace nodelet::supervisor {

struct SupervisorPolicy {
  std::chrono::milliseconds backoff_initial{100};
  std::chrono::milliseconds backoff_max{10000};
  std::chrono::milliseconds backoff_reset_after{60000};
  int restart_intensity = 10;  // more restarts than this within restart_period is FATAL
  std::chrono::milliseconds restart_period{60000};
  std::chrono::milliseconds fatal_cooldown{300000};
  std::chrono::milliseconds start_timeout{10000};
  std::chrono::milliseconds stop_timeout{10000};
  std::chrono::milliseconds heartbeat_deadline{5000};
  std::chrono::milliseconds failing_grace{30000};
};

class ProcessLauncher {
 public:
  virtual ~ProcessLauncher() = default;
  // Starts the service's process in its own process group; returns its pid.
  virtual Result<pid_t> Spawn(const std::string& name) = 0;
  // Sends `sig` to the process group of `pid`.
  virtual void SignalGroup(pid_t pid, int sig) = 0;
  // Where the service's stdout and stderr go.
  virtual std::string LogPath(const std::string& name) const = 0;
};

class ProcessManager : public SupervisedServices {
 public:
  ProcessManager(const Clock& clock, ProcessLauncher& launcher, SupervisorPolicy policy,
                 std::vector<std::string> names);

  // Starts every service (at supervisor start).
  void StartAll() override;
  // Stops every service (at supervisor shutdown); AllStopped() tells when done.
  void StopAll() override;
  bool AllStopped() const override;

  // Events. Each returns false when the pid or name is not one of ours.
  bool OnReady(const std::string& name, pid_t pid) override;
  bool OnHeartbeat(const std::string& name, ipc::control::Health health,
                   const std::string& reason) override;
  bool OnExit(pid_t pid, int wait_status);
  // Timers: restarts due, start and stop timeouts, hang detection, FATAL cooldown.
  void Tick() override;
  MonoTime NextDeadline() const override;

  // "4/4 services running" or "plegd BACKOFF (exit 1), 3/4 running".
  std::string Summary() const override;
  bool AllRunning() const override;
  // Which service owns `pid`, if any.
  const std::string* NameOf(pid_t pid) const;

  // ServiceControl.
  std::vector<ServiceInfo> List() const override;
  bool Has(const std::string& name) const override;
  void Start(const std::string& name, DoneCallback done) override;
  void Stop(const std::string& name, DoneCallback done) override;
  void Restart(const std::string& name, DoneCallback done) override;

 private:
  enum class AfterStop { kStay, kStartNow, kRestartWithBackoff };

  struct Service {
    std::string name;
    ProcessState state = ProcessState::Stopped;
    pid_t pid = 0;
    MonoTime state_since{};
    int64_t wall_since = 0;
    MonoTime running_since{};
    bool was_running = false;
    MonoTime deadline = MonoTime::max();
    std::chrono::milliseconds next_delay{0};
    std::deque<MonoTime> restarts;
    uint32_t restart_count = 0;
    std::string reason;
    MonoTime last_heartbeat{};
    ipc::control::Health health = ipc::control::Health::Ok;
    std::string health_reason;
    bool heard = false;
    MonoTime failing_since{};
    AfterStop after_stop = AfterStop::kStay;
    bool sigkill_sent = false;
    std::vector<DoneCallback> start_waiters;
    std::vector<DoneCallback> stop_waiters;
  };

  Service* Find(const std::string& name);
  void SetState(Service& s, ProcessState state);
  void Spawn(Service& s);
  void BeginStop(Service& s, AfterStop after, const std::string& reason);
  void ScheduleRestart(Service& s, const std::string& reason);
  static void Notify(std::vector<DoneCallback>& waiters, bool ok, const std::string& msg);
  std::string Describe(const Service& s) const;

  const Clock& clock_;
  ProcessLauncher& launcher_;
  SupervisorPolicy policy_;
  std::vector<Service> services_;
};

// "exit 1", "signal 9 (Killed)".
std::string DescribeWaitStatus(int wait_status);
// "0.4s", "12s", "4:59".
std::string FormatDelay(Duration d);

}  // namespace nodelet::supervisor
