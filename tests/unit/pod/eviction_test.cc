// The kubelet's eviction rules (lib/pod/eviction.h): flag parsing, thresholds met, soft grace
// periods, node conditions held for the transition period, the ranking and the message.
#include "lib/pod/eviction.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lib/pod/defaults.h"
#include "lib/pod/manifest_parser.h"
#include "lib/pod/qos.h"
#include "lib/pod/validation.h"
#include "tests/unit/pod/pod_of.h"

namespace nodelet::pod {
namespace {

using namespace std::chrono_literals;

// "Ns" only: enough for these tests (the real parser is lib/common's ParseDuration).
Result<std::chrono::milliseconds> Seconds(const std::string& text) {
  if (text.size() < 2 || text.back() != 's') return InvalidArgument("bad duration " + text);
  return std::chrono::milliseconds(std::stoll(text.substr(0, text.size() - 1)) * 1000);
}

TEST(EvictionFlagsTest, ParsesQuantitiesAndPercentagesAndDropsZeroes) {
  auto t = ParseEvictionThresholds(
      "memory.available<100Mi, nodefs.available<10%,nodefs.inodesFree<0%,imagefs.available<0",
      true);
  ASSERT_TRUE(t.ok()) << t.status().message();
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ((*t)[0].signal, EvictionSignal::kMemoryAvailable);
  EXPECT_EQ((*t)[0].quantity, int64_t{100} << 20);
  EXPECT_EQ((*t)[0].MinAvailable(1 << 30), int64_t{100} << 20);
  EXPECT_EQ((*t)[1].signal, EvictionSignal::kNodeFsAvailable);
  EXPECT_FALSE((*t)[1].quantity);
  EXPECT_EQ((*t)[1].MinAvailable(1000), 100);
  EXPECT_TRUE((*t)[1].hard);
}

TEST(EvictionFlagsTest, RefusesWhatTheKubeletRefusesNamingTheEntry) {
  for (const char* bad :
       {"memory.available>100Mi", "memory.available<=100Mi", "cpu.available<1", "memory.available",
        "memory.available<-1Mi", "nodefs.available<101%", "nodefs.available<x%",
        "memory.available<1Mi,memory.available<2Mi", "memory.available<1Zi"}) {
    auto t = ParseEvictionThresholds(bad, true);
    EXPECT_FALSE(t.ok()) << bad;
    if (!t.ok()) {
      EXPECT_NE(t.status().message().find('"'), std::string::npos) << bad;
    }
  }
}

TEST(EvictionFlagsTest, TheDefaultsAreTheKubeletsLinuxDefaults) {
  auto d = DefaultHardThresholds();
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[0].quantity, int64_t{100} << 20);
  EXPECT_EQ(d[1].percentage, 10);
  EXPECT_EQ(d[2].signal, EvictionSignal::kNodeFsInodesFree);
  EXPECT_EQ(d[2].percentage, 5);
  EXPECT_EQ(d[3].signal, EvictionSignal::kImageFsAvailable);
  EXPECT_EQ(d[3].percentage, 15);
}

TEST(EvictionFlagsTest, EverySoftThresholdNeedsAGracePeriodAndNoGracePeriodIsSpare) {
  auto soft = *ParseEvictionThresholds("memory.available<1Gi,nodefs.available<20%", false);
  EXPECT_FALSE(ApplySoftGracePeriods("memory.available=30s", Seconds, &soft).ok());
  EXPECT_FALSE(ApplySoftGracePeriods(
                   "memory.available=30s,nodefs.available=5s,imagefs.available=1s", Seconds, &soft)
                   .ok());
  EXPECT_FALSE(
      ApplySoftGracePeriods("memory.available=30,nodefs.available=5s", Seconds, &soft).ok());
  ASSERT_TRUE(
      ApplySoftGracePeriods("memory.available=30s,nodefs.available=5s", Seconds, &soft).ok());
  EXPECT_EQ(soft[0].grace_period, 30s);
  EXPECT_EQ(soft[1].grace_period, 5s);
  EXPECT_FALSE(soft[0].hard);
}

EvictionObservations Memory(int64_t available, int64_t capacity = int64_t{8} << 30) {
  return {{EvictionSignal::kMemoryAvailable, {available, capacity}}};
}

TEST(EvictionStateTest, AHardThresholdActsAtOnceAndItsConditionOutlivesItForTheTransition) {
  EvictionState state(*ParseEvictionThresholds("memory.available<1Gi", true), 30s);
  EXPECT_TRUE(state.Observe(Memory(int64_t{2} << 30), 1000).empty());
  EXPECT_FALSE(state.Pressure("MemoryPressure", 1000));
  EXPECT_EQ(state.Observe(Memory(int64_t{512} << 20), 2000).size(), 1u);
  EXPECT_TRUE(state.Pressure("MemoryPressure", 2000));
  EXPECT_FALSE(state.Pressure("DiskPressure", 2000));
  // Resolved, but the condition stays for the transition period.
  EXPECT_TRUE(state.Observe(Memory(int64_t{2} << 30), 3000).empty());
  EXPECT_TRUE(state.Pressure("MemoryPressure", 31000));
  EXPECT_FALSE(state.Pressure("MemoryPressure", 32001));
}

TEST(EvictionStateTest, ASoftThresholdActsOnlyAfterHoldingForItsGracePeriod) {
  auto soft = *ParseEvictionThresholds("memory.available<1Gi", false);
  ASSERT_TRUE(ApplySoftGracePeriods("memory.available=10s", Seconds, &soft).ok());
  EvictionState state(soft, 0s);
  const auto low = Memory(int64_t{512} << 20);
  EXPECT_TRUE(state.Observe(low, 0).empty());
  EXPECT_TRUE(state.Pressure("MemoryPressure", 0));  // the condition does not wait
  EXPECT_TRUE(state.Observe(low, 9000).empty());
  // Interrupted: the grace period starts again.
  EXPECT_TRUE(state.Observe(Memory(int64_t{2} << 30), 9500).empty());
  EXPECT_TRUE(state.Observe(low, 10000).empty());
  EXPECT_TRUE(state.Observe(low, 19999).empty());
  EXPECT_EQ(state.Observe(low, 20000).size(), 1u);
}

TEST(EvictionStateTest, PercentagesAreOfTheObservedCapacityAndUnobservedSignalsNeverMeet) {
  EvictionState state(*ParseEvictionThresholds("nodefs.available<10%,imagefs.available<1", true),
                      0s);
  EvictionObservations o{{EvictionSignal::kNodeFsAvailable, {99, 1000}}};
  auto act = state.Observe(o, 1);
  ASSERT_EQ(act.size(), 1u);
  EXPECT_EQ(act[0].signal, EvictionSignal::kNodeFsAvailable);
  EXPECT_TRUE(state.Pressure("DiskPressure", 1));
  o[EvictionSignal::kNodeFsAvailable].available = 100;
  EXPECT_TRUE(state.Observe(o, 2).empty());
}

TEST(EvictionFlagsTest, MinimumReclaimsGoOnEveryThresholdOfTheirSignalAndRefuseStrays) {
  auto t = *ParseEvictionThresholds("memory.available<100Mi,nodefs.available<10%", true);
  auto soft = *ParseEvictionThresholds("nodefs.available<20%", false);
  t.insert(t.end(), soft.begin(), soft.end());
  ASSERT_TRUE(ApplyMinimumReclaims("nodefs.available=5%, memory.available=50Mi", &t).ok());
  EXPECT_EQ(t[0].ReclaimTarget(1 << 30), int64_t{150} << 20);
  EXPECT_EQ(t[1].ReclaimTarget(1000), 150);
  EXPECT_EQ(t[2].ReclaimTarget(1000), 250);
  for (const char* bad :
       {"nodefs.available", "cpu.available=1", "memory.available=-1Mi", "nodefs.available=101%",
        "memory.available=1Mi,memory.available=2Mi", "imagefs.available=1Gi"}) {
    auto copy = t;
    Status s = ApplyMinimumReclaims(bad, &copy);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find('"'), std::string::npos) << bad;
  }
}

