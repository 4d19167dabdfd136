// The manifest decoder's v1 schema: the fields of a v1 Pod (metadata, spec, containers, probes,
// lifecycle hooks, security contexts, volumes) read into the model with FieldDecoder's getters,
// and the v1 fields nodelet refuses because dropping them would change what runs.
#include <limits>
#include <string>

#include "lib/pod/manifest_decode.h"

namespace nodelet::pod::manifest_internal {
namespace {

// The v1 types: one member function per object type, which ObjectList and Sub call for each
// object they find.
class PodDecoder : public FieldDecoder {
 public:
  using FieldDecoder::FieldDecoder;

  void Meta(const Fields& f, const std::string& p, ObjectMeta& m) {
    Str(f, "name", p, m.name);
    Str(f, "namespace", p, m.namespace_name);
    Str(f, "uid", p, m.uid);
    StrMap(f, "labels", p, m.labels);
    StrMap(f, "annotations", p, m.annotations);
    Time(f, "creationTimestamp", p, m.creation_timestamp);
    Time(f, "deletionTimestamp", p, m.deletion_timestamp);
    OptInt64(f, "deletionGracePeriodSeconds", p, m.deletion_grace_period_seconds);
  }

  void KeyRef(const Fields& f, const std::string& p, KeySelector& k) {
    Str(f, "name", p, k.name);
    Str(f, "key", p, k.key);
    OptBool(f, "optional", p, k.optional);
  }

  void EnvSource(const Fields& f, const std::string& p, EnvVarSource& v) {
    Sub(f, "fieldRef", p, v.field_ref, &PodDecoder::FieldRef);
    Sub(f, "resourceFieldRef", p, v.resource_field_ref, &PodDecoder::ResourceFieldRef);
    Sub(f, "configMapKeyRef", p, v.config_map_key_ref, &PodDecoder::KeyRef);
    Sub(f, "secretKeyRef", p, v.secret_key_ref, &PodDecoder::KeyRef);
    Forbid(f, "fileKeyRef", p);
  }

  void Env(const Fields& f, const std::string& p, EnvVar& e) {
    Str(f, "name", p, e.name);
    Str(f, "value", p, e.value);
    Sub(f, "valueFrom", p, e.value_from, &PodDecoder::EnvSource);
  }

  void EnvFromRefFields(const Fields& f, const std::string& p, EnvFromRef& r) {
    Str(f, "name", p, r.name);
    OptBool(f, "optional", p, r.optional);
  }

  void EnvFrom(const Fields& f, const std::string& p, EnvFromSource& e) {
    Str(f, "prefix", p, e.prefix);
    Sub(f, "configMapRef", p, e.config_map_ref, &PodDecoder::EnvFromRefFields);
    Sub(f, "secretRef", p, e.secret_ref, &PodDecoder::EnvFromRefFields);
  }

  void Port(const Fields& f, const std::string& p, ContainerPort& port) {
    Str(f, "name", p, port.name);
    Int32(f, "containerPort", p, port.container_port);
    Str(f, "protocol", p, port.protocol);
    Int32(f, "hostPort", p, port.host_port);
    Str(f, "hostIP", p, port.host_ip);
  }

  void HostAliasFields(const Fields& f, const std::string& p, HostAlias& a) {
    Str(f, "ip", p, a.ip);
    StrList(f, "hostnames", p, a.hostnames);
  }

  // A LocalObjectReference: only its name.
  void ReferenceName(const Fields& f, const std::string& p, std::string& name) {
    Str(f, "name", p, name);
  }

  void DnsOption(const Fields& f, const std::string& p, PodDnsConfigOption& o) {
    Str(f, "name", p, o.name);
    if (const YAML::Node* n = Get(f, "value")) {
      std::string v;
      if (StringValue(*n, Child(p, "value"), v)) o.value = std::move(v);
    }
  }

  void DnsConfig(const Fields& f, const std::string& p, PodDnsConfig& d) {
    StrList(f, "nameservers", p, d.nameservers);
    StrList(f, "searches", p, d.searches);
    ObjectList(f, "options", p, d.options, &PodDecoder::DnsOption);
  }

