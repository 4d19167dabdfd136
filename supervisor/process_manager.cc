#include "supervisor/process_manager.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace nodelet::supervisor {

using ipc::control::Health;

std::string DescribeWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return "exit " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    int sig = WTERMSIG(wait_status);
    return "signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "status " + std::to_string(wait_status);
}

std::string FormatDelay(Duration d) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  if (ms < 0) ms = 0;
  char buf[32];
  if (ms < 10000) {
    std::snprintf(buf, sizeof buf, "%.1fs", static_cast<double>(ms) / 1000.0);
  } else if (ms < 60000) {
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(ms / 1000));
  } else {
    long long s = ms / 1000;
    std::snprintf(buf, sizeof buf, "%lld:%02lld", s / 60, s % 60);
  }
  return buf;
}

ProcessManager::ProcessManager(const Clock& clock, ProcessLauncher& launcher,
                               SupervisorPolicy policy, std::vector<std::string> names)
    : clock_(clock), launcher_(launcher), policy_(policy) {
  for (auto& n : names) {
    Service s;
    s.name = std::move(n);
    s.state_since = clock_.Now();
    s.wall_since = clock_.WallSeconds();
    services_.push_back(std::move(s));
  }
}

ProcessManager::Service* ProcessManager::Find(const std::string& name) {
  for (auto& s : services_) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

const std::string* ProcessManager::NameOf(pid_t pid) const {
  for (const auto& s : services_) {
    if (s.pid == pid && pid > 0) return &s.name;
  }
  return nullptr;
}

void ProcessManager::Notify(std::vector<DoneCallback>& waiters, bool ok, const std::string& msg) {
  auto run = std::move(waiters);
  waiters.clear();
  for (auto& w : run) w(ok, msg);
}

void ProcessManager::SetState(Service& s, ProcessState state) {
  s.state = state;
  s.state_since = clock_.Now();
  s.wall_since = clock_.WallSeconds();
}

void ProcessManager::Spawn(Service& s) {
  s.sigkill_sent = false;
  s.after_stop = AfterStop::kStay;
  s.heard = false;
  s.health = Health::Ok;
  s.health_reason.clear();
  auto pid = launcher_.Spawn(s.name);
  if (!pid.ok()) {
    ScheduleRestart(s, "spawn error: " + pid.status().message());
    return;
  }
  s.pid = *pid;
  s.reason.clear();
  SetState(s, ProcessState::Starting);
  s.deadline = clock_.Now() + policy_.start_timeout;
}

void ProcessManager::ScheduleRestart(Service& s, const std::string& reason) {
  const auto now = clock_.Now();
  s.pid = 0;
  s.reason = reason;
  ++s.restart_count;
  s.restarts.push_back(now);
  while (!s.restarts.empty() && now - s.restarts.front() > policy_.restart_period) {
    s.restarts.pop_front();
  }
  if (static_cast<int>(s.restarts.size()) > policy_.restart_intensity) {
    s.reason = "too many restarts (" + std::to_string(s.restarts.size()) + " in " +
               FormatDelay(policy_.restart_period) + "), last: " + reason;
    SetState(s, ProcessState::Fatal);
    s.deadline = now + policy_.fatal_cooldown;
    Notify(s.start_waiters, false, "spawn error");
    return;
  }
  // A service that ran well for long enough starts again from the first delay.
  bool long_run = s.was_running && now - s.running_since >= policy_.backoff_reset_after;
  if (s.next_delay.count() == 0 || long_run) {
    s.next_delay = policy_.backoff_initial;
  } else {
    s.next_delay = std::min(s.next_delay * 2, policy_.backoff_max);
  }
  s.was_running = false;
  SetState(s, ProcessState::Backoff);
  s.deadline = now + s.next_delay;
  // An operator waiting for this start learns that it failed; the restart goes on by itself.
  Notify(s.start_waiters, false, "spawn error (" + reason + ")");
}

void ProcessManager::BeginStop(Service& s, AfterStop after, const std::string& reason) {
  s.after_stop = after;
  if (!reason.empty()) s.reason = reason;
  SetState(s, ProcessState::Stopping);
  s.deadline = clock_.Now() + policy_.stop_timeout;
  s.sigkill_sent = false;
  launcher_.SignalGroup(s.pid, SIGTERM);
  // A stopped (SIGSTOP) process keeps a pending SIGTERM until it runs again.
  launcher_.SignalGroup(s.pid, SIGCONT);
}

void ProcessManager::StartAll() {
  for (auto& s : services_) {
    if (s.state == ProcessState::Stopped || s.state == ProcessState::Exited) Spawn(s);
  }
}

void ProcessManager::StopAll() {
  for (auto& s : services_) {
    switch (s.state) {
      case ProcessState::Starting:
      case ProcessState::Running:
        BeginStop(s, AfterStop::kStay, "");
        break;
      case ProcessState::Stopping:
        s.after_stop = AfterStop::kStay;
        break;
      default:
        SetState(s, ProcessState::Stopped);
        s.deadline = MonoTime::max();
        break;
    }
  }
}

bool ProcessManager::AllStopped() const {
  for (const auto& s : services_) {
    if (s.pid != 0) return false;
  }
  return true;
}

bool ProcessManager::OnReady(const std::string& name, pid_t pid) {
  Service* s = Find(name);
  if (s == nullptr || s->pid != pid || pid <= 0) return false;
  s->heard = true;
  s->last_heartbeat = clock_.Now();
  if (s->state == ProcessState::Starting) {
    SetState(*s, ProcessState::Running);
    s->running_since = clock_.Now();
    s->was_running = true;
    s->deadline = MonoTime::max();
    Notify(s->start_waiters, true, "started");
  }
  return true;
}

bool ProcessManager::OnHeartbeat(const std::string& name, Health health,
                                 const std::string& reason) {
  Service* s = Find(name);
  if (s == nullptr) return false;
  const auto now = clock_.Now();
  s->heard = true;
  s->last_heartbeat = now;
  if (health == Health::Failing && s->health != Health::Failing) s->failing_since = now;
  s->health = health;
  s->health_reason = reason;
  return true;
}

bool ProcessManager::OnExit(pid_t pid, int wait_status) {
  Service* s = nullptr;
  for (auto& c : services_) {
    if (c.pid == pid && pid > 0) s = &c;
  }
  if (s == nullptr) return false;
  const std::string why = DescribeWaitStatus(wait_status);
  if (s->state == ProcessState::Stopping) {
    s->pid = 0;
    switch (s->after_stop) {
      case AfterStop::kStay:
        SetState(*s, ProcessState::Stopped);
        s->deadline = MonoTime::max();
        s->reason.clear();
        Notify(s->stop_waiters, true, "stopped");
        break;
      case AfterStop::kStartNow:
        Notify(s->stop_waiters, true, "stopped");
        Spawn(*s);
        break;
      case AfterStop::kRestartWithBackoff:
        ScheduleRestart(*s, s->reason);
        break;
    }
    return true;
  }
  ScheduleRestart(*s, why);
  return true;
}

void ProcessManager::Tick() {
  const auto now = clock_.Now();
  for (auto& s : services_) {
    switch (s.state) {
      case ProcessState::Backoff:
        if (now >= s.deadline) Spawn(s);
        break;
      case ProcessState::Fatal:
        if (now >= s.deadline) {
          s.restarts.clear();
          s.next_delay = std::chrono::milliseconds(0);
          Spawn(s);
        }
        break;
      case ProcessState::Starting:
        if (now >= s.deadline) {
          BeginStop(s, AfterStop::kRestartWithBackoff,
                    "start timeout (no READY=1 within " + FormatDelay(policy_.start_timeout) + ")");
        }
        break;
      case ProcessState::Running:
        if (now - s.last_heartbeat > policy_.heartbeat_deadline) {
          BeginStop(s, AfterStop::kRestartWithBackoff,
                    "hung: no heartbeat for " + FormatDelay(now - s.last_heartbeat));
        } else if (s.health == Health::Failing && now - s.failing_since > policy_.failing_grace) {
          BeginStop(s, AfterStop::kRestartWithBackoff, "failing: " + s.health_reason);
        }
        break;
      case ProcessState::Stopping:
        if (!s.sigkill_sent && now >= s.deadline) {
          launcher_.SignalGroup(s.pid, SIGKILL);
          s.sigkill_sent = true;
        }
        break;
      default:
        break;
    }
  }
}

MonoTime ProcessManager::NextDeadline() const {
  MonoTime next = MonoTime::max();
  for (const auto& s : services_) {
    switch (s.state) {
      case ProcessState::Running: {
        next = std::min(
            next, s.last_heartbeat + policy_.heartbeat_deadline + std::chrono::milliseconds(1));
        if (s.health == Health::Failing) {
          next = std::min(next,
                          s.failing_since + policy_.failing_grace + std::chrono::milliseconds(1));
        }
        break;
      }
      case ProcessState::Stopping:
        if (!s.sigkill_sent) next = std::min(next, s.deadline);
        break;
      default:
        next = std::min(next, s.deadline);
        break;
    }
  }
  return next;
}

bool ProcessManager::AllRunning() const {
  for (const auto& s : services_) {
    if (s.state != ProcessState::Running) return false;
  }
  return true;
}

std::string ProcessManager::Summary() const {
  size_t running = 0;
  std::string others;
  for (const auto& s : services_) {
    if (s.state == ProcessState::Running) {
      ++running;
      continue;
    }
    if (!others.empty()) others += ", ";
    others += s.name + " " + ([&] {
                switch (s.state) {
                  case ProcessState::Stopped:
                    return "STOPPED";
                  case ProcessState::Starting:
                    return "STARTING";
                  case ProcessState::Backoff:
                    return "BACKOFF";
                  case ProcessState::Stopping:
                    return "STOPPING";
                  case ProcessState::Exited:
                    return "EXITED";
                  case ProcessState::Fatal:
                    return "FATAL";
                  default:
                    return "RUNNING";
                }
              })();
    if (!s.reason.empty() && (s.state == ProcessState::Backoff || s.state == ProcessState::Fatal ||
                              s.state == ProcessState::Stopping)) {
      others += " (" + s.reason + ")";
    }
  }
  const std::string count = std::to_string(running) + "/" + std::to_string(services_.size());
  if (others.empty()) return count + " services running";
  return others + ", " + count + " running";
}

std::string ProcessManager::Describe(const Service& s) const {
  const auto now = clock_.Now();
  switch (s.state) {
    case ProcessState::Backoff:
      return s.reason + ", restart in " + FormatDelay(s.deadline - now);
    case ProcessState::Fatal:
      return s.reason + ", retry in " + FormatDelay(s.deadline - now);
    case ProcessState::Starting:
      return "pid " + std::to_string(s.pid) + ", starting";
    case ProcessState::Stopping:
      return "pid " + std::to_string(s.pid) + ", stopping" +
             (s.reason.empty() ? "" : " (" + s.reason + ")");
    case ProcessState::Stopped:
      return s.was_running || s.restart_count > 0 ? "stopped" : "Not started";
    default:
      return s.reason;
  }
}

std::vector<ServiceInfo> ProcessManager::List() const {
  std::vector<ServiceInfo> out;
  const auto now = clock_.Now();
  for (const auto& s : services_) {
    ServiceInfo i;
    i.name = s.name;
    i.state = s.state;
    i.pid = s.pid;
    if (s.state == ProcessState::Running) {
      i.uptime_ms = static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(now - s.running_since).count());
      i.description = "pid " + std::to_string(s.pid) + ", uptime";
    } else {
      i.description = Describe(s);
    }
    i.restarts = s.restart_count;
    if (s.heard) {
      switch (s.health) {
        case Health::Ok:
          i.health = "ok";
          break;
        case Health::Degraded:
          i.health = "degraded: " + s.health_reason;
          break;
        case Health::Failing:
          i.health = "failing: " + s.health_reason;
          break;
      }
    }
    i.log_path = launcher_.LogPath(s.name);
    i.state_since_epoch_s = s.wall_since;
    out.push_back(std::move(i));
  }
  return out;
}

