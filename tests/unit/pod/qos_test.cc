// QoS classes and OOM score adjustments, computed from manifests as written (defaults applied),
// against the kubelet's rules (lib/pod/qos.h).
#include "lib/pod/qos.h"

#include <gtest/gtest.h>

#include <string>

#include "lib/pod/defaults.h"
#include "lib/pod/manifest_parser.h"
#include "lib/pod/validation.h"
#include "tests/unit/pod/pod_of.h"

namespace nodelet::pod {
namespace {

// One container `app` with `resources` (a flow mapping), plus `more` (other containers).
std::string OneContainer(const std::string& resources, const std::string& more = "") {
  return "  containers:\n  - name: app\n    image: busybox\n    resources: " + resources + "\n" +
         more;
}

QosClass QosOf(const std::string& spec) { return PodQos(PodOf(spec)); }

TEST(QosTest, NothingRequestedOrLimitedIsBestEffort) {
  EXPECT_EQ(QosOf(OneContainer("{}")), QosClass::kBestEffort);
  // Zero quantities and resources other than cpu and memory do not count.
  EXPECT_EQ(QosOf(OneContainer("{requests: {cpu: '0', memory: '0'}}")), QosClass::kBestEffort);
  EXPECT_EQ(QosOf(OneContainer("{limits: {ephemeral-storage: 1Gi}}")), QosClass::kBestEffort);
}

TEST(QosTest, EqualCpuAndMemoryLimitsAndRequestsAreGuaranteed) {
  EXPECT_EQ(QosOf(OneContainer("{limits: {cpu: 500m, memory: 64Mi}}")), QosClass::kGuaranteed)
      << "requests default to the limits";
  EXPECT_EQ(QosOf(OneContainer("{requests: {cpu: '0.5', memory: 64Mi}, limits: {cpu: 500m, "
                               "memory: 67108864}}")),
            QosClass::kGuaranteed)
      << "compared by value, not by text";
  EXPECT_EQ(QosOf(OneContainer("{limits: {cpu: 1, memory: 1Gi}}",
                               "  initContainers:\n  - name: init\n    image: busybox\n"
                               "    resources: {limits: {cpu: 2, memory: 2Gi}}\n")),
            QosClass::kGuaranteed);
}

TEST(QosTest, AnythingElseIsBurstable) {
  // A request only.
  EXPECT_EQ(QosOf(OneContainer("{requests: {memory: 64Mi}}")), QosClass::kBurstable);
  // A cpu limit without a memory limit.
  EXPECT_EQ(QosOf(OneContainer("{limits: {cpu: 1}}")), QosClass::kBurstable);
  // Requests below the limits.
  EXPECT_EQ(QosOf(OneContainer("{requests: {cpu: 100m, memory: 64Mi}, limits: {cpu: 1, "
                               "memory: 64Mi}}")),
            QosClass::kBurstable);
  // One container Guaranteed, another with nothing.
  EXPECT_EQ(QosOf(OneContainer("{limits: {cpu: 1, memory: 1Gi}}",
                               "  - name: side\n    image: busybox\n")),
            QosClass::kBurstable);
  // An init container with nothing makes a Guaranteed pod Burstable too.
  EXPECT_EQ(QosOf(OneContainer("{limits: {cpu: 1, memory: 1Gi}}",
                               "  initContainers:\n  - name: init\n    image: busybox\n")),
            QosClass::kBurstable);
}

TEST(QosTest, Names) {
  EXPECT_EQ(QosClassName(QosClass::kGuaranteed), "Guaranteed");
  EXPECT_EQ(QosClassName(QosClass::kBurstable), "Burstable");
  EXPECT_EQ(QosClassName(QosClass::kBestEffort), "BestEffort");
}

TEST(OomScoreAdjTest, ByQosAsTheKubeletComputesIt) {
  constexpr int64_t kCapacity = int64_t{4} << 30;  // 4 GiB
  Pod guaranteed = PodOf(OneContainer("{limits: {cpu: 1, memory: 1Gi}}"));
  EXPECT_EQ(ContainerOomScoreAdj(guaranteed, guaranteed.spec.containers[0], kCapacity), -997);
  Pod best = PodOf(OneContainer("{}"));
  EXPECT_EQ(ContainerOomScoreAdj(best, best.spec.containers[0], kCapacity), 1000);
  // Burstable: 1000 - 1000 * 1 GiB / 4 GiB.
  Pod burst = PodOf(OneContainer("{requests: {memory: 1Gi}}"));
  EXPECT_EQ(ContainerOomScoreAdj(burst, burst.spec.containers[0], kCapacity), 750);
  // No memory request: 999, just below BestEffort.
  Pod cpu_only = PodOf(OneContainer("{requests: {cpu: 1}}"));
  EXPECT_EQ(ContainerOomScoreAdj(cpu_only, cpu_only.spec.containers[0], kCapacity), 999);
  // A request of the whole node: 3, just above Guaranteed.
  Pod huge = PodOf(OneContainer("{requests: {memory: 8Gi}}"));
  EXPECT_EQ(ContainerOomScoreAdj(huge, huge.spec.containers[0], kCapacity), 3);
  // Unknown capacity: as no request.
  EXPECT_EQ(ContainerOomScoreAdj(burst, burst.spec.containers[0], 0), 999);
}

TEST(OomScoreAdjTest, ANodeCriticalPodIsKilledLast) {
  Pod critical = PodOf(OneContainer("{}") + "  priorityClassName: system-node-critical\n");
  EXPECT_EQ(critical.spec.priority_class_name, "system-node-critical");
  EXPECT_EQ(PodQos(critical), QosClass::kBestEffort);
  EXPECT_EQ(ContainerOomScoreAdj(critical, critical.spec.containers[0], int64_t{1} << 30), -997);
  Pod cluster = PodOf(OneContainer("{}") + "  priorityClassName: system-cluster-critical\n");
  EXPECT_EQ(ContainerOomScoreAdj(cluster, cluster.spec.containers[0], int64_t{1} << 30), 1000);
}

TEST(PriorityClassNameTest, MustBeADnsSubdomain) {
  auto r = DecodeManifest(
      "apiVersion: v1\nkind: Pod\nmetadata: {name: q, namespace: default}\nspec:\n"
      "  priorityClassName: Not_A_Name\n  containers:\n  - name: app\n    image: busybox\n",
      "q.yaml");
  ASSERT_TRUE(r.errors.empty());
  ASSERT_EQ(r.pods.size(), 1u);
  Pod pod = r.pods[0].pod;
  ApplyPodDefaults(pod);
  auto errors = ValidatePod(pod);
  ASSERT_FALSE(errors.empty());
  EXPECT_NE(errors[0].ToString().find("spec.priorityClassName"), std::string::npos);
}

}  // namespace
}  // namespace nodelet::pod
