#include "lib/pod/manifest_parser.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "lib/pod/defaults.h"
#include "lib/pod/validation.h"
#include "tests/testing/harness.h"
#include "tests/unit/pod/test_manifests.h"

namespace nodelet::pod {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kSource[] = "/etc/nodelet/manifests/web.yaml";

ManifestParseResult Decode(std::string_view content, const ParseOptions& options = {}) {
  return DecodeManifest(content, kSource, options);
}

// The single error of a one-error result.
std::string OnlyError(const ManifestParseResult& r) {
  EXPECT_TRUE(r.pods.empty());
  EXPECT_EQ(r.errors.size(), 1u);
  return r.errors.empty() ? std::string() : r.errors.front().message;
}

TEST(ManifestParserTest, DecodesEveryFieldOfAFullYamlPod) {
  auto r = Decode(testing::kFullPodYaml);
  ASSERT_TRUE(r.errors.empty()) << r.errors.front().message;
  ASSERT_EQ(r.pods.size(), 1u);
  EXPECT_EQ(r.documents, 1);
  const Pod& pod = r.pods[0].pod;
  EXPECT_EQ(pod.metadata.name, "web");
  EXPECT_EQ(pod.metadata.namespace_name, "prod");
  EXPECT_EQ(pod.metadata.labels.at("example.com/tier"), "frontend");
  EXPECT_EQ(pod.metadata.annotations.at("note"), "hello");
  EXPECT_FALSE(pod.metadata.creation_timestamp.has_value());  // null
  EXPECT_EQ(pod.metadata.deletion_grace_period_seconds, 15);
  EXPECT_EQ(pod.spec.restart_policy, "OnFailure");
  EXPECT_EQ(pod.spec.termination_grace_period_seconds, 10);
  EXPECT_EQ(pod.spec.active_deadline_seconds, 600);
  EXPECT_TRUE(pod.spec.host_network);
  EXPECT_EQ(pod.spec.node_name, "ignored-for-static");
  ASSERT_EQ(pod.spec.init_containers.size(), 1u);
  EXPECT_EQ(pod.spec.init_containers[0].command,
            (std::vector<std::string>{"sh", "-c", "echo init"}));
  ASSERT_EQ(pod.spec.containers.size(), 2u);
  const Container& app = pod.spec.containers[0];
  EXPECT_EQ(app.image, "registry.local:5000/app");
  EXPECT_EQ(app.image_pull_policy, "IfNotPresent");
  EXPECT_EQ(app.args, (std::vector<std::string>{"--port", "8080"}));
  EXPECT_EQ(app.working_dir, "/srv");
  ASSERT_EQ(app.env.size(), 2u);
  EXPECT_EQ(app.env[0].value, "production");
  EXPECT_EQ(app.env[1].name, "EMPTY");
  EXPECT_EQ(app.env[1].value, "");
  ASSERT_EQ(app.ports.size(), 2u);
  EXPECT_EQ(app.ports[0].name, "http");
  EXPECT_EQ(app.ports[0].container_port, 8080);
  EXPECT_EQ(app.ports[0].host_port, 8080);
  EXPECT_EQ(app.ports[1].protocol, "UDP");
  EXPECT_EQ(app.resources.requests.at("cpu").MilliValue(), 100);
  EXPECT_EQ(app.resources.requests.at("memory").Value(), 64 * 1024 * 1024);
  EXPECT_EQ(app.resources.limits.at("cpu").MilliValue(), 500);
  EXPECT_EQ(app.resources.limits.at("ephemeral-storage").Value(), 1000000000);
  ASSERT_EQ(app.volume_mounts.size(), 2u);
  EXPECT_TRUE(app.volume_mounts[1].read_only);
  EXPECT_EQ(app.volume_mounts[1].sub_path, "app");
  ASSERT_TRUE(app.liveness_probe && app.liveness_probe->http_get);
  EXPECT_EQ(app.liveness_probe->http_get->port, IntOrString::String("http"));
  EXPECT_EQ(app.liveness_probe->http_get->path, "/healthz");
  EXPECT_EQ(app.liveness_probe->http_get->http_headers.at(0).name, "X-Probe");
  EXPECT_EQ(app.liveness_probe->initial_delay_seconds, 5);
  ASSERT_TRUE(app.readiness_probe && app.readiness_probe->tcp_socket);
  EXPECT_EQ(app.readiness_probe->tcp_socket->port, IntOrString::Int(8080));
  EXPECT_EQ(app.readiness_probe->success_threshold, 2);
  ASSERT_TRUE(app.startup_probe && app.startup_probe->exec);
  EXPECT_EQ(app.startup_probe->failure_threshold, 30);
  ASSERT_TRUE(app.security_context);
  EXPECT_EQ(app.security_context->run_as_user, 1000);
  EXPECT_EQ(app.security_context->run_as_non_root, true);
  EXPECT_EQ(app.security_context->privileged, false);
  EXPECT_EQ(app.security_context->allow_privilege_escalation, false);
  EXPECT_EQ(app.termination_message_path, "/tmp/term");
  // Not defaulted by the decoder.
  EXPECT_EQ(pod.spec.containers[1].image_pull_policy, "");

  ASSERT_EQ(pod.spec.volumes.size(), 6u);
  EXPECT_EQ(pod.spec.volumes[0].empty_dir->medium, "Memory");
  EXPECT_EQ(pod.spec.volumes[0].empty_dir->size_limit->Value(), 64 * 1024 * 1024);
  EXPECT_EQ(pod.spec.volumes[1].host_path->type, "Directory");
  const auto& cm = *pod.spec.volumes[2].config_map;
  EXPECT_EQ(cm.name, "app-config");
  EXPECT_EQ(cm.items.at(0).mode, 0600);  // YAML 1.1 octal, as Kubernetes reads it
  EXPECT_EQ(cm.default_mode, 0644);
  EXPECT_EQ(cm.optional, true);
  EXPECT_EQ(pod.spec.volumes[3].secret->default_mode, 256);
  const auto& dapi = *pod.spec.volumes[4].downward_api;
  EXPECT_EQ(dapi.items.at(0).field_ref->field_path, "metadata.labels");
  EXPECT_EQ(dapi.items.at(1).resource_field_ref->divisor->MilliValue(), 1);
  EXPECT_FALSE(pod.spec.volumes[5].empty_dir.has_value());  // defaults add it later
}

TEST(ManifestParserTest, DecodesJson) {
  auto r = Decode(testing::kSmallPodJson);
  ASSERT_TRUE(r.errors.empty()) << r.errors.front().message;
  ASSERT_EQ(r.pods.size(), 1u);
  const Container& c = r.pods[0].pod.spec.containers.at(0);
  EXPECT_EQ(c.command, (std::vector<std::string>{"sleep", "3600"}));
  EXPECT_EQ(c.ports.at(0).container_port, 80);
  EXPECT_EQ(c.resources.limits.at("cpu").MilliValue(), 1000);  // a JSON number quantity
  EXPECT_EQ(c.liveness_probe->tcp_socket->port, IntOrString::Int(80));
}

TEST(ManifestParserTest, SeveralDocumentsOneBadOthersGoOn) {
  std::string content = std::string("---\n") + testing::kMinimalPodYaml + "---\n# empty\n---\n" +
                        "apiVersion: v1\nkind: Pod\nmetadata: {name: two}\nspec:\n  containers:\n"
                        "  - name: c\n    image: busybox\n    ports: [{containerPort: abc}]\n" +
                        "---\n" + testing::kSmallPodJson + "\n...\n";
  auto r = Decode(content);
  EXPECT_EQ(r.documents, 3);
  ASSERT_EQ(r.pods.size(), 2u);
  EXPECT_EQ(r.pods[0].pod.metadata.name, "web");
  EXPECT_EQ(r.pods[0].document, 1);
  EXPECT_EQ(r.pods[1].pod.metadata.name, "api");
  EXPECT_EQ(r.pods[1].document, 3);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].document, 2);
  EXPECT_EQ(r.errors[0].message, std::string(kSource) +
                                     " (document 2): spec.containers[0].ports[0].containerPort: "
                                     "Invalid value: \"abc\": must be an integer");
}

