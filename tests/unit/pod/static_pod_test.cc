#include "lib/pod/static_pod.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "tests/testing/harness.h"
#include "tests/unit/pod/test_manifests.h"

namespace nodelet::pod {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

constexpr char kPath[] = "/etc/nodelet/manifests/web.yaml";

StaticPodOrigin Origin(std::string node = "node1", std::string source = kPath) {
  StaticPodOrigin o;
  o.kind = PodSourceKind::kFile;
  o.source = std::move(source);
  o.node_name = std::move(node);
  o.seen = UnixTime{1714564800, 123000000};
  return o;
}

Pod LoadOne(std::string_view content, const StaticPodOrigin& origin = Origin()) {
  auto r = LoadStaticPods(content, origin);
  EXPECT_TRUE(r.errors.empty()) << (r.errors.empty() ? "" : r.errors[0].message);
  EXPECT_EQ(r.pods.size(), 1u);
  return r.pods.empty() ? Pod{} : r.pods[0].pod;
}

TEST(StaticPodTest, NamingAnnotationsAndDefaults) {
  Pod pod = LoadOne(testing::kMinimalPodYaml, Origin("Node1.Example.com"));
  EXPECT_EQ(pod.metadata.name, "web-node1.example.com");
  EXPECT_EQ(pod.metadata.namespace_name, "default");
  EXPECT_THAT(pod.metadata.uid, MatchesRegex("[0-9a-f]{32}"));
  EXPECT_EQ(pod.spec.node_name, "node1.example.com");
  EXPECT_EQ(pod.metadata.uid,
            LoadOne(testing::kMinimalPodYaml, Origin("node1.example.com")).metadata.uid);
  EXPECT_THAT(pod.metadata.annotations.at("kubernetes.io/config.hash"),
              MatchesRegex("[0-9a-f]{32}"));
  EXPECT_NE(pod.metadata.annotations.at("kubernetes.io/config.hash"), pod.metadata.uid);
  EXPECT_EQ(pod.metadata.annotations.at("kubernetes.io/config.mirror"), pod.metadata.uid);
  EXPECT_EQ(pod.metadata.annotations.at("kubernetes.io/config.seen"), "2024-05-01T12:00:00.123Z");
  EXPECT_EQ(pod.metadata.annotations.at("kubernetes.io/config.source"), "file");
  EXPECT_EQ(pod.spec.restart_policy, "Always");
  EXPECT_EQ(pod.spec.containers[0].image_pull_policy, "Always");

  StaticPodOrigin http = Origin();
  http.kind = PodSourceKind::kHttp;
  http.source = "http://127.0.0.1:8080/pods.yaml";
  Pod from_url = LoadOne(testing::kMinimalPodYaml, http);
  EXPECT_EQ(from_url.metadata.annotations.at("kubernetes.io/config.source"), "http");
  EXPECT_NE(from_url.metadata.uid, LoadOne(testing::kMinimalPodYaml).metadata.uid);
}

TEST(StaticPodTest, UidIsStableAcrossEditsAndTracksNameNodeAndSource) {
  const std::string uid = LoadOne(testing::kMinimalPodYaml).metadata.uid;
  // Same manifest, same node, same source: same UID (also at another time).
  StaticPodOrigin later = Origin();
  later.seen = UnixTime{1900000000, 0};
  EXPECT_EQ(LoadOne(testing::kMinimalPodYaml, later).metadata.uid, uid);
  // Formatting, comments, key order and JSON vs YAML do not matter.
  constexpr char kReformatted[] =
      "# comment\nkind: Pod\napiVersion: v1\nspec:\n  containers:\n  - image: busybox\n"
      "    name: app\n    command:\n    - sleep\n    - '3600'\nmetadata: {name: web}\n";
  EXPECT_EQ(LoadOne(kReformatted).metadata.uid, uid);
  constexpr char kJson[] =
      R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"web"},"spec":{"containers":)"
      R"([{"name":"app","image":"busybox","command":["sleep","3600"]}]}})";
  EXPECT_EQ(LoadOne(kJson).metadata.uid, uid);
  // An edited manifest keeps the UID (an UPDATE) but not the config hash.
  std::string changed = testing::kMinimalPodYaml;
  changed.replace(changed.find("3600"), 4, "3601");
  EXPECT_EQ(LoadOne(changed).metadata.uid, uid);
  EXPECT_NE(LoadOne(changed).metadata.annotations.at("kubernetes.io/config.hash"),
            LoadOne(testing::kMinimalPodYaml).metadata.annotations.at("kubernetes.io/config.hash"));
  // Another name, another node or another file: another UID.
  std::string renamed = testing::kMinimalPodYaml;
  renamed.replace(renamed.find("name: web"), 9, "name: api");
  EXPECT_NE(LoadOne(renamed).metadata.uid, uid);
  EXPECT_NE(LoadOne(testing::kMinimalPodYaml, Origin("node2")).metadata.uid, uid);
  EXPECT_NE(LoadOne(testing::kMinimalPodYaml, Origin("node1", "/etc/nodelet/manifests/other.yaml"))
                .metadata.uid,
            uid);
  // The UID function itself, on the pod as written.
  auto decoded = DecodeManifest(testing::kMinimalPodYaml, kPath);
  EXPECT_EQ(StaticPodUid(decoded.pods.at(0).pod, Origin()), uid);
}

