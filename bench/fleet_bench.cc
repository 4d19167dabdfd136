// Fleet: a pod written to etcd (PREFIX/pods/NODE/NS/NAME) → its status Running on the node, as
// statusd's watch stream shows it, one pod at a time; beside it, in the same run and on the same
// node, the same pod written to the manifest directory (docs/fleet.md). A real nodelet on a
// private containerd and a private 3-member etcd cluster on loopback.
//
//   fleet-bench --bin-dir DIR --images-dir DIR [--pods 20] [--json FILE]
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench/bench_nodelet.h"
#include "bench/bench_report.h"
#include "lib/etcd/etcd_client.h"
#include "lib/etcd/fleet_keys.h"
#include "lib/status/status_client.h"
#include "tests/testing/etcd_cluster.h"

using namespace nodelet;
using namespace nodelet::bench;
using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

double Ms(SteadyClock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Runs `write`, then waits on the watch stream until pod `name` is Running; the time taken, or
// a negative number when it did not come within a minute.
template <typename Write>
double TimeToRunning(const std::string& run_dir, const std::string& name, Write write) {
  ipc::Context ctx;
  status::StatusWatcher watcher(ctx, run_dir);
  if (!watcher.Connect().ok()) return -1;
  (void)watcher.Next(milliseconds(300));  // the subscription is live before the write
  const auto t0 = SteadyClock::now();
  write();
  const auto end = t0 + std::chrono::seconds(60);
  while (SteadyClock::now() < end) {
    auto ev = watcher.Next(milliseconds(500));
    if (!ev.ok() || ev->record.pod.name != name) continue;
    if (AllRunning(ev->record, 1)) return Ms(SteadyClock::now() - t0);
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string bin_dir, images_dir, json_path;
  int pods = 20;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--bin-dir" && i + 1 < argc) {
      bin_dir = argv[++i];
    } else if (a == "--images-dir" && i + 1 < argc) {
      images_dir = argv[++i];
    } else if (a == "--pods" && i + 1 < argc) {
      pods = std::atoi(argv[++i]);
    } else if (a == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: fleet-bench --bin-dir DIR --images-dir DIR [--pods N] [--json FILE]\n");
      return 2;
    }
  }
  if (bin_dir.empty() || images_dir.empty() || pods < 1) {
    std::fprintf(stderr, "fleet-bench: --bin-dir and --images-dir are required\n");
    return 2;
  }
  testing::EtcdCluster cluster;
  if (Status s = cluster.Start(); !s.ok()) {
    std::fprintf(stderr, "etcd: %s\n", s.ToString().c_str());
    return 1;
  }
  auto options = cluster.ClientOptionsFor();
  auto client = etcd::Client::Connect(*options, RealClock::Get());
  if (!client.ok()) {
    std::fprintf(stderr, "etcd client: %s\n", client.status().ToString().c_str());
    return 1;
  }
  auto node = BenchNodelet::Start(images_dir);
  if (!node || !node->StartNodelet(
                   bin_dir, "fleet",
                   {"--etcd-endpoints", cluster.endpoints_string(), "--etcd-allow-insecure"})) {
    return 1;
  }
  const etcd::FleetKeys keys;
  std::vector<double> from_etcd, from_file;
  for (int i = 0; i < pods; ++i) {
    // Alternating, so that both see the same machine over the run.
    const std::string e = "e" + std::to_string(i);
    double ms = TimeToRunning(node->run_dir(), e, [&] {
      (void)(*client)->Put(keys.Pod("bench", "default", e), IdlePodYaml(e, 1));
    });
    if (ms < 0) {
      std::fprintf(stderr, "pod %s from etcd did not reach Running\n", e.c_str());
      return 1;
    }
    from_etcd.push_back(ms);
    const std::string f = "f" + std::to_string(i);
    ms = TimeToRunning(node->run_dir(), f + "-bench",
                       [&] { node->Write(f + ".yaml", IdlePodYaml(f, 1)); });
    if (ms < 0) {
      std::fprintf(stderr, "pod %s from the manifest directory did not reach Running\n", f.c_str());
      return 1;
    }
    from_file.push_back(ms);
    (void)(*client)->Delete(keys.Pod("bench", "default", e));
    node->Remove(f + ".yaml");
    if (!node->WaitRuntimeEmpty(milliseconds(60000))) {
      std::fprintf(stderr, "the pods were not removed\n");
      return 1;
    }
  }
  Figure fig = Distribution("etcd write → pod Running, 1 pod", "ms", from_etcd);
  SetReference(fig, "the same pod from the manifest directory", from_file);
  std::printf("etcd write → Running: p50 %.1f ms p99 %.1f ms; manifest file: p50 %.1f p99 %.1f\n",
              *fig.p50, *fig.p99, *fig.ref_p50, *fig.ref_p99);
  return WriteReport(json_path, {fig}) ? 0 : 1;
}