TEST(ManifestParserTest, SyntaxErrorInOneDocumentNamesTheFileAndLine) {
  std::string content = std::string(testing::kMinimalPodYaml) +
                        "---\napiVersion: v1\nkind: Pod\nmetadata: {name: [oops\n";
  auto r = Decode(content);
  ASSERT_EQ(r.pods.size(), 1u);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_THAT(r.errors[0].message, StartsWith(std::string(kSource) + " (document 2): line "));
  EXPECT_THAT(r.errors[0].message, HasSubstr("YAML syntax error"));
  // The line number counts from the top of the file.
  EXPECT_EQ(
      r.errors[0].message,
      std::string(kSource) +
          " (document 2): line 14, column 1: YAML syntax error: end of sequence flow not found");
}

TEST(ManifestParserTest, SyntaxErrorSingleDocument) {
  std::string msg = OnlyError(Decode("apiVersion: v1\nkind: Pod\nspec: {containers: [\n"));
  EXPECT_THAT(msg, StartsWith(std::string(kSource) + ": line "));
  EXPECT_THAT(msg, HasSubstr("YAML syntax error"));
}

TEST(ManifestParserTest, UnknownKindIsRejectedUnlessAccepted) {
  constexpr char kDeployment[] = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n";
  EXPECT_EQ(OnlyError(Decode(kDeployment)),
            std::string(kSource) +
                ": kind: Unsupported value: \"Deployment\": supported values: "
                "\"Pod\"");
  ParseOptions options;
  options.other_kinds = {"ConfigMap", "Secret"};
  std::string content = std::string(testing::kMinimalPodYaml) +
                        "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, namespace: "
                        "prod}\ndata: {a: b}\n---\n" +
                        kDeployment;
  auto r = Decode(content, options);
  ASSERT_EQ(r.pods.size(), 1u);
  ASSERT_EQ(r.others.size(), 1u);
  EXPECT_EQ(r.others[0].kind, "ConfigMap");
  EXPECT_EQ(r.others[0].api_version, "v1");
  EXPECT_EQ(r.others[0].name, "cfg");
  EXPECT_EQ(r.others[0].namespace_name, "prod");
  EXPECT_EQ(r.others[0].document, 2);
  EXPECT_EQ(r.others[0].object["data"]["a"].Scalar(), "b");
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].message, std::string(kSource) +
                                     " (document 3): kind: Unsupported value: \"Deployment\": "
                                     "supported values: \"Pod\", \"ConfigMap\", \"Secret\"");
}