TEST(EvictionStateTest, AThresholdActedOnHoldsUntilItsMinimumReclaimIsWonBack) {
  auto t = *ParseEvictionThresholds("memory.available<1Gi", true);
  ASSERT_TRUE(ApplyMinimumReclaims("memory.available=512Mi", &t).ok());
  EvictionState state(t, 0s);
  const int64_t mi = int64_t{1} << 20;
  // Not met yet: the minimum reclaim alone never raises a threshold.
  EXPECT_TRUE(state.Observe(Memory(1200 * mi), 0).empty());
  EXPECT_EQ(state.Observe(Memory(900 * mi), 1000).size(), 1u);
  // Back above the threshold but not above threshold + reclaim: still acted on, still pressure.
  EXPECT_EQ(state.Observe(Memory(1200 * mi), 2000).size(), 1u);
  EXPECT_TRUE(state.Pressure("MemoryPressure", 2000));
  EXPECT_TRUE(state.Observe(Memory(1536 * mi), 3000).empty());
  EXPECT_FALSE(state.Pressure("MemoryPressure", 3000));
  // Once resolved, the band alone does not raise it again.
  EXPECT_TRUE(state.Observe(Memory(1200 * mi), 4000).empty());
}

// What decides whether the eviction manager must read a pod's disk use every round.
TEST(LocalStorageTest, HasLocalStorageLimitsSeesSizeLimitsAndEphemeralStorageLimits) {
  EXPECT_FALSE(HasLocalStorageLimits(
      PodOf("  volumes:\n  - {name: free, emptyDir: {}}\n"
            "  containers:\n  - name: app\n    image: busybox\n"
            "    resources: {limits: {memory: 64Mi}, requests: {ephemeral-storage: 1Mi}}\n")));
  EXPECT_TRUE(
      HasLocalStorageLimits(PodOf("  volumes:\n  - {name: data, emptyDir: {sizeLimit: 2Mi}}\n"
                                  "  containers:\n  - name: app\n    image: busybox\n")));
  EXPECT_TRUE(
      HasLocalStorageLimits(PodOf("  containers:\n  - name: app\n    image: busybox\n"
                                  "    resources: {limits: {ephemeral-storage: 1Mi}}\n")));
  EXPECT_TRUE(
      HasLocalStorageLimits(PodOf("  initContainers:\n  - name: init\n    image: busybox\n"
                                  "    resources: {limits: {ephemeral-storage: 1Mi}}\n"
                                  "  containers:\n  - name: app\n    image: busybox\n")));
}

