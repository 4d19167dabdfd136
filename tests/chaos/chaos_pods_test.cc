// The chaos soak's manifests: every kind is a valid static pod for nodelet, an env edit changes
// the container hash while a label edit keeps it, and the kinds keep their restart policies.
#include "tests/chaos/chaos_pods.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/chaos/chaos_soak.h"

namespace nodelet::chaos {
namespace {

constexpr PodKind kAll[] = {PodKind::kLongRunning,      PodKind::kLongWithInit,
                            PodKind::kLongWithVolumes,  PodKind::kLongWithProbes,
                            PodKind::kCrashLooping,     PodKind::kCompleteNever,
                            PodKind::kCompleteOnFailure};

TEST(ChaosPodsTest, EveryKindIsAValidStaticPod) {
  for (PodKind kind : kAll) {
    ChaosPod pod{"p1", kind, 18081, 0, 0};
    auto expected = ExpectPod(RenderPodManifest(pod), "/m/p1.yaml", "chaos");
    ASSERT_TRUE(expected.ok()) << PodKindName(kind) << ": " << expected.status().ToString();
    EXPECT_EQ(expected->full_name, "p1-chaos");
    EXPECT_EQ(expected->uid.size(), 32u);
    EXPECT_FALSE(expected->container_hashes.empty());
  }
  EXPECT_EQ(
      ExpectPod(RenderPodManifest({"a", PodKind::kCompleteNever, 0, 0, 0}), "/m/a.yaml", "chaos")
          ->restart_policy,
      "Never");
  EXPECT_EQ(
      ExpectPod(RenderPodManifest({"a", PodKind::kCrashLooping, 0, 0, 0}), "/m/a.yaml", "chaos")
          ->restart_policy,
      "Always");
}

// A pod on the pod network has no hostNetwork; the others keep it. Both are valid static pods.
TEST(ChaosPodsTest, PodNetworkPodsLeaveOutHostNetwork) {
  for (PodKind kind : kAll) {
    ChaosPod pod{"p4", kind, 18081, 0, 0};
    EXPECT_THAT(RenderPodManifest(pod), ::testing::HasSubstr("hostNetwork: true"));
    pod.pod_network = true;
    std::string manifest = RenderPodManifest(pod);
    EXPECT_THAT(manifest, ::testing::Not(::testing::HasSubstr("hostNetwork")));
    auto expected = ExpectPod(manifest, "/m/p4.yaml", "chaos");
    EXPECT_TRUE(expected.ok()) << PodKindName(kind) << ": " << expected.status().ToString();
  }
}

// With a results directory, the volume pod's writer gets its preStop hook, its POD_NAME from the
// downward API and the results hostPath; the manifest stays a valid static pod.
TEST(ChaosPodsTest, VolumePodWithResultsHasAPreStopHookAndTheResultsMount) {
  ChaosPod pod{"p3", PodKind::kLongWithVolumes, 0, 0, 0, "/tmp/chaos-results"};
  const std::string manifest = RenderPodManifest(pod);
  auto expected = ExpectPod(manifest, "/m/p3.yaml", "chaos");
  ASSERT_TRUE(expected.ok()) << expected.status().ToString() << "\n" << manifest;
  EXPECT_THAT(manifest, ::testing::HasSubstr("preStop:"));
  EXPECT_THAT(manifest, ::testing::HasSubstr("fieldPath: metadata.name"));
  EXPECT_THAT(manifest, ::testing::HasSubstr("path: /tmp/chaos-results"));
  EXPECT_THAT(RenderPodManifest({"p3", PodKind::kLongWithVolumes, 0, 0, 0}),
              ::testing::Not(::testing::HasSubstr("preStop:")));
}

TEST(ChaosPodsTest, SpecEditChangesTheHashLabelEditDoesNot) {
  for (PodKind kind : kAll) {
    ChaosPod pod{"p2", kind, 18082, 0, 0};
    auto base = ExpectPod(RenderPodManifest(pod), "/m/p2.yaml", "chaos");
    pod.label_generation = 1;
    auto label = ExpectPod(RenderPodManifest(pod), "/m/p2.yaml", "chaos");
    pod.generation = 1;
    auto spec = ExpectPod(RenderPodManifest(pod), "/m/p2.yaml", "chaos");
    ASSERT_TRUE(base.ok() && label.ok() && spec.ok());
    EXPECT_EQ(base->uid, label->uid) << "an edit keeps the UID";
    EXPECT_EQ(base->uid, spec->uid);
    EXPECT_EQ(base->container_hashes, label->container_hashes) << PodKindName(kind);
    EXPECT_NE(base->container_hashes, spec->container_hashes) << PodKindName(kind);
  }
}

TEST(ChaosPodsTest, RotationIsMostlyLongRunning) {
  int long_running = 0;
  for (int i = 0; i < 50; ++i) long_running += IsLongRunning(KindForIndex(i));
  EXPECT_EQ(long_running, 35);
}

TEST(ChaosPodsTest, BadManifestIsAnError) {
  auto r =
      ExpectPod("apiVersion: v1\nkind: Pod\nmetadata: {name: Bad_Name}\n", "/m/x.yaml", "chaos");
  EXPECT_FALSE(r.ok());
}

// Only the shims containerd cleans up while it boots again count as lost by the runtime; the
// same line for a task stopped in normal operation does not (lines as containerd 1.6 writes
// them, from the CI run of seed 2958233716637673032).
TEST(ShimsLostAtBootTest, OnlyCleanupsDuringABootCount) {
  const std::string log =
      "time=\"T1\" level=info msg=\"starting containerd\" revision=\"1.6.20\"\n"
      "time=\"T2\" level=info msg=\"containerd successfully booted in 0.069837s\"\n"
      "time=\"T3\" level=warning msg=\"cleaning up after shim disconnected\" id=aaa "
      "namespace=k8s.io\n"
      "time=\"T4\" level=info msg=\"starting containerd\" revision=\"1.6.20\"\n"
      "time=\"T5\" level=warning msg=\"cleaning up after shim disconnected\" id=bbb "
      "namespace=k8s.io\n"
      "time=\"T6\" level=info msg=\"cleaning up dead shim\"\n"
      "time=\"T7\" level=warning msg=\"cleaning up after shim disconnected\" id=ccc\n"
      "time=\"T8\" level=info msg=\"containerd successfully booted in 1.029603s\"\n"
      "time=\"T9\" level=warning msg=\"cleaning up after shim disconnected\" id=ddd "
      "namespace=k8s.io\n";
  EXPECT_EQ(ShimsLostAtBoot(log), (std::set<std::string>{"bbb", "ccc"}));
  EXPECT_TRUE(ShimsLostAtBoot("").empty());
}

// RunPodSandbox calls in flight when containerd stops are counted; answered or failed ones are
// not, nor are calls still open at the end of the log (containerd never stopped under them).
TEST(SandboxCallsCutByStopTest, CountsCallsOpenAtAStop) {
  const std::string a = "Name:pa,Uid:1,Namespace:default,Attempt:0,";
  const std::string b = "Name:pb,Uid:2,Namespace:default,Attempt:0,";
  const std::string c = "Name:pc,Uid:3,Namespace:default,Attempt:1,";
  auto call = [](const std::string& meta, const std::string& tail) {
    return "time=\"T\" level=info msg=\"RunPodSandbox for &PodSandboxMetadata{" + meta + "}" +
           tail + "\n";
  };
  const std::string log = call(a, "\"") + call(b, "\"") +
                          call(a, " returns sandbox id \\\"abc\\\"\"") +
                          "time=\"T\" level=info msg=\"Stop CRI service\"\n" + call(c, "\"") +
                          call(c, " failed, error\" error=\"x\"") + call(a, "\"");
  EXPECT_EQ(SandboxCallsCutByStop(log), 1);  // b only
  EXPECT_EQ(SandboxCallsCutByStop(""), 0);
  // A retry while the first call runs fails on the reserved name: the first is still in flight.
  const std::string retried = call(b, "\"") + call(b, "\"") +
                              call(b, " failed, error\" error=\"failed to reserve sandbox name\"") +
                              "time=\"T\" level=info msg=\"Stop CRI service\"\n";
  EXPECT_EQ(SandboxCallsCutByStop(retried), 1);
}

}  // namespace
}  // namespace nodelet::chaos