TEST(ManifestParserTest, KindAndApiVersionChecks) {
  EXPECT_EQ(OnlyError(Decode("apiVersion: v1\nmetadata: {name: x}\n")),
            std::string(kSource) + ": kind: Required value");
  EXPECT_EQ(OnlyError(Decode("kind: Pod\nmetadata: {name: x}\n")),
            std::string(kSource) + ": apiVersion: Required value");
  EXPECT_EQ(OnlyError(Decode("apiVersion: v2\nkind: Pod\nspec: {}\n")),
            std::string(kSource) +
                ": apiVersion: Unsupported value: \"v2\": supported values: "
                "\"v1\"");
  EXPECT_EQ(OnlyError(Decode("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n")),
            std::string(kSource) + ": spec: Required value");
  EXPECT_EQ(OnlyError(Decode("- a\n- b\n")),
            std::string(kSource) + ": the document must be a mapping (an object), not a list");
  EXPECT_EQ(OnlyError(Decode("hello\n")),
            std::string(kSource) + ": the document must be a mapping (an object), not a scalar");
}

TEST(ManifestParserTest, EmptyContentHasNoDocuments) {
  for (const char* content : {"", "\n\n", "# only a comment\n", "---\n---\n"}) {
    auto r = Decode(content);
    EXPECT_TRUE(r.pods.empty() && r.errors.empty() && r.others.empty()) << content;
    EXPECT_EQ(r.documents, 0);
  }
}

TEST(ManifestParserTest, DirectivesBeforeTheFirstDocument) {
  auto r = Decode(std::string("%YAML 1.2\n---\n") + testing::kMinimalPodYaml);
  ASSERT_TRUE(r.errors.empty()) << r.errors[0].message;
  EXPECT_EQ(r.pods.size(), 1u);
}

TEST(ManifestParserTest, DocumentEndMarkersAndDirectivesBetweenDocuments) {
  std::string content = std::string(testing::kMinimalPodYaml) + "...\n%YAML 1.2\n---\n" +
                        testing::kSmallPodJson + "\n...\n# trailing comment\n...\n";
  auto r = Decode(content);
  ASSERT_TRUE(r.errors.empty()) << r.errors[0].message;
  ASSERT_EQ(r.pods.size(), 2u);
  EXPECT_EQ(r.pods[1].pod.metadata.name, "api");
  // A document after "..." without "---" is a document of its own.
  r = Decode(std::string(testing::kMinimalPodYaml) + "...\n" + testing::kSmallPodJson);
  ASSERT_TRUE(r.errors.empty()) << r.errors[0].message;
  EXPECT_EQ(r.pods.size(), 2u);
}

