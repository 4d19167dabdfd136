// Eviction through the real `nodelet` on a private containerd (docs/resources.md, "Eviction").
//
// Three pods hold memory (a dd whose buffer stays allocated while it blocks writing into a
// pipe nobody reads): a BestEffort pod (700Mi), a node-critical BestEffort pod (800Mi) and a
// Burstable pod well within its 1Gi request (100Mi). nodelet first runs them with hard eviction
// off; the test then measures memory.available as the kubelet does (MemTotal minus the root
// cgroup's working set), restarts nodelet with --eviction-hard memory.available<(that + 350Mi),
// and checks:
// - the BestEffort pod goes, Failed with reason Evicted and the kubelet's message; the critical
//   pod (which uses more above its request) and the Burstable one stay; one eviction only;
// - MemoryPressure is on the node while it holds, and a new BestEffort pod is refused (reason
//   Evicted) while a Burstable one is admitted;
// - podworkerd and statusd SIGKILLed as the eviction is decided, and later nodelet SIGKILLed
//   with every service and started again, neither lose the Evicted status nor start the pod
//   again nor evict anything else.
// And for disk: --root-dir on a 64Mi tmpfs (nodefs), a BestEffort pod filling an emptyDir
// with 44Mi under --eviction-hard nodefs.available<24Mi, and a quiet pod: podworkerd is asked to
// reclaim first, then the filler is evicted (the most above its request), its emptyDir is torn
// down so the space comes back, the quiet pod stays, and under DiskPressure no new pod is
// admitted.
// Runs alone (is_parallel false): another test's pods would move the node's memory.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/testing/containerd.h"
#include "tests/testing/harness.h"
#include "tests/testing/nodelet_fixture.h"

namespace nodelet::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

int64_t FileInt(const std::string& path) {
  std::ifstream in(path);
  int64_t v = -1;
  in >> v;
  return v;
}

int64_t StatKey(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string k;
  int64_t v = 0;
  while (in >> k >> v) {
    if (k == key) return v;
  }
  return -1;
}

// memory.available as the kubelet measures it: MemTotal minus the working set of the root
// cgroup (v1: usage minus total_inactive_file; v2: from /proc/meminfo).
int64_t MemoryAvailable() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0;
  int64_t total = 0, free = 0, inactive_file = 0;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemTotal:") total = kib * 1024;
    if (key == "MemFree:") free = kib * 1024;
    if (key == "Inactive(file):") inactive_file = kib * 1024;
  }
  if (fs::exists("/sys/fs/cgroup/memory/memory.usage_in_bytes")) {
    const int64_t usage = FileInt("/sys/fs/cgroup/memory/memory.usage_in_bytes");
    const int64_t inactive = StatKey("/sys/fs/cgroup/memory/memory.stat", "total_inactive_file");
    return total - std::max<int64_t>(0, usage - inactive);
  }
  return total - std::max<int64_t>(0, total - free - inactive_file);
}

// A host-network pod whose container holds `mib` MiB until killed.
std::string HogYaml(const std::string& name, int mib, const std::string& extra_spec,
                    const std::string& resources) {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
         "\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 2\n" + extra_spec +
         "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
         "    imagePullPolicy: Never\n"
         "    command: [\"sh\", \"-c\", \"dd if=/dev/zero bs=" +
         std::to_string(mib) + "M count=1 | sleep 3600\"]\n    resources: " + resources + "\n";
}

