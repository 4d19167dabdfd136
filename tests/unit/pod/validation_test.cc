// ValidatePod on whole pods: the full manifest is valid, uids, the defaults a decoded pod gets
// (and that they validate), and edge cases that are accepted. Each rule with its message is
// validation_rules_test.cc's.
#include "lib/pod/validation.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lib/pod/defaults.h"
#include "lib/pod/manifest_parser.h"
#include "tests/unit/pod/test_manifests.h"
#include "tests/unit/pod/validation_fixture.h"

namespace nodelet::pod {
namespace {

TEST(ValidationTest, TheFullPodIsValid) {
  FieldErrors errs = ValidatePod(ValidPod());
  EXPECT_TRUE(errs.empty()) << errs.front().ToString();
}

// metadata.uid names directories under the root dir: only a UUID or a DNS-1123 label passes.
TEST(ValidationTest, UidMustBeAUuidOrALabel) {
  for (const std::string& good : std::vector<std::string>{
           "0b6d3f2a-9c1e-4f7b-8a2d-1e5c9f0a3b7d", "0B6D3F2A-9C1E-4F7B-8A2D-1E5C9F0A3B7D", "abc123",
           "0123456789abcdef0123456789abcdef"}) {
    Pod pod = ValidPod();
    pod.metadata.uid = good;
    EXPECT_EQ(FirstError(pod), "<valid>") << good;
  }
  for (const std::string& bad :
       std::vector<std::string>{"../../../x", "..", ".", "a/b", "/etc", std::string("ab\0c", 4),
                                "Upper", "-lead", std::string(64, 'a')}) {
    Pod pod = ValidPod();
    pod.metadata.uid = bad;
    FieldErrors errs = ValidatePod(pod);
    ASSERT_FALSE(errs.empty()) << bad;
    EXPECT_EQ(errs.front().ToString().rfind("metadata.uid: Invalid value", 0), 0u)
        << errs.front().ToString();
  }
}

TEST(ValidationTest, DefaultsAreApplied) {
  auto r = DecodeManifest(testing::kMinimalPodYaml, "m.yaml");
  Pod pod = r.pods.at(0).pod;
  pod.spec.volumes.push_back(Volume{.name = "v"});
  pod.spec.volumes.push_back(Volume{.name = "c", .config_map = ConfigMapVolumeSource{.name = "x"}});
  pod.spec.volumes.push_back(Volume{.name = "s", .secret = SecretVolumeSource{.secret_name = "y"}});
  pod.spec.volumes.push_back(
      Volume{.name = "d",
             .downward_api = DownwardApiVolumeSource{
                 .items = {{.path = "n",
                            .field_ref = ObjectFieldSelector{.field_path = "metadata.name"}}}}});
  Container& c = pod.spec.containers[0];
  c.ports.push_back({.container_port = 80});
  c.resources.limits["memory"] = *Quantity::Parse("1Gi");
  c.resources.limits["cpu"] = *Quantity::Parse("2");
  c.resources.requests["cpu"] = *Quantity::Parse("1");
  c.liveness_probe = Probe{.http_get = HttpGetAction{.port = IntOrString::Int(80)}};
  ApplyPodDefaults(pod);
  EXPECT_EQ(pod.metadata.namespace_name, "default");
  EXPECT_EQ(pod.spec.restart_policy, "Always");
  EXPECT_EQ(pod.spec.termination_grace_period_seconds, 30);
  EXPECT_EQ(c.image_pull_policy, "Always");  // busybox: no tag
  EXPECT_EQ(c.termination_message_path, "/dev/termination-log");
  EXPECT_EQ(c.ports[0].protocol, "TCP");
  EXPECT_EQ(c.ports[0].host_port, 0);                          // not host network
  EXPECT_EQ(c.resources.requests.at("memory").text(), "1Gi");  // from the limit
  EXPECT_EQ(c.resources.requests.at("cpu").text(), "1");       // kept
  const Probe& p = *c.liveness_probe;
  EXPECT_EQ(p.period_seconds, 10);
  EXPECT_EQ(p.timeout_seconds, 1);
  EXPECT_EQ(p.success_threshold, 1);
  EXPECT_EQ(p.failure_threshold, 3);
  EXPECT_EQ(p.initial_delay_seconds, 0);
  EXPECT_EQ(p.http_get->path, "/");
  EXPECT_EQ(p.http_get->scheme, "HTTP");
  ASSERT_TRUE(pod.spec.volumes[0].empty_dir.has_value());
  EXPECT_EQ(pod.spec.volumes[1].config_map->default_mode, 0644);
  EXPECT_EQ(pod.spec.volumes[2].secret->default_mode, 0644);
  EXPECT_EQ(pod.spec.volumes[3].downward_api->default_mode, 0644);
  EXPECT_EQ(pod.spec.volumes[3].downward_api->items[0].field_ref->api_version, "v1");
  EXPECT_TRUE(ValidatePod(pod).empty()) << ValidatePod(pod).front().ToString();

  Pod again = pod;
  ApplyPodDefaults(again);
  EXPECT_EQ(again, pod);  // idempotent

  pod.spec.host_network = true;
  ApplyPodDefaults(pod);
  EXPECT_EQ(pod.spec.containers[0].ports[0].host_port, 80);
}

TEST(ValidationTest, ImagePullPolicyDefaultFollowsTheTag) {
  EXPECT_EQ(DefaultImagePullPolicy("busybox"), "Always");
  EXPECT_EQ(DefaultImagePullPolicy("busybox:latest"), "Always");
  EXPECT_EQ(DefaultImagePullPolicy("busybox:1.36"), "IfNotPresent");
  EXPECT_EQ(DefaultImagePullPolicy("registry.local:5000/app"), "Always");
  EXPECT_EQ(DefaultImagePullPolicy("registry.local:5000/app:v2"), "IfNotPresent");
  EXPECT_EQ(DefaultImagePullPolicy("app@sha256:abcd"), "IfNotPresent");
}

TEST(ValidationTest, AcceptedEdgeCases) {
  Pod pod = ValidPod();
  pod.metadata.labels["empty"] = "";
  pod.metadata.labels["a.b-c_d/E.f"] = "x";  // invalid prefix: uppercase not allowed
  EXPECT_NE(FirstError(pod), "<valid>");
  pod.metadata.labels.erase("a.b-c_d/E.f");
  pod.metadata.labels["a.b-c.d/E_f"] = "X.y-z_1";
  pod.metadata.annotations["Example.COM/Note"] = "annotation keys are lowercased first";
  pod.spec.containers[0].resources.limits["example.com/gpu"] = Quantity::FromValue(1);
  pod.spec.containers[0].resources.limits["hugepages-2Mi"] = *Quantity::Parse("4Mi");
  pod.spec.volumes[4].downward_api->items[0].field_ref->field_path = "metadata.labels['app']";
  pod.spec.volumes[4].downward_api->items[1].resource_field_ref->resource = "limits.memory";
  pod.spec.volumes[4].downward_api->items[1].resource_field_ref->divisor = *Quantity::Parse("1Mi");
  pod.spec.termination_grace_period_seconds = 0;
  EXPECT_EQ(FirstError(pod), "<valid>");
}

}  // namespace
}  // namespace nodelet::pod