TEST(StaticPodTest, PinnedUid) {
  // Pinned: the UID must not change between nodelet versions, or every static pod would be
  // re-created on upgrade. If this fails, the canonical encoding or the hash changed: revert.
  EXPECT_EQ(LoadOne(testing::kMinimalPodYaml).metadata.uid, "506c90347194716d72ae14884648e82d");
}

TEST(StaticPodTest, ExplicitUidIsKept) {
  std::string yaml = testing::kMinimalPodYaml;
  yaml.replace(yaml.find("  name: web"), 11, "  name: web\n  uid: my-own-uid");
  Pod pod = LoadOne(yaml);
  EXPECT_EQ(pod.metadata.uid, "my-own-uid");
  EXPECT_EQ(pod.metadata.annotations.at("kubernetes.io/config.mirror"), "my-own-uid");
}

TEST(StaticPodTest, FullManifestBecomesAValidStaticPod) {
  Pod pod = LoadOne(testing::kFullPodYaml);
  EXPECT_EQ(pod.metadata.name, "web-node1");
  EXPECT_EQ(pod.metadata.namespace_name, "prod");
  EXPECT_EQ(pod.spec.node_name, "node1");  // the manifest's nodeName is replaced
  EXPECT_EQ(pod.metadata.annotations.at("note"), "hello");
}

TEST(StaticPodTest, InvalidManifestsYieldOneMessageNamingFileFieldAndReason) {
  std::string dup = std::string(testing::kMinimalPodYaml) + "  - name: app\n    image: busybox\n";
  auto r = LoadStaticPods(dup, Origin());
  EXPECT_TRUE(r.pods.empty());
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].message,
            "/etc/nodelet/manifests/web.yaml: spec.containers[1].name: Duplicate value: \"app\"");
  EXPECT_EQ(r.errors[0].field_errors.size(), 1u);

  std::string bad_name = testing::kMinimalPodYaml;
  bad_name.replace(bad_name.find("name: web"), 9, "name: Web_App");
  r = LoadStaticPods(bad_name, Origin());
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_THAT(r.errors[0].message,
              ::testing::StartsWith("/etc/nodelet/manifests/web.yaml: metadata.name: Invalid "
                                    "value: \"Web_App-node1\": a lowercase RFC 1123 subdomain"));

  // The static name is checked for length too.
  std::string long_name = testing::kMinimalPodYaml;
  long_name.replace(long_name.find("name: web"), 9, "name: " + std::string(250, 'w'));
  r = LoadStaticPods(long_name, Origin());
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_THAT(r.errors[0].message, HasSubstr("must be no more than 253 characters"));
}

TEST(StaticPodTest, ErrorsAreInDocumentOrder) {
  std::string invalid = testing::kMinimalPodYaml;
  invalid.replace(invalid.find("name: web"), 9, "name: Web");
  std::string content = invalid + "---\nkind: Pod\n---\n" + testing::kSmallPodJson;
  auto r = LoadStaticPods(content, Origin());
  ASSERT_EQ(r.pods.size(), 1u);
  ASSERT_EQ(r.errors.size(), 2u);
  EXPECT_EQ(r.errors[0].document, 1);  // found by validation, after decoding
  EXPECT_EQ(r.errors[1].document, 2);  // found by the decoder
  EXPECT_EQ(r.errors[1].message, std::string(kPath) + " (document 2): apiVersion: Required value");
}

TEST(StaticPodTest, SameNameTwiceInOneFile) {
  std::string content = std::string(testing::kMinimalPodYaml) + "---\n" + testing::kMinimalPodYaml;
  auto r = LoadStaticPods(content, Origin());
  ASSERT_EQ(r.pods.size(), 1u);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].message,
            std::string(kPath) + " (document 2): metadata.name: Duplicate value: \"web-node1\"");
}

