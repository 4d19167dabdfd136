// Pod startup latency: manifests written into nodelet's manifest directory → each pod's status
// Running as seen on statusd's watch stream, for 1, 30 and 100 pods written at once; beside it,
// in the same run, the same pods created directly through the CRI client (RunPodSandbox,
// CreateContainer, StartContainer) with the same concurrency as podworkerd's pool: the
// runtime's floor. Runs a real nodelet (all services) on a private containerd.
//
// A size of 1 is measured --one-pod-rounds times (default 15), each round one pod through
// nodelet and one through CRI (the floor first every other round), each after a 0.5 s pause,
// and its figures are over those rounds: one pod's start is a single sample otherwise, and a
// ratio of two single samples swung from 0.96 to 1.65x. Larger sizes are measured
// --rounds times (default 3) the same way, their figures over every pod of every round: the
// 100-pod ratio of single rounds swung from 1.03 to 1.31x in one session.
//
// With --data-dir, each size's per-pod latencies go to startup-N-nodelet.dat and
// startup-N-floor.dat (sorted, with the cumulative fraction) for bench/plots/startup.gp.
//
//   pod-startup-bench --bin-dir DIR --images-dir DIR [--sizes 1,30,100] [--relist-period 100ms]
//                     [--one-pod-rounds N] [--rounds N] [--floor same|bare] [--json FILE]
//                     [--data-dir DIR]
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_report.h"
#include "lib/common/fs.h"
#include "lib/pod/qos.h"
#include "lib/pod/static_pod.h"
#include "lib/status/status_client.h"
#include "svc-podworkerd/cri_configs.h"
#include "svc-podworkerd/pod_cgroups.h"
#include "svc-podworkerd/pod_dns.h"
#include "tests/testing/containerd.h"
#include "tests/testing/harness.h"

using namespace nodelet;
using namespace nodelet::testing;
using namespace nodelet::bench;
using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;
namespace v1 = ::runtime::v1;

