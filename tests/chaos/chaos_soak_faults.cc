// The soak's faults, one per beat of the fault window: SIGKILL or SIGSTOP of a running service
// (found through `nodeletctl status`), the supervisor SIGKILLed or SIGTERMed and started again,
// and containerd restarted once halfway.
#include <signal.h>

#include <vector>

#include "tests/chaos/chaos_soak_impl.h"

namespace nodelet::chaos::soak_internal {

std::map<std::string, nlohmann::json> Soak::ServiceStatus() {
  std::map<std::string, nlohmann::json> out;
  auto r = RunCommand({options_.bin_dir + "/nodeletctl", "--run-dir", run_, "status", "--json"},
                      seconds(5));
  auto j = nlohmann::json::parse(r.output, nullptr, false);
  if (j.is_discarded() || !j.is_array()) return out;
  for (const auto& s : j) out[s.value("name", "")] = s;
  return out;
}

void Soak::RestartSupervisor(bool hard) {
  auto services = ServiceStatus();
  Log(std::string("fault: supervisor ") + (hard ? "SIGKILL" : "SIGTERM") + " and start again",
      true);
  nodelet_->Signal(hard ? SIGKILL : SIGTERM);
  if (!nodelet_->Wait(seconds(40)).has_value()) {
    Violation(figures_.leak_violations, "nodelet did not exit within 40 s of SIGTERM");
    nodelet_->Signal(SIGKILL);
    nodelet_->Wait(seconds(10));
  }
  // Its services go with it (SIGTERM: stopped by it; SIGKILL: PR_SET_PDEATHSIG).
  for (const auto& [name, s] : services) {
    pid_t pid = s.value("pid", 0);
    if (pid > 0 && !testing::WaitProcessGone(pid, seconds(15))) {
      Violation(figures_.leak_violations,
                "service " + name + " (pid " + std::to_string(pid) + ") outlived its supervisor");
    }
  }
  ++figures_.supervisor_restarts;
  if (Status s = StartNodelet(); !s.ok()) Log("nodelet restart: " + s.ToString(), true);
}

void Soak::InjectFault(steady_clock::time_point now, steady_clock::time_point t0) {
  (void)t0;
  // Processes still SIGSTOPped after 25 s (the supervisor kills a hung service well before).
  for (auto it = stopped_.begin(); it != stopped_.end();) {
    if (now - it->second > seconds(25) || !testing::ProcessAlive(it->first)) {
      kill(it->first, SIGCONT);
      it = stopped_.erase(it);
    } else {
      ++it;
    }
  }
  if (options_.containerd_restart && !containerd_restarted_ && now >= containerd_restart_at_) {
    Log("fault: containerd restart", true);
    containerd_restarted_ = true;
    Status s = containerd_->Restart(seconds(60));
    if (!s.ok()) Log("containerd restart failed: " + s.ToString(), true);
    ++figures_.containerd_restarts;
    return;
  }
  if (!supervisor_restart_at_.empty() && now >= supervisor_restart_at_.front()) {
    supervisor_restart_at_.erase(supervisor_restart_at_.begin());
    RestartSupervisor(figures_.supervisor_restarts % 2 == 0);
    return;
  }
  auto services = ServiceStatus();
  std::vector<std::pair<std::string, pid_t>> running;
  for (const auto& [name, s] : services) {
    pid_t pid = s.value("pid", 0);
    if (s.value("state", "") == "RUNNING" && pid > 0) running.emplace_back(name, pid);
  }
  if (running.empty()) return;  // the supervisor is busy restarting: next time
  auto [name, pid] = running[static_cast<size_t>(Rand(0, static_cast<int>(running.size()) - 1))];
  if (now - last_sigstop_ > seconds(20) && stopped_.empty()) {
    Log("fault: SIGSTOP " + name + " (pid " + std::to_string(pid) + ")", options_.verbose);
    kill(pid, SIGSTOP);
    stopped_.emplace_back(pid, now);
    last_sigstop_ = now;
    ++figures_.sigstops;
    return;
  }
  Log("fault: SIGKILL " + name + " (pid " + std::to_string(pid) + ")");
  kill(pid, SIGKILL);
  ++figures_.sigkills;
}

}  // namespace nodelet::chaos::soak_internal
