// The manifest decoder on a pod's fields: every field of a full YAML pod, JSON, the fields it
// ignores (and names) and those it refuses, type errors by field path, metadata timestamps and
// scalars, and the DNS fields with their validation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "lib/pod/defaults.h"
#include "lib/pod/manifest_parser.h"
#include "lib/pod/validation.h"
#include "tests/unit/pod/manifest_parser_fixture.h"
#include "tests/unit/pod/test_manifests.h"

namespace nodelet::pod {
namespace {

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
