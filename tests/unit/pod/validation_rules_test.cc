// ValidatePod's rules, each broken on a valid pod with the message it gives (the API server's
// wording), every problem of a pod reported in field order, and how a FieldError renders.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "lib/pod/validation.h"
#include "tests/unit/pod/validation_fixture.h"

namespace nodelet::pod {
namespace {

struct Rule {
  const char* what;
  std::function<void(Pod&)> mutate;
  std::string expected;  // the first error
};

TEST(ValidationTest, EveryRuleWithItsMessage) {
  const std::string kLabelMsg =
      "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
      "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
      "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
  const std::string kSubdomainMsg =
      "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
      "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
      "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
  auto app = [](Pod& p) -> Container& { return p.spec.containers[0]; };
  const std::vector<Rule> kRules = {
      {"missing name", [](Pod& p) { p.metadata.name.clear(); },
       "metadata.name: Required value: name or generateName is required"},
      {"invalid name", [](Pod& p) { p.metadata.name = "Web_App"; },
       "metadata.name: Invalid value: \"Web_App\": " + kSubdomainMsg},
      {"name too long", [](Pod& p) { p.metadata.name = std::string(254, 'a'); },
       "metadata.name: Invalid value: \"" + std::string(254, 'a') +
           "\": must be no more than 253 characters"},
      {"invalid namespace", [](Pod& p) { p.metadata.namespace_name = "a.b"; },
       "metadata.namespace: Invalid value: \"a.b\": " + kLabelMsg},
      {"label key", [](Pod& p) { p.metadata.labels["bad key"] = "v"; },
       "metadata.labels: Invalid value: \"bad key\": name part must consist of alphanumeric "
       "characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. "
       "'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
       "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"},
      {"label key prefix", [](Pod& p) { p.metadata.labels["Example.com/x"] = "v"; },
       "metadata.labels: Invalid value: \"Example.com/x\": prefix part " + kSubdomainMsg},
      {"label value", [](Pod& p) { p.metadata.labels["app"] = "-web"; },
       "metadata.labels: Invalid value: \"-web\": a valid label must be an empty string or "
       "consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
       "alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for "
       "validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"},
      {"label value too long", [](Pod& p) { p.metadata.labels["app"] = std::string(64, 'a'); },
       "metadata.labels: Invalid value: \"" + std::string(64, 'a') +
           "\": must be no more than 63 characters"},
      {"annotation key", [](Pod& p) { p.metadata.annotations["a/b/c"] = "v"; },
       "metadata.annotations: Invalid value: \"a/b/c\": a qualified name must consist of "
       "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
       "character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
       "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and "
       "'/' (e.g. 'example.com/MyName')"},
      {"annotations too big",
       [](Pod& p) { p.metadata.annotations["big"] = std::string(300000, 'x'); },
       "metadata.annotations: Too long: must have at most 262144 bytes"},
      {"deletion grace", [](Pod& p) { p.metadata.deletion_grace_period_seconds = -1; },
       "metadata.deletionGracePeriodSeconds: Invalid value: -1: must be greater than or equal to "
       "0"},
      {"no containers", [](Pod& p) { p.spec.containers.clear(); },
       "spec.containers: Required value"},
      {"container name required", [&](Pod& p) { app(p).name.clear(); },
       "spec.containers[0].name: Required value"},
      {"container name invalid", [&](Pod& p) { app(p).name = "App"; },
       "spec.containers[0].name: Invalid value: \"App\": " + kLabelMsg},
      {"duplicate container", [](Pod& p) { p.spec.containers[1].name = "app"; },
       "spec.containers[1].name: Duplicate value: \"app\""},
      {"duplicate init container", [](Pod& p) { p.spec.init_containers[0].name = "sidecar"; },
       "spec.initContainers[0].name: Duplicate value: \"sidecar\""},
      {"image required", [&](Pod& p) { app(p).image.clear(); },
       "spec.containers[0].image: Required value"},
      {"init image required", [](Pod& p) { p.spec.init_containers[0].image.clear(); },
       "spec.initContainers[0].image: Required value"},
      {"image whitespace", [&](Pod& p) { app(p).image = "busybox "; },
       "spec.containers[0].image: Invalid value: \"busybox \": must not have leading or trailing "
       "whitespace"},
      {"pull policy", [&](Pod& p) { app(p).image_pull_policy = "Sometimes"; },
       "spec.containers[0].imagePullPolicy: Unsupported value: \"Sometimes\": supported values: "
       "\"Always\", \"IfNotPresent\", \"Never\""},
      {"env name", [&](Pod& p) { app(p).env[0].name = "1ABC"; },
       "spec.containers[0].env[0].name: Invalid value: \"1ABC\": a valid environment variable "
       "name must consist of alphabetic characters, digits, '_', '-', or '.', and must not start "
       "with a digit (e.g. 'my.env-name',  or 'MY_ENV.NAME',  or 'MyEnvName1', regex used for "
       "validation is '[-._a-zA-Z][-._a-zA-Z0-9]*')"},
      {"env name required", [&](Pod& p) { app(p).env[0].name.clear(); },
       "spec.containers[0].env[0].name: Required value"},
      {"container port zero", [&](Pod& p) { app(p).ports[1].container_port = 0; },
       "spec.containers[0].ports[1].containerPort: Invalid value: 0: must be between 1 and "
       "65535, inclusive"},
      {"container port too big",
       [&](Pod& p) {
         p.spec.host_network = false;
         app(p).ports[1].container_port = 70000;
       },
       "spec.containers[0].ports[1].containerPort: Invalid value: 70000: must be between 1 and "
       "65535, inclusive"},
      {"host port range",
       [&](Pod& p) {
         p.spec.host_network = false;
         app(p).ports[0].host_port = -1;
       },
       "spec.containers[0].ports[0].hostPort: Invalid value: -1: must be between 1 and 65535, "
       "inclusive"},
      {"host network host port", [&](Pod& p) { app(p).ports[0].host_port = 81; },
       "spec.containers[0].ports[0].hostPort: Invalid value: 81: must match containerPort when "
       "hostNetwork is true"},
      {"host port conflict",
       [](Pod& p) {
         p.spec.containers[1].ports.push_back(
             {.container_port = 8080, .protocol = "TCP", .host_port = 8080});
       },
       "spec.containers[1].ports[0].hostPort: Duplicate value: \"TCP/8080\""},
      {"port name", [&](Pod& p) { app(p).ports[0].name = "HTTP"; },
       "spec.containers[0].ports[0].name: Invalid value: \"HTTP\": must contain only "
       "alpha-numeric characters (a-z, 0-9), and hyphens (-)"},
      {"port name letters", [&](Pod& p) { app(p).ports[0].name = "8080"; },
       "spec.containers[0].ports[0].name: Invalid value: \"8080\": must contain at least one "
       "letter (a-z)"},
      {"duplicate port name", [&](Pod& p) { app(p).ports[1].name = "http"; },
       "spec.containers[0].ports[1].name: Duplicate value: \"http\""},
      {"protocol", [&](Pod& p) { app(p).ports[1].protocol = "ICMP"; },
       "spec.containers[0].ports[1].protocol: Unsupported value: \"ICMP\": supported values: "
       "\"SCTP\", \"TCP\", \"UDP\""},
      {"resource name", [&](Pod& p) { app(p).resources.limits["gpu"] = Quantity::FromValue(1); },
       "spec.containers[0].resources.limits[gpu]: Invalid value: \"gpu\": must be a standard "
       "resource type or fully qualified"},
      {"negative quantity",
       [&](Pod& p) { app(p).resources.limits["cpu"] = *Quantity::Parse("-1"); },
       "spec.containers[0].resources.limits[cpu]: Invalid value: \"-1\": must be greater than or "
       "equal to 0"},
      {"request above limit",
       [&](Pod& p) { app(p).resources.requests["cpu"] = *Quantity::Parse("2"); },
       "spec.containers[0].resources.requests[cpu]: Invalid value: \"2\": must be less than or "
       "equal to cpu limit of 0.5"},
      {"mount name required", [&](Pod& p) { app(p).volume_mounts[0].name.clear(); },
       "spec.containers[0].volumeMounts[0].name: Required value"},
      {"mount of undeclared volume", [&](Pod& p) { app(p).volume_mounts[0].name = "nothere"; },
       "spec.containers[0].volumeMounts[0].name: Not found: \"nothere\""},
      {"mount path required", [&](Pod& p) { app(p).volume_mounts[0].mount_path.clear(); },
       "spec.containers[0].volumeMounts[0].mountPath: Required value"},
      {"mount path relative", [&](Pod& p) { app(p).volume_mounts[0].mount_path = "data"; },
       "spec.containers[0].volumeMounts[0].mountPath: Invalid value: \"data\": must be an "
       "absolute path"},
      {"mount path unique", [&](Pod& p) { app(p).volume_mounts[1].mount_path = "/data"; },
       "spec.containers[0].volumeMounts[1].mountPath: Invalid value: \"/data\": must be unique"},
      {"sub path absolute", [&](Pod& p) { app(p).volume_mounts[1].sub_path = "/etc"; },
       "spec.containers[0].volumeMounts[1].subPath: Invalid value: \"/etc\": must be a relative "
       "path"},
      {"sub path dotdot", [&](Pod& p) { app(p).volume_mounts[1].sub_path = "a/../../b"; },
       "spec.containers[0].volumeMounts[1].subPath: Invalid value: \"a/../../b\": must not "
       "contain '..'"},
      {"probe without handler", [&](Pod& p) { app(p).liveness_probe->http_get.reset(); },
       "spec.containers[0].livenessProbe: Required value: must specify a handler type"},
      {"probe with two handlers",
       [&](Pod& p) {
         app(p).liveness_probe->tcp_socket = TcpSocketAction{.port = IntOrString::Int(1)};
       },
       "spec.containers[0].livenessProbe.tcpSocket: Forbidden: may not specify more than 1 "
       "handler type"},
      {"probe negative", [&](Pod& p) { app(p).readiness_probe->initial_delay_seconds = -5; },
       "spec.containers[0].readinessProbe.initialDelaySeconds: Invalid value: -5: must be "
       "greater than or equal to 0"},
      {"liveness success threshold", [&](Pod& p) { app(p).liveness_probe->success_threshold = 2; },
       "spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1"},
      {"startup success threshold", [&](Pod& p) { app(p).startup_probe->success_threshold = 3; },
       "spec.containers[0].startupProbe.successThreshold: Invalid value: 3: must be 1"},
      {"probe port number",
       [&](Pod& p) { app(p).readiness_probe->tcp_socket->port = IntOrString::Int(0); },
       "spec.containers[0].readinessProbe.tcpSocket.port: Invalid value: 0: must be between 1 "
       "and 65535, inclusive"},
      {"probe port name",
       [&](Pod& p) { app(p).liveness_probe->http_get->port = IntOrString::String("-web"); },
       "spec.containers[0].livenessProbe.httpGet.port: Invalid value: \"-web\": must not begin "
       "or end with a hyphen"},
      {"probe scheme", [&](Pod& p) { app(p).liveness_probe->http_get->scheme = "FTP"; },
       "spec.containers[0].livenessProbe.httpGet.scheme: Unsupported value: \"FTP\": supported "
       "values: \"HTTP\", \"HTTPS\""},
      {"probe header",
       [&](Pod& p) { app(p).liveness_probe->http_get->http_headers[0].name = "X Y"; },
       "spec.containers[0].livenessProbe.httpGet.httpHeaders[0].name: Invalid value: \"X Y\": a "
       "valid HTTP header must consist of alphanumeric characters or '-' (e.g. 'X-Header-Name', "
       "regex used for validation is '[-A-Za-z0-9]+')"},
      {"exec command", [&](Pod& p) { app(p).startup_probe->exec->command.clear(); },
       "spec.containers[0].startupProbe.exec.command: Required value"},
      {"init container probe",
       [](Pod& p) {
         p.spec.init_containers[0].readiness_probe = p.spec.containers[0].readiness_probe;
       },
       "spec.initContainers[0].readinessProbe: Forbidden: may not be set for init containers"},
      {"run as user", [&](Pod& p) { app(p).security_context->run_as_user = -1; },
       "spec.containers[0].securityContext.runAsUser: Invalid value: -1: must be between 0 and "
       "2147483647, inclusive"},
      {"run as group", [&](Pod& p) { app(p).security_context->run_as_group = 1LL << 32; },
       "spec.containers[0].securityContext.runAsGroup: Invalid value: 4294967296: must be "
       "between 0 and 2147483647, inclusive"},
      {"privileged without escalation", [&](Pod& p) { app(p).security_context->privileged = true; },
       "spec.containers[0].securityContext.allowPrivilegeEscalation: Invalid value: false: "
       "cannot set allowPrivilegeEscalation to false and privileged to true"},
      {"restart policy", [](Pod& p) { p.spec.restart_policy = "Sometimes"; },
       "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", "
       "\"Never\", \"OnFailure\""},
      {"grace period", [](Pod& p) { p.spec.termination_grace_period_seconds = -1; },
       "spec.terminationGracePeriodSeconds: Invalid value: -1: must be greater than or equal to "
       "0"},
      {"active deadline", [](Pod& p) { p.spec.active_deadline_seconds = 0; },
       "spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, "
       "inclusive"},
      {"node name", [](Pod& p) { p.spec.node_name = "Node_1"; },
       "spec.nodeName: Invalid value: \"Node_1\": " + kSubdomainMsg},
      {"volume name required", [](Pod& p) { p.spec.volumes[5].name.clear(); },
       "spec.volumes[5].name: Required value"},
      {"volume name invalid", [](Pod& p) { p.spec.volumes[5].name = "Scratch"; },
       "spec.volumes[5].name: Invalid value: \"Scratch\": " + kLabelMsg},
      {"duplicate volume", [](Pod& p) { p.spec.volumes[5].name = "data"; },
       "spec.volumes[5].name: Duplicate value: \"data\""},
      {"two volume sources",
       [](Pod& p) { p.spec.volumes[1].secret = SecretVolumeSource{.secret_name = "s"}; },
       "spec.volumes[1].secret: Forbidden: may not specify more than 1 volume type"},
      {"no volume source", [](Pod& p) { p.spec.volumes[5].empty_dir.reset(); },
       "spec.volumes[5]: Required value: must specify a volume type"},
      {"empty dir medium", [](Pod& p) { p.spec.volumes[0].empty_dir->medium = "Disk"; },
       "spec.volumes[0].emptyDir.medium: Unsupported value: \"Disk\": supported values: \"\", "
       "\"HugePages\", \"Memory\""},
      {"empty dir size",
       [](Pod& p) { p.spec.volumes[0].empty_dir->size_limit = *Quantity::Parse("-1Mi"); },
       "spec.volumes[0].emptyDir.sizeLimit: Invalid value: \"-1Mi\": must be greater than or "
       "equal to 0"},
      {"host path required", [](Pod& p) { p.spec.volumes[1].host_path->path.clear(); },
       "spec.volumes[1].hostPath.path: Required value"},
      {"host path dotdot", [](Pod& p) { p.spec.volumes[1].host_path->path = "/var/../etc"; },
       "spec.volumes[1].hostPath.path: Invalid value: \"/var/../etc\": must not contain '..'"},
      {"host path type", [](Pod& p) { p.spec.volumes[1].host_path->type = "Dir"; },
       "spec.volumes[1].hostPath.type: Unsupported value: \"Dir\": supported values: \"\", "
       "\"BlockDevice\", \"CharDevice\", \"Directory\", \"DirectoryOrCreate\", \"File\", "
       "\"FileOrCreate\", \"Socket\""},
      {"config map name", [](Pod& p) { p.spec.volumes[2].config_map->name.clear(); },
       "spec.volumes[2].configMap.name: Required value"},
      {"config map item key", [](Pod& p) { p.spec.volumes[2].config_map->items[0].key.clear(); },
       "spec.volumes[2].configMap.items[0].key: Required value"},
      {"config map item path", [](Pod& p) { p.spec.volumes[2].config_map->items[0].path = "../x"; },
       "spec.volumes[2].configMap.items[0].path: Invalid value: \"../x\": must not contain '..'"},
      {"config map item mode", [](Pod& p) { p.spec.volumes[2].config_map->items[0].mode = 01000; },
       "spec.volumes[2].configMap.items[0].mode: Invalid value: 512: must be a number between 0 "
       "and 0777 (octal), both inclusive"},
      {"config map default mode", [](Pod& p) { p.spec.volumes[2].config_map->default_mode = -1; },
       "spec.volumes[2].configMap.defaultMode: Invalid value: -1: must be a number between 0 and "
       "0777 (octal), both inclusive"},
      {"secret name", [](Pod& p) { p.spec.volumes[3].secret->secret_name.clear(); },
       "spec.volumes[3].secret.secretName: Required value"},
      {"downward path", [](Pod& p) { p.spec.volumes[4].downward_api->items[0].path = "/abs"; },
       "spec.volumes[4].downwardAPI.items[0].path: Invalid value: \"/abs\": must be a relative "
       "path"},
      {"downward field path",
       [](Pod& p) {
         p.spec.volumes[4].downward_api->items[0].field_ref->field_path = "spec.nodeName";
       },
       "spec.volumes[4].downwardAPI.items[0].fieldRef.fieldPath: Unsupported value: "
       "\"spec.nodeName\": supported values: \"metadata.annotations\", \"metadata.labels\", "
       "\"metadata.name\", \"metadata.namespace\", \"metadata.uid\""},
      {"downward both refs",
       [](Pod& p) {
         auto& items = p.spec.volumes[4].downward_api->items;
         items[0].resource_field_ref = items[1].resource_field_ref;
       },
       "spec.volumes[4].downwardAPI.items[0]: Invalid value: \"resource\": fieldRef and "
       "resourceFieldRef can not be specified simultaneously"},
      {"downward no ref",
       [](Pod& p) { p.spec.volumes[4].downward_api->items[0].field_ref.reset(); },
       "spec.volumes[4].downwardAPI.items[0]: Required value: one of fieldRef and "
       "resourceFieldRef is required"},
      {"downward resource",
       [](Pod& p) {
         p.spec.volumes[4].downward_api->items[1].resource_field_ref->resource = "limits.gpu";
       },
       "spec.volumes[4].downwardAPI.items[1].resourceFieldRef.resource: Unsupported value: "
       "\"limits.gpu\": supported values: \"limits.cpu\", \"limits.ephemeral-storage\", "
       "\"limits.memory\", \"requests.cpu\", \"requests.ephemeral-storage\", "
       "\"requests.memory\""},
      {"downward divisor",
       [](Pod& p) {
         p.spec.volumes[4].downward_api->items[1].resource_field_ref->divisor =
             *Quantity::Parse("2");
       },
       "spec.volumes[4].downwardAPI.items[1].resourceFieldRef.divisor: Invalid value: \"2\": "
       "only divisor's values 1m and 1 are supported with the cpu resource"},
      {"downward container",
       [](Pod& p) {
         p.spec.volumes[4].downward_api->items[1].resource_field_ref->container_name.clear();
       },
       "spec.volumes[4].downwardAPI.items[1].resourceFieldRef.containerName: Required value"},
      {"env value and valueFrom",
       [&](Pod& p) {
         app(p).env = {{"A", "x", EnvVarSource{ObjectFieldSelector{"v1", "metadata.name"}}}};
       },
       "spec.containers[0].env[0].valueFrom: Invalid value: \"\": may not be specified when "
       "`value` is not empty"},
      {"env valueFrom with two sources",
       [&](Pod& p) {
         EnvVarSource two;
         two.field_ref = ObjectFieldSelector{"v1", "metadata.name"};
         two.config_map_key_ref = KeySelector{"c", "k", std::nullopt};
         app(p).env = {{"A", "", two}};
       },
       "spec.containers[0].env[0].valueFrom: Invalid value: \"\": may not have more than one "
       "field specified at a time"},
      {"env fieldRef",
       [&](Pod& p) {
         app(p).env = {{"A", "", EnvVarSource{ObjectFieldSelector{"v1", "metadata.labels"}}}};
       },
       "spec.containers[0].env[0].valueFrom.fieldRef.fieldPath: Unsupported value: "
       "\"metadata.labels\": supported values: \"metadata.name\", \"metadata.namespace\", "
       "\"metadata.uid\", \"spec.nodeName\", \"spec.serviceAccountName\", \"status.hostIP\", "
       "\"status.hostIPs\", \"status.podIP\", \"status.podIPs\""},
      {"env secretKeyRef key",
       [&](Pod& p) {
         EnvVarSource v;
         v.secret_key_ref = KeySelector{"s", "../k", std::nullopt};
         app(p).env = {{"A", "", v}};
       },
       "spec.containers[0].env[0].valueFrom.secretKeyRef.key: Invalid value: \"../k\": a valid "
       "config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  "
       "or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"},
      {"envFrom without a source", [&](Pod& p) { app(p).env_from = {EnvFromSource{"P_"}}; },
       "spec.containers[0].envFrom[0]: Invalid value: \"\": must specify one of: `configMapRef` "
       "or `secretRef`"},
      {"envFrom prefix",
       [&](Pod& p) {
         app(p).env_from = {EnvFromSource{"1P", EnvFromRef{"c", std::nullopt}}};
       },
       "spec.containers[0].envFrom[0].prefix: Invalid value: \"1P\": a valid environment "
       "variable name must consist of alphabetic characters, digits, '_', '-', or '.', and must "
       "not start with a digit (e.g. 'my.env-name',  or 'MY_ENV.NAME',  or 'MyEnvName1', regex "
       "used for validation is '[-._a-zA-Z][-._a-zA-Z0-9]*')"},
      {"hook without a handler",
       [&](Pod& p) {
         app(p).lifecycle = Lifecycle{LifecycleHandler{}, std::nullopt};
       },
       "spec.containers[0].lifecycle.postStart: Required value: must specify a handler type"},
      {"hook sleep longer than the grace period",
       [&](Pod& p) {
         p.spec.termination_grace_period_seconds = 5;
         LifecycleHandler h;
         h.sleep = SleepAction{6};
         app(p).lifecycle = Lifecycle{std::nullopt, h};
       },
       "spec.containers[0].lifecycle.preStop.sleep.seconds: Invalid value: 6: must be greater "
       "than 0 and less than terminationGracePeriodSeconds (5)"},
      {"hook on an init container",
       [&](Pod& p) {
         LifecycleHandler h;
         h.exec = ExecAction{{"true"}};
         p.spec.init_containers.at(0).lifecycle = Lifecycle{h, std::nullopt};
       },
       "spec.initContainers[0].lifecycle: Forbidden: may not be set for init containers"},
      {"grpc probe port",
       [&](Pod& p) {
         Probe probe;
         probe.grpc = GrpcAction{0, ""};
         probe.period_seconds = probe.timeout_seconds = 1;
         probe.success_threshold = probe.failure_threshold = 1;
         app(p).liveness_probe = probe;
       },
       "spec.containers[0].livenessProbe.grpc.port: Invalid value: 0: must be between 1 and "
       "65535, inclusive"},
      {"terminationMessagePolicy", [&](Pod& p) { app(p).termination_message_policy = "Logs"; },
       "spec.containers[0].terminationMessagePolicy: Unsupported value: \"Logs\": supported "
       "values: \"File\", \"FallbackToLogsOnError\""},
      {"runtimeClassName", [](Pod& p) { p.spec.runtime_class_name = "Fast_Runc"; },
       "spec.runtimeClassName: Invalid value: \"Fast_Runc\": " + kSubdomainMsg},
  };
  for (const Rule& rule : kRules) {
    Pod pod = ValidPod();
    rule.mutate(pod);
    EXPECT_EQ(FirstError(pod), rule.expected) << rule.what;
  }
}

TEST(ValidationTest, ReportsEveryProblemInFieldOrder) {
  Pod pod = ValidPod();
  pod.metadata.name = "Bad";
  pod.spec.containers[1].name = "app";
  pod.spec.restart_policy = "x";
  FieldErrors errs = ValidatePod(pod);
  ASSERT_EQ(errs.size(), 3u);
  EXPECT_EQ(errs[0].field(), "metadata.name");
  EXPECT_EQ(errs[1].field(), "spec.containers[1].name");
  EXPECT_EQ(errs[1].type(), FieldError::Type::kDuplicate);
  EXPECT_EQ(errs[2].field(), "spec.restartPolicy");
}

TEST(FieldErrorTest, Rendering) {
  EXPECT_EQ(FieldError::Required("a.b").ToString(), "a.b: Required value");
  EXPECT_EQ(FieldError::Required("a", "why").ToString(), "a: Required value: why");
  EXPECT_EQ(FieldError::Invalid("a", 5, "d").ToString(), "a: Invalid value: 5: d");
  EXPECT_EQ(FieldError::NotFound("a", "x").ToString(), "a: Not found: \"x\"");
  EXPECT_EQ(FieldError::Forbidden("a", "no").ToString(), "a: Forbidden: no");
  EXPECT_EQ(FieldError::NotSupported("a", "x", {"A", "B"}).ToString(),
            "a: Unsupported value: \"x\": supported values: \"A\", \"B\"");
  EXPECT_EQ(QuoteValue("a\"b\\c\n\x01"), "\"a\\\"b\\\\c\\n\\x01\"");
  EXPECT_EQ(QuoteValue(std::string(300, 'x')), "\"" + std::string(256, 'x') + "...\"");
  EXPECT_EQ(Key("spec.x", "a\nb"), "spec.x[a?b]");
}

}  // namespace
}  // namespace nodelet::pod
