// Restart latency: `kill -9` of a service → the supervisor sees it RUNNING again (its READY=1
// received), measured from the kill to the supervisor's aggregate STATUS= datagram saying all
// services run again. Runs a real nodelet with its own temporary directories (no containerd:
// the services start without one); one figure per service, all measured on the same nodelet.
//
//   restart-bench --bin-dir DIR [--kills N] [--services plegd,podworkerd,statusd,volumed]
//                 [--json FILE]
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_report.h"
#include "tests/testing/harness.h"

using namespace nodelet::testing;
using Clock = std::chrono::steady_clock;

using namespace nodelet::bench;

namespace {

pid_t ServicePid(const std::string& ctl, const std::string& run_dir, const std::string& name) {
  auto r = RunCommand({ctl, "--run-dir", run_dir, "pid", name}, milliseconds(5000));
  if (r.exit_code != 0) return -1;
  return static_cast<pid_t>(std::atoi(r.output.c_str()));
}

}  // namespace

int main(int argc, char** argv) {
  std::string bin_dir, json_path, services_arg = "plegd,podworkerd,statusd,volumed";
  int kills = 50;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--bin-dir" && i + 1 < argc)
      bin_dir = argv[++i];
    else if (a == "--kills" && i + 1 < argc)
      kills = std::atoi(argv[++i]);
    else if ((a == "--services" || a == "--service") && i + 1 < argc)
      services_arg = argv[++i];
    else if (a == "--json" && i + 1 < argc)
      json_path = argv[++i];
    else {
      std::fprintf(
          stderr,
          "usage: restart-bench --bin-dir DIR [--kills N] [--services A,B,...] [--json FILE]\n");
      return 2;
    }
  }
  if (bin_dir.empty()) return 2;
  std::vector<std::string> services;
  {
    std::stringstream ss(services_arg);
    for (std::string s; std::getline(ss, s, ',');) services.push_back(s);
  }
  TempDir dir;
  const std::string run_dir = dir.Sub("run");
  const std::string ctl = bin_dir + "/nodeletctl";
  NotifyListener notify(dir.Sub("notify.sock"));
  // The default first restart delay (100 ms), kept for every kill (--backoff-max 100ms: kills
  // in a row would otherwise double it up to 10 s), and a large intensity limit, so many kills
  // in a row measure restarts and never hit FATAL.
  {
    std::ofstream cfg(dir.Sub("config.yaml"));
    cfg << "supervisor:\n  restart-intensity: 100000\n";
  }
  Subprocess nodelet({bin_dir + "/nodelet", "--config", dir.Sub("config.yaml"), "--root-dir",
                      dir.Sub("root"), "--run-dir", run_dir, "--log-dir", dir.Sub("log"),
                      "--backoff-max", "100ms", "--cgroup-root", TestCgroupRoot(dir.path())},
                     {{"NOTIFY_SOCKET", notify.path()}}, dir.Sub("nodelet.log"));
  if (!notify.WaitFor("READY=1", milliseconds(20000))) {
    std::fprintf(stderr, "nodelet did not become ready\n");
    return 1;
  }
  std::vector<Figure> figures;
  for (const auto& service : services) {
    std::vector<double> ms;
    for (int i = 0; i < kills; ++i) {
      pid_t pid = ServicePid(ctl, run_dir, service);
      if (pid <= 0) {
        std::fprintf(stderr, "no pid for %s\n", service.c_str());
        return 1;
      }
      auto t0 = Clock::now();
      kill(pid, SIGKILL);
      // First the supervisor notices the death, then the service comes back.
      if (!notify.WaitFor("BACKOFF", milliseconds(10000)) ||
          !notify.WaitFor("STATUS=4/4 services running", milliseconds(20000))) {
        std::fprintf(stderr, "%s did not come back after kill %d\n", service.c_str(), i);
        return 1;
      }
      ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      // Let the reaper and the log pump settle before the next kill; not part of the figure.
      if (!WaitProcessGone(pid, milliseconds(5000))) return 1;
    }
    figures.push_back(
        Distribution("service restart, " + service + " (kill -9 → RUNNING)", "ms", ms));
    SetGoal(figures.back(), "p50", "<", 150);
    figures.back().note = "includes the 100 ms first restart delay";
    std::printf("%-36s p50 %7.1f ms  p99 %7.1f ms  (%d kills)\n", ("restart " + service).c_str(),
                *figures.back().p50, *figures.back().p99, kills);
  }
  nodelet.Signal(SIGTERM);
  nodelet.Wait(milliseconds(15000));
  WriteReport(json_path, figures, {{"kills_per_service", kills}, {"first_restart_delay_ms", 100}});
  return 0;
}
