// Resources through the real `nodelet` on a private containerd: each pod's QoS class in its
// status, and the OOM score adjustment its containers run with, read from inside them
// (/proc/self/oom_score_adj), against the kubelet's rules (lib/pod/qos.h) computed here from
// the machine's MemTotal; pod cgroups under the test's --cgroup-root, their limits read from the
// cgroup files, the containers inside them, and their removal with the pod; the usage figures
// (/stats/summary, `nodeletctl top`, the resource metrics) against the cgroup files.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/testing/containerd.h"
#include "tests/testing/harness.h"
#include "tests/testing/http_get.h"
#include "tests/testing/leak_check.h"
#include "tests/testing/nodelet_fixture.h"

namespace nodelet::testing {
namespace {

using namespace std::chrono_literals;

int64_t MemTotalBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemTotal:") return kib * 1024;
  }
  return 0;
}

std::string FirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// The cgroup v1 hierarchy of `controller` (cpu is cpu,cpuacct on Debian), or the v2 root.
std::string Hierarchy(const std::string& controller) {
  return std::filesystem::exists("/sys/fs/cgroup/" + controller) ? "/sys/fs/cgroup/" + controller
                                                                 : "/sys/fs/cgroup";
}

int ReadOomScoreAdj(const std::string& path) {
  std::ifstream in(path);
  int v = 0;
  in >> v;
  return v;
}

class ResourcesE2eTest : public NodeletTest {
 protected:
  std::string results_dir() const { return dir_.Sub("results"); }

  // A host-network pod, restartPolicy Never, whose one container writes its oom_score_adj into
  // the results directory, with `resources` (a flow mapping) and `spec_extra`.
  void WritePod(const std::string& name, const std::string& resources,
                const std::string& spec_extra = "") {
    Write(name + ".yaml",
          "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
              "\nspec:\n  hostNetwork: true\n  restartPolicy: Never\n"
              "  terminationGracePeriodSeconds: 2\n" +
              spec_extra + "  volumes:\n  - name: results\n    hostPath: {path: " + results_dir() +
              "}\n  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
              "    imagePullPolicy: Never\n"
              "    command: [\"sh\", \"-c\", \"cat /proc/self/oom_score_adj > /results/" +
              name + ".tmp; mv /results/" + name + ".tmp /results/" + name +
              "\"]\n    volumeMounts: [{name: results, mountPath: /results}]\n"
              "    resources: " +
              resources + "\n");
  }
  std::string Qos(const std::string& pod) {
    auto p = CtlPod(pod + "-node1");
    return p.is_null() ? std::string() : p["status"].value("qosClass", "");
  }
};

// Guaranteed, Burstable, BestEffort and a node-critical BestEffort pod: the status names the
// class; the containers' oom_score_adj is the kubelet's, with containerd's
// restrict_oom_score_adj raising the negative ones to containerd's own score.
TEST_F(ResourcesE2eTest, QosClassInTheStatusAndOomScoreAdjInsideTheContainer) {
  std::filesystem::create_directories(results_dir());
  chmod(results_dir().c_str(), 0777);
  WritePod("guaranteed", "{limits: {cpu: 100m, memory: 64Mi}}");
  WritePod("burstable", "{requests: {memory: 256Mi}, limits: {memory: 512Mi}}");
  WritePod("besteffort", "{}");
  WritePod("critical", "{}", "  priorityClassName: system-node-critical\n");
  StartNodelet();
  const std::vector<std::string> pods = {"guaranteed", "burstable", "besteffort", "critical"};
  ASSERT_TRUE(WaitFor(
      [&] {
        return std::all_of(pods.begin(), pods.end(), [&](const std::string& p) {
          return std::filesystem::exists(results_dir() + "/" + p) && !Qos(p).empty();
        });
      },
      60s))
      << CtlPod("guaranteed-node1").dump(2);

  EXPECT_EQ(Qos("guaranteed"), "Guaranteed");
  EXPECT_EQ(Qos("burstable"), "Burstable");
  EXPECT_EQ(Qos("besteffort"), "BestEffort");
  EXPECT_EQ(Qos("critical"), "BestEffort");

  const int64_t mem_total = MemTotalBytes();
  ASSERT_GT(mem_total, 0);
  int64_t burstable = 1000 - (1000 * (int64_t{256} << 20)) / mem_total;
  burstable = std::clamp<int64_t>(burstable, 3, 999);
  const int floor =
      ReadOomScoreAdj("/proc/" + std::to_string(containerd_->pid()) + "/oom_score_adj");
  EXPECT_EQ(ReadOomScoreAdj(results_dir() + "/burstable"), burstable);
  EXPECT_EQ(ReadOomScoreAdj(results_dir() + "/besteffort"), 1000);
  EXPECT_EQ(ReadOomScoreAdj(results_dir() + "/guaranteed"), std::max(-997, floor));
  EXPECT_EQ(ReadOomScoreAdj(results_dir() + "/critical"), std::max(-997, floor));
}