  void Mount(const Fields& f, const std::string& p, VolumeMount& m) {
    Str(f, "name", p, m.name);
    Str(f, "mountPath", p, m.mount_path);
    Bool(f, "readOnly", p, m.read_only);
    Str(f, "subPath", p, m.sub_path);
    Forbid(f, "subPathExpr", p);
    ForbidUnlessDefault(f, "mountPropagation", "None", p);
    ForbidUnlessDefault(f, "recursiveReadOnly", "Disabled", p);
  }

  void Exec(const Fields& f, const std::string& p, ExecAction& e) {
    StrList(f, "command", p, e.command);
  }

  void Header(const Fields& f, const std::string& p, HttpHeader& h) {
    Str(f, "name", p, h.name);
    Str(f, "value", p, h.value);
  }

  void HttpGet(const Fields& f, const std::string& p, HttpGetAction& h) {
    Str(f, "host", p, h.host);
    PortRef(f, "port", p, h.port);
    Str(f, "path", p, h.path);
    Str(f, "scheme", p, h.scheme);
    ObjectList(f, "httpHeaders", p, h.http_headers, &PodDecoder::Header);
  }

  void TcpSocket(const Fields& f, const std::string& p, TcpSocketAction& t) {
    Str(f, "host", p, t.host);
    PortRef(f, "port", p, t.port);
  }

  void Grpc(const Fields& f, const std::string& p, GrpcAction& g) {
    Int32(f, "port", p, g.port);
    Str(f, "service", p, g.service);
  }

  void ProbeFields(const Fields& f, const std::string& p, Probe& probe) {
    Sub(f, "exec", p, probe.exec, &PodDecoder::Exec);
    Sub(f, "httpGet", p, probe.http_get, &PodDecoder::HttpGet);
    Sub(f, "tcpSocket", p, probe.tcp_socket, &PodDecoder::TcpSocket);
    Sub(f, "grpc", p, probe.grpc, &PodDecoder::Grpc);
    Int32(f, "initialDelaySeconds", p, probe.initial_delay_seconds);
    Int32(f, "periodSeconds", p, probe.period_seconds);
    Int32(f, "timeoutSeconds", p, probe.timeout_seconds);
    Int32(f, "successThreshold", p, probe.success_threshold);
    Int32(f, "failureThreshold", p, probe.failure_threshold);
    ForbidSet(f, "terminationGracePeriodSeconds", p);
  }

  void Sleep(const Fields& f, const std::string& p, SleepAction& s) {
    if (const YAML::Node* n = Get(f, "seconds")) {
      if (auto v = IntValue(*n, Child(p, "seconds"), std::numeric_limits<int64_t>::min(),
                            std::numeric_limits<int64_t>::max(), "64 bits")) {
        s.seconds = static_cast<int64_t>(*v);
      }
    }
  }

  void Handler(const Fields& f, const std::string& p, LifecycleHandler& h) {
    Sub(f, "exec", p, h.exec, &PodDecoder::Exec);
    Sub(f, "httpGet", p, h.http_get, &PodDecoder::HttpGet);
    Sub(f, "sleep", p, h.sleep, &PodDecoder::Sleep);
    Forbid(f, "tcpSocket", p,
           "not supported as a lifecycle handler (the kubelet keeps the field only for backward "
           "compatibility and fails the hook)");
  }

  void LifecycleFields(const Fields& f, const std::string& p, Lifecycle& l) {
    Sub(f, "postStart", p, l.post_start, &PodDecoder::Handler);
    Sub(f, "preStop", p, l.pre_stop, &PodDecoder::Handler);
    Forbid(f, "stopSignal", p);
  }

  void Caps(const Fields& f, const std::string& p, Capabilities& c) {
    StrList(f, "add", p, c.add);
    StrList(f, "drop", p, c.drop);
  }

  void Profile(const Fields& f, const std::string& p, SecurityProfile& s) {
    Str(f, "type", p, s.type);
    Str(f, "localhostProfile", p, s.localhost_profile);
  }