TEST(ManifestParserTest, ContentAfterAFlowDocumentIsAnErrorNotAHang) {
  // yaml-cpp 0.7's LoadAll loops forever, allocating, on these (found by fuzz-manifest).
  for (const char* content : {"{}\n,\n", "[1],\n x\n", "{\"a\": 1},\n \"b\": [{\"c\": 1\n"}) {
    std::string msg = OnlyError(Decode(content));
    EXPECT_THAT(msg, StartsWith(std::string(kSource) + ": line "));
    EXPECT_THAT(msg, HasSubstr("YAML syntax error")) << content;
  }
  EXPECT_EQ(OnlyError(Decode("{}\n,\n")),
            std::string(kSource) +
                ": line 2, column 1: YAML syntax error: unexpected content after the end of the "
                "document");
}

TEST(ManifestParserTest, DuplicateKeyAtTheRoot) {
  EXPECT_EQ(OnlyError(Decode(std::string(testing::kMinimalPodYaml) + "kind: Pod\n")),
            std::string(kSource) + ": kind: Invalid value: \"Pod\": duplicate key");
}

TEST(ManifestParserTest, UnknownFieldsAreIgnored) {
  auto r = Decode(std::string(testing::kMinimalPodYaml) +
                  "  dnsPolicy: ClusterFirst\n  tolerations: [{operator: Exists}]\n"
                  "status: {phase: Pending}\nextra: 1\n");
  ASSERT_TRUE(r.errors.empty()) << r.errors[0].message;
  EXPECT_EQ(r.pods.size(), 1u);
}

TEST(ManifestParserTest, TypeErrorsNameTheField) {
  struct Case {
    std::string spec_tail;  // appended under the container
    std::string expected;
  };
  const Case kCases[] = {
      {"    workingDir: 1234\n",
       "spec.containers[0].workingDir: Invalid value: 1234: must be a string"},
      {"    env: [{name: A, value: true}]\n",
       "spec.containers[0].env[0].value: Invalid value: true: must be a string"},
      {"    env: [{name: A, value: 8080}]\n",
       "spec.containers[0].env[0].value: Invalid value: 8080: must be a string"},
      {"    args: [--port, 8080]\n",
       "spec.containers[0].args[1]: Invalid value: 8080: must be a string"},
      {"    ports: [{containerPort: \"80\"}]\n",
       "spec.containers[0].ports[0].containerPort: Invalid value: \"80\": must be an integer"},
      {"    ports: [{containerPort: 80.5}]\n",
       "spec.containers[0].ports[0].containerPort: Invalid value: 80.5: must be an integer"},
      {"    ports: [{containerPort: 99999999999}]\n",
       "spec.containers[0].ports[0].containerPort: Invalid value: 99999999999: must fit in 32 "
       "bits"},
      {"    ports: {containerPort: 80}\n",
       "spec.containers[0].ports: Invalid value: {...}: must be a list"},
      {"    resources: {limits: {memory: 12xyz}}\n",
       "spec.containers[0].resources.limits[memory]: Invalid value: \"12xyz\": quantities must "
       "match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$' (cannot "
       "parse \"xyz\" after the number)"},
      {"    resources: {requests: {cpu: [1]}}\n",
       "spec.containers[0].resources.requests[cpu]: Invalid value: [...]: must be a quantity (a "
       "string or a number)"},
      {"    securityContext: {privileged: yes}\n",
       "spec.containers[0].securityContext.privileged: Invalid value: \"yes\": must be a boolean "
       "(true or false)"},
      {"    env: [{name: A, valueFrom: {fileKeyRef: {path: x}}}]\n",
       "spec.containers[0].env[0].valueFrom.fileKeyRef: Forbidden: not supported by nodelet"},
      {"    envFrom: [{prefix: 7, configMapRef: {name: x}}]\n",
       "spec.containers[0].envFrom[0].prefix: Invalid value: 7: must be a string"},
      {"    livenessProbe: {grpc: {port: \"9\"}}\n",
       "spec.containers[0].livenessProbe.grpc.port: Invalid value: \"9\": must be an integer"},
      {"    lifecycle: {preStop: {tcpSocket: {port: 80}}}\n",
       "spec.containers[0].lifecycle.preStop.tcpSocket: Forbidden: not supported as a lifecycle "
       "handler (the kubelet keeps the field only for backward compatibility and fails the "
       "hook)"},
      {"    lifecycle: {postStart: {sleep: {seconds: x}}}\n",
       "spec.containers[0].lifecycle.postStart.sleep.seconds: Invalid value: \"x\": must be an "
       "integer"},
      {"    volumeMounts: [{name: a, mountPath: /a, subPathExpr: $(X)}]\n",
       "spec.containers[0].volumeMounts[0].subPathExpr: Forbidden: not supported by nodelet"},
      {"    env: [7]\n", "spec.containers[0].env[0]: Invalid value: 7: must be an object"},
      {"    env: [~]\n", "spec.containers[0].env[0]: Invalid value: null: must be an object"},
      {"    name: a\n", "spec.containers[0].name: Invalid value: \"a\": duplicate key"},
  };
  for (const Case& c : kCases) {
    std::string yaml = std::string(testing::kMinimalPodYaml) + c.spec_tail;
    EXPECT_EQ(OnlyError(Decode(yaml)), std::string(kSource) + ": " + c.expected) << c.spec_tail;
  }
}