// A Guaranteed and a Burstable pod: each runs in its pod cgroup (kubepods/pod<UID> and
// kubepods/burstable/pod<UID> under the test's --cgroup-root), with the kubelet's pod-level
// limits in the cgroup files; deleting the manifests removes the pod cgroups.
TEST_F(ResourcesE2eTest, PodCgroupsCarryThePodLimitsAndGoWithThePod) {
  if (!std::filesystem::exists("/sys/fs/cgroup/memory")) {
    GTEST_SKIP() << "the file checks below are cgroup v1's (this machine: hybrid)";
  }
  std::filesystem::create_directories(results_dir());
  chmod(results_dir().c_str(), 0777);
  auto pod = [&](const std::string& name, const std::string& resources) {
    Write(name + ".yaml",
          "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
              "\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n"
              "  volumes:\n  - name: results\n    hostPath: {path: " +
              results_dir() +
              "}\n  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
              "    imagePullPolicy: Never\n"
              "    command: [\"sh\", \"-c\", \"cat /proc/self/cgroup > /results/" +
              name + ".tmp; mv /results/" + name + ".tmp /results/" + name + "; " +
              kSleepUntilTerm +
              "\"]\n    volumeMounts: [{name: results, mountPath: /results}]\n"
              "    resources: " +
              resources + "\n");
  };
  pod("gpod", "{limits: {cpu: 200m, memory: 64Mi}}");
  pod("bpod", "{requests: {cpu: 100m}}");
  StartNodelet({"--system-reserved", "cpu=500m,memory=256Mi", "--kube-reserved", "memory=64Mi"});
  ASSERT_TRUE(WaitFor(
      [&] {
        return std::filesystem::exists(results_dir() + "/gpod") &&
               std::filesystem::exists(results_dir() + "/bpod");
      },
      60s))
      << CtlPod("gpod-node1").dump(2);
  const std::string root = TestCgroupRoot(dir_.path());
  auto uid = [&](const std::string& name) { return PodJson(name)["metadata"].value("uid", ""); };
  // Node allocatable enforced on kubepods: the capacity minus the reservations.
  const int64_t alloc_memory = MemTotalBytes() - (int64_t{256 + 64} << 20);
  const int64_t page = sysconf(_SC_PAGESIZE);
  EXPECT_EQ(FirstLine(Hierarchy("memory") + root + "/kubepods/memory.limit_in_bytes"),
            std::to_string(alloc_memory / page * page));
  EXPECT_EQ(FirstLine(Hierarchy("cpu") + root + "/kubepods/cpu.shares"),
            std::to_string((sysconf(_SC_NPROCESSORS_ONLN) * 1000 - 500) * 1024 / 1000));
  const std::string g = root + "/kubepods/pod" + uid("gpod-node1");
  const std::string b = root + "/kubepods/burstable/pod" + uid("bpod-node1");

  EXPECT_EQ(FirstLine(Hierarchy("memory") + g + "/memory.limit_in_bytes"),
            std::to_string(64 << 20));
  EXPECT_EQ(FirstLine(Hierarchy("cpu") + g + "/cpu.cfs_quota_us"), "20000");
  EXPECT_EQ(FirstLine(Hierarchy("cpu") + g + "/cpu.shares"), std::to_string(200 * 1024 / 1000));
  EXPECT_EQ(FirstLine(Hierarchy("cpu") + b + "/cpu.shares"), std::to_string(100 * 1024 / 1000));
  EXPECT_EQ(FirstLine(Hierarchy("cpu") + b + "/cpu.cfs_quota_us"), "-1");
  // The QoS cgroups: burstable/ shares for its pods' cpu requests, besteffort/ the minimum.
  EXPECT_EQ(FirstLine(Hierarchy("cpu") + root + "/kubepods/burstable/cpu.shares"),
            std::to_string(100 * 1024 / 1000));
  EXPECT_EQ(FirstLine(Hierarchy("cpu") + root + "/kubepods/besteffort/cpu.shares"), "2");
  // The containers run inside: /proc/self/cgroup names the pod's cgroup for memory.
  EXPECT_NE(ReadTextFile(results_dir() + "/gpod").find(g + "/"), std::string::npos)
      << ReadTextFile(results_dir() + "/gpod");
  EXPECT_NE(ReadTextFile(results_dir() + "/bpod").find(b + "/"), std::string::npos)
      << ReadTextFile(results_dir() + "/bpod");

  std::filesystem::remove(manifests() + "/gpod.yaml");
  std::filesystem::remove(manifests() + "/bpod.yaml");
  EXPECT_TRUE(WaitFor([&] { return PodCgroupsUnder(root).empty(); }, 60s))
      << "left: " << (PodCgroupsUnder(root).empty() ? "" : PodCgroupsUnder(root)[0]);
}

