// Event latency through the whole agent: a container's process is killed (SIGKILL) → statusd's
// watch stream shows that container terminated. A real nodelet on a private containerd runs one
// pod (restartPolicy Never) with N idle containers; they are killed one after the other, each at
// a random phase of the relist period (of 1 s with runtime events, where the period does not
// matter), once per variant: "default" (runtime events, plegd's default period), "PERIOD"
// (runtime events, that period), "PERIOD/relist" (no runtime events: relisting only). The
// reference in the same run is containerd's own floor: when CRI ContainerStatus first reports
// the container EXITED (polled while waiting). plegd's share alone is pleg-bench.
//
//   event-bench --bin-dir DIR --images-dir DIR [--exits N] [--periods default,1s/relist]
//               [--json FILE]
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_nodelet.h"
#include "bench/bench_report.h"

using namespace nodelet;
using namespace nodelet::bench;
using SteadyClock = std::chrono::steady_clock;
namespace v1 = ::runtime::v1;

namespace {

constexpr char kPod[] = "events";

double Ms(SteadyClock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

int PeriodMs(const std::string& period) {
  if (period.size() > 2 && period.substr(period.size() - 2) == "ms") return std::stoi(period);
  return std::stoi(period) * 1000;
}

struct Latency {
  std::string period;
  std::vector<double> status_ms;   // kill → statusd shows the container terminated
  std::vector<double> runtime_ms;  // kill → CRI reports EXITED
};

const status::ContainerStatus* FindContainer(const status::PodStatusRecord& r,
                                             const std::string& name) {
  for (const auto& c : r.status.container_statuses) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

// A variant's flags and the span of its random kill phase.
struct Variant {
  std::string name;
  std::vector<std::string> flags;
  int phase_ms = 1000;
  bool events = true;
};

Variant ParseVariant(const std::string& token) {
  Variant v;
  v.name = token;
  std::string period = token;
  if (const size_t slash = token.find("/relist"); slash != std::string::npos) {
    period = token.substr(0, slash);
    v.events = false;
    v.flags = {"--runtime-events", "false"};
  }
  if (period != "default") {
    v.flags.push_back("--relist-period");
    v.flags.push_back(period);
    if (!v.events) v.phase_ms = PeriodMs(period);
  }
  return v;
}

std::string Describe(const Variant& v) {
  const std::string period = v.name.substr(0, v.name.find('/')) == "default"
                                 ? "default relist"
                                 : "relist " + v.name.substr(0, v.name.find('/'));
  return (v.events ? "runtime events, " : "relist only, ") + period;
}

bool Measure(BenchNodelet& b, const std::string& bin_dir, const Variant& variant, int exits,
             Latency& out) {
  out.period = variant.name;
  const int period_ms = variant.phase_ms;
  std::string tag = variant.name;
  std::replace(tag.begin(), tag.end(), '/', '-');
  if (!b.StartNodelet(bin_dir, "events-" + tag, variant.flags)) return false;
  ipc::Context ctx;
  status::StatusWatcher watcher(ctx, b.run_dir());
  if (!watcher.Connect().ok()) return false;
  (void)watcher.Next(milliseconds(300));  // the subscription is live before the pod exists
  b.Write("events.yaml", IdlePodYaml(kPod, exits, "Never"));

  // Every container running; keep the latest record.
  status::PodStatusRecord latest;
  auto end = SteadyClock::now() + std::chrono::seconds(120);
  while (!AllRunning(latest, static_cast<size_t>(exits))) {
    if (SteadyClock::now() >= end) {
      std::fprintf(stderr, "the pod with %d containers did not reach Running\n", exits);
      return false;
    }
    auto ev = watcher.Next(milliseconds(500));
    if (ev.ok() && ev->kind == status::WatchEvent::Kind::kChanged &&
        ev->record.pod.name.rfind(kPod, 0) == 0) {
      latest = ev->record;
    }
  }
  std::mt19937 rng(42);
  auto& cri = b.containerd().cri();
  for (int i = 0; i < exits; ++i) {
    const std::string name = "c" + std::to_string(i);
    const auto* c = FindContainer(latest, name);
    if (!c) return false;
    std::string id = c->container_id;
    if (auto sep = id.find("://"); sep != std::string::npos) id = id.substr(sep + 3);
    pid_t pid = testing::ContainerPid(cri, id);
    if (pid <= 0) {
      std::fprintf(stderr, "no pid for container %s\n", name.c_str());
      return false;
    }
    // Kill at a random phase of the relist period, as real exits happen; keep reading the
    // stream meanwhile.
    auto kill_at = SteadyClock::now() + milliseconds(rng() % static_cast<unsigned>(period_ms));
    while (SteadyClock::now() < kill_at) {
      auto left = std::chrono::duration_cast<milliseconds>(kill_at - SteadyClock::now());
      auto ev = watcher.Next(std::max(left, milliseconds(1)));
      if (ev.ok() && ev->record.pod.name == latest.pod.name) latest = ev->record;
    }
    auto t0 = SteadyClock::now();
    kill(pid, SIGKILL);
    std::optional<double> seen_status, seen_runtime;
    auto deadline = t0 + std::chrono::seconds(30);
    while (!seen_status || !seen_runtime) {
      if (SteadyClock::now() >= deadline) {
        std::fprintf(stderr, "container %s: no terminated status within 30 s\n", name.c_str());
        return false;
      }
      if (!seen_runtime) {
        auto st = cri.ContainerStatus(id, false);
        if (st.ok() && st->status().state() == v1::CONTAINER_EXITED)
          seen_runtime = Ms(SteadyClock::now() - t0);
      }
      auto ev = watcher.Next(milliseconds(seen_runtime ? 200 : 2));
      if (!ev.ok() || ev->record.pod.name != latest.pod.name) continue;
      latest = ev->record;
      const auto* now = FindContainer(latest, name);
      if (!seen_status && now && now->state.terminated) seen_status = Ms(SteadyClock::now() - t0);
    }
    out.status_ms.push_back(*seen_status);
    out.runtime_ms.push_back(*seen_runtime);
  }
  b.Remove("events.yaml");
  if (!b.WaitRuntimeEmpty(milliseconds(60000))) {
    std::fprintf(stderr, "nodelet did not remove the pod\n");
    return false;
  }
  b.StopNodelet();
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string bin_dir, images_dir, json_path, periods_arg = "default,1s/relist";
  int exits = 40;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--bin-dir" && i + 1 < argc)
      bin_dir = argv[++i];
    else if (a == "--images-dir" && i + 1 < argc)
      images_dir = argv[++i];
    else if (a == "--exits" && i + 1 < argc)
      exits = std::atoi(argv[++i]);
    else if (a == "--periods" && i + 1 < argc)
      periods_arg = argv[++i];
    else if (a == "--json" && i + 1 < argc)
      json_path = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: event-bench --bin-dir DIR --images-dir DIR [--exits N] "
                   "[--periods default,1s/relist] [--json FILE]\n");
      return 2;
    }
  }
  if (bin_dir.empty() || images_dir.empty() || exits < 1) {
    std::fprintf(stderr, "event-bench: --bin-dir and --images-dir are required, --exits >= 1\n");
    return 2;
  }
  auto b = BenchNodelet::Start(images_dir);
  if (!b) return 1;
  std::vector<Figure> figures;
  std::stringstream ss(periods_arg);
  for (std::string token; std::getline(ss, token, ',');) {
    const Variant v = ParseVariant(token);
    Latency l;
    if (!Measure(*b, bin_dir, v, exits, l)) return 1;
    Figure f = Distribution("event latency, " + Describe(v) + " (kill → status terminated)", "ms",
                            l.status_ms);
    SetReference(f, "CRI reports EXITED (containerd's floor)", l.runtime_ms);
    if (token == "100ms/relist") SetGoal(f, "p99", "<", 150);
    if (token == "default") SetGoal(f, "p99 over reference", "<", 20);
    std::printf(
        "event latency, %-32s p50 %7.1f ms  p99 %7.1f ms   (CRI floor p50 %6.1f ms, "
        "p99 %6.1f ms, %d exits)\n",
        Describe(v).c_str(), *f.p50, *f.p99, *f.ref_p50, *f.ref_p99, exits);
    figures.push_back(f);
  }
  WriteReport(json_path, figures, {{"exits_per_period", exits}});
  return 0;
}