TEST(ManifestParserTest, UnsupportedVolumeSourceIsRejected) {
  std::string yaml = std::string(testing::kMinimalPodYaml) +
                     "  volumes:\n  - name: v\n    persistentVolumeClaim: {claimName: c}\n";
  EXPECT_EQ(OnlyError(Decode(yaml)),
            std::string(kSource) +
                ": spec.volumes[0].persistentVolumeClaim: Forbidden: volume type not supported by "
                "nodelet (supported: emptyDir, hostPath, configMap, secret, downwardAPI)");
}

TEST(ManifestParserTest, MetadataTimestampsAndScalars) {
  auto r = Decode(
      "apiVersion: v1\nkind: Pod\nmetadata:\n  name: t\n  creationTimestamp: "
      "2024-05-01T12:00:00Z\n  deletionTimestamp: \"2024-05-01T14:00:00+02:00\"\n  labels: "
      "{version: \"1\", empty: }\nspec: {containers: [{name: a, image: b, command: [\"true\", "
      "!!str 12], ports: [{containerPort: 0x50}]}]}\n");
  ASSERT_TRUE(r.errors.empty()) << r.errors[0].message;
  const Pod& pod = r.pods.at(0).pod;
  EXPECT_EQ(pod.metadata.creation_timestamp, 1714564800);
  EXPECT_EQ(pod.metadata.deletion_timestamp, 1714564800);
  EXPECT_EQ(pod.metadata.labels.at("version"), "1");
  EXPECT_EQ(pod.metadata.labels.at("empty"), "");
  EXPECT_EQ(pod.spec.containers[0].command, (std::vector<std::string>{"true", "12"}));
  EXPECT_EQ(pod.spec.containers[0].ports[0].container_port, 80);

  EXPECT_EQ(OnlyError(Decode("apiVersion: v1\nkind: Pod\nmetadata: {name: t, creationTimestamp: "
                             "yesterday}\nspec: {}\n")),
            std::string(kSource) +
                ": metadata.creationTimestamp: Invalid value: \"yesterday\": "
                "must be an RFC 3339 time (e.g. 2006-01-02T15:04:05Z)");
  EXPECT_EQ(OnlyError(Decode("apiVersion: v1\nkind: Pod\nmetadata: {name: t, labels: {v: 1}}\n"
                             "spec: {}\n")),
            std::string(kSource) + ": metadata.labels[v]: Invalid value: 1: must be a string");
}

// --- the bad manifests of the issue's test list, and hostile input ---

TEST(ManifestParserTest, RejectsOversizedContent) {
  std::string big(10 * 1024 * 1024, '#');
  EXPECT_EQ(OnlyError(Decode(big)),
            std::string(kSource) + ": the manifest is larger than the limit of 1048576 bytes");
  ParseOptions small;
  small.limits.max_file_bytes = 100;
  EXPECT_THAT(OnlyError(Decode(testing::kFullPodYaml, small)),
              HasSubstr("larger than the limit of 100 bytes"));
}

TEST(ManifestParserTest, RejectsA10MegabyteFileWithoutReadingItAll) {
  nodelet::testing::TempDir dir;
  std::string path = dir.path() + "/big.yaml";
  {
    std::ofstream out(path);
    out << testing::kMinimalPodYaml;
    std::string filler(1024 * 1024, ' ');
    for (int i = 0; i < 10; ++i) out << "#" << filler << "\n";
  }
  auto r = DecodeManifestFile(path);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].message, path + ": the manifest is larger than the limit of 1048576 bytes");
  EXPECT_TRUE(r.pods.empty());
}

TEST(ManifestParserTest, MissingFileNamesIt) {
  auto r = DecodeManifestFile("/nonexistent/dir/pod.yaml");
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_THAT(r.errors[0].message, StartsWith("/nonexistent/dir/pod.yaml: "));
  EXPECT_THAT(r.errors[0].message, HasSubstr("No such file"));
}

