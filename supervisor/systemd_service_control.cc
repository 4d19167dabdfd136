#include "supervisor/systemd_service_control.h"

#include <signal.h>

#include <algorithm>
#include <cstring>

#include "lib/ipc/process_state_name.h"
#include "supervisor/process_manager.h"

namespace nodelet::supervisor {
namespace {

using Health = ipc::control::Health;

const char* KindName(int kind) {
  switch (kind) {
    case 0:
      return "start";
    case 1:
      return "stop";
    default:
      return "restart";
  }
}

}  // namespace

ProcessState MapUnitState(const UnitStatus& st) {
  // systemd 252 shows a pending automatic restart as activating/auto-restart (older releases
  // as failed/auto-restart): the supervisor's BACKOFF either way.
  if (st.sub_state == "auto-restart") return ProcessState::Backoff;
  const std::string& a = st.active_state;
  if (a == "active" || a == "reloading") return ProcessState::Running;
  if (a == "activating") return ProcessState::Starting;
  if (a == "deactivating") return ProcessState::Stopping;
  if (a == "failed") return ProcessState::Fatal;
  return ProcessState::Stopped;
}

std::string DescribeUnitFailure(const UnitStatus& st) {
  std::string process;
  if (st.exec_main_code == 1) {  // CLD_EXITED
    process = "exit " + std::to_string(st.exec_main_status);
  } else if (st.exec_main_code == 2 || st.exec_main_code == 3) {  // CLD_KILLED, CLD_DUMPED
    const char* name = strsignal(st.exec_main_status);
    process = "signal " + std::to_string(st.exec_main_status) +
              (name ? std::string(" (") + name + ")" : "");
  }
  const std::string& r = st.result;
  if (r.empty() || r == "success") return "";
  if (r == "exit-code" || r == "signal" || r == "core-dump") {
    return process.empty() ? r : process;
  }
  std::string what = r == "watchdog"          ? "watchdog timeout"
                     : r == "start-limit-hit" ? "start limit hit"
                     : r == "timeout"         ? "start or stop timeout"
                                              : r;
  return process.empty() ? what : what + " (" + process + ")";
}

SystemdServiceControl::SystemdServiceControl(const Clock& clock, SystemdBus& bus,
                                             SystemdModeOptions options,
                                             std::vector<std::string> names)
    : clock_(clock), bus_(bus), options_(std::move(options)) {
  for (auto& name : names) {
    Unit u;
    u.unit = options_.unit_prefix + name + ".service";
    u.name = std::move(name);
    units_.push_back(std::move(u));
  }
}

std::string SystemdServiceControl::UnitName(const std::string& name) const {
  return options_.unit_prefix + name + ".service";
}

Status SystemdServiceControl::Watch() {
  std::vector<std::string> units;
  for (const auto& u : units_) units.push_back(u.unit);
  if (Status s = bus_.Watch(units, this); !s.ok()) return s;
  RefreshAll();
  for (const auto& u : units_) {
    if (!u.have_status) return Unavailable(u.error);
  }
  return Status::Ok();
}

SystemdServiceControl::Unit* SystemdServiceControl::Find(const std::string& name) {
  for (auto& u : units_) {
    if (u.name == name) return &u;
  }
  return nullptr;
}

bool SystemdServiceControl::Has(const std::string& name) const {
  return std::any_of(units_.begin(), units_.end(), [&](const Unit& u) { return u.name == name; });
}

ProcessState SystemdServiceControl::StateOf(const Unit& u) const {
  if (!u.have_status) return ProcessState::Stopped;
  return MapUnitState(u.status);
}

void SystemdServiceControl::Refresh(Unit& u) {
  u.changed = false;
  auto st = bus_.GetUnitStatus(u.unit);
  if (!st.ok()) {
    u.error = st.status().message();
    return;
  }
  u.status = *st;
  u.have_status = true;
  u.error.clear();
}

void SystemdServiceControl::RefreshAll() {
  for (auto& u : units_) {
    Refresh(u);
    Settle(u);
  }
  next_refresh_ = clock_.Now() + options_.refresh_period;
}

void SystemdServiceControl::RefreshChanged() {
  for (auto& u : units_) {
    if (!u.changed) continue;
    Refresh(u);
    Settle(u);
  }
}

void SystemdServiceControl::Settle(Unit& u) {
  const ProcessState state = StateOf(u);
  for (auto it = u.ops.begin(); it != u.ops.end();) {
    Op& op = *it;
    if (!op.job_done || op.kind == OpKind::kStop) {
      ++it;
      continue;
    }
    const pid_t pid = u.status.main_pid;
    if (state == ProcessState::Running && pid != 0 && u.hello_pid == pid &&
        (op.kind != OpKind::kRestart || pid != op.old_pid)) {
      DoneCallback done = std::move(op.done);
      it = u.ops.erase(it);
      done(true, "started");
      continue;
    }
    if (state == ProcessState::Backoff || state == ProcessState::Fatal ||
        state == ProcessState::Stopped) {
      DoneCallback done = std::move(op.done);
      it = u.ops.erase(it);
      std::string why = DescribeUnitFailure(u.status);
      done(false,
           std::string(ipc::ProcessStateName(state)) + (why.empty() ? "" : " (" + why + ")"));
      continue;
    }
    ++it;
  }
}

void SystemdServiceControl::OnJobRemoved(const std::string& job_path, const std::string& unit,
                                         const std::string& result) {
  for (auto& u : units_) {
    if (u.unit != unit) continue;
    u.changed = true;
    for (auto it = u.ops.begin(); it != u.ops.end(); ++it) {
      if (it->job != job_path) continue;
      it->job_done = true;
      if (result == "done" && it->kind != OpKind::kStop) break;  // settled once it said hello
      DoneCallback done = std::move(it->done);
      const OpKind kind = it->kind;
      u.ops.erase(it);
      if (result == "done") {
        done(true, "stopped");
      } else {
        done(false,
             std::string(KindName(static_cast<int>(kind))) + " job of " + unit + ": " + result);
      }
      break;
    }
  }
}

void SystemdServiceControl::OnUnitChanged(const std::string& unit) {
  for (auto& u : units_) {
    if (u.unit == unit) u.changed = true;
  }
}

void SystemdServiceControl::Enqueue(Unit& u, OpKind kind, DoneCallback done) {
  const ProcessState state = StateOf(u);
  // An operator's start clears FATAL (and systemd's start-limit counter) at once.
  if (kind != OpKind::kStop && state == ProcessState::Fatal) {
    if (Status s = bus_.ResetFailedUnit(u.unit); !s.ok()) return done(false, s.message());
  }
  Result<std::string> job = kind == OpKind::kStart  ? bus_.StartUnit(u.unit)
                            : kind == OpKind::kStop ? bus_.StopUnit(u.unit)
                                                    : bus_.RestartUnit(u.unit);
  if (!job.ok()) return done(false, job.status().message());
  Op op{kind, *job, false, u.status.main_pid, clock_.Now() + options_.job_timeout, std::move(done)};
  u.ops.push_back(std::move(op));
}

void SystemdServiceControl::Start(const std::string& name, DoneCallback done) {
  Unit* u = Find(name);
  if (u == nullptr) return done(false, "no such process");
  Refresh(*u);
  if (StateOf(*u) == ProcessState::Running) return done(false, "already started");
  Enqueue(*u, OpKind::kStart, std::move(done));
}

void SystemdServiceControl::Stop(const std::string& name, DoneCallback done) {
  Unit* u = Find(name);
  if (u == nullptr) return done(false, "no such process");
  Refresh(*u);
  switch (StateOf(*u)) {
    case ProcessState::Stopped:
      return done(false, "not running");
    case ProcessState::Fatal:
      // Nothing runs and nothing will restart it; leave the unit inactive rather than failed.
      if (Status s = bus_.ResetFailedUnit(u->unit); !s.ok()) return done(false, s.message());
      u->changed = true;
      return done(true, "stopped");
    default:
      Enqueue(*u, OpKind::kStop, std::move(done));
  }
}

void SystemdServiceControl::Restart(const std::string& name, DoneCallback done) {
  Unit* u = Find(name);
  if (u == nullptr) return done(false, "no such process");
  Refresh(*u);
  Enqueue(*u, OpKind::kRestart, std::move(done));
}

void SystemdServiceControl::StartAll() { RefreshAll(); }

void SystemdServiceControl::StopAll() {
  // The units are systemd's: they keep running while the supervisor is away.
  stopping_ = true;
  for (auto& u : units_) {
    auto ops = std::move(u.ops);
    u.ops.clear();
    for (auto& op : ops) op.done(false, "nodelet is stopping");
  }
}

bool SystemdServiceControl::OnReady(const std::string& name, pid_t pid) {
  Unit* u = Find(name);
  if (u == nullptr) return false;
  u->hello_pid = pid;
  u->heard = true;
  u->last_heartbeat = clock_.Now();
  u->health = Health::Ok;
  u->health_reason.clear();
  // The hello may come before systemd's signals: read MainPID now.
  Refresh(*u);
  Settle(*u);
  return true;
}

bool SystemdServiceControl::OnHeartbeat(const std::string& name, Health health,
                                        const std::string& reason) {
  Unit* u = Find(name);
  if (u == nullptr) return false;
  u->heard = true;
  u->last_heartbeat = clock_.Now();
  u->health = health;
  u->health_reason = reason;
  return true;
}

void SystemdServiceControl::Tick() {
  const MonoTime now = clock_.Now();
  if (now >= next_refresh_) RefreshAll();
  for (auto& u : units_) {
    for (auto it = u.ops.begin(); it != u.ops.end();) {
      if (now < it->deadline) {
        ++it;
        continue;
      }
      DoneCallback done = std::move(it->done);
      std::string why = it->job_done ? "no hello from the new " + u.unit + " process"
                                     : "the " + std::string(KindName(static_cast<int>(it->kind))) +
                                           " job of " + u.unit + " did not finish";
      it = u.ops.erase(it);
      done(false, "timed out after " + FormatDelay(options_.job_timeout) + ": " + why);
    }
  }
}

MonoTime SystemdServiceControl::NextDeadline() const {
  MonoTime next = next_refresh_;
  for (const auto& u : units_) {
    for (const auto& op : u.ops) next = std::min(next, op.deadline);
  }
  return next;
}

bool SystemdServiceControl::AllRunning() const {
  return std::all_of(units_.begin(), units_.end(),
                     [&](const Unit& u) { return StateOf(u) == ProcessState::Running; });
}

std::string SystemdServiceControl::Summary() const {
  size_t running = 0;
  std::string others;
  for (const auto& u : units_) {
    const ProcessState state = StateOf(u);
    if (state == ProcessState::Running) ++running;
    // A running unit is listed only when its state could not be read (it is the last known).
    if (state == ProcessState::Running && u.error.empty()) continue;
    if (!others.empty()) others += ", ";
    others += u.name + " " + ipc::ProcessStateName(state);
    std::string why = !u.error.empty() ? "systemd: " + u.error
                      : (state == ProcessState::Backoff || state == ProcessState::Fatal)
                          ? DescribeUnitFailure(u.status)
                          : "";
    if (!why.empty()) others += " (" + why + ")";
  }
  const std::string count = std::to_string(running) + "/" + std::to_string(units_.size());
  if (others.empty()) return count + " services running";
  return others + ", " + count + " running";
}

std::string SystemdServiceControl::Describe(const Unit& u) const {
  if (!u.error.empty()) return "systemd: " + u.error;
  const UnitStatus& st = u.status;
  const std::string pid = "pid " + std::to_string(st.main_pid);
  switch (StateOf(u)) {
    case ProcessState::Running:
      return pid + ", uptime";
    case ProcessState::Starting:
      return pid + ", starting";
    case ProcessState::Stopping:
      return pid + ", stopping";
    case ProcessState::Backoff: {
      std::string why = DescribeUnitFailure(st);
      return (why.empty() ? "exited" : why) + ", systemd restarts it";
    }
    case ProcessState::Fatal: {
      std::string why = DescribeUnitFailure(st);
      return (why.empty() ? "failed" : why) + ", `nodeletctl start " + u.name + "` to retry";
    }
    default:
      if (st.load_state == "not-found") return "unit " + u.unit + " not found";
      return st.active_enter_monotonic_usec == 0 ? "Not started" : "stopped";
  }
}

std::vector<ServiceInfo> SystemdServiceControl::List() const {
  std::vector<ServiceInfo> out;
  const auto now = clock_.Now();
  for (const auto& u : units_) {
    ServiceInfo i;
    i.name = u.name;
    i.state = StateOf(u);
    if (i.state == ProcessState::Starting || i.state == ProcessState::Running ||
        i.state == ProcessState::Stopping) {
      i.pid = u.status.main_pid;
    }
    if (i.state == ProcessState::Running && u.status.active_enter_monotonic_usec != 0) {
      auto since = MonoTime(std::chrono::duration_cast<Duration>(
          std::chrono::microseconds(u.status.active_enter_monotonic_usec)));
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - since).count();
      i.uptime_ms = ms > 0 ? static_cast<uint64_t>(ms) : 0;
    }
    i.description = Describe(u);
    i.restarts = u.status.n_restarts;
    if (u.heard) {
      if (i.state == ProcessState::Running &&
          now - u.last_heartbeat > options_.heartbeat_deadline) {
        i.health = "failing: no heartbeat for " + FormatDelay(now - u.last_heartbeat);
      } else {
        switch (u.health) {
          case Health::Ok:
            i.health = "ok";
            break;
          case Health::Degraded:
            i.health = "degraded: " + u.health_reason;
            break;
          case Health::Failing:
            i.health = "failing: " + u.health_reason;
            break;
        }
      }
    }
    // In systemd mode a service's output goes to the journal.
    i.log_path = "";
    i.state_since_epoch_s = static_cast<int64_t>(u.status.state_change_usec / 1000000);
    out.push_back(std::move(i));
  }
  return out;
}

}  // namespace nodelet::supervisor