TEST(LocalStorageTest, AnEmptyDirPastItsSizeLimitComesFirst) {
  const auto pod = PodOf(
      "  volumes:\n  - {name: data, emptyDir: {sizeLimit: 2Mi}}\n  - {name: free, emptyDir: {}}\n"
      "  containers:\n  - name: app\n    image: busybox\n"
      "    resources: {limits: {ephemeral-storage: 1Mi}}\n");
  PodStorageUsage u;
  u.volumes = {{"data", 2 << 20}, {"free", 50 << 20}};
  u.total = 52 << 20;
  // Exactly at its limit is within it; the pod's total is past the containers' limit.
  EXPECT_EQ(LocalStorageViolation(pod, u),
            "Pod ephemeral local storage usage exceeds the total limit of containers 1Mi. ");
  u.volumes["data"] = (2 << 20) + 1;
  EXPECT_EQ(LocalStorageViolation(pod, u),
            "Usage of EmptyDir volume \"data\" exceeds the limit \"2Mi\". ");
}

TEST(LocalStorageTest, PodLimitIsTheSumOfItsContainersAndAContainerIsHeldToItsOwn) {
  const auto pod = PodOf(
      "  containers:\n  - name: a\n    image: busybox\n"
      "    resources: {limits: {ephemeral-storage: 3Mi}}\n"
      "  - name: b\n    image: busybox\n    resources: {limits: {ephemeral-storage: 1M}}\n"
      "  - name: c\n    image: busybox\n");
  PodStorageUsage u;
  u.containers = {{"a", 1 << 20}, {"b", 1000000}, {"c", 2 << 20}};
  u.total = (3 << 20) + 1000000;
  EXPECT_EQ(LocalStorageViolation(pod, u), std::nullopt);  // c has no limit of its own
  u.containers["b"] = 1000001;
  EXPECT_EQ(LocalStorageViolation(pod, u),
            "Container b exceeded its local ephemeral storage limit \"1M\". ");
  u.total = (3 << 20) + 1000001;
  EXPECT_EQ(LocalStorageViolation(pod, u),
            "Pod ephemeral local storage usage exceeds the total limit of containers 4145728. ");
}