TEST(ManifestParserTest, RejectsBinaryContent) {
  std::string elf(
      "\x7f"
      "ELF\x02\x01\x01\x00\x00\x00",
      10);
  EXPECT_EQ(OnlyError(Decode(elf)),
            std::string(kSource) + ": not a text file: control byte 0x02 at offset 4");
  EXPECT_EQ(OnlyError(Decode(std::string("kind: Pod\0", 10))),
            std::string(kSource) + ": not a text file: it contains a NUL byte at offset 9");
  EXPECT_EQ(OnlyError(Decode("apiVersion: v1\x01\n")),
            std::string(kSource) + ": not a text file: control byte 0x01 at offset 14");
  EXPECT_EQ(OnlyError(Decode("name: \xff\xfe\n")),
            std::string(kSource) + ": not UTF-8 text: invalid byte 0xff at offset 6");
  EXPECT_EQ(OnlyError(Decode("name: \xc3\n")),
            std::string(kSource) + ": not UTF-8 text: invalid byte 0x0a at offset 7");
  EXPECT_EQ(OnlyError(Decode("name: \xed\xa0\x80\n")),  // a UTF-16 surrogate
            std::string(kSource) + ": not UTF-8 text: invalid sequence at offset 6");
  // A UTF-8 BOM and non-ASCII text are fine.
  auto r = Decode(std::string("\xef\xbb\xbf") + testing::kMinimalPodYaml +
                  "    env: [{name: GREETING, value: \"gr\xc3\xbc\xc3\x9f dich\"}]\n");
  ASSERT_TRUE(r.errors.empty()) << r.errors[0].message;
  EXPECT_EQ(r.pods.at(0).pod.spec.containers[0].env[0].value, "gr\xc3\xbc\xc3\x9f dich");
}

TEST(ManifestParserTest, RejectsDeepNesting) {
  // Flow style, deeper than the limit but shallow for yaml-cpp.
  std::string flow =
      "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {x: " + std::string(100, '[') +
      std::string(100, ']') + "}\n";
  EXPECT_EQ(OnlyError(Decode(flow)),
            std::string(kSource) + ": the document nests deeper than 64 levels");
  // Block style.
  std::string block = "apiVersion: v1\nkind: Pod\nspec:\n";
  for (int i = 1; i <= 80; ++i) block += std::string(i * 2, ' ') + "k:\n";
  EXPECT_EQ(OnlyError(Decode(block)),
            std::string(kSource) + ": the document nests deeper than 64 levels");
  // Deep enough to hit yaml-cpp's own recursion guard.
  std::string very_deep = "a: " + std::string(50000, '[') + "\n";
  std::string msg = OnlyError(Decode(very_deep));
  EXPECT_THAT(msg, StartsWith(std::string(kSource) + ": "));
  ParseOptions tight;
  tight.limits.max_depth = 3;
  EXPECT_THAT(OnlyError(Decode(testing::kMinimalPodYaml, tight)), HasSubstr("deeper than 3"));
}

TEST(ManifestParserTest, AliasesCannotMultiplyWork) {
  // "Billion laughs": each level refers to the previous one ten times.
  std::string yaml = "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  a0: &a0 [x, x, x]\n";
  for (int i = 1; i <= 9; ++i) {
    yaml += "  a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int j = 0; j < 10; ++j) yaml += (j ? ", *a" : "*a") + std::to_string(i - 1);
    yaml += "]\n";
  }
  EXPECT_EQ(OnlyError(Decode(yaml)),
            std::string(kSource) +
                ": the document has more than 200000 nodes (aliases count each "
                "time they are used)");
  // A self-referencing alias is either refused by yaml-cpp or cut by the depth limit.
  auto r = Decode("apiVersion: v1\nkind: Pod\nspec: &s {x: *s}\n");
  EXPECT_TRUE(r.pods.empty());
  EXPECT_EQ(r.errors.size(), 1u);
}

TEST(ManifestParserTest, DocumentCountLimit) {
  ParseOptions options;
  options.limits.max_documents = 2;
  std::string content;
  for (int i = 0; i < 3; ++i) content += std::string("---\n") + testing::kMinimalPodYaml;
  EXPECT_EQ(OnlyError(Decode(content, options)),
            std::string(kSource) + ": the manifest holds more than 2 documents");
}

TEST(ManifestParserTest, MessageFormat) {
  EXPECT_EQ(ManifestMessage("f.yaml", 2, true, "x: Required value"),
            "f.yaml (document 2): x: Required value");
  EXPECT_EQ(ManifestMessage("f.yaml", 2, false, "x: Required value"), "f.yaml: x: Required value");
  EXPECT_EQ(ManifestMessage("f.yaml", 0, true, "too big"), "f.yaml: too big");
}

}  // namespace
}  // namespace nodelet::pod