  void Security(const Fields& f, const std::string& p, SecurityContext& s) {
    OptInt64(f, "runAsUser", p, s.run_as_user);
    OptInt64(f, "runAsGroup", p, s.run_as_group);
    OptBool(f, "runAsNonRoot", p, s.run_as_non_root);
    OptBool(f, "privileged", p, s.privileged);
    OptBool(f, "readOnlyRootFilesystem", p, s.read_only_root_filesystem);
    OptBool(f, "allowPrivilegeEscalation", p, s.allow_privilege_escalation);
    Sub(f, "capabilities", p, s.capabilities, &PodDecoder::Caps);
    Sub(f, "seccompProfile", p, s.seccomp_profile, &PodDecoder::Profile);
    Sub(f, "appArmorProfile", p, s.app_armor_profile, &PodDecoder::Profile);
    Str(f, "procMount", p, s.proc_mount);
    ForbidSet(f, "seLinuxOptions", p, "not supported by nodelet (the node has no SELinux)");
    ForbidSet(f, "windowsOptions", p, "not supported by nodelet (a Linux node)");
  }

  void SysctlFields(const Fields& f, const std::string& p, Sysctl& s) {
    Str(f, "name", p, s.name);
    Str(f, "value", p, s.value);
  }

  void PodSecurity(const Fields& f, const std::string& p, PodSecurityContext& s) {
    OptInt64(f, "runAsUser", p, s.run_as_user);
    OptInt64(f, "runAsGroup", p, s.run_as_group);
    OptBool(f, "runAsNonRoot", p, s.run_as_non_root);
    OptInt64(f, "fsGroup", p, s.fs_group);
    Str(f, "fsGroupChangePolicy", p, s.fs_group_change_policy);
    List(f, "supplementalGroups", p, [&](const YAML::Node& n, const std::string& ip) {
      if (auto v = IntValue(n, ip, 0, std::numeric_limits<int64_t>::max(), "64 bits")) {
        s.supplemental_groups.push_back(static_cast<int64_t>(*v));
      }
    });
    ObjectList(f, "sysctls", p, s.sysctls, &PodDecoder::SysctlFields);
    Sub(f, "seccompProfile", p, s.seccomp_profile, &PodDecoder::Profile);
    Sub(f, "appArmorProfile", p, s.app_armor_profile, &PodDecoder::Profile);
    ForbidUnlessDefault(f, "supplementalGroupsPolicy", "Merge", p);
    ForbidSet(f, "seLinuxOptions", p, "not supported by nodelet (the node has no SELinux)");
    ForbidSet(f, "seLinuxChangePolicy", p, "not supported by nodelet (the node has no SELinux)");
    ForbidSet(f, "windowsOptions", p, "not supported by nodelet (a Linux node)");
  }

  void ContainerFields(const Fields& f, const std::string& p, Container& c) {
    Str(f, "name", p, c.name);
    Str(f, "image", p, c.image);
    Str(f, "imagePullPolicy", p, c.image_pull_policy);
    StrList(f, "command", p, c.command);
    StrList(f, "args", p, c.args);
    Str(f, "workingDir", p, c.working_dir);
    ObjectList(f, "env", p, c.env, &PodDecoder::Env);
    ObjectList(f, "envFrom", p, c.env_from, &PodDecoder::EnvFrom);
    ObjectList(f, "ports", p, c.ports, &PodDecoder::Port);
    if (const YAML::Node* r = Get(f, "resources")) {
      std::string rp = Child(p, "resources");
      if (auto rf = Object(*r, rp)) {
        Resources(*rf, "requests", rp, c.resources.requests);
        Resources(*rf, "limits", rp, c.resources.limits);
        Forbid(*rf, "claims", rp);
        Ignored(*rf, rp);
      }
    }
    ObjectList(f, "volumeMounts", p, c.volume_mounts, &PodDecoder::Mount);
    Sub(f, "livenessProbe", p, c.liveness_probe, &PodDecoder::ProbeFields);
    Sub(f, "readinessProbe", p, c.readiness_probe, &PodDecoder::ProbeFields);
    Sub(f, "startupProbe", p, c.startup_probe, &PodDecoder::ProbeFields);
    Sub(f, "securityContext", p, c.security_context, &PodDecoder::Security);
    Str(f, "terminationMessagePath", p, c.termination_message_path);
    Str(f, "terminationMessagePolicy", p, c.termination_message_policy);
    Sub(f, "lifecycle", p, c.lifecycle, &PodDecoder::LifecycleFields);
    Bool(f, "stdin", p, c.stdin);
    Bool(f, "stdinOnce", p, c.stdin_once);
    Bool(f, "tty", p, c.tty);
    for (const char* key : {"volumeDevices", "restartPolicy"}) {
      ForbidSet(f, key, p);
    }
  }