TEST(LocalStorageTest, NoLimitsNoEviction) {
  const auto pod = PodOf(
      "  volumes:\n  - {name: data, emptyDir: {}}\n"
      "  containers:\n  - name: app\n    image: busybox\n");
  PodStorageUsage u;
  u.volumes = {{"data", int64_t{1} << 40}};
  u.containers = {{"app", int64_t{1} << 40}};
  u.total = int64_t{2} << 40;
  EXPECT_EQ(LocalStorageViolation(pod, u), std::nullopt);
}

EvictionCandidate Pod(std::string uid, int64_t usage, int64_t request, int32_t priority = 0) {
  EvictionCandidate c;
  c.uid = uid;
  c.name = "default/" + uid;
  c.has_stats = true;
  c.memory_usage = c.storage_usage = usage;
  c.memory_request = c.storage_request = request;
  c.inodes_usage = usage;
  c.priority = priority;
  c.containers.push_back({"app", usage, request, usage, request});
  return c;
}

std::vector<std::string> Order(EvictionSignal s, const std::vector<EvictionCandidate>& pods) {
  std::vector<std::string> out;
  for (size_t i : RankForEviction(s, pods)) out.push_back(pods[i].uid);
  return out;
}

TEST(EvictionRankTest, AboveRequestsFirstThenLowerPriorityThenMostAboveRequests) {
  std::vector<EvictionCandidate> pods = {
      Pod("burstable-within", 100, 200),       // below its request
      Pod("besteffort-small", 10, 0),          // above (request 0)
      Pod("besteffort-big", 300, 0),           // above, by more
      Pod("high-priority-big", 900, 0, 1000),  // above, but a higher priority
      Pod("critical", 5000, 0, kSystemCriticalPriority),
  };
  EXPECT_EQ(Order(EvictionSignal::kMemoryAvailable, pods),
            (std::vector<std::string>{"besteffort-big", "besteffort-small", "high-priority-big",
                                      "burstable-within"}));
  EXPECT_EQ(Order(EvictionSignal::kNodeFsAvailable, pods),
            Order(EvictionSignal::kMemoryAvailable, pods));
}

TEST(EvictionRankTest, CriticalPodsAreNeverRankedAndPodsWithoutStatsGoLast) {
  std::vector<EvictionCandidate> pods = {Pod("unmeasured", 0, 0), Pod("node-critical", 1, 0),
                                         Pod("cluster-critical", 1, 0), Pod("plain", 1, 0)};
  pods[0].has_stats = false;
  pods[1].priority = 2000001000;
  pods[2].priority = 2000000000;
  EXPECT_EQ(Order(EvictionSignal::kMemoryAvailable, pods),
            (std::vector<std::string>{"plain", "unmeasured"}));
  EXPECT_TRUE(IsEvictionExempt(2000000000));
  EXPECT_FALSE(IsEvictionExempt(1999999999));
}