// One cgroup's counters as the test reads them from the v1 files: cumulative CPU time and the
// working set (usage minus total_inactive_file).
struct CgroupFigures {
  uint64_t cpu_ns = 0;
  int64_t working_set = 0;
};

CgroupFigures ReadCgroupFigures(const std::string& cgroup) {
  CgroupFigures f;
  f.cpu_ns = std::stoull("0" + FirstLine(Hierarchy("cpuacct") + cgroup + "/cpuacct.usage"));
  const int64_t usage =
      std::stoll("0" + FirstLine(Hierarchy("memory") + cgroup + "/memory.usage_in_bytes"));
  std::ifstream stat(Hierarchy("memory") + cgroup + "/memory.stat");
  std::string key;
  int64_t value = 0, inactive = 0;
  while (stat >> key >> value) {
    if (key == "total_inactive_file") inactive = value;
  }
  f.working_set = std::max<int64_t>(0, usage - inactive);
  return f;
}

// `v` lies within 10 % of the range [lo, hi] the test read around it (or `slack` of it).
::testing::AssertionResult Near(double v, double lo, double hi, double slack = 0) {
  if (lo > hi) std::swap(lo, hi);
  const double below = std::min(lo * 0.9, lo - slack), above = std::max(hi * 1.1, hi + slack);
  if (v >= below && v <= above) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << v << " is not within [" << static_cast<int64_t>(below)
                                       << ", " << static_cast<int64_t>(above) << "]";
}

// The body of GET `path` on nodelet's HTTP endpoint at 127.0.0.1:`port` ("" when it fails).
std::string HttpBody(int port, const std::string& path) {
  return HttpGetBody("127.0.0.1", port, path);
}

nlohmann::json FindPod(const nlohmann::json& summary, const std::string& name) {
  if (!summary.is_object() || !summary.contains("pods")) return nullptr;
  for (const auto& p : summary["pods"]) {
    if (p["podRef"].value("name", "") == name) return p;
  }
  return nullptr;
}

