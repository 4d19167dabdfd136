// The Pod model: plain structs for the Kubernetes v1 Pod fields that nodelet honours for static
// pods (docs/pods.md lists them). Field names follow the v1 API in snake_case. A Pod is what the
// manifest parser produces (as written), what ApplyPodDefaults completes, what ValidatePod
// checks, and what travels between processes as ipc-schemas/pod.fbs.
//
// Conventions: an empty string or list means "not set"; std::optional marks the fields the API
// itself keeps as pointers (where "unset" and "zero" differ). Times are Unix epoch seconds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lib/pod/quantity.h"

namespace nodelet::pod {

// Well-known values.
inline constexpr char kRestartPolicyAlways[] = "Always";
inline constexpr char kRestartPolicyOnFailure[] = "OnFailure";
inline constexpr char kRestartPolicyNever[] = "Never";
inline constexpr char kPullAlways[] = "Always";
inline constexpr char kPullIfNotPresent[] = "IfNotPresent";
inline constexpr char kPullNever[] = "Never";
inline constexpr char kProtocolTcp[] = "TCP";
inline constexpr char kProtocolUdp[] = "UDP";
inline constexpr char kProtocolSctp[] = "SCTP";
inline constexpr char kSchemeHttp[] = "HTTP";
inline constexpr char kSchemeHttps[] = "HTTPS";
inline constexpr char kDefaultNamespace[] = "default";
inline constexpr char kDefaultTerminationMessagePath[] = "/dev/termination-log";
inline constexpr char kTerminationMessageReadFile[] = "File";
inline constexpr char kTerminationMessageFallbackToLogsOnError[] = "FallbackToLogsOnError";
inline constexpr int64_t kDefaultTerminationGracePeriodSeconds = 30;
inline constexpr int32_t kDefaultFileMode = 0644;
inline constexpr char kDnsClusterFirst[] = "ClusterFirst";
inline constexpr char kDnsClusterFirstWithHostNet[] = "ClusterFirstWithHostNet";
inline constexpr char kDnsDefault[] = "Default";
inline constexpr char kDnsNone[] = "None";
// The API server's (and the resolver's) limits on dnsConfig.
inline constexpr size_t kMaxDnsNameservers = 3;
inline constexpr size_t kMaxDnsSearchPaths = 32;
inline constexpr size_t kMaxDnsSearchListChars = 2048;

// A port given by number or by name (the API's IntOrString).
struct IntOrString {
  bool is_string = false;
  int32_t int_value = 0;
  std::string str_value;

