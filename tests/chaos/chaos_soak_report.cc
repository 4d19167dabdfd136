// The soak's figures as JSON (--json) and as the summary it prints.
#include <sstream>

#include "tests/chaos/chaos_soak.h"

namespace nodelet::chaos {

nlohmann::json SoakFigures::ToJson() const {
  return {{"duration_s", duration_s},
          {"seed", seed},
          {"faults",
           {{"sigkill", sigkills},
            {"sigstop", sigstops},
            {"supervisor_restarts", supervisor_restarts},
            {"containerd_restarts", containerd_restarts},
            {"total", sigkills + sigstops + supervisor_restarts + containerd_restarts}}},
          {"churn",
           {{"adds", adds},
            {"edits_restart", edits_restart},
            {"edits_label", edits_label},
            {"deletes", deletes},
            {"configmap_edits", configmap_edits}}},
          {"checks",
           {{"pods_checked", pods_checked},
            {"containers_tracked", containers_tracked},
            {"continuity_checks", continuity_checks},
            {"runtime_losses", runtime_losses},
            {"runtime_netns_left", runtime_netns_left},
            {"status_samples", status_samples},
            {"status_pods_tracked", status_pods_tracked},
            {"grace_verdicts", grace_verdicts},
            {"grace_no_prestop", grace_no_prestop},
            {"pod_ip_sandboxes", pod_ip_sandboxes},
            {"pod_ip_checks", pod_ip_checks}}},
          {"violations",
           {{"desired", desired_violations},
            {"undesired", undesired_violations},
            {"restarted", restart_violations},
            {"status", status_violations},
            {"leaks", leak_violations},
            {"grace", grace_violations},
            {"ip", ip_violations},
            {"total", violations()}}},
          {"details", details}};
}

std::string SoakFigures::Summary() const {
  std::ostringstream out;
  out << "chaos soak: " << duration_s << " s of faults, seed " << seed << "\n"
      << "  faults injected: " << (sigkills + sigstops + supervisor_restarts + containerd_restarts)
      << " (SIGKILL " << sigkills << ", SIGSTOP " << sigstops << ", supervisor restarts "
      << supervisor_restarts << ", containerd restarts " << containerd_restarts << ")\n"
      << "  churn: " << adds << " adds, " << edits_restart << " spec edits, " << edits_label
      << " label edits, " << deletes << " deletes, " << configmap_edits << " ConfigMap edits\n"
      << "  pods checked: " << pods_checked << "; containers followed: " << containers_tracked
      << " (continuity checks: " << continuity_checks
      << ", lost by containerd's restart: " << runtime_losses << ")"
      << "; statusd samples: " << status_samples << " over " << status_pods_tracked << " pods\n"
      << "  grace periods checked: " << grace_verdicts << " (preStop not seen: " << grace_no_prestop
      << ")\n"
      << "  left by containerd's restart: " << runtime_netns_left << " netns mounts\n"
      << "  pod IPs followed: " << pod_ip_sandboxes << " sandboxes (" << pod_ip_checks
      << " checks)\n"
      << "  violations: " << violations() << " (desired " << desired_violations << ", undesired "
      << undesired_violations << ", restarted " << restart_violations << ", status "
      << status_violations << ", leaks " << leak_violations << ", grace " << grace_violations
      << ", ip " << ip_violations << ")\n";
  for (const auto& d : details) out << "    " << d << "\n";
  return out.str();
}

}  // namespace nodelet::chaos