class EvictionE2eTest : public NodeletTest {
 protected:
  // The pod's cgroup memory usage (v1 or v2), -1 when it has none yet.
  int64_t PodMemory(const std::string& pod) {
    auto p = PodJson(pod + "-node1");
    const std::string uid = p.is_null() ? "" : p["metadata"].value("uid", "");
    if (uid.empty()) return -1;
    const std::string root =
        fs::exists("/sys/fs/cgroup/memory") ? "/sys/fs/cgroup/memory" : "/sys/fs/cgroup";
    for (const char* qos : {"", "/burstable", "/besteffort"}) {
      const std::string dir = root + TestCgroupRoot(dir_.path()) + "/kubepods" + qos + "/pod" + uid;
      if (!fs::exists(dir)) continue;
      const int64_t v1 = FileInt(dir + "/memory.usage_in_bytes");
      return v1 >= 0 ? v1 : FileInt(dir + "/memory.current");
    }
    return -1;
  }
  std::string Phase(const std::string& pod) {
    auto p = CtlPod(pod + "-node1");
    return p.is_null() ? "" : p["status"].value("phase", "");
  }
  bool NodeCondition(const std::string& type) {
    auto r =
        RunCommand({BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "node", "--json"}, 5s);
    auto j = nlohmann::json::parse(r.output, nullptr, false);
    if (j.is_discarded() || !j.contains("status")) return false;
    for (const auto& c : j["status"]["conditions"]) {
      if (c.value("type", "") == type) return c.value("status", "") == "True";
    }
    return false;
  }
  size_t Count(const std::string& log, const std::string& needle) {
    std::ifstream in(dir_.Sub(log));
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t n = 0;
    for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
      ++n;
    }
    return n;
  }
};