bool ProcessManager::Has(const std::string& name) const {
  for (const auto& s : services_) {
    if (s.name == name) return true;
  }
  return false;
}

void ProcessManager::Start(const std::string& name, DoneCallback done) {
  Service* s = Find(name);
  if (s == nullptr) return done(false, "no such process");
  switch (s->state) {
    case ProcessState::Running:
      return done(false, "already started");
    case ProcessState::Starting:
      s->start_waiters.push_back(std::move(done));
      return;
    case ProcessState::Stopping:
      s->after_stop = AfterStop::kStartNow;
      s->start_waiters.push_back(std::move(done));
      return;
    case ProcessState::Fatal:
      // The operator's start clears FATAL at once.
      s->restarts.clear();
      s->next_delay = std::chrono::milliseconds(0);
      [[fallthrough]];
    default:
      s->start_waiters.push_back(std::move(done));
      Spawn(*s);
      return;
  }
}

void ProcessManager::Stop(const std::string& name, DoneCallback done) {
  Service* s = Find(name);
  if (s == nullptr) return done(false, "no such process");
  switch (s->state) {
    case ProcessState::Starting:
    case ProcessState::Running:
      s->stop_waiters.push_back(std::move(done));
      BeginStop(*s, AfterStop::kStay, "");
      return;
    case ProcessState::Stopping:
      s->after_stop = AfterStop::kStay;
      s->stop_waiters.push_back(std::move(done));
      return;
    case ProcessState::Backoff:
    case ProcessState::Fatal:
      // Nothing runs; cancel the planned restart.
      SetState(*s, ProcessState::Stopped);
      s->deadline = MonoTime::max();
      Notify(s->start_waiters, false, "stopped");
      return done(true, "stopped");
    default:
      return done(false, "not running");
  }
}

void ProcessManager::Restart(const std::string& name, DoneCallback done) {
  Service* s = Find(name);
  if (s == nullptr) return done(false, "no such process");
  if (s->state == ProcessState::Running || s->state == ProcessState::Starting) {
    s->start_waiters.push_back(std::move(done));
    BeginStop(*s, AfterStop::kStartNow, "restart requested");
    return;
  }
  if (s->state == ProcessState::Stopping) {
    s->after_stop = AfterStop::kStartNow;
    s->start_waiters.push_back(std::move(done));
    return;
  }
  Start(name, std::move(done));
}

}  // namespace nodelet::supervisor