// A Guaranteed pod (cpu 200m: the CFS quota holds its busy loop to 0.2 cores) whose container
// fills a medium Memory emptyDir with 64 MiB (tmpfs pages stay charged to its cgroup) and a disk
// emptyDir with 2 MiB, then burns CPU: /stats/summary, `nodeletctl top` and /metrics report
// what the pod's and the container's cgroup files say, within 10 %.
TEST_F(ResourcesE2eTest, UsageFiguresMatchTheCgroupFiles) {
  if (!std::filesystem::exists("/sys/fs/cgroup/memory")) {
    GTEST_SKIP() << "the file checks below are cgroup v1's (this machine: hybrid)";
  }
  Write("burner.yaml",
        BusyboxPodYaml("burner",
                       "dd if=/dev/zero of=/mem/fill bs=1M count=64 2>/dev/null && "
                       "dd if=/dev/zero of=/scratch/data bs=1M count=2 2>/dev/null && "
                       "echo filled && touch /scratch/ready; trap 'exit 0' TERM; "
                       "while :; do :; done",
                       "  volumes:\n  - name: mem\n    emptyDir: {medium: Memory}\n"
                       "  - name: scratch\n    emptyDir: {}\n",
                       "    resources: {limits: {cpu: 200m, memory: 256Mi}}\n"
                       "    volumeMounts: [{name: mem, mountPath: /mem}, "
                       "{name: scratch, mountPath: /scratch}]\n"));
  const int port = FreeLoopbackPort();
  StartNodelet({"--http-address", "127.0.0.1:" + std::to_string(port)});
  std::string uid;
  ASSERT_TRUE(WaitFor(
      [&] {
        auto j = PodJson("burner-node1");
        if (!j.is_object() || !j.contains("metadata")) return false;
        uid = j["metadata"].value("uid", "");
        return !uid.empty() &&
               std::filesystem::exists(dir_.Sub("root") + "/pods/" + uid +
                                       "/volumes/kubernetes.io~empty-dir/scratch/ready");
      },
      60s))
      << CtlPod("burner-node1").dump(2);
  const std::string ctr = RunningContainer("burner-node1", "app");
  ASSERT_FALSE(ctr.empty());
  // containerd (cgroupfs driver) makes the container's cgroup by its id inside the pod's cgroup,
  // the sandbox's cgroup_parent: what the collector reads.
  const std::string pod_cg = TestCgroupRoot(dir_.path()) + "/kubepods/pod" + uid;
  const std::string ctr_cg = pod_cg + "/" + ctr;
  ASSERT_TRUE(std::filesystem::is_directory(Hierarchy("memory") + ctr_cg)) << ctr_cg;
  ASSERT_TRUE(std::filesystem::is_directory(Hierarchy("cpuacct") + ctr_cg)) << ctr_cg;

  // Rates need two samples with the pod: ask until the summary has one.
  nlohmann::json summary;
  ASSERT_TRUE(WaitFor(
      [&] {
        summary = nlohmann::json::parse(HttpBody(port, "/stats/summary"), nullptr, false);
        auto p = FindPod(summary, "burner-node1");
        return !p.is_null() && p.contains("cpu") && p["cpu"].contains("usageNanoCores");
      },
      30s))
      << summary.dump(2);

  // Cumulative CPU and working set: the summary's between what the files said before and after.
  auto pod_before = ReadCgroupFigures(pod_cg), ctr_before = ReadCgroupFigures(ctr_cg);
  const auto t_before = std::chrono::steady_clock::now();
  summary = nlohmann::json::parse(HttpBody(port, "/stats/summary"), nullptr, false);
  auto pod_after = ReadCgroupFigures(pod_cg), ctr_after = ReadCgroupFigures(ctr_cg);
  nlohmann::json pod = FindPod(summary, "burner-node1");
  ASSERT_FALSE(pod.is_null()) << summary.dump(2);
  EXPECT_EQ(pod["podRef"]["uid"], uid);
  EXPECT_EQ(pod["podRef"]["namespace"], "default");
  EXPECT_TRUE(
      Near(pod["cpu"]["usageCoreNanoSeconds"].get<double>(), pod_before.cpu_ns, pod_after.cpu_ns));
  EXPECT_TRUE(Near(pod["memory"]["workingSetBytes"].get<double>(), pod_before.working_set,
                   pod_after.working_set));
  EXPECT_GE(pod["memory"]["workingSetBytes"].get<int64_t>(), 64 << 20);
  ASSERT_EQ(pod["containers"].size(), 1u) << pod.dump(2);
  const auto& app = pod["containers"][0];
  EXPECT_EQ(app["name"], "app");
  EXPECT_TRUE(
      Near(app["cpu"]["usageCoreNanoSeconds"].get<double>(), ctr_before.cpu_ns, ctr_after.cpu_ns));
  EXPECT_TRUE(Near(app["memory"]["workingSetBytes"].get<double>(), ctr_before.working_set,
                   ctr_after.working_set));
  EXPECT_GT(app["logs"]["usedBytes"].get<int64_t>(), 0) << "it wrote 'filled'";
  // The disk emptyDir is measured, the tmpfs one is memory (above), not a local volume.
  ASSERT_EQ(pod["volume"].size(), 1u) << pod.dump(2);
  EXPECT_EQ(pod["volume"][0]["name"], "scratch");
  EXPECT_TRUE(Near(pod["volume"][0]["usedBytes"].get<double>(), 2 << 20, (2 << 20) + 16384));
  EXPECT_GE(pod["ephemeral-storage"]["usedBytes"].get<int64_t>(),
            pod["volume"][0]["usedBytes"].get<int64_t>() + app["logs"]["usedBytes"].get<int64_t>());
  EXPECT_GT(summary["node"]["memory"]["workingSetBytes"].get<int64_t>(), 64 << 20);
  EXPECT_GT(summary["node"]["fs"]["capacityBytes"].get<int64_t>(), 0);

  // Rates: the summary's usageNanoCores and top's CPU against the rate of the cgroup's counter
  // over the time the test watched it (the quota keeps it near 200m); top's memory against the
  // working set. nodelet's rate is over its own two samples, not over the test's window, and a
  // quota-held loop's rate moves by a fifth between windows on a loaded machine (204m against
  // 179m watched, in a fresh clone's run): a quarter of slack, which a wrong cgroup (0, or the
  // node's figure) or a wrong unit (1000 times) still fails.
  ASSERT_TRUE(WaitFor([&] { return std::chrono::steady_clock::now() - t_before >= 1500ms; }, 10s));
  const auto t_mid = std::chrono::steady_clock::now();
  auto pod_mid = ReadCgroupFigures(pod_cg);
  summary = nlohmann::json::parse(HttpBody(port, "/stats/summary"), nullptr, false);
  pod = FindPod(summary, "burner-node1");
  ASSERT_FALSE(pod.is_null());
  auto rate = [](uint64_t from, uint64_t to, std::chrono::steady_clock::duration d) {
    return static_cast<double>(to - from) * 1e9 /
           static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
  };
  const double watched = rate(pod_before.cpu_ns, pod_mid.cpu_ns, t_mid - t_before);
  EXPECT_GT(watched, 0.1e9) << "the busy loop runs";
  EXPECT_TRUE(Near(pod["cpu"]["usageNanoCores"].get<double>(), watched, watched,
                   std::max(30e6, 0.25 * watched)));

  auto top_before = ReadCgroupFigures(pod_cg);
  auto top =
      RunCommand({BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "top", "pods"}, 15s);
  auto top_after = ReadCgroupFigures(pod_cg);
  const auto t_end = std::chrono::steady_clock::now();
  ASSERT_EQ(top.exit_code, 0) << top.output;
  EXPECT_EQ(top.output.rfind("NAME", 0), 0u) << top.output;
  std::istringstream rows(top.output);
  std::string line, name, cpu, mem;
  while (std::getline(rows, line)) {
    std::istringstream cols(line);
    cols >> name >> cpu >> mem;
    if (name == "burner-node1") break;
  }
  ASSERT_EQ(name, "burner-node1") << top.output;
  ASSERT_TRUE(cpu.size() > 1 && cpu.back() == 'm') << top.output;
  ASSERT_TRUE(mem.size() > 2 && mem.substr(mem.size() - 2) == "Mi") << top.output;
  const double whole = rate(pod_before.cpu_ns, top_after.cpu_ns, t_end - t_before);
  EXPECT_TRUE(Near(std::stod(cpu) * 1e6, whole, whole, std::max(30e6, 0.25 * whole))) << top.output;
  EXPECT_TRUE(Near(std::stod(mem), static_cast<double>(top_before.working_set >> 20),
                   static_cast<double>(top_after.working_set >> 20), 1))
      << top.output;

  auto node_top =
      RunCommand({BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "top", "node"}, 15s);
  ASSERT_EQ(node_top.exit_code, 0) << node_top.output;
  EXPECT_NE(node_top.output.find("NAME    CPU(cores)   CPU%"), std::string::npos)
      << node_top.output;
  EXPECT_NE(node_top.output.find("\nnode1   "), std::string::npos) << node_top.output;
  EXPECT_NE(node_top.output.find("%"), node_top.output.rfind("%")) << node_top.output;

  // The kubelet's resource metrics of the same pod and container.
  const std::string metrics = HttpBody(port, "/metrics");
  for (const std::string series :
       {"pod_memory_working_set_bytes{namespace=\"default\",pod=\"burner-node1\"} ",
        "pod_cpu_usage_seconds_total{namespace=\"default\",pod=\"burner-node1\"} ",
        "container_cpu_usage_seconds_total{container=\"app\",namespace=\"default\","
        "pod=\"burner-node1\"} ",
        "container_memory_working_set_bytes{container=\"app\",namespace=\"default\","
        "pod=\"burner-node1\"} ",
        "container_start_time_seconds{container=\"app\",namespace=\"default\","
        "pod=\"burner-node1\"} ",
        "node_cpu_usage_seconds_total ", "node_memory_working_set_bytes ",
        "resource_scrape_error 0\n"}) {
    EXPECT_NE(metrics.find(series), std::string::npos) << series;
  }
  const auto at = metrics.find("pod_memory_working_set_bytes{namespace=\"default\",pod=\"burner");
  ASSERT_NE(at, std::string::npos);
  const double metric_ws = std::stod(metrics.substr(metrics.find("} ", at) + 2));
  const auto now_fig = ReadCgroupFigures(pod_cg);
  EXPECT_TRUE(Near(metric_ws, pod_before.working_set, now_fig.working_set));
}

}  // namespace
}  // namespace nodelet::testing