TEST_F(EvictionE2eTest, BestEffortGoesFirstCriticalNeverAndCrashesNeitherLoseNorRepeatIt) {
  Write("be.yaml", HogYaml("be", 700, "", "{}"));
  Write("crit.yaml", HogYaml("crit", 800, "  priorityClassName: system-node-critical\n", "{}"));
  Write("bu.yaml", HogYaml("bu", 100, "", "{requests: {memory: 1Gi}}"));
  const std::vector<std::string> no_eviction = {"--eviction-hard", "",
                                                "--eviction-monitoring-period", "1s"};
  StartNodelet(no_eviction);
  ASSERT_TRUE(WaitFor(
      [&] {
        return PodMemory("be") > (690 << 20) && PodMemory("crit") > (790 << 20) &&
               PodMemory("bu") > (95 << 20);
      },
      90s))
      << PodMemory("be") << " " << PodMemory("crit") << " " << PodMemory("bu");
  // The pods keep running while nodelet restarts (as under the kubelet).
  nodelet_->Signal(SIGTERM);
  ASSERT_TRUE(nodelet_->Wait(30s).has_value());
  const int64_t available = MemoryAvailable();
  ASSERT_GT(available, 0);
  // 350Mi short now (more once nodelet runs again); about 350Mi to spare, less what nodelet and
  // the late pods take, once the BestEffort pod's 700Mi are freed: wide margins, as page cache
  // moving between the active and inactive lists shifts the working set on a busy machine.
  const int64_t threshold_mib = (available >> 20) + 350;
  const std::vector<std::string> with_eviction = {
      "--eviction-hard",
      "memory.available<" + std::to_string(threshold_mib) + "Mi",
      "--eviction-monitoring-period",
      "1s",
      "--eviction-pressure-transition-period",
      "120s"};
  StartNodelet(with_eviction);

  // SIGKILLed as the eviction is decided: podworkerd (which is to stop the pod) and statusd
  // (which is to store its status).
  ASSERT_TRUE(WaitFor([&] { return Count("nodelet-2.log", "Evicting pod") >= 1; }, 60s));
  for (const char* service : {"podworkerd", "statusd"}) {
    const pid_t pid = ServicePid(service);
    ASSERT_GT(pid, 0) << service;
    ASSERT_EQ(kill(pid, SIGKILL), 0) << service;
  }
  ASSERT_TRUE(WaitFor([&] { return Phase("be") == "Failed"; }, 60s)) << CtlPod("be-node1").dump(2);
  auto be = CtlPod("be-node1");
  EXPECT_EQ(be["status"].value("reason", ""), "Evicted");
  const std::string message = be["status"].value("message", "");
  EXPECT_THAT(message, ::testing::StartsWith("The node was low on resource: memory. Threshold "
                                             "quantity: " +
                                             std::to_string(threshold_mib) + "Mi, available: "));
  EXPECT_THAT(message, ::testing::HasSubstr("Container app was using "));
  EXPECT_THAT(message, ::testing::HasSubstr(", request is 0, has larger consumption of memory."));
  EXPECT_TRUE(WaitFor([&] { return RunningContainer("be-node1").empty(); }, 20s));
  EXPECT_TRUE(WaitFor([&] { return NodeCondition("MemoryPressure"); }, 20s));  // rebuilt every 10 s

  // Under MemoryPressure: a BestEffort pod is refused, a Burstable one admitted.
  Write("late-be.yaml", HogYaml("late-be", 1, "", "{}"));
  Write("late-bu.yaml", HogYaml("late-bu", 1, "", "{requests: {memory: 8Mi}}"));
  ASSERT_TRUE(WaitFor([&] { return Phase("late-be") == "Failed"; }, 30s));
  auto late = CtlPod("late-be-node1");
  EXPECT_EQ(late["status"].value("reason", ""), "Evicted");
  EXPECT_EQ(late["status"].value("message", ""), "The node had condition: [MemoryPressure]. ");
  EXPECT_TRUE(WaitFor([&] { return !RunningContainer("late-bu-node1").empty(); }, 60s));

  ASSERT_TRUE(WaitServiceHealthy("podworkerd", 30s));
  // Several monitoring periods and podworkerd syncs later.
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(Phase("be"), "Failed");
    EXPECT_TRUE(RunningContainer("be-node1").empty());
    std::this_thread::sleep_for(1s);  // sampling a steady state: nothing to wait on
  }
  EXPECT_EQ(CtlPod("be-node1")["status"].value("reason", ""), "Evicted");

  // nodelet SIGKILLed with its services, and started again: the record keeps the pod evicted;
  // nothing else is.
  ASSERT_TRUE(KillSupervisorAndServices());
  StartNodelet(with_eviction);
  ASSERT_TRUE(WaitServiceHealthy("podworkerd", 30s));
  for (int i = 0; i < 5; ++i) {
    std::this_thread::sleep_for(1s);  // as above
    EXPECT_EQ(Phase("be"), "Failed");
    EXPECT_TRUE(RunningContainer("be-node1").empty());
  }
  EXPECT_EQ(CtlPod("be-node1")["status"].value("reason", ""), "Evicted");
  EXPECT_FALSE(RunningContainer("crit-node1").empty());
  EXPECT_FALSE(RunningContainer("bu-node1").empty());
  EXPECT_EQ(Phase("crit"), "Running");
  EXPECT_EQ(Phase("bu"), "Running");
  // The pod refused under pressure stays refused (statusd holds it Failed), though the pressure
  // may be gone now.
  EXPECT_EQ(Phase("late-be"), "Failed");
  EXPECT_TRUE(RunningContainer("late-be-node1").empty());
  EXPECT_EQ(Count("nodelet-2.log", "Evicting pod"), 1u);
  EXPECT_EQ(Count("nodelet-3.log", "Evicting pod"), 0u);
  EXPECT_EQ(Count("nodelet-2.log", "Evicting pod default/be-node1"), 1u);
}

// The disk test's nodefs: a small tmpfs on --root-dir (NodeletTest's TearDown unmounts what is
// under the test's directory once nodelet and containerd have stopped).
class DiskEvictionE2eTest : public EvictionE2eTest {
 protected:
  void SetUp() override {
    EvictionE2eTest::SetUp();
    fs::create_directories(dir_.Sub("root"));
    ASSERT_EQ(mount("tmpfs", dir_.Sub("root").c_str(), "tmpfs", MS_NOSUID | MS_NODEV,
                    "size=64m,mode=0755"),
              0)
        << strerror(errno);
  }
};