TEST(EvictionRankTest, InodesRankByInodesUsedWithNoRequest) {
  std::vector<EvictionCandidate> pods = {Pod("few", 10, 1000), Pod("many", 500, 1000)};
  EXPECT_EQ(Order(EvictionSignal::kNodeFsInodesFree, pods),
            (std::vector<std::string>{"many", "few"}));
  // By bytes both are within their requests: the one most below goes last.
  EXPECT_EQ(Order(EvictionSignal::kNodeFsAvailable, pods),
            (std::vector<std::string>{"many", "few"}));
}

TEST(EvictionRankTest, PidsRankByPriorityThenProcessesAndNameNoContainer) {
  auto with = [](std::string uid, int64_t processes, int32_t priority) {
    EvictionCandidate c = Pod(uid, 0, 1000, priority);
    c.processes = processes;
    return c;
  };
  std::vector<EvictionCandidate> pods = {with("few", 3, 0), with("many", 400, 0),
                                         with("important", 900, 10),
                                         with("crit", 5000, 2000001000)};
  EXPECT_EQ(Order(EvictionSignal::kPidAvailable, pods),
            (std::vector<std::string>{"many", "few", "important"}));
  auto t = *ParseEvictionThresholds("pid.available<1000", true);
  ASSERT_EQ(t.size(), 1u);
  EvictionState state(t, 0s);
  EXPECT_EQ(state.Observe({{EvictionSignal::kPidAvailable, {900, 32768}}}, 1).size(), 1u);
  EXPECT_TRUE(state.Pressure("PIDPressure", 1));
  EXPECT_FALSE(state.Pressure("DiskPressure", 1));
  EXPECT_EQ(EvictionMessage(t[0], {900, 32768}, pods[1]),
            "The node was low on resource: pids. Threshold quantity: 1000, available: 900. ");
}

TEST(EvictionMessageTest, NamesTheResourceTheThresholdTheAvailableAndTheContainersAbove) {
  auto t = (*ParseEvictionThresholds("memory.available<100Mi", true))[0];
  EvictionCandidate p = Pod("p", int64_t{300} << 20, 0);
  p.containers.push_back({"quiet", 1 << 20, int64_t{64} << 20, 0, 0});
  EXPECT_EQ(EvictionMessage(t, {int64_t{50} << 20, int64_t{8} << 30}, p),
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. "
            "Container app was using 300Mi, request is 0, has larger consumption of memory. ");
  auto d = (*ParseEvictionThresholds("nodefs.available<10%", true))[0];
  EXPECT_EQ(EvictionMessage(d, {1536, 100000}, Pod("q", 4096, 1024)),
            "The node was low on resource: ephemeral-storage. Threshold quantity: 10%, available: "
            "1536. Container app was using 4Ki, request is 1Ki, has larger consumption of "
            "ephemeral-storage. ");
  auto i = (*ParseEvictionThresholds("nodefs.inodesFree<5%", true))[0];
  EXPECT_EQ(EvictionMessage(i, {7, 1000}, Pod("r", 900, 0)),
            "The node was low on resource: inodes. Threshold quantity: 5%, available: 7. ");
}

TEST(EvictionMessageTest, FormatsBytesWithTheLargestExactBinarySuffix) {
  EXPECT_EQ(FormatBytes(0), "0");
  EXPECT_EQ(FormatBytes(1023), "1023");
  EXPECT_EQ(FormatBytes(1024), "1Ki");
  EXPECT_EQ(FormatBytes(1536), "1536");
  EXPECT_EQ(FormatBytes(int64_t{3} << 30), "3Gi");
  EXPECT_EQ(FormatBytes((int64_t{1} << 20) + 1024), "1025Ki");
}

}  // namespace
}  // namespace nodelet::pod
