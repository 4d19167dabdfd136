// plegd benchmarks against a private containerd (tests/testing/containerd.h):
//
//  - event latency: a container's process is killed → a subscriber (PlegMirror, the Clone
//    pattern every consumer uses) has ContainerDied. p50/p99 over N exits, at relist periods
//    1 s and 100 ms, with a real nodelet-plegd;
//  - relist cost: wall time and CPU of one relist (ListPodSandbox + ListContainers + diff) at
//    10 and 100 real containers, and at 10, 100 and 500 with the fake runtime (the diff alone).
//    CPU is this process's (plegd's side of the relist: gRPC client and diff); containerd's own
//    CPU for the same relists is reported beside it.
//
//   pleg-bench --bin-dir DIR --images-dir DIR [--exits N] [--json FILE]
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_report.h"
#include "bench/bench_stats.h"
#include "lib/pleg/pleg_mirror.h"
#include "svc-plegd/cri_pleg_runtime.h"
#include "svc-plegd/relist_diff.h"
#include "tests/fakes/fake_pleg_runtime.h"
#include "tests/testing/containerd.h"
#include "tests/testing/harness.h"

using namespace nodelet;
using namespace nodelet::testing;
using namespace nodelet::bench;
using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;
namespace v1 = ::runtime::v1;