namespace nodelet::pod {
namespace {

// Fields the decoder does not take are named, by path, for the IgnoredFields warning; the pod's
// status is dropped without a word (as the API server drops it).
TEST(ManifestParserTest, IgnoredFieldsAreListedByPath) {
  auto r = Decode(
      "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  generateName: w-\n"
      "spec:\n  dnsPolicy: ClusterFirst\n  tolerations: []\n  hostPID: false\n"
      "  hostUsers: true\n  securityContext: {}\n"
      "  containers:\n  - name: app\n    image: busybox\n    resizePolicy: []\n"
      "    resources: {limits: {cpu: 1}, future: x}\n"
      "    livenessProbe: {exec: {command: [\"true\"]}, surprise: 1}\n"
      "status:\n  phase: Running\nextra: 1\n");
  ASSERT_TRUE(r.errors.empty()) << r.errors.front().message;
  ASSERT_EQ(r.pods.size(), 1u);
  EXPECT_THAT(r.pods[0].ignored_fields,
              ::testing::UnorderedElementsAre(
                  "metadata.generateName", "spec.tolerations", "spec.containers[0].resizePolicy",
                  "spec.containers[0].resources.future",
                  "spec.containers[0].livenessProbe.surprise", "extra"));
}

// v1 fields that would change what runs are refused when set to anything but their zero value.
TEST(ManifestParserTest, FieldsThatWouldChangeWhatRunsAreRefused) {
  const std::pair<std::string, std::string> kCases[] = {
      {"  securityContext: {supplementalGroupsPolicy: Strict}\n",
       "spec.securityContext.supplementalGroupsPolicy: Forbidden: not supported by nodelet "
       "(only Merge)"},
      {"  securityContext: {seLinuxOptions: {level: \"s0:c1\"}}\n",
       "spec.securityContext.seLinuxOptions: Forbidden: not supported by nodelet (the node has "
       "no SELinux)"},
      {"  ephemeralContainers: [{name: debug, image: busybox}]\n",
       "spec.ephemeralContainers: Forbidden: not supported by nodelet"},
      {"  hostUsers: false\n",
       "spec.hostUsers: Forbidden: false is not supported by nodelet (no user namespaces)"},
  };
  for (const auto& [spec_line, expected] : kCases) {
    std::string yaml = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n" + spec_line +
                       "  containers:\n  - name: app\n    image: busybox\n";
    EXPECT_EQ(OnlyError(Decode(yaml)), std::string(kSource) + ": " + expected) << spec_line;
  }
  for (const char* container_line :
       {"    securityContext: {windowsOptions: {runAsUserName: x}}\n",
        "    volumeMounts: [{name: v, mountPath: /v, mountPropagation: Bidirectional}]\n"}) {
    std::string yaml =
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n"
        "  containers:\n  - name: app\n    image: busybox\n" +
        std::string(container_line);
    EXPECT_THAT(OnlyError(Decode(yaml)),
                ::testing::HasSubstr("Forbidden: not supported by nodelet"))
        << container_line;
  }
}

// hostname, subdomain, setHostnameAsFQDN, hostAliases, dnsPolicy and dnsConfig are read, and
// refused with the API server's reasons when invalid (each with its field path).
TEST(ManifestParserTest, DnsFieldsAreReadAndValidated) {
  auto ok = Decode(
      "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n"
      "  hostname: h\n  subdomain: s\n  setHostnameAsFQDN: true\n"
      "  hostAliases: [{ip: 10.0.0.1, hostnames: [a.example, b]}]\n"
      "  dnsPolicy: None\n"
      "  dnsConfig: {nameservers: [1.1.1.1, \"2001:db8::1\"], searches: [example.com.],"
      " options: [{name: ndots, value: \"1\"}, {name: edns0}]}\n"
      "  containers:\n  - name: app\n    image: busybox\n"
      "    ports: [{containerPort: 80, hostPort: 8080, hostIP: 127.0.0.1}]\n");
  ASSERT_TRUE(ok.errors.empty()) << ok.errors.front().message;
  const PodSpec& s = ok.pods.at(0).pod.spec;
  EXPECT_EQ(s.hostname, "h");
  EXPECT_EQ(s.subdomain, "s");
  EXPECT_EQ(s.set_hostname_as_fqdn, true);
  ASSERT_EQ(s.host_aliases.size(), 1u);
  EXPECT_EQ(s.host_aliases[0].hostnames, (std::vector<std::string>{"a.example", "b"}));
  EXPECT_EQ(s.dns_policy, "None");
  ASSERT_TRUE(s.dns_config);
  EXPECT_EQ(s.dns_config->options.at(0).value, "1");
  EXPECT_EQ(s.dns_config->options.at(1).value, std::nullopt);
  EXPECT_EQ(s.containers.at(0).ports.at(0).host_ip, "127.0.0.1");
  EXPECT_TRUE(ok.pods.at(0).ignored_fields.empty());

  const std::pair<std::string, std::string> kCases[] = {
      {"  hostname: Bad_Name\n", "spec.hostname: Invalid value: \"Bad_Name\""},
      {"  subdomain: a.b\n", "spec.subdomain: Invalid value: \"a.b\""},
      {"  hostAliases: [{ip: 10.0.0.300, hostnames: [a]}]\n",
       "spec.hostAliases[0].ip: Invalid value: \"10.0.0.300\": must be a valid IP address"},
      {"  hostAliases: [{ip: 10.0.0.3, hostnames: [ok, -bad]}]\n",
       "spec.hostAliases[0].hostnames[1]: Invalid value: \"-bad\""},
      {"  dnsPolicy: Cluster\n", "spec.dnsPolicy: Unsupported value: \"Cluster\""},
      {"  dnsPolicy: None\n",
       "spec.dnsConfig: Required value: must provide `dnsConfig` when `dnsPolicy` is None"},
      {"  dnsPolicy: None\n  dnsConfig: {searches: [a.com]}\n",
       "spec.dnsConfig.nameservers: Required value: must provide at least one DNS nameserver "
       "when `dnsPolicy` is None"},
      {"  dnsConfig: {nameservers: [1.1.1.1, 1.1.1.2, 1.1.1.3, 1.1.1.4]}\n",
       "spec.dnsConfig.nameservers: Invalid value: [1.1.1.1 1.1.1.2 1.1.1.3 1.1.1.4]: must not "
       "have more than 3 nameservers"},
      {"  dnsConfig: {nameservers: [dns.local]}\n",
       "spec.dnsConfig.nameservers[0]: Invalid value: \"dns.local\": must be a valid IP"},
      {"  dnsConfig: {searches: [Bad..Name]}\n",
       "spec.dnsConfig.searches[0]: Invalid value: \"Bad..Name\""},
      {"  dnsConfig: {options: [{value: \"1\"}]}\n",
       "spec.dnsConfig.options[0]: Required value: must not be empty"},
  };
  // The decoder reads them; ValidatePod (on the defaulted pod) refuses them.
  auto validate = [](const std::string& spec_lines) {
    auto r = Decode("apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n" + spec_lines +
                    "  containers:\n  - name: app\n    image: busybox\n");
    EXPECT_TRUE(r.errors.empty()) << spec_lines;
    if (r.pods.empty()) return std::string("<no pod>");
    Pod pod = r.pods[0].pod;
    ApplyPodDefaults(pod);
    FieldErrors errs = ValidatePod(pod);
    EXPECT_EQ(errs.size(), 1u) << spec_lines;
    return errs.empty() ? std::string("<valid>") : errs.front().ToString();
  };
  for (const auto& [spec_line, expected] : kCases) {
    EXPECT_THAT(validate(spec_line), ::testing::StartsWith(expected)) << spec_line;
  }
  EXPECT_THAT(OnlyError(Decode("apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n"
                               "  setHostnameAsFQDN: yes-please\n"
                               "  containers:\n  - name: app\n    image: busybox\n")),
              ::testing::HasSubstr("spec.setHostnameAsFQDN: Invalid value"));
  std::string searches;
  for (int i = 0; i < 33; ++i) searches += (i ? ", " : "") + std::string("s") + std::to_string(i);
  EXPECT_THAT(validate("  dnsConfig: {searches: [" + searches + "]}\n"),
              ::testing::HasSubstr("must not have more than 32 search paths"));
  std::string long_names;
  for (int i = 0; i < 9; ++i) {
    const std::string label(60, static_cast<char>('a' + i));
    long_names += (i ? ", " : "") + label + "." + label + "." + label + "." + label;
  }
  EXPECT_THAT(validate("  dnsConfig: {searches: [" + long_names + "]}\n"),
              ::testing::HasSubstr("must not have more than 2048 characters (including spaces)"));
}

}  // namespace
}  // namespace nodelet::pod