std::string FillerYaml(const std::string& name, int mib) {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
         "\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 2\n"
         "  volumes:\n  - name: data\n    emptyDir: {}\n"
         "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
         "    imagePullPolicy: Never\n"
         "    command: [\"sh\", \"-c\", \"dd if=/dev/zero of=/data/fill bs=1M count=" +
         std::to_string(mib) +
         "; sleep 3600\"]\n"
         "    volumeMounts: [{name: data, mountPath: /data}]\n";
}

TEST_F(DiskEvictionE2eTest, TheFillerIsEvictedAfterAReclaimAndItsEmptyDirGivesTheSpaceBack) {
  // Filled first with eviction off, then nodelet restarted with the threshold: directory
  // figures are walked at most every 10 s (docs/resources.md, "Usage"), so a pod that fills its
  // emptyDir within a second of starting would be ranked on a walk made before it filled.
  Write("quiet.yaml", FillerYaml("quiet", 1));
  Write("filler.yaml", FillerYaml("filler", 44));
  StartNodelet({"--eviction-hard", "", "--eviction-monitoring-period", "1s"});
  ASSERT_TRUE(WaitFor([&] { return !RunningContainer("quiet-node1").empty(); }, 60s));
  ASSERT_TRUE(WaitFor([&] { return !RunningContainer("filler-node1").empty(); }, 60s));
  const std::string filled_uid = PodJson("filler-node1")["metadata"].value("uid", "");
  ASSERT_TRUE(WaitFor(
      [&] {
        std::error_code ec;
        return fs::file_size(dir_.Sub("root") + "/pods/" + filled_uid +
                                 "/volumes/kubernetes.io~empty-dir/data/fill",
                             ec) == (uintmax_t{44} << 20);
      },
      30s));
  nodelet_->Signal(SIGTERM);
  ASSERT_TRUE(nodelet_->Wait(30s).has_value());
  StartNodelet({"--eviction-hard", "nodefs.available<24Mi", "--eviction-monitoring-period", "1s",
                "--eviction-pressure-transition-period", "120s"});
  ASSERT_TRUE(WaitFor([&] { return Phase("filler") == "Failed"; }, 90s))
      << CtlPod("filler-node1").dump(2);
  auto filler = CtlPod("filler-node1");
  EXPECT_EQ(filler["status"].value("reason", ""), "Evicted");
  EXPECT_THAT(filler["status"].value("message", ""),
              ::testing::StartsWith("The node was low on resource: ephemeral-storage. Threshold "
                                    "quantity: 24Mi, available: "));
  EXPECT_GE(Count("nodelet-2.log", "asking podworkerd to reclaim"), 1u);
  EXPECT_TRUE(WaitFor([&] { return NodeCondition("DiskPressure"); }, 20s));  // rebuilt every 10 s
  // Its emptyDir goes once it has stopped: the space is back.
  const std::string uid = PodJson("filler-node1")["metadata"].value("uid", "");
  ASSERT_FALSE(uid.empty());
  EXPECT_TRUE(WaitFor([&] { return !fs::exists(dir_.Sub("root") + "/pods/" + uid); }, 60s))
      << dir_.Sub("root") + "/pods/" + uid;
  // Under DiskPressure no new pod is admitted, whatever its QoS class.
  Write("late.yaml", HogYaml("late", 1, "", "{requests: {memory: 8Mi}}"));
  ASSERT_TRUE(WaitFor([&] { return Phase("late") == "Failed"; }, 30s));
  EXPECT_EQ(CtlPod("late-node1")["status"].value("message", ""),
            "The node had condition: [DiskPressure]. ");
  EXPECT_FALSE(RunningContainer("quiet-node1").empty());
  EXPECT_EQ(Phase("quiet"), "Running");
  EXPECT_EQ(Count("nodelet-2.log", "Evicting pod"), 1u);
}

}  // namespace
}  // namespace nodelet::testing
