#include "lib/pod/canonical.h"

#include <gtest/gtest.h>

#include "lib/pod/defaults.h"
#include "lib/pod/manifest_parser.h"
#include "tests/unit/pod/test_manifests.h"

namespace nodelet::pod {
namespace {

Container DefaultedApp(std::string_view yaml = testing::kFullPodYaml) {
  auto r = DecodeManifest(yaml, "x.yaml");
  EXPECT_TRUE(r.errors.empty());
  Pod pod = r.pods.at(0).pod;
  ApplyPodDefaults(pod);
  return pod.spec.containers.at(0);
}

TEST(CanonicalTest, FnvReferenceValues) {
  // Published FNV-1a test vectors.
  EXPECT_EQ(Fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(Fnv1a64("foobar"), 0x85944171f73967e8ULL);
  EXPECT_EQ(Hex128(Fnv1a128("")), "6c62272e07bb014262b821756295c58d");
  EXPECT_EQ(Hex128(Fnv1a128("a")), "d228cb696f1a8caf78912b704e4a8964");
}

TEST(CanonicalTest, ContainerHashIsPinned) {
  // Pinned on purpose: podworkerd restarts every container whose hash changed, so a change of
  // this value would restart every container on the node when nodelet is upgraded. If this
  // fails, the encoding or the field list changed: revert that change instead of updating the
  // constants. The minimal pod's value was also computed by hand from the encoding that
  // docs/pods.md specifies (a few lines of Python), so the spec and the code agree.
  EXPECT_EQ(ContainerSpecHashHex(DefaultedApp()), "c9c90b5aba39e36c");
  EXPECT_EQ(ContainerSpecHashHex(DefaultedApp(testing::kMinimalPodYaml)), "e91486ee85fb20dc");
}

TEST(CanonicalTest, ContainerHashFollowsTheFieldList) {
  const Container base = DefaultedApp();
  const uint64_t h = ContainerSpecHash(base);
  EXPECT_EQ(ContainerSpecHash(base), h);  // deterministic

  auto changed = [&](auto mutate) {
    Container c = base;
    mutate(c);
    return ContainerSpecHash(c) != h;
  };
  // In the list: each change gives a new hash.
  EXPECT_TRUE(changed([](Container& c) { c.name = "app2"; }));
  EXPECT_TRUE(changed([](Container& c) { c.image = "app:v2"; }));
  EXPECT_TRUE(changed([](Container& c) { c.command.push_back("-v"); }));
  EXPECT_TRUE(changed([](Container& c) { c.args = {"--port", "8081"}; }));
  EXPECT_TRUE(changed([](Container& c) { std::swap(c.args[0], c.args[1]); }));
  EXPECT_TRUE(changed([](Container& c) { c.working_dir = "/"; }));
  EXPECT_TRUE(changed([](Container& c) { c.env[0].value = "dev"; }));
  EXPECT_TRUE(changed([](Container& c) { c.env.push_back({"X", ""}); }));
  EXPECT_TRUE(changed([](Container& c) { c.ports[0].host_port = 0; }));
  EXPECT_TRUE(
      changed([](Container& c) { c.resources.limits["memory"] = *Quantity::Parse("256Mi"); }));
  EXPECT_TRUE(changed([](Container& c) { c.volume_mounts[0].read_only = true; }));
  EXPECT_TRUE(changed([](Container& c) { c.security_context->run_as_user = 0; }));
  EXPECT_TRUE(changed([](Container& c) { c.security_context->privileged.reset(); }));
  EXPECT_TRUE(changed([](Container& c) { c.termination_message_path = "/dev/termination-log"; }));
  // Field boundaries are unambiguous: moving text between fields changes the hash.
  EXPECT_TRUE(changed([](Container& c) {
    c.command = {"/bin/app", "--port"};
    c.args = {"8080"};
  }));
  // Not in the list: probes and the pull policy apply without a restart.
  EXPECT_FALSE(changed([](Container& c) { c.liveness_probe.reset(); }));
  EXPECT_FALSE(changed([](Container& c) { c.readiness_probe->period_seconds = 99; }));
  EXPECT_FALSE(changed([](Container& c) { c.image_pull_policy = "Always"; }));
  // Quantities hash by value.
  EXPECT_FALSE(changed([](Container& c) { c.resources.limits["cpu"] = *Quantity::Parse("500m"); }));
}

TEST(CanonicalTest, ExplicitDefaultsHashLikeOmittedOnes) {
  std::string explicit_defaults = std::string(testing::kMinimalPodYaml) +
                                  "    imagePullPolicy: Always\n"
                                  "    terminationMessagePath: /dev/termination-log\n";
  EXPECT_EQ(ContainerSpecHash(DefaultedApp(explicit_defaults)),
            ContainerSpecHash(DefaultedApp(testing::kMinimalPodYaml)));
}

TEST(CanonicalTest, CanonicalPodCoversEveryField) {
  auto r = DecodeManifest(testing::kFullPodYaml, "x.yaml");
  const Pod base = r.pods.at(0).pod;
  const std::string enc = CanonicalPod(base);
  auto differs = [&](auto mutate) {
    Pod p = base;
    mutate(p);
    return CanonicalPod(p) != enc;
  };
  EXPECT_TRUE(differs([](Pod& p) { p.metadata.labels["x"] = ""; }));
  EXPECT_TRUE(differs([](Pod& p) { p.metadata.creation_timestamp = 0; }));
  EXPECT_TRUE(differs([](Pod& p) { p.spec.restart_policy = "Always"; }));
  EXPECT_TRUE(differs([](Pod& p) { p.spec.host_network = false; }));
  EXPECT_TRUE(differs([](Pod& p) { p.spec.containers[0].liveness_probe->period_seconds = 1; }));
  EXPECT_TRUE(differs([](Pod& p) { p.spec.containers[0].image_pull_policy = "Never"; }));
  EXPECT_TRUE(differs([](Pod& p) { p.spec.volumes[2].config_map->optional = false; }));
  EXPECT_TRUE(differs([](Pod& p) { p.spec.volumes[5].empty_dir = EmptyDirVolumeSource{}; }));
  EXPECT_TRUE(differs([](Pod& p) {
    p.spec.volumes[4].downward_api->items[1].resource_field_ref->divisor.reset();
  }));
  EXPECT_TRUE(differs([](Pod& p) { std::swap(p.spec.containers[0], p.spec.containers[1]); }));
  EXPECT_FALSE(differs([](Pod&) {}));
}

}  // namespace
}  // namespace nodelet::pod
