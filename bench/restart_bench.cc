// Restart latency: `kill -9` of a service → the supervisor sees it RUNNING again (its READY=1
// received), measured from the kill to the supervisor's aggregate STATUS= datagram saying all
// services run again. Runs a real nodelet with its own temporary directories.
//
//   restart-bench --bin-dir DIR [--kills N] [--service NAME] [--json FILE]
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "bench/bench_stats.h"
#include "tests/testing/harness.h"

using namespace nodelet::testing;
using Clock = std::chrono::steady_clock;

using nodelet::bench::Percentile;

namespace {

pid_t ServicePid(const std::string& ctl, const std::string& run_dir, const std::string& name) {
  auto r = RunCommand({ctl, "--run-dir", run_dir, "pid", name}, milliseconds(5000));
  if (r.exit_code != 0) return -1;
  return static_cast<pid_t>(std::atoi(r.output.c_str()));
}

}  // namespace

int main(int argc, char** argv) {
  std::string bin_dir, json_path, service = "plegd";
  int kills = 50;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--bin-dir" && i + 1 < argc) bin_dir = argv[++i];
    else if (a == "--kills" && i + 1 < argc) kills = std::atoi(argv[++i]);
    else if (a == "--service" && i + 1 < argc) service = argv[++i];
    else if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else {
      std::fprintf(stderr, "usage: restart-bench --bin-dir DIR [--kills N] [--service NAME] [--json FILE]\n");
      return 2;
    }
  }
  if (bin_dir.empty()) return 2;
  TempDir dir;
  const std::string run_dir = dir.Sub("run");
  const std::string ctl = bin_dir + "/nodeletctl";
  NotifyListener notify(dir.Sub("notify.sock"));
  // The default policy (first restart after 100 ms) but a large intensity limit, so 50 kills
  // in a row measure restarts and never hit FATAL.
  {
    std::ofstream cfg(dir.Sub("config.yaml"));
    cfg << "supervisor:\n  restart-intensity: 100000\n";
  }
  Subprocess nodelet({bin_dir + "/nodelet", "--config", dir.Sub("config.yaml"), "--root-dir",
                      dir.Sub("root"), "--run-dir", run_dir, "--log-dir", dir.Sub("log")},
                     {{"NOTIFY_SOCKET", notify.path()}}, dir.Sub("nodelet.log"));
  if (!notify.WaitFor("READY=1", milliseconds(20000))) {
    std::fprintf(stderr, "nodelet did not become ready\n");
    return 1;
  }
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
  nodelet.Signal(SIGTERM);
  nodelet.Wait(milliseconds(15000));
  double p50 = Percentile(ms, 50), p99 = Percentile(ms, 99);
  std::printf("%-36s %9.1f ms %10s\n", ("restart " + service + " p50").c_str(), p50, "< 150 ms");
  std::printf("%-36s %9.1f ms\n", ("restart " + service + " p99").c_str(), p99);
  std::printf("(%d kills; first restart delay 100 ms)\n", kills);
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << "{\"service\": \"" << service << "\", \"unit\": \"ms\", \"samples\": " << ms.size()
        << ", \"p50\": " << p50 << ", \"p99\": " << p99 << ", \"goal_p50\": 150}\n";
  }
  return 0;
}
