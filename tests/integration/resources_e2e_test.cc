// Resources through the real `nodelet` on a private containerd: each pod's QoS class in its
// status, and the OOM score adjustment its containers run with, read from inside them
// (/proc/self/oom_score_adj), against the kubelet's rules (lib/pod/qos.h) computed here from
// the machine's MemTotal; pod cgroups under the test's --cgroup-root, their limits read from the
// cgroup files, the containers inside them, and their removal with the pod.
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

}  // namespace
}  // namespace nodelet::testing