  void KeyPath(const Fields& f, const std::string& p, KeyToPath& k) {
    Str(f, "key", p, k.key);
    Str(f, "path", p, k.path);
    OptInt32(f, "mode", p, k.mode);
  }

  void EmptyDir(const Fields& f, const std::string& p, EmptyDirVolumeSource& e) {
    Str(f, "medium", p, e.medium);
    OptQuantity(f, "sizeLimit", p, e.size_limit);
  }

  void HostPath(const Fields& f, const std::string& p, HostPathVolumeSource& h) {
    Str(f, "path", p, h.path);
    Str(f, "type", p, h.type);
  }

  void ConfigMap(const Fields& f, const std::string& p, ConfigMapVolumeSource& c) {
    Str(f, "name", p, c.name);
    ObjectList(f, "items", p, c.items, &PodDecoder::KeyPath);
    OptInt32(f, "defaultMode", p, c.default_mode);
    OptBool(f, "optional", p, c.optional);
  }

  void Secret(const Fields& f, const std::string& p, SecretVolumeSource& s) {
    Str(f, "secretName", p, s.secret_name);
    ObjectList(f, "items", p, s.items, &PodDecoder::KeyPath);
    OptInt32(f, "defaultMode", p, s.default_mode);
    OptBool(f, "optional", p, s.optional);
  }

  void FieldRef(const Fields& f, const std::string& p, ObjectFieldSelector& s) {
    Str(f, "apiVersion", p, s.api_version);
    Str(f, "fieldPath", p, s.field_path);
  }

  void ResourceFieldRef(const Fields& f, const std::string& p, ResourceFieldSelector& s) {
    Str(f, "containerName", p, s.container_name);
    Str(f, "resource", p, s.resource);
    OptQuantity(f, "divisor", p, s.divisor);
  }

  void DownwardFile(const Fields& f, const std::string& p, DownwardApiVolumeFile& d) {
    Str(f, "path", p, d.path);
    Sub(f, "fieldRef", p, d.field_ref, &PodDecoder::FieldRef);
    Sub(f, "resourceFieldRef", p, d.resource_field_ref, &PodDecoder::ResourceFieldRef);
    OptInt32(f, "mode", p, d.mode);
  }

  void DownwardApi(const Fields& f, const std::string& p, DownwardApiVolumeSource& d) {
    ObjectList(f, "items", p, d.items, &PodDecoder::DownwardFile);
    OptInt32(f, "defaultMode", p, d.default_mode);
  }

  void VolumeFields(const Fields& f, const std::string& p, Volume& v) {
    Str(f, "name", p, v.name);
    Sub(f, "emptyDir", p, v.empty_dir, &PodDecoder::EmptyDir);
    Sub(f, "hostPath", p, v.host_path, &PodDecoder::HostPath);
    Sub(f, "configMap", p, v.config_map, &PodDecoder::ConfigMap);
    Sub(f, "secret", p, v.secret, &PodDecoder::Secret);
    Sub(f, "downwardAPI", p, v.downward_api, &PodDecoder::DownwardApi);
    static const char* const kUnsupportedSources[] = {"awsElasticBlockStore",
                                                      "azureDisk",
                                                      "azureFile",
                                                      "cephfs",
                                                      "cinder",
                                                      "csi",
                                                      "ephemeral",
                                                      "fc",
                                                      "flexVolume",
                                                      "flocker",
                                                      "gcePersistentDisk",
                                                      "gitRepo",
                                                      "glusterfs",
                                                      "image",
                                                      "iscsi",
                                                      "nfs",
                                                      "persistentVolumeClaim",
                                                      "photonPersistentDisk",
                                                      "portworxVolume",
                                                      "projected",
                                                      "quobyte",
                                                      "rbd",
                                                      "scaleIO",
                                                      "storageos",
                                                      "vsphereVolume"};
    for (const char* key : kUnsupportedSources) {
      Forbid(f, key, p,
             "volume type not supported by nodelet (supported: emptyDir, hostPath, configMap, "
             "secret, downwardAPI)");
    }
  }

