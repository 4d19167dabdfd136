// Hostile manifests through the real entry point (LoadStaticPods, as every manifest source
// uses it): path traversal in names and volume paths, enormous and deeply nested documents.
// Each is refused with an error naming the field (or the limit), memory stays bounded, no stack
// overflow, and a good pod next to the bad one still loads (docs/pods.md, "Hostile input").
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <string>
#include <vector>

#include "lib/pod/static_pod.h"
#include "tests/unit/pod/test_manifests.h"

namespace nodelet::pod {
namespace {

using ::testing::HasSubstr;

constexpr char kHostileSource[] = "/etc/nodelet/manifests/hostile.yaml";

ManifestParseResult Load(const std::string& content) {
  StaticPodOrigin origin;
  origin.source = kHostileSource;
  origin.node_name = "node1";
  return LoadStaticPods(content, origin);
}

// The peak resident set of this process so far, in MiB.
long PeakRssMiB() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024;
}

// A pod with one volume of `volume` (YAML flow) mounted by `mount` (extra mount fields).
std::string PodWith(const std::string& name, const std::string& volume,
                    const std::string& mount = "") {
  return "apiVersion: v1\nkind: Pod\nmetadata: {name: " + name +
         "}\nspec:\n  containers:\n  - name: app\n    image: busybox\n"
         "    volumeMounts: [{name: v, mountPath: /data" +
         mount +
         "}]\n"
         "  volumes: [{name: v, " +
         volume + "}]\n";
}

TEST(HostileManifestTest, PathTraversalInNamesAndVolumePathsIsRefused) {
  struct Case {
    std::string manifest;
    std::string error;  // a substring of the one error
  };
  const std::vector<Case> cases = {
      {PodWith("../../etc", "emptyDir: {}"), "metadata.name: Invalid value: \"../../etc-node1\""},
      {PodWith("a/b", "emptyDir: {}"), "metadata.name: Invalid value: \"a/b-node1\""},
      {"apiVersion: v1\nkind: Pod\nmetadata: {name: w, namespace: ../kube-system}\n"
       "spec: {containers: [{name: app, image: busybox}]}\n",
       "metadata.namespace: Invalid value: \"../kube-system\""},
      {"apiVersion: v1\nkind: Pod\nmetadata: {name: w}\n"
       "spec: {containers: [{name: ../app, image: busybox}]}\n",
       "spec.containers[0].name: Invalid value: \"../app\""},
      {"apiVersion: v1\nkind: Pod\nmetadata: {name: w}\n"
       "spec: {containers: [{name: app, image: busybox}], volumes: [{name: ../v, emptyDir: {}}]}\n",
       "spec.volumes[0].name: Invalid value: \"../v\""},
      {PodWith("w", "hostPath: {path: /var/lib/../../etc}"),
       "spec.volumes[0].hostPath.path: Invalid value: \"/var/lib/../../etc\": must not contain "
       "'..'"},
      {PodWith("w", "emptyDir: {}", ", subPath: ../../../etc"),
       "spec.containers[0].volumeMounts[0].subPath: Invalid value: \"../../../etc\""},
      {PodWith("w", "emptyDir: {}", ", subPath: /etc"),
       "spec.containers[0].volumeMounts[0].subPath: Invalid value: \"/etc\": must be a relative "
       "path"},
      {PodWith("w", "configMap: {name: c, items: [{key: k, path: ../../shadow}]}"),
       "spec.volumes[0].configMap.items[0].path: Invalid value: \"../../shadow\""},
      {PodWith("w", "configMap: {name: c, items: [{key: k, path: /etc/shadow}]}"),
       "spec.volumes[0].configMap.items[0].path: Invalid value: \"/etc/shadow\": must be a "
       "relative path"},
      {PodWith("w", "secret: {secretName: s, items: [{key: k, path: a/../../b}]}"),
       "spec.volumes[0].secret.items[0].path: Invalid value: \"a/../../b\""},
  };
  for (const Case& c : cases) {
    // The hostile pod shares its file with a good one: only the hostile one is refused.
    auto r = Load(c.manifest + "---\n" + testing::kMinimalPodYaml);
    ASSERT_EQ(r.errors.size(), 1u) << c.manifest;
    EXPECT_THAT(r.errors[0].message, HasSubstr(kHostileSource)) << c.manifest;
    EXPECT_THAT(r.errors[0].message, HasSubstr(c.error)) << c.manifest;
    ASSERT_EQ(r.pods.size(), 1u) << c.manifest;
    EXPECT_EQ(r.pods[0].pod.metadata.name, "web-node1");
  }
}

TEST(HostileManifestTest, EnormousManifestIsRefusedBeforeParsing) {
  const long before = PeakRssMiB();
  // 16 MiB of a valid-looking pod list: the size limit answers before YAML is read.
  std::string big;
  big.reserve(17u << 20);
  big = testing::kMinimalPodYaml;
  big += "    env:\n";
  while (big.size() < (16u << 20))
    big += "    - {name: E, value: \"" + std::string(1000, 'x') + "\"}\n";
  auto r = Load(big);
  EXPECT_TRUE(r.pods.empty());
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_THAT(r.errors[0].message, HasSubstr("larger than the limit of 1048576 bytes"));
  // The test's own 17 MiB string, and little more (parsing it as YAML would take hundreds).
  EXPECT_LT(PeakRssMiB() - before, 128);
}

TEST(HostileManifestTest, HundredThousandLevelsOfNestingAreRefusedWithoutStackOverflow) {
  const int kLevels = 100000;
  std::string json_objects = "{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"spec\": ";
  for (int i = 0; i < kLevels; ++i) json_objects += "{\"a\": ";
  json_objects += "1" + std::string(kLevels, '}') + "}";
  std::string flow_lists = "spec: " + std::string(kLevels, '[') + std::string(kLevels, ']') + "\n";
  std::string block_lists = "spec:\n";  // "- - - - ... x": block sequences, one per level
  for (int i = 0; i < kLevels; ++i) block_lists += "- ";
  block_lists += "x\n";
  std::string unclosed = "spec: " + std::string(kLevels, '{');
  const long before = PeakRssMiB();
  for (const std::string* doc : {&json_objects, &flow_lists, &block_lists, &unclosed}) {
    // Under the 1 MiB file limit: the nesting itself is what must be refused.
    ASSERT_LT(doc->size(), 1u << 20);
    auto r = Load(*doc + "\n---\n" + testing::kMinimalPodYaml);
    ASSERT_EQ(r.errors.size(), 1u) << doc->substr(0, 40);
    EXPECT_THAT(r.errors[0].message, HasSubstr(kHostileSource));
    EXPECT_THAT(r.errors[0].message, ::testing::AnyOf(HasSubstr("nests deeper than 64 levels"),
                                                      HasSubstr("YAML syntax error")))
        << doc->substr(0, 40);
    EXPECT_EQ(r.pods.size(), 1u) << "the good pod after the deep document was lost";
  }
  EXPECT_LT(PeakRssMiB() - before, 256);
}

}  // namespace
}  // namespace nodelet::pod
