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