namespace {

constexpr char kManagedLabel[] = "nodelet.io/managed";

v1::PodSandboxConfig Sandbox(const std::string& name, const std::string& log_dir) {
  v1::PodSandboxConfig config;
  config.mutable_metadata()->set_name(name);
  config.mutable_metadata()->set_uid("uid-" + name);
  config.mutable_metadata()->set_namespace_("bench");
  config.set_log_directory(log_dir);
  (*config.mutable_labels())[kManagedLabel] = "true";
  auto* ns = config.mutable_linux()->mutable_security_context()->mutable_namespace_options();
  ns->set_network(v1::NODE);
  ns->set_pid(v1::CONTAINER);
  ns->set_ipc(v1::POD);
  return config;
}

v1::ContainerConfig Sleeper(const std::string& name) {
  v1::ContainerConfig config;
  config.mutable_metadata()->set_name(name);
  config.mutable_image()->set_image(kBusyboxImage);
  config.add_command("sleep");
  config.add_command("100000");
  config.set_log_path(name + ".log");
  auto* ns = config.mutable_linux()->mutable_security_context()->mutable_namespace_options();
  ns->set_network(v1::NODE);
  ns->set_pid(v1::CONTAINER);
  return config;
}

double ThisProcessCpuMs() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
         (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

// utime + stime of another process, from /proc/PID/stat.
double ProcessCpuMs(pid_t pid) {
  long long ticks = nodelet::bench::ProcessCpuTicks(pid);
  if (ticks < 0) return 0;
  return static_cast<double>(ticks) * 1e3 / static_cast<double>(sysconf(_SC_CLK_TCK));
}

struct LatencyResult {
  std::string period;
  std::vector<double> ms;
  std::vector<double> runtime_ms;  // kill → CRI ContainerStatus says EXITED
};

// Kills `exits` containers one after the other under a plegd relisting every `period`, and
// measures kill → ContainerDied at a subscriber.
bool MeasureEventLatency(ContainerdInstance& containerd, const TempDir& dir,
                         const std::string& bin_dir, const std::string& period, int exits,
                         LatencyResult& result) {
  result.period = period;
  const int period_ms = period == "1s" ? 1000 : 100;
  const std::string run_dir = dir.Sub("run-" + period);
  NotifyListener notify(dir.Sub("notify-" + period + ".sock"));
  Subprocess plegd(
      {bin_dir + "/nodelet-plegd", "--root-dir", dir.Sub("root"), "--run-dir", run_dir, "--log-dir",
       dir.Sub("log"), "--runtime-endpoint", containerd.endpoint(), "--relist-period", period},
      {{"NOTIFY_SOCKET", notify.path()}}, dir.Sub("plegd-" + period + ".log"));
  if (!notify.WaitFor("READY=1", milliseconds(10000))) {
    std::fprintf(stderr, "plegd did not become ready\n");
    return false;
  }
  ipc::Context ctx;
  EventLoop loop(RealClock::Get());
  pleg::PlegMirror mirror(ctx, RealClock::Get(), run_dir, ipc::ServiceId::Ctl);
  std::map<std::string, SteadyClock::time_point> died, started;
  mirror.on_event = [&](const ipc::pleg::Event& e, const ipc::pleg::PodRecordT&) {
    if (!e.id()) return;
    if (e.type() == ipc::pleg::EventType::ContainerDied) died[e.id()->str()] = SteadyClock::now();
    if (e.type() == ipc::pleg::EventType::ContainerStarted) {
      started[e.id()->str()] = SteadyClock::now();
    }
  };
  // Runs the subscriber's loop until `done` or the timeout.
  auto pump_until = [&](const std::function<bool()>& done, milliseconds timeout) {
    auto end = SteadyClock::now() + timeout;
    while (!done()) {
      if (SteadyClock::now() >= end || !loop.RunOnce(milliseconds(20)).ok()) return false;
    }
    return true;
  };
  if (!mirror.Connect(loop).ok() ||
      !pump_until([&] { return mirror.in_sync(); }, milliseconds(10000))) {
    std::fprintf(stderr, "cannot subscribe to plegd\n");
    return false;
  }

  auto& cri = containerd.cri();
  const std::string pod = "latency-" + std::string(period == "1s" ? "1s" : "100ms");
  auto sandbox_config = Sandbox(pod, dir.Sub("podlogs/" + pod));
  auto sandbox = cri.RunPodSandbox(sandbox_config, "");
  if (!sandbox.ok()) {
    std::fprintf(stderr, "RunPodSandbox: %s\n", sandbox.status().ToString().c_str());
    return false;
  }
  for (int i = 0; i < exits; ++i) {
    auto id = cri.CreateContainer(*sandbox, Sleeper("c" + std::to_string(i)), sandbox_config);
    if (!id.ok() || !cri.StartContainer(*id).ok()) {
      std::fprintf(stderr, "cannot start container %d\n", i);
      return false;
    }
    if (!pump_until([&] { return started.count(*id) != 0; }, milliseconds(10000))) {
      std::fprintf(stderr, "no ContainerStarted for container %d\n", i);
      return false;
    }
    // Kill at a random phase of the relist period, as real exits are (ContainerStarted arrives
    // just after a relist, so killing at once would always measure a whole period).
    auto jitter = SteadyClock::now() + milliseconds(std::rand() % period_ms);
    pump_until([&] { return SteadyClock::now() >= jitter; }, milliseconds(period_ms + 100));
    pid_t pid = ContainerPid(cri, *id);
    if (pid <= 0) return false;
    auto t0 = SteadyClock::now();
    kill(pid, SIGKILL);
    // The runtime's floor: when CRI itself first reports the container exited (polled between
    // pumps of the subscriber).
    SteadyClock::time_point runtime_saw{};
    auto seen_by_runtime = [&] {
      if (runtime_saw == SteadyClock::time_point{}) {
        auto st = cri.ContainerStatus(*id, false);
        if (st.ok() && st->status().state() == v1::CONTAINER_EXITED)
          runtime_saw = SteadyClock::now();
      }
      return runtime_saw != SteadyClock::time_point{} && died.count(*id) != 0;
    };
    if (!pump_until(seen_by_runtime, milliseconds(10000))) {
      std::fprintf(stderr, "no ContainerDied for container %d\n", i);
      return false;
    }
    result.ms.push_back(std::chrono::duration<double, std::milli>(died[*id] - t0).count());
    result.runtime_ms.push_back(
        std::chrono::duration<double, std::milli>(runtime_saw - t0).count());
    (void)cri.RemoveContainer(*id);
  }
  (void)cri.StopPodSandbox(*sandbox);
  (void)cri.RemovePodSandbox(*sandbox);
  plegd.Signal(SIGTERM);
  plegd.Wait(milliseconds(5000));
  return true;
}

struct RelistCost {
  std::string runtime;
  int containers = 0;
  double wall_ms_p50 = 0, wall_ms_p99 = 0;
  double cpu_ms = 0;              // per relist, this process
  double containerd_cpu_ms = -1;  // per relist, containerd (real runtime only)
};

RelistCost MeasureRelist(plegd::PlegRuntime& runtime, const std::string& name, int containers,
                         int rounds, pid_t containerd_pid) {
  RelistCost cost;
  cost.runtime = name;
  cost.containers = containers;
  plegd::RelistDiff diff;
  std::vector<double> wall;
  // One warm-up relist (connection set-up, first diff reports everything).
  if (auto l = runtime.List(); l.ok()) diff.Update(*l);
  double cpu0 = ThisProcessCpuMs();
  double ctrd0 = containerd_pid > 0 ? ProcessCpuMs(containerd_pid) : 0;
  for (int i = 0; i < rounds; ++i) {
    auto t0 = SteadyClock::now();
    auto listing = runtime.List();
    if (listing.ok()) diff.Update(*listing);
    wall.push_back(std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count());
  }
  cost.cpu_ms = (ThisProcessCpuMs() - cpu0) / rounds;
  if (containerd_pid > 0) cost.containerd_cpu_ms = (ProcessCpuMs(containerd_pid) - ctrd0) / rounds;
  cost.wall_ms_p50 = Percentile(wall, 50);
  cost.wall_ms_p99 = Percentile(wall, 99);
  return cost;
}

// Tops the runtime up to `total` running containers, 10 per sandbox.
bool GrowTo(ContainerdInstance& containerd, const TempDir& dir, int total, int& have) {
  auto& cri = containerd.cri();
  while (have < total) {
    const std::string pod = "relist-" + std::to_string(have / 10);
    auto config = Sandbox(pod, dir.Sub("podlogs/" + pod));
    auto sandbox = cri.RunPodSandbox(config, "");
    if (!sandbox.ok()) return false;
    for (int i = 0; i < 10 && have < total; ++i, ++have) {
      auto id = cri.CreateContainer(*sandbox, Sleeper("c" + std::to_string(i)), config);
      if (!id.ok() || !cri.StartContainer(*id).ok()) return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string bin_dir, images_dir, json_path;
  int exits = 50;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--bin-dir" && i + 1 < argc)
      bin_dir = argv[++i];
    else if (a == "--images-dir" && i + 1 < argc)
      images_dir = argv[++i];
    else if (a == "--exits" && i + 1 < argc)
      exits = std::atoi(argv[++i]);
    else if (a == "--json" && i + 1 < argc)
      json_path = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: pleg-bench --bin-dir DIR --images-dir DIR [--exits N] [--json FILE]\n");
      return 2;
    }
  }
  if (bin_dir.empty() || images_dir.empty()) return 2;
  TempDir dir;
  ContainerdOptions opts;
  opts.dir = dir.Sub("ctrd");
  opts.image_tarballs = DefaultImageTarballs(images_dir);
  auto started = ContainerdInstance::Start(opts);
  if (!started.ok()) {
    std::fprintf(stderr, "containerd: %s\n", started.status().ToString().c_str());
    return 1;
  }
  auto containerd = std::move(*started);

  std::vector<LatencyResult> latency;
  for (const char* period : {"1s", "100ms"}) {
    LatencyResult r;
    if (!MeasureEventLatency(*containerd, dir, bin_dir, period, exits, r)) return 1;
    latency.push_back(std::move(r));
  }

  std::vector<RelistCost> costs;
  {
    plegd::CriPlegRuntime real(containerd->cri());
    int have = 0;
    for (int n : {10, 100}) {
      if (!GrowTo(*containerd, dir, n, have)) {
        std::fprintf(stderr, "cannot start %d containers\n", n);
        return 1;
      }
      costs.push_back(MeasureRelist(real, "containerd", n, 50, containerd->pid()));
    }
  }
  for (int n : {10, 100, 500}) {
    FakePlegRuntime fake;
    for (int p = 0; p < n / 10; ++p) {
      std::map<std::string, plegd::ContainerState> cs;
      for (int i = 0; i < 10; ++i) cs["c" + std::to_string(i)] = plegd::ContainerState::Running;
      fake.AddPod("pod" + std::to_string(p), cs);
    }
    costs.push_back(MeasureRelist(fake, "fake", n, 200, -1));
  }
  (void)containerd->Stop();

  std::printf("%-44s %9s %9s %10s\n", "plegd event latency (kill → ContainerDied)", "p50", "p99",
              "goal p99");
  for (const auto& r : latency) {
    std::printf("  relist period %-29s %7.1f ms %7.1f ms %10s\n", r.period.c_str(),
                Percentile(r.ms, 50), Percentile(r.ms, 99), r.period == "100ms" ? "< 150 ms" : "");
    std::printf("    runtime floor (CRI says EXITED)%-10s %7.1f ms %7.1f ms\n", "",
                Percentile(r.runtime_ms, 50), Percentile(r.runtime_ms, 99));
  }
  std::printf("(%d exits per period)\n", exits);
  std::printf("%-44s %9s %9s %10s %12s\n", "relist cost", "wall p50", "wall p99", "CPU",
              "containerd");
  for (const auto& c : costs) {
    char ctrd[32] = "-";
    if (c.containerd_cpu_ms >= 0) std::snprintf(ctrd, sizeof ctrd, "%.2f ms", c.containerd_cpu_ms);
    std::printf("  %-42s %6.2f ms %6.2f ms %7.3f ms %12s\n",
                (c.runtime + ", " + std::to_string(c.containers) + " containers").c_str(),
                c.wall_ms_p50, c.wall_ms_p99, c.cpu_ms, ctrd);
  }
  std::vector<Figure> figures;
  for (const auto& r : latency) {
    figures.push_back(Distribution(
        "plegd event latency, relist " + r.period + " (kill → ContainerDied at a subscriber)", "ms",
        r.ms));
    SetReference(figures.back(), "CRI reports EXITED (containerd's floor)", r.runtime_ms);
    if (r.period == "100ms") SetGoal(figures.back(), "p99", "<", 150);
  }
  nlohmann::json details;
  details["exits_per_period"] = exits;
  for (const auto& c : costs) {
    details["relist_cost"].push_back({{"runtime", c.runtime},
                                      {"containers", c.containers},
                                      {"wall_ms_p50", c.wall_ms_p50},
                                      {"wall_ms_p99", c.wall_ms_p99},
                                      {"cpu_ms", c.cpu_ms},
                                      {"containerd_cpu_ms", c.containerd_cpu_ms}});
    if (c.runtime != "containerd") continue;
    Figure f = Value("plegd relist CPU, " + std::to_string(c.containers) + " containers", "ms",
                     c.cpu_ms, 50);
    SetReferenceValue(f, "containerd's CPU for the same relist", c.containerd_cpu_ms);
    f.note = "wall p50 " + std::to_string(c.wall_ms_p50).substr(0, 5) + " ms";
    if (c.containers == 100) SetGoal(f, "value", "<", 10);
    figures.push_back(f);
  }
  WriteReport(json_path, figures, details);
  return 0;
}
