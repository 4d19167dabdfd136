// The chaos soak's manifests: every kind is a valid static pod for nodelet, an env edit changes
// the container hash while a label edit keeps it, and the kinds keep their restart policies.
#include "tests/chaos/chaos_pods.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace nodelet::chaos
