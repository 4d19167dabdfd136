// statusd durable update throughput and latency: a real nodelet-statusd (SQLite WAL in a
// temporary root dir), 100 pods updating, every SetPodStatus acknowledged only after its
// transaction committed. Keeps a window of requests in flight on one pipelined client and
// measures acknowledged updates per second and per-request latency (send → ack).
//
//   status-bench --bin-dir DIR [--updates N] [--pods N] [--window N] [--json FILE]
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "bench/bench_report.h"
#include "lib/ipc/endpoints.h"
#include "lib/status/status_client.h"
#include "tests/testing/harness.h"

using namespace nodelet;
using namespace nodelet::testing;
using SteadyClock = std::chrono::steady_clock;

using namespace nodelet::bench;

namespace {

status::PodStatus MakeStatus(int n) {
  status::PodStatus s;
  s.phase = status::PodPhase::kRunning;
  s.host_ip = "127.0.0.1";
  s.pod_ip = "127.0.0.1";
  s.start_time_unix_s = 1700000000;
  status::PodCondition ready;
  ready.type = "Ready";
  ready.status = n % 2 ? status::ConditionStatus::kTrue : status::ConditionStatus::kFalse;
  s.conditions.push_back(ready);
  status::ContainerStatus c;
  c.name = "app";
  c.image = "nodelet.local/busybox:1.0";
  c.container_id = "containerd://0123456789abcdef";
  c.restart_count = n;  // every update is a real change
  c.state.running = status::ContainerStateRunning{1700000000};
  c.ready = true;
  c.started = true;
  s.container_statuses.push_back(c);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::string bin_dir, json_path;
  int updates = 50000, pods = 100, window = 256;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--bin-dir" && i + 1 < argc)
      bin_dir = argv[++i];
    else if (a == "--updates" && i + 1 < argc)
      updates = std::atoi(argv[++i]);
    else if (a == "--pods" && i + 1 < argc)
      pods = std::atoi(argv[++i]);
    else if (a == "--window" && i + 1 < argc)
      window = std::atoi(argv[++i]);
    else if (a == "--json" && i + 1 < argc)
      json_path = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: status-bench --bin-dir DIR [--updates N] [--pods N] [--window N] "
                   "[--json FILE]\n");
      return 2;
    }
  }
  TempDir dir;
  const std::string run_dir = dir.Sub("run");
  NotifyListener notify(dir.Sub("notify.sock"));
  Subprocess statusd({bin_dir + "/nodelet-statusd", "--root-dir", dir.Sub("root"), "--run-dir",
                      run_dir, "--log-dir", dir.Sub("log"), "--log-level", "warn"},
                     {{"NOTIFY_SOCKET", notify.path()}}, dir.Sub("statusd.log"));
  if (!notify.WaitFor("READY=1", milliseconds(10000))) {
    std::fprintf(stderr, "statusd did not become ready\n");
    return 1;
  }
  ipc::Context ctx;
  status::PipelinedStatusClient client(ctx, run_dir, ipc::ServiceId::Podworkerd);
  if (!client.Connect().ok()) return 1;
  std::vector<status::PodIdentity> ids;
  for (int p = 0; p < pods; ++p) {
    status::PodIdentity id;
    id.namespace_ = "default";
    id.name = "bench-" + std::to_string(p);
    id.uid = "00000000-0000-0000-0000-" + std::to_string(100000000000 + p);
    id.container_count = 1;
    ids.push_back(id);
  }
  std::map<uint64_t, SteadyClock::time_point> in_flight;
  std::vector<double> latency_us;
  latency_us.reserve(static_cast<size_t>(updates));
  int sent = 0, acked = 0, errors = 0;
  auto t0 = SteadyClock::now();
  while (acked + errors < updates) {
    while (sent < updates && static_cast<int>(in_flight.size()) < window) {
      auto id = client.SendSetPodStatus(ids[static_cast<size_t>(sent % pods)],
                                        MakeStatus(sent / pods + 1), milliseconds(5000));
      if (!id.ok()) {
        std::fprintf(stderr, "send failed: %s\n", id.status().ToString().c_str());
        return 1;
      }
      in_flight[*id] = SteadyClock::now();
      ++sent;
    }
    auto reply = client.Receive(milliseconds(10000));
    if (!reply.ok()) {
      std::fprintf(stderr, "no reply: %s\n", reply.status().ToString().c_str());
      return 1;
    }
    auto it = in_flight.find(reply->request_id);
    if (it == in_flight.end()) continue;
    latency_us.push_back(
        std::chrono::duration<double, std::micro>(SteadyClock::now() - it->second).count());
    in_flight.erase(it);
    if (reply->status.ok())
      ++acked;
    else
      ++errors;
  }
  double secs = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  statusd.Signal(SIGTERM);
  statusd.Wait(milliseconds(5000));
  double rate = acked / secs;
  double p50 = Percentile(latency_us, 50), p99 = Percentile(latency_us, 99);
  std::printf("%-36s %9.0f /s %12s\n", "statusd durable updates", rate, "> 10000");
  std::printf("%-36s %9.0f us\n", "statusd SetPodStatus p50", p50);
  std::printf("%-36s %9.0f us\n", "statusd SetPodStatus p99", p99);
  std::printf("(%d updates over %d pods, %d in flight, %d errors)\n", updates, pods, window,
              errors);
  std::vector<Figure> figures;
  figures.push_back(Value("statusd durable updates (acknowledged after commit)", "updates/s", rate,
                          static_cast<size_t>(acked)));
  SetGoal(figures.back(), "value", ">", 10000);
  figures.push_back(Distribution("statusd SetPodStatus latency (send → ack)", "us", latency_us));
  figures.back().note = std::to_string(window) + " in flight";
  WriteReport(json_path, figures, {{"pods", pods}, {"window", window}, {"errors", errors}});
  return errors == 0 ? 0 : 1;
}