// The bad manifests of the issue's test list, each in its own file of one directory; every
// one is rejected with a message naming its file, and the good file still yields its pod.
TEST(StaticPodTest, BadManifestFilesAreRejectedAndTheGoodOneLoads) {
  nodelet::testing::TempDir dir;
  struct File {
    std::string name;
    std::string content;
    std::string reason;  // a substring of the message
  };
  std::string dup = std::string(testing::kMinimalPodYaml) + "  - name: app\n    image: busybox\n";
  std::string bad_name = testing::kMinimalPodYaml;
  bad_name.replace(bad_name.find("name: web"), 9, "name: -web");
  std::string quantity =
      std::string(testing::kMinimalPodYaml) + "    resources: {limits: {memory: 12xyz}}\n";
  std::string deep = "apiVersion: v1\nkind: Pod\nspec:\n";
  for (int i = 1; i <= 200; ++i) deep += std::string(i, ' ') + "- \n";
  std::string nested_flow = "apiVersion: v1\nkind: Pod\nspec: " + std::string(10000, '{');
  const std::vector<File> files = {
      {"syntax.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: x\n", "YAML syntax error"},
      {"kind.yaml", "apiVersion: v1\nkind: Pdo\nmetadata: {name: x}\n",
       "kind: Unsupported value: \"Pdo\""},
      {"name.yaml", bad_name, "metadata.name: Invalid value: \"-web-node1\""},
      {"dup.yaml", dup, "spec.containers[1].name: Duplicate value: \"app\""},
      {"quantity.yaml", quantity,
       "spec.containers[0].resources.limits[memory]: Invalid value: \"12xyz\""},
      {"big.yaml", std::string(10 * 1024 * 1024, '#'), "larger than the limit of 1048576 bytes"},
      {"binary.yaml",
       std::string("\x7f"
                   "ELF\x02\x01\x01\x00",
                   8) +
           std::string(1000, '\xff'),
       "not a text file"},
      {"deep.yaml", deep, "nests deeper than 64 levels"},
      {"deepflow.yaml", nested_flow, ""},
  };
  for (const File& f : files) {
    std::ofstream(dir.Sub(f.name), std::ios::binary) << f.content;
  }
  std::ofstream(dir.Sub("good.yaml")) << testing::kMinimalPodYaml;
  for (const File& f : files) {
    auto r = ReadStaticPodFile(Origin("node1", dir.Sub(f.name)));
    EXPECT_TRUE(r.pods.empty()) << f.name;
    ASSERT_EQ(r.errors.size(), 1u) << f.name;
    EXPECT_THAT(r.errors[0].message, ::testing::StartsWith(dir.Sub(f.name) + ": ")) << f.name;
    EXPECT_THAT(r.errors[0].message, HasSubstr(f.reason)) << f.name;
  }
  auto good = ReadStaticPodFile(Origin("node1", dir.Sub("good.yaml")));
  ASSERT_TRUE(good.errors.empty());
  EXPECT_EQ(good.pods.at(0).pod.metadata.name, "web-node1");
}

// A pod from etcd never takes the uid its value names: it could otherwise take a static pod's
// uid, and with it the pod's directory and containers. Its uid comes from the node, the key and
// the key's create_revision: an edit keeps it, a key written again after a delete changes it.
TEST(StaticPodTest, AnEtcdPodsUidIsDerivedNeverTakenFromTheValue) {
  const std::string static_uid = LoadOne(testing::kMinimalPodYaml).metadata.uid;
  StaticPodOrigin etcd;
  etcd.kind = PodSourceKind::kEtcd;
  etcd.source = "/nodelet/v1/pods/node1/default/web";
  etcd.node_name = "node1";
  etcd.create_revision = 7;
  etcd.seen = UnixTime{1714564800, 0};
  std::string claiming = testing::kMinimalPodYaml;
  claiming.replace(claiming.find("  name: web\n"), 12, "  name: web\n  uid: " + static_uid + "\n");
  auto r = LoadStaticPods(claiming, etcd);
  ASSERT_TRUE(r.errors.empty()) << r.errors[0].message;
  ASSERT_EQ(r.pods.size(), 1u);
  const std::string uid = r.pods[0].pod.metadata.uid;
  EXPECT_NE(uid, static_uid) << "the value's metadata.uid is not taken";
  EXPECT_THAT(uid, MatchesRegex("[0-9a-f]{32}"));
  EXPECT_EQ(uid, EtcdPodUid(r.pods[0].pod, etcd));
  EXPECT_NE(
      std::find(r.pods[0].ignored_fields.begin(), r.pods[0].ignored_fields.end(), "metadata.uid"),
      r.pods[0].ignored_fields.end())
      << "the ignored uid is named (an IgnoredFields warning)";
  EXPECT_EQ(LoadOne(testing::kMinimalPodYaml, etcd).metadata.uid, uid)
      << "with or without a uid in the value, the same key and revision give the same pod";
  std::string edited = testing::kMinimalPodYaml;
  edited.replace(edited.find("3600"), 4, "60");
  EXPECT_EQ(LoadOne(edited, etcd).metadata.uid, uid) << "an edit is the same pod";
  StaticPodOrigin recreated = etcd;
  recreated.create_revision = 9;
  EXPECT_NE(LoadOne(testing::kMinimalPodYaml, recreated).metadata.uid, uid)
      << "a key deleted and written again is a new pod";
  StaticPodOrigin other_node = etcd;
  other_node.node_name = "node2";
  EXPECT_NE(LoadOne(testing::kMinimalPodYaml, other_node).metadata.uid, uid);
}

}  // namespace
}  // namespace nodelet::pod