  void Spec(const Fields& f, const std::string& p, PodSpec& s) {
    ObjectList(f, "initContainers", p, s.init_containers, &PodDecoder::ContainerFields);
    ObjectList(f, "containers", p, s.containers, &PodDecoder::ContainerFields);
    ObjectList(f, "volumes", p, s.volumes, &PodDecoder::VolumeFields);
    Str(f, "restartPolicy", p, s.restart_policy);
    OptInt64(f, "terminationGracePeriodSeconds", p, s.termination_grace_period_seconds);
    OptInt64(f, "activeDeadlineSeconds", p, s.active_deadline_seconds);
    Bool(f, "hostNetwork", p, s.host_network);
    Str(f, "nodeName", p, s.node_name);
    Str(f, "runtimeClassName", p, s.runtime_class_name);
    Str(f, "serviceAccountName", p, s.service_account_name);
    Bool(f, "hostPID", p, s.host_pid);
    Bool(f, "hostIPC", p, s.host_ipc);
    OptBool(f, "shareProcessNamespace", p, s.share_process_namespace);
    Sub(f, "securityContext", p, s.security_context, &PodDecoder::PodSecurity);
    Str(f, "hostname", p, s.hostname);
    Str(f, "subdomain", p, s.subdomain);
    OptBool(f, "setHostnameAsFQDN", p, s.set_hostname_as_fqdn);
    ObjectList(f, "hostAliases", p, s.host_aliases, &PodDecoder::HostAliasFields);
    Str(f, "dnsPolicy", p, s.dns_policy);
    Sub(f, "dnsConfig", p, s.dns_config, &PodDecoder::DnsConfig);
    Str(f, "priorityClassName", p, s.priority_class_name);
    ObjectList(f, "imagePullSecrets", p, s.image_pull_secrets, &PodDecoder::ReferenceName);
    for (const char* key : {"ephemeralContainers", "resourceClaims", "resources"}) {
      ForbidSet(f, key, p);
    }
    // hostUsers: true is the default (the node's user namespace); false asks for a user
    // namespace of the pod's own.
    if (const YAML::Node* h = Get(f, "hostUsers")) {
      if (auto v = BoolValue(*h, Child(p, "hostUsers")); v && !*v) {
        errors_.push_back(FieldError::Forbidden(Child(p, "hostUsers"),
                                                "false is not supported by nodelet (no user "
                                                "namespaces)"));
      }
    }
  }

  void PodFields(const Fields& f, Pod& pod) {
    if (const YAML::Node* m = Get(f, "metadata")) {
      if (auto mf = Object(*m, "metadata")) {
        Meta(*mf, "metadata", pod.metadata);
        Ignored(*mf, "metadata");
      }
    }
    if (const YAML::Node* s = Get(f, "spec")) {
      if (auto sf = Object(*s, "spec")) {
        Spec(*sf, "spec", pod.spec);
        Ignored(*sf, "spec");
      }
    } else {
      errors_.push_back(FieldError::Required("spec"));
    }
    // A pod's status is the node's to write: what a manifest says there is dropped, as the API
    // server drops it on create, without a warning.
    (void)Get(f, "status");
    Ignored(f, "");
  }
};

}  // namespace

void DecodePodFields(const Fields& f, FieldErrors& errors, std::vector<std::string>* ignored,
                     Pod& pod) {
  PodDecoder(errors, ignored).PodFields(f, pod);
}

}  // namespace nodelet::pod::manifest_internal