  static IntOrString Int(int32_t v) { return {false, v, {}}; }
  static IntOrString String(std::string s) { return {true, 0, std::move(s)}; }
  // "8080" or "http".
  std::string ToString() const { return is_string ? str_value : std::to_string(int_value); }
  bool operator==(const IntOrString&) const = default;
};

struct ObjectMeta {
  std::string name;
  std::string namespace_name;  // metadata.namespace
  std::string uid;
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  std::optional<int64_t> creation_timestamp;  // Unix seconds
  std::optional<int64_t> deletion_timestamp;  // Unix seconds
  std::optional<int64_t> deletion_grace_period_seconds;
  bool operator==(const ObjectMeta&) const = default;
};

// env[].valueFrom.configMapKeyRef / secretKeyRef: one key of a local ConfigMap or Secret.
struct KeySelector {
  std::string name;  // the ConfigMap's or Secret's name
  std::string key;
  std::optional<bool> optional;  // true: a missing object or key leaves the variable out
  bool operator==(const KeySelector&) const = default;
};
struct ObjectFieldSelector {
  std::string api_version;  // default "v1"
  std::string field_path;   // metadata.name, metadata.labels['k'], ...
  bool operator==(const ObjectFieldSelector&) const = default;
};
struct ResourceFieldSelector {
  std::string container_name;
  std::string resource;  // limits.cpu, requests.memory, ...
  std::optional<Quantity> divisor;
  bool operator==(const ResourceFieldSelector&) const = default;
};
// env[].valueFrom: exactly one source after validation.
struct EnvVarSource {
  std::optional<ObjectFieldSelector> field_ref;
  std::optional<ResourceFieldSelector> resource_field_ref;
  std::optional<KeySelector> config_map_key_ref;
  std::optional<KeySelector> secret_key_ref;
  bool operator==(const EnvVarSource&) const = default;
};
struct EnvVar {
  std::string name;
  std::string value;  // may hold $(VAR) references
  std::optional<EnvVarSource> value_from;
  bool operator==(const EnvVar&) const = default;
};
// envFrom[].configMapRef / secretRef.
struct EnvFromRef {
  std::string name;
  std::optional<bool> optional;
  bool operator==(const EnvFromRef&) const = default;
};
// envFrom[]: every key of a ConfigMap or a Secret, each prefixed.
struct EnvFromSource {
  std::string prefix;
  std::optional<EnvFromRef> config_map_ref;
  std::optional<EnvFromRef> secret_ref;
  bool operator==(const EnvFromSource&) const = default;
};

struct ContainerPort {
  std::string name;
  int32_t container_port = 0;
  std::string protocol;   // TCP (default), UDP, SCTP
  int32_t host_port = 0;  // 0: none
  std::string host_ip;    // the host address hostPort binds to; empty: every address
  bool operator==(const ContainerPort&) const = default;
};

// Resource name ("cpu", "memory", "ephemeral-storage", "example.com/gpu") -> quantity.
using ResourceList = std::map<std::string, Quantity>;

struct ResourceRequirements {
  ResourceList requests;
  ResourceList limits;
  bool operator==(const ResourceRequirements&) const = default;
};

struct VolumeMount {
  std::string name;
  std::string mount_path;
  bool read_only = false;
  std::string sub_path;
  bool operator==(const VolumeMount&) const = default;
};

struct ExecAction {
  std::vector<std::string> command;
  bool operator==(const ExecAction&) const = default;
};

struct HttpHeader {
  std::string name;
  std::string value;
  bool operator==(const HttpHeader&) const = default;
};

struct HttpGetAction {
  std::string host;  // empty: the pod IP
  IntOrString port;
  std::string path;    // default "/"
  std::string scheme;  // HTTP (default) or HTTPS
  std::vector<HttpHeader> http_headers;
  bool operator==(const HttpGetAction&) const = default;
};

struct TcpSocketAction {
  std::string host;
  IntOrString port;
  bool operator==(const TcpSocketAction&) const = default;
};

// probe.grpc: the standard gRPC health check (grpc.health.v1.Health/Check).
struct GrpcAction {
  int32_t port = 0;
  std::string service;  // "": the server's overall health (unset and "" mean the same)
  bool operator==(const GrpcAction&) const = default;
};

// A probe: exactly one handler (exec, httpGet, tcpSocket, grpc) after validation.
struct Probe {
  std::optional<ExecAction> exec;
  std::optional<HttpGetAction> http_get;
  std::optional<TcpSocketAction> tcp_socket;
  std::optional<GrpcAction> grpc;
  int32_t initial_delay_seconds = 0;
  int32_t period_seconds = 0;     // default 10
  int32_t timeout_seconds = 0;    // default 1
  int32_t success_threshold = 0;  // default 1
  int32_t failure_threshold = 0;  // default 3
  bool operator==(const Probe&) const = default;
};

// lifecycle.*.sleep.
struct SleepAction {
  int64_t seconds = 0;
  bool operator==(const SleepAction&) const = default;
};

// lifecycle.postStart / preStop: exactly one of exec, httpGet, sleep after validation (the API's
// tcpSocket is refused: the kubelet does not run it).
struct LifecycleHandler {
  std::optional<ExecAction> exec;
  std::optional<HttpGetAction> http_get;
  std::optional<SleepAction> sleep;
  bool operator==(const LifecycleHandler&) const = default;
};

struct Lifecycle {
  std::optional<LifecycleHandler> post_start;
  std::optional<LifecycleHandler> pre_stop;
  bool operator==(const Lifecycle&) const = default;
};

// securityContext.capabilities: names as written (with or without CAP_, any case; ALL).
struct Capabilities {
  std::vector<std::string> add;
  std::vector<std::string> drop;
  bool operator==(const Capabilities&) const = default;
};

// seccompProfile and appArmorProfile: type RuntimeDefault, Unconfined or Localhost (then
// localhost_profile: for seccomp a path relative to ROOT-DIR/seccomp, for AppArmor a loaded
// profile's name).
struct SecurityProfile {
  std::string type;
  std::string localhost_profile;
  bool operator==(const SecurityProfile&) const = default;
};

struct SecurityContext {
  std::optional<int64_t> run_as_user;
  std::optional<int64_t> run_as_group;
  std::optional<bool> run_as_non_root;
  std::optional<bool> privileged;
  std::optional<bool> read_only_root_filesystem;
  std::optional<bool> allow_privilege_escalation;
  std::optional<Capabilities> capabilities;
  std::optional<SecurityProfile> seccomp_profile;
  std::optional<SecurityProfile> app_armor_profile;
  std::string proc_mount;  // "" or Default (Unmasked is refused: it needs hostUsers false)
  bool operator==(const SecurityContext&) const = default;
};

struct Sysctl {
  std::string name;
  std::string value;
  bool operator==(const Sysctl&) const = default;
};

// spec.securityContext: the defaults of every container's securityContext (a container's own
// field wins) and what only a pod has.
struct PodSecurityContext {
  std::optional<int64_t> run_as_user;
  std::optional<int64_t> run_as_group;
  std::optional<bool> run_as_non_root;
  std::optional<int64_t> fs_group;
  std::string fs_group_change_policy;  // "" (Always), Always or OnRootMismatch
  std::vector<int64_t> supplemental_groups;
  std::vector<Sysctl> sysctls;
  std::optional<SecurityProfile> seccomp_profile;
  std::optional<SecurityProfile> app_armor_profile;
  bool operator==(const PodSecurityContext&) const = default;
};

struct Container {
  std::string name;
  std::string image;
  std::string image_pull_policy;  // Always, IfNotPresent, Never (default by the image's tag)
  std::vector<std::string> command;
  std::vector<std::string> args;
  std::string working_dir;
  std::vector<EnvVar> env;
  std::vector<ContainerPort> ports;
  ResourceRequirements resources;
  std::vector<VolumeMount> volume_mounts;
  std::optional<Probe> liveness_probe;
  std::optional<Probe> readiness_probe;
  std::optional<Probe> startup_probe;
  std::optional<SecurityContext> security_context;
  std::string termination_message_path;  // default /dev/termination-log
  std::vector<EnvFromSource> env_from;
  std::optional<Lifecycle> lifecycle;
  std::string termination_message_policy;  // File (default) or FallbackToLogsOnError
  // The container's stdin stays open for `nodeletctl attach` (stdin_once: closed after the first
  // attach ends); tty: the container runs in a terminal.
  bool stdin = false;
  bool stdin_once = false;
  bool tty = false;
  bool operator==(const Container&) const = default;
};

struct KeyToPath {
  std::string key;
  std::string path;
  std::optional<int32_t> mode;
  bool operator==(const KeyToPath&) const = default;
};

struct EmptyDirVolumeSource {
  std::string medium;  // "" (node disk) or "Memory"
  std::optional<Quantity> size_limit;
  bool operator==(const EmptyDirVolumeSource&) const = default;
};

struct HostPathVolumeSource {
  std::string path;
  // "", DirectoryOrCreate, Directory, FileOrCreate, File, Socket, CharDevice, BlockDevice.
  std::string type;
  bool operator==(const HostPathVolumeSource&) const = default;
};

struct ConfigMapVolumeSource {
  std::string name;
  std::vector<KeyToPath> items;
  std::optional<int32_t> default_mode;  // default 0644
  std::optional<bool> optional;
  bool operator==(const ConfigMapVolumeSource&) const = default;
};

struct SecretVolumeSource {
  std::string secret_name;
  std::vector<KeyToPath> items;
  std::optional<int32_t> default_mode;  // default 0644
  std::optional<bool> optional;
  bool operator==(const SecretVolumeSource&) const = default;
};

struct DownwardApiVolumeFile {
  std::string path;
  std::optional<ObjectFieldSelector> field_ref;
  std::optional<ResourceFieldSelector> resource_field_ref;
  std::optional<int32_t> mode;
  bool operator==(const DownwardApiVolumeFile&) const = default;
};

struct DownwardApiVolumeSource {
  std::vector<DownwardApiVolumeFile> items;
  std::optional<int32_t> default_mode;  // default 0644
  bool operator==(const DownwardApiVolumeSource&) const = default;
};

// A volume: a name and exactly one source (emptyDir when none is given).
struct Volume {
  std::string name;
  std::optional<EmptyDirVolumeSource> empty_dir;
  std::optional<HostPathVolumeSource> host_path;
  std::optional<ConfigMapVolumeSource> config_map;
  std::optional<SecretVolumeSource> secret;
  std::optional<DownwardApiVolumeSource> downward_api;
  bool operator==(const Volume&) const = default;
};

// spec.hostAliases[]: extra lines of the pod's /etc/hosts.
struct HostAlias {
  std::string ip;
  std::vector<std::string> hostnames;
  bool operator==(const HostAlias&) const = default;
};

// spec.dnsConfig.options[]: a resolver option ("ndots" with value "2", or "edns0" alone).
struct PodDnsConfigOption {
  std::string name;
  std::optional<std::string> value;
  bool operator==(const PodDnsConfigOption&) const = default;
};

// spec.dnsConfig: merged into what dnsPolicy gives (docs/pods.md, "DNS and /etc/hosts").
struct PodDnsConfig {
  std::vector<std::string> nameservers;
  std::vector<std::string> searches;
  std::vector<PodDnsConfigOption> options;
  bool operator==(const PodDnsConfig&) const = default;
};

struct PodSpec {
  std::vector<Container> init_containers;
  std::vector<Container> containers;
  std::vector<Volume> volumes;
  std::string restart_policy;                               // Always (default), OnFailure, Never
  std::optional<int64_t> termination_grace_period_seconds;  // default 30
  std::optional<int64_t> active_deadline_seconds;
  bool host_network = false;
  std::string node_name;
  std::string runtime_class_name;    // the CRI runtime handler; empty: the runtime's default
  std::string service_account_name;  // only read through the downward API (no token mount)
  bool host_pid = false;
  bool host_ipc = false;
  std::optional<bool> share_process_namespace;
  std::optional<PodSecurityContext> security_context;
  std::string hostname;   // DNS-1123 label; empty: the pod's name
  std::string subdomain;  // DNS-1123 label; the FQDN is HOSTNAME.SUBDOMAIN.NS.svc.CLUSTER-DOMAIN
  std::optional<bool> set_hostname_as_fqdn;
  std::vector<HostAlias> host_aliases;
  std::string dns_policy;  // ClusterFirst (default), ClusterFirstWithHostNet, Default, None
  std::optional<PodDnsConfig> dns_config;
  // A DNS subdomain name. system-node-critical makes the pod node-critical (lib/pod/qos.h);
  // nodelet has no PriorityClass objects, so other names give priority 0, as for a standalone
  // kubelet.
  std::string priority_class_name;
  // imagePullSecrets[].name: Secrets of the pod's namespace (kubernetes.io/dockerconfigjson or
  // kubernetes.io/dockercfg) whose registry credentials are tried before the node's.
  std::vector<std::string> image_pull_secrets;
  bool operator==(const PodSpec&) const = default;
};

struct Pod {
  ObjectMeta metadata;
  PodSpec spec;
  bool operator==(const Pod&) const = default;

  // "namespace/name", for messages and keys.
  std::string FullName() const { return metadata.namespace_name + "/" + metadata.name; }
};

}  // namespace nodelet::pod
