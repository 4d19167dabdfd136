// FakeSystemdBus: systemd's D-Bus API as the supervisor's systemd mode sees it, driven by hand.
// A test sets each unit's properties, sees which jobs were asked for, ends a job (JobRemoved)
// or announces a change (PropertiesChanged); the signals reach the listener on Process(), as
// they would from the real bus. Calls can be made to fail to exercise the error paths.
#pragma once

#include <sys/types.h>

#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "supervisor/systemd_bus.h"

namespace nodelet::testing {

// A loaded unit's properties in the given states, with its main pid (0: none) and a result of
// "success".
inline supervisor::UnitStatus UnitInState(const std::string& active, const std::string& sub,
                                          pid_t pid = 0) {
  supervisor::UnitStatus st;
  st.load_state = "loaded";
  st.active_state = active;
  st.sub_state = sub;
  st.main_pid = pid;
  st.result = "success";
  return st;
}

class FakeSystemdBus : public supervisor::SystemdBus {
 public:
  struct JobCall {
    std::string method;  // "StartUnit", "StopUnit", "RestartUnit"
    std::string unit;
    std::string job;  // the job path handed back
  };

  Status Watch(const std::vector<std::string>& units, Listener* listener) override {
    if (!reachable)
      return Unavailable("Failed to connect to the system bus: No such file or directory");
    watched = units;
    listener_ = listener;
    return Status::Ok();
  }
  Result<supervisor::UnitStatus> GetUnitStatus(const std::string& unit) override {
    ++reads[unit];
    if (!reachable) return Unavailable("Failed to read " + unit + ": Connection timed out");
    auto it = units.find(unit);
    if (it == units.end()) {
      supervisor::UnitStatus st;
      st.load_state = "not-found";
      st.active_state = "inactive";
      st.sub_state = "dead";
      return st;
    }
    return it->second;
  }
  Result<std::string> StartUnit(const std::string& unit) override { return Job("StartUnit", unit); }
  Result<std::string> StopUnit(const std::string& unit) override { return Job("StopUnit", unit); }
  Result<std::string> RestartUnit(const std::string& unit) override {
    return Job("RestartUnit", unit);
  }
  Status ResetFailedUnit(const std::string& unit) override {
    reset_failed.push_back(unit);
    if (!reachable) return Unavailable("Failed to reset-failed " + unit + ": Connection timed out");
    auto& st = units[unit];
    if (st.active_state == "failed") {
      st.active_state = "inactive";
      st.sub_state = "dead";
    }
    return Status::Ok();
  }
  zmq::pollitem_t PollItem() override { return {nullptr, -1, 0, 0}; }
  void Process() override {
    while (!queue_.empty()) {
      auto signal = std::move(queue_.front());
      queue_.pop_front();
      signal();
    }
  }

  // Test controls. Each queues the signal systemd would send; Process() delivers it.
  void SetUnit(const std::string& unit, supervisor::UnitStatus st) {
    units[unit] = std::move(st);
    queue_.push_back([this, unit] {
      if (listener_) listener_->OnUnitChanged(unit);
    });
  }
  void EndJob(const std::string& job, const std::string& result) {
    std::string unit;
    for (const auto& c : calls) {
      if (c.job == job) unit = c.unit;
    }
    queue_.push_back([this, job, unit, result] {
      if (listener_) listener_->OnJobRemoved(job, unit, result);
    });
  }
  const JobCall& LastCall() const { return calls.back(); }

  std::map<std::string, supervisor::UnitStatus> units;
  std::vector<JobCall> calls;
  std::vector<std::string> reset_failed;
  std::vector<std::string> watched;
  std::map<std::string, int> reads;
  bool reachable = true;
  bool refuse_jobs = false;

 private:
  Result<std::string> Job(const std::string& method, const std::string& unit) {
    if (!reachable || refuse_jobs) {
      return Unavailable("Failed to " + method + " " + unit + ": Access denied");
    }
    std::string job = "/org/freedesktop/systemd1/job/" + std::to_string(next_job_++);
    calls.push_back({method, unit, job});
    return job;
  }

  Listener* listener_ = nullptr;
  std::deque<std::function<void()>> queue_;
  int next_job_ = 100;
};

}  // namespace nodelet::testing