namespace {

constexpr int kConcurrency = 16;  // podworkerd's default --pod-workers
// A pause before each measurement (not a wait for an event): after the runtime lists nothing,
// the last run's cleanup goes on for a while (shims exiting, snapshots removed, nodelet's
// housekeeping) and would fall on whichever side is measured next.
constexpr milliseconds kSettle{500};

std::string PodYaml(const std::string& name) {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
         "\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 2\n"
         "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
         "    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; "
         "while true; do sleep 1; done\"]\n";
}

double Ms(SteadyClock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

struct Figures {
  int pods = 0;
  double p50 = 0, p99 = 0, all = 0;
  std::vector<double> ms;  // per pod
};

Figures Summarize(int pods, const std::vector<double>& ms, double all) {
  return Figures{pods, Percentile(ms, 50), Percentile(ms, 99), all, ms};
}

// Through nodelet: write the manifests, wait for every pod Running on the watch stream.
bool MeasureNodelet(const std::string& manifests, const std::string& run_dir, int n, int round,
                    Figures& out) {
  ipc::Context ctx;
  status::StatusWatcher watcher(ctx, run_dir);
  if (!watcher.Connect().ok()) return false;
  // The subscription must be live before the first status can change.
  (void)watcher.Next(milliseconds(300));
  std::string staging = manifests + "/.staging";
  std::filesystem::create_directories(staging);
  std::set<std::string> names;
  for (int i = 0; i < n; ++i) {
    std::string name = "r" + std::to_string(round) + "p" + std::to_string(i);
    std::ofstream(staging + "/" + name + ".yaml") << PodYaml(name);
    names.insert(name + "-bench");
  }
  auto t0 = SteadyClock::now();
  for (int i = 0; i < n; ++i) {
    std::string name = "r" + std::to_string(round) + "p" + std::to_string(i) + ".yaml";
    std::filesystem::rename(staging + "/" + name, manifests + "/" + name);
  }
  std::map<std::string, double> running;
  auto end = t0 + std::chrono::seconds(120);
  while (running.size() < names.size() && SteadyClock::now() < end) {
    auto ev = watcher.Next(milliseconds(500));
    if (!ev.ok()) continue;
    const auto& r = ev->record;
    if (!names.count(r.pod.name) || running.count(r.pod.name)) continue;
    bool up = r.status.phase == status::PodPhase::kRunning &&
              !r.status.container_statuses.empty() &&
              r.status.container_statuses[0].state.running.has_value();
    if (up) running[r.pod.name] = Ms(SteadyClock::now() - t0);
  }
  double all = Ms(SteadyClock::now() - t0);
  if (running.size() < names.size()) {
    std::fprintf(stderr, "only %zu of %d pods reached Running\n", running.size(), n);
    return false;
  }
  std::vector<double> ms;
  for (const auto& [_, v] : running) ms.push_back(v);
  out = Summarize(n, ms, all);
  // Remove them and wait until the runtime is empty again.
  for (int i = 0; i < n; ++i) {
    std::filesystem::remove(manifests + "/r" + std::to_string(round) + "p" + std::to_string(i) +
                            ".yaml");
  }
  return true;
}

bool WaitRuntimeEmpty(cri::RuntimeService& cri, milliseconds timeout) {
  auto end = SteadyClock::now() + timeout;
  while (SteadyClock::now() < end) {
    auto list = cri.ListPodSandbox(v1::PodSandboxFilter());
    if (list.ok() && list->empty()) return true;
    std::this_thread::sleep_for(milliseconds(100));  // polling CRI: there is no event to wait on
  }
  return false;
}

// The CRI requests podworkerd makes for PodYaml's pods, made by podworkerd's own builders
// (svc-podworkerd/cri_configs.h): the static pod as the file source makes it (uid, defaults),
// the pod's cgroup under its QoS class (as --cgroups-per-qos, the default), the sandbox's
// hostname, DNS and log directory, and the container's labels, annotations, resources,
// security context, /etc/hosts and termination-message mounts. Only podworkerd's own
// bookkeeping is left out, and the nodelet.io/managed label (docs/bench.md, "Pod startup").
struct SamePods {
  std::string root_dir;  // the pods' /etc/hosts and termination-message files
  std::string log_dir;
  podworkerd::PodCgroupConfig cgroups;
  podworkerd::NodeDnsSettings dns;
};

struct PodRequests {
  v1::PodSandboxConfig sandbox;
  v1::ContainerConfig container;
  std::string uid;
};

// The configs of pod `name`, with what they need on the host made (the pod's cgroup, its files).
Result<PodRequests> MakePodRequests(const SamePods& same, const std::string& name) {
  pod::StaticPodOrigin origin;
  origin.source = same.root_dir + "/" + name + ".yaml";
  origin.node_name = "bench";
  origin.seen = UnixTime{std::chrono::duration_cast<std::chrono::seconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count(),
                         0};
  auto loaded = pod::LoadStaticPods(PodYaml(name), origin);
  if (!loaded.errors.empty() || loaded.pods.size() != 1) {
    return InvalidArgument("the floor's pod " + name + " does not load");
  }
  const pod::Pod& pod = loaded.pods[0].pod;
  const pod::Container& c = pod.spec.containers[0];
  PodRequests out;
  out.uid = pod.metadata.uid;
  auto network = podworkerd::MakeSandboxNetwork(pod, same.dns, nullptr);
  if (!network.ok()) return network.status();
  auto cgroup = podworkerd::PodCgroupName(same.cgroups, pod);
  if (!cgroup.ok()) return cgroup.status();
  if (Status s = podworkerd::EnsurePodCgroup(same.cgroups, *cgroup, podworkerd::PodLimits(pod));
      !s.ok()) {
    return s;
  }
  out.sandbox = podworkerd::MakeSandboxConfig(pod, 0, same.log_dir, &*network);
  out.sandbox.mutable_linux()->set_cgroup_parent(*cgroup);
  out.container =
      podworkerd::MakeContainerConfig(pod, c, 0, nullptr, same.root_dir + "/seccomp", nullptr);
  out.container.mutable_linux()->mutable_resources()->set_oom_score_adj(
      pod::ContainerOomScoreAdj(pod, c, 0));
  // Without nodelet's label: its pod killer removes the labelled sandboxes it did not make.
  out.sandbox.mutable_labels()->erase(podworkerd::kManagedLabel);
  out.container.mutable_labels()->erase(podworkerd::kManagedLabel);
  if (podworkerd::ShouldMountHostsFile(c)) {
    auto hosts = ReadFileBounded("/etc/hosts", 10 << 20);
    if (!hosts.ok()) return hosts.status();
    auto m = podworkerd::EtcHostsFileMount(
        same.root_dir, pod.metadata.uid,
        podworkerd::HostNetworkHostsFileContent(*hosts, pod.spec.host_aliases));
    if (!m.ok()) return m.status();
    *out.container.add_mounts() = std::move(*m);
  }
  if (!c.termination_message_path.empty()) {
    auto m = podworkerd::TerminationMessageMount(same.root_dir, pod, c, 0);
    if (!m.ok()) return m.status();
    *out.container.add_mounts() = std::move(*m);
  }
  return out;
}

// The floor: the same pods through CRI directly, kConcurrency at a time: `same`'s requests, or
// (without it) a bare sandbox and container (host network, the same command) as until session
// 23.
bool MeasureFloor(ContainerdInstance& containerd, const std::string& log_dir, int n,
                  const SamePods* same, Figures& out) {
  std::vector<double> ms(n, 0);
  std::vector<std::string> sandboxes(n), uids(n);
  std::atomic<int> next{0};
  std::atomic<bool> failed{false};
  std::mutex error_mu;
  std::string error;
  auto fail = [&](const std::string& why) {
    std::lock_guard<std::mutex> lock(error_mu);
    if (error.empty()) error = why;
    failed = true;
  };
  static std::atomic<int> floor_round{0};
  const int this_round = ++floor_round;
  auto t0 = SteadyClock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < std::min(n, kConcurrency); ++t) {
    threads.emplace_back([&] {
      auto client = cri::GrpcCriClient::Create(containerd.endpoint());
      if (!client.ok()) return fail(client.status().ToString());
      for (int i = next++; i < n; i = next++) {
        v1::PodSandboxConfig sc;
        v1::ContainerConfig cc;
        if (same != nullptr) {
          auto made = MakePodRequests(
              *same, "floor" + std::to_string(this_round) + "-" + std::to_string(i));
          if (!made.ok()) return fail(made.status().ToString());
          sc = std::move(made->sandbox);
          cc = std::move(made->container);
          uids[i] = made->uid;
        } else {
          sc.mutable_metadata()->set_name("floor" + std::to_string(i));
          sc.mutable_metadata()->set_uid("floor-uid-" + std::to_string(i));
          sc.mutable_metadata()->set_namespace_("bench");
          sc.set_log_directory(log_dir + "/floor" + std::to_string(i));
          sc.mutable_linux()->mutable_security_context()->mutable_namespace_options()->set_network(
              v1::NODE);
          cc.mutable_metadata()->set_name("app");
          cc.mutable_image()->set_image(kBusyboxImage);
          for (const char* a : {"sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"})
            cc.add_command(a);
          cc.set_log_path("app.log");
          cc.mutable_linux()->mutable_security_context()->mutable_namespace_options()->set_network(
              v1::NODE);
        }
        auto sb = (*client)->RunPodSandbox(sc, "");
        if (!sb.ok()) return fail("RunPodSandbox: " + sb.status().ToString());
        sandboxes[i] = *sb;
        auto id = (*client)->CreateContainer(*sb, cc, sc);
        if (!id.ok()) return fail("CreateContainer: " + id.status().ToString());
        if (Status s = (*client)->StartContainer(*id); !s.ok()) {
          return fail("StartContainer: " + s.ToString());
        }
        ms[i] = Ms(SteadyClock::now() - t0);
      }
    });
  }
  for (auto& t : threads) t.join();
  double all = Ms(SteadyClock::now() - t0);
  for (const auto& id : sandboxes) {
    if (id.empty()) continue;
    (void)containerd.cri().StopPodSandbox(id);
    (void)containerd.cri().RemovePodSandbox(id);
  }
  if (same != nullptr) {
    for (const auto& uid : uids) {
      if (!uid.empty()) (void)podworkerd::RemovePodCgroup(same->cgroups, uid);
    }
  }
  if (failed) {
    std::fprintf(stderr, "the CRI floor: %s\n", error.c_str());
    return false;
  }
  out = Summarize(n, ms, all);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string bin_dir, images_dir, json_path, data_dir, sizes_arg = "1,30,100", relist;
  std::string events = "true", label, floor_kind = "same";
  int one_pod_rounds = 15, many_pod_rounds = 3;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--bin-dir" && i + 1 < argc)
      bin_dir = argv[++i];
    else if (a == "--images-dir" && i + 1 < argc)
      images_dir = argv[++i];
    else if (a == "--sizes" && i + 1 < argc)
      sizes_arg = argv[++i];
    else if (a == "--relist-period" && i + 1 < argc)
      relist = argv[++i];
    else if (a == "--runtime-events" && i + 1 < argc)
      events = argv[++i];
    else if (a == "--label" && i + 1 < argc)
      label = argv[++i];
    else if (a == "--json" && i + 1 < argc)
      json_path = argv[++i];
    else if (a == "--data-dir" && i + 1 < argc)
      data_dir = argv[++i];
    else if (a == "--one-pod-rounds" && i + 1 < argc)
      one_pod_rounds = std::max(1, std::atoi(argv[++i]));
    else if (a == "--rounds" && i + 1 < argc)
      many_pod_rounds = std::max(1, std::atoi(argv[++i]));
    else if (a == "--floor" && i + 1 < argc &&
             (std::string(argv[i + 1]) == "same" || std::string(argv[i + 1]) == "bare"))
      floor_kind = argv[++i];
    else {
      std::fprintf(
          stderr,
          "usage: pod-startup-bench --bin-dir DIR --images-dir DIR [--sizes 1,30,100] "
          "[--relist-period PERIOD (default: plegd's)] [--runtime-events true|false] "
          "[--label TEXT] [--one-pod-rounds N] [--rounds N] [--floor same|bare] [--json FILE] "
          "[--data-dir DIR]\n");
      return 2;
    }
  }
  if (bin_dir.empty() || images_dir.empty()) return 2;
  std::vector<int> sizes;
  {
    std::stringstream ss(sizes_arg);
    for (std::string s; std::getline(ss, s, ',');) sizes.push_back(std::stoi(s));
  }
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
  const std::string manifests = dir.Sub("manifests");
  std::filesystem::create_directories(manifests);
  NotifyListener notify(dir.Sub("notify.sock"));
  std::vector<std::string> cmd = {bin_dir + "/nodelet",
                                  "--root-dir",
                                  dir.Sub("root"),
                                  "--run-dir",
                                  dir.Sub("run"),
                                  "--log-dir",
                                  dir.Sub("log"),
                                  "--runtime-endpoint",
                                  containerd->endpoint(),
                                  "--runtime-events",
                                  events,
                                  "--pod-manifest-path",
                                  manifests,
                                  "--node-name",
                                  "bench",
                                  "--cgroup-root",
                                  TestCgroupRoot(dir.path())};
  if (!relist.empty()) {
    cmd.push_back("--relist-period");
    cmd.push_back(relist);
  }
  Subprocess nodelet(cmd, {{"NOTIFY_SOCKET", notify.path()}}, dir.Sub("nodelet.log"));
  if (!notify.WaitFor("READY=1", milliseconds(30000))) {
    std::fprintf(stderr, "nodelet did not become ready\n");
    return 1;
  }
  // The floor's pods: podworkerd's requests for the same manifests (its own cgroup root beside
  // nodelet's, so that neither sweeps the other's pod cgroups).
  SamePods same;
  same.root_dir = dir.Sub("floor-root");
  same.log_dir = dir.Sub("floor-logs");
  same.cgroups.enabled = true;
  same.cgroups.root = TestCgroupRoot(dir.path()) + "-floor";
  struct FloorCgroups {
    std::string root;
    ~FloorCgroups() { RemoveCgroupTree(root); }
  } floor_cgroups{same.cgroups.root};
  if (floor_kind == "same") {
    std::filesystem::create_directories(same.root_dir);
    if (Status s = podworkerd::EnsureQosCgroups(same.cgroups, 0); !s.ok()) {
      std::fprintf(stderr, "the floor's cgroups: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  const SamePods* floor_pods = floor_kind == "same" ? &same : nullptr;
  std::vector<std::pair<Figures, Figures>> results;
  int round = 0;
  for (int n : sizes) {
    // Several rounds, their pods pooled (see the top of the file).
    const int rounds = n == 1 ? one_pod_rounds : many_pod_rounds;
    std::vector<double> nodelet_ms, floor_ms;
    double nodelet_all = 0, floor_all = 0;
    for (int r = 0; r < rounds; ++r) {
      Figures via_nodelet, floor;
      auto through_nodelet = [&] {
        std::this_thread::sleep_for(kSettle);
        if (!MeasureNodelet(manifests, dir.Sub("run"), n, ++round, via_nodelet)) return false;
        if (!WaitRuntimeEmpty(containerd->cri(), milliseconds(120000))) {
          std::fprintf(stderr, "nodelet did not remove the pods\n");
          return false;
        }
        return true;
      };
      auto through_cri = [&] {
        std::this_thread::sleep_for(kSettle);
        if (!MeasureFloor(*containerd, dir.Sub("floor-logs"), n, floor_pods, floor)) {
          std::fprintf(stderr, "the CRI floor run failed\n");
          return false;
        }
        return true;
      };
      // Every other round the floor goes first: what one side leaves behind falls on the other
      // side as often as the other way round.
      const bool ok =
          r % 2 == 0 ? through_nodelet() && through_cri() : through_cri() && through_nodelet();
      if (!ok) return 1;
      nodelet_ms.insert(nodelet_ms.end(), via_nodelet.ms.begin(), via_nodelet.ms.end());
      floor_ms.insert(floor_ms.end(), floor.ms.begin(), floor.ms.end());
      nodelet_all = std::max(nodelet_all, via_nodelet.all);
      floor_all = std::max(floor_all, floor.all);
    }
    results.push_back({Summarize(n, nodelet_ms, nodelet_all), Summarize(n, floor_ms, floor_all)});
  }
  nodelet.Signal(SIGTERM);
  nodelet.Wait(milliseconds(30000));
  (void)containerd->Stop();

  const std::string mode =
      (events == "false" ? std::string("relist only, ") : std::string("runtime events, ")) +
      "relist " + (relist.empty() ? std::string("default") : relist);
  std::printf(
      "pod startup (manifest written → Running in statusd), %s, vs the CRI floor "
      "(%s, %d at a time)\n",
      mode.c_str(), floor_kind == "same" ? "podworkerd's requests" : "bare pods", kConcurrency);
  std::printf("%6s %12s %12s %12s %12s %12s %12s %8s\n", "pods", "nodelet p50", "p99", "all",
              "floor p50", "p99", "all", "ratio");
  std::vector<Figure> figures;
  nlohmann::json details;
  details["relist_period"] = relist.empty() ? "default" : relist;
  details["runtime_events"] = events != "false";
  const std::string suffix = label.empty() ? "" : " [" + label + "]";
  details["concurrency"] = kConcurrency;
  details["floor"] = floor_kind;
  for (const auto& [a, f] : results) {
    double ratio = f.p50 > 0 ? a.p50 / f.p50 : 0;
    std::printf("%6d %9.0f ms %9.0f ms %9.0f ms %9.0f ms %9.0f ms %9.0f ms %7.2fx\n", a.pods, a.p50,
                a.p99, a.all, f.p50, f.p99, f.all, ratio);
    Figure fig =
        Distribution("pod startup, " + std::to_string(a.pods) + (a.pods == 1 ? " pod" : " pods") +
                         " (manifest → Running)" + suffix,
                     "ms", a.ms);
    SetReference(fig,
                 (floor_kind == "same"
                      ? std::string("the same pods through CRI directly (podworkerd's requests), ")
                      : std::string("bare pods through CRI directly, ")) +
                     std::to_string(kConcurrency) + " at a time (floor)",
                 f.ms);
    SetGoal(fig, "ratio", "<", 1.2);
    fig.note = "all Running after " + std::to_string(static_cast<long>(a.all)) + " ms, floor " +
               std::to_string(static_cast<long>(f.all)) + " ms";
    figures.push_back(fig);
    if (a.pods == 1) {
      Figure one = Value("one pod Running, end to end" + suffix, "ms", a.p50, 1);
      SetGoal(one, "value", "<", 250);
      figures.push_back(one);
    }
    details["sizes"].push_back({{"pods", a.pods},
                                {"nodelet_ms", {{"p50", a.p50}, {"p99", a.p99}, {"all", a.all}}},
                                {"floor_ms", {{"p50", f.p50}, {"p99", f.p99}, {"all", f.all}}},
                                {"ratio_p50", ratio}});
    if (!data_dir.empty()) {
      std::string base = data_dir + "/startup-" + std::to_string(a.pods) +
                         (label.empty() ? std::string() : "-" + label);
      WriteCdf(base + "-nodelet.dat", a.ms);
      WriteCdf(base + "-floor.dat", f.ms);
    }
  }
  WriteReport(json_path, figures, details);
  return 0;
}
