#include "lib/pod/validation.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <string_view>

#include "lib/pod/names.h"
#include "lib/pod/security.h"

namespace nodelet::pod {
namespace {

// 8-4-4-4-12 hex digits, either case, as Kubernetes uids are written.
bool IsUuid(std::string_view v) {
  if (v.size() != 36) return false;
  for (size_t i = 0; i < v.size(); ++i) {
    char c = v[i];
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (c != '-') return false;
    } else if (!std::isxdigit(static_cast<unsigned char>(c))) {
      return false;
    }
  }
  return true;
}

constexpr char kNonNegative[] = "must be greater than or equal to 0";
constexpr char kPortRange[] = "must be between 1 and 65535, inclusive";
constexpr char kFileModeError[] = "must be a number between 0 and 0777 (octal), both inclusive";
constexpr size_t kTotalAnnotationSizeLimit = 256 * 1024;

class PodValidator {
 public:
  explicit PodValidator(FieldErrors& errors) : errors_(errors) {}

  void Run(const Pod& pod) {
    Meta(pod.metadata);
    Spec(pod.spec);
    PodSecurity(pod.spec);
    AppArmorAnnotations(pod);
  }

 private:
  void Invalid(std::string path, std::string_view value, const std::vector<std::string>& msgs) {
    for (const auto& m : msgs) errors_.push_back(FieldError::Invalid(path, value, m));
  }

  void NonNegative(const std::string& path, int64_t v) {
    if (v < 0) errors_.push_back(FieldError::Invalid(path, v, kNonNegative));
  }

  void Meta(const ObjectMeta& m) {
    if (m.name.empty()) {
      errors_.push_back(FieldError::Required("metadata.name", "name or generateName is required"));
    } else {
      Invalid("metadata.name", m.name, IsDns1123Subdomain(m.name));
    }
    if (m.namespace_name.empty()) {
      errors_.push_back(FieldError::Required("metadata.namespace"));
    } else {
      Invalid("metadata.namespace", m.namespace_name, IsDns1123Label(m.namespace_name));
    }
    // The uid names directories under the root dir (pods/UID/...): only a UUID or a
    // DNS-1123 label may pass, so it can never hold "/", "..", NUL or an empty component.
    if (!m.uid.empty() && !IsUuid(m.uid) && !IsDns1123Label(m.uid).empty()) {
      errors_.push_back(
          FieldError::Invalid("metadata.uid", m.uid, "must be a UUID or a DNS-1123 label"));
    }
    for (const auto& [k, v] : m.labels) {
      Invalid("metadata.labels", k, IsQualifiedName(k));
      Invalid("metadata.labels", v, IsValidLabelValue(v));
    }
    size_t total = 0;
    for (const auto& [k, v] : m.annotations) {
      std::string lower = k;
      for (char& c : lower) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
      Invalid("metadata.annotations", k, IsQualifiedName(lower));
      total += k.size() + v.size();
    }
    if (total > kTotalAnnotationSizeLimit) {
      errors_.push_back(FieldError::TooLong("metadata.annotations", kTotalAnnotationSizeLimit));
    }
    if (m.deletion_grace_period_seconds) {
      NonNegative("metadata.deletionGracePeriodSeconds", *m.deletion_grace_period_seconds);
    }
  }

  void Spec(const PodSpec& s) {
    grace_period_ = s.termination_grace_period_seconds;
    std::set<std::string> volume_names;
    for (size_t i = 0; i < s.volumes.size(); ++i) {
      VolumeFields(s.volumes[i], Index("spec.volumes", i), volume_names);
    }
    std::set<std::string> container_names;
    if (s.containers.empty()) errors_.push_back(FieldError::Required("spec.containers"));
    for (size_t i = 0; i < s.containers.size(); ++i) {
      ContainerFields(s.containers[i], Index("spec.containers", i), container_names, volume_names,
                      s.host_network, /*init=*/false);
    }
    for (size_t i = 0; i < s.init_containers.size(); ++i) {
      ContainerFields(s.init_containers[i], Index("spec.initContainers", i), container_names,
                      volume_names, s.host_network, /*init=*/true);
    }
    HostPorts(s.containers);
    if (s.restart_policy.empty()) {
      errors_.push_back(FieldError::Required("spec.restartPolicy"));
    } else if (s.restart_policy != kRestartPolicyAlways &&
               s.restart_policy != kRestartPolicyOnFailure &&
               s.restart_policy != kRestartPolicyNever) {
      errors_.push_back(FieldError::NotSupported("spec.restartPolicy", s.restart_policy,
                                                 {"Always", "Never", "OnFailure"}));
    }
    if (s.termination_grace_period_seconds) {
      NonNegative("spec.terminationGracePeriodSeconds", *s.termination_grace_period_seconds);
    }
    if (s.active_deadline_seconds &&
        (*s.active_deadline_seconds < 1 || *s.active_deadline_seconds > 2147483647)) {
      errors_.push_back(FieldError::Invalid("spec.activeDeadlineSeconds",
                                            *s.active_deadline_seconds,
                                            "must be between 1 and 2147483647, inclusive"));
    }
    if (!s.node_name.empty())
      Invalid("spec.nodeName", s.node_name, IsDns1123Subdomain(s.node_name));
    if (!s.priority_class_name.empty()) {
      Invalid("spec.priorityClassName", s.priority_class_name,
              IsDns1123Subdomain(s.priority_class_name));
    }
    if (!s.runtime_class_name.empty()) {
      Invalid("spec.runtimeClassName", s.runtime_class_name,
              IsDns1123Subdomain(s.runtime_class_name));
    }
    if (!s.service_account_name.empty()) {
      Invalid("spec.serviceAccountName", s.service_account_name,
              IsDns1123Subdomain(s.service_account_name));
    }
    Dns(s);
  }

  // The API server's hostname, subdomain, hostAliases, dnsPolicy and dnsConfig rules
  // (ValidatePodSpec, validateDNSPolicy, validatePodDNSConfig, ValidateHostAliases).
  void Dns(const PodSpec& s) {
    if (!s.hostname.empty()) Invalid("spec.hostname", s.hostname, IsDns1123Label(s.hostname));
    if (!s.subdomain.empty()) Invalid("spec.subdomain", s.subdomain, IsDns1123Label(s.subdomain));
    for (size_t i = 0; i < s.host_aliases.size(); ++i) {
      const HostAlias& a = s.host_aliases[i];
      std::string p = Index("spec.hostAliases", i);
      Invalid(Child(p, "ip"), a.ip, IsValidIp(a.ip));
      for (size_t j = 0; j < a.hostnames.size(); ++j) {
        Invalid(Index(Child(p, "hostnames"), j), a.hostnames[j],
                IsDns1123Subdomain(a.hostnames[j]));
      }
    }
    if (s.dns_policy.empty()) {
      errors_.push_back(FieldError::Required("spec.dnsPolicy"));
    } else if (s.dns_policy != kDnsClusterFirst && s.dns_policy != kDnsClusterFirstWithHostNet &&
               s.dns_policy != kDnsDefault && s.dns_policy != kDnsNone) {
      errors_.push_back(
          FieldError::NotSupported("spec.dnsPolicy", s.dns_policy,
                                   {"ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"}));
    }
    const std::string path = "spec.dnsConfig";
    if (s.dns_policy == kDnsNone) {
      if (!s.dns_config) {
        errors_.push_back(
            FieldError::Required(path, "must provide `dnsConfig` when `dnsPolicy` is None"));
        return;
      }
      if (s.dns_config->nameservers.empty()) {
        errors_.push_back(FieldError::Required(
            Child(path, "nameservers"),
            "must provide at least one DNS nameserver when `dnsPolicy` is None"));
        return;
      }
    }
    if (!s.dns_config) return;
    const PodDnsConfig& d = *s.dns_config;
    const std::string ns_path = Child(path, "nameservers");
    if (d.nameservers.size() > kMaxDnsNameservers) {
      errors_.push_back(FieldError::InvalidRendered(
          ns_path, Join(d.nameservers),
          "must not have more than " + std::to_string(kMaxDnsNameservers) + " nameservers"));
    }
    for (size_t i = 0; i < d.nameservers.size(); ++i) {
      Invalid(Index(ns_path, i), d.nameservers[i], IsValidIp(d.nameservers[i]));
    }
    const std::string search_path = Child(path, "searches");
    if (d.searches.size() > kMaxDnsSearchPaths) {
      errors_.push_back(FieldError::InvalidRendered(
          search_path, Join(d.searches),
          "must not have more than " + std::to_string(kMaxDnsSearchPaths) + " search paths"));
    }
    size_t chars = d.searches.empty() ? 0 : d.searches.size() - 1;
    for (const auto& search : d.searches) chars += search.size();
    if (chars > kMaxDnsSearchListChars) {
      errors_.push_back(FieldError::InvalidRendered(
          search_path, Join(d.searches),
          "must not have more than " + std::to_string(kMaxDnsSearchListChars) +
              " characters (including spaces) in the search list"));
    }
    for (size_t i = 0; i < d.searches.size(); ++i) {
      // A trailing dot is fine (an absolute name).
      std::string_view search = d.searches[i];
      if (!search.empty() && search.back() == '.') search.remove_suffix(1);
      Invalid(Index(search_path, i), d.searches[i], IsDns1123Subdomain(search));
    }
    for (size_t i = 0; i < d.options.size(); ++i) {
      if (d.options[i].name.empty()) {
        errors_.push_back(
            FieldError::Required(Index(Child(path, "options"), i), "must not be empty"));
      }
    }
  }

  // A list as the API server shows it in an error: [a b c].
  static std::string Join(const std::vector<std::string>& list) {
    std::string out = "[";
    for (size_t i = 0; i < list.size(); ++i) out += (i ? " " : "") + list[i];
    return out + "]";
  }

  // Host ports must be unique per protocol across the pod's containers.
  void HostPorts(const std::vector<Container>& containers) {
    std::set<std::string> seen;
    for (size_t i = 0; i < containers.size(); ++i) {
      for (size_t j = 0; j < containers[i].ports.size(); ++j) {
        const ContainerPort& p = containers[i].ports[j];
        if (p.host_port == 0) continue;
        std::string key = p.protocol + "/" + std::to_string(p.host_port);
        if (!seen.insert(key).second) {
          errors_.push_back(FieldError::Duplicate(
              Child(Index(Child(Index("spec.containers", i), "ports"), j), "hostPort"), key));
        }
      }
    }
  }

  void ContainerFields(const Container& c, const std::string& path, std::set<std::string>& names,
                       const std::set<std::string>& volumes, bool host_network, bool init) {
    std::string name_path = Child(path, "name");
    if (c.name.empty()) {
      errors_.push_back(FieldError::Required(name_path));
    } else {
      Invalid(name_path, c.name, IsDns1123Label(c.name));
      if (!names.insert(c.name).second) errors_.push_back(FieldError::Duplicate(name_path, c.name));
    }
    if (c.image.empty()) {
      errors_.push_back(FieldError::Required(Child(path, "image")));
    } else if (c.image.find_first_of(" \t\r\n") == 0 ||
               std::string_view(" \t\r\n").find(c.image.back()) != std::string_view::npos) {
      errors_.push_back(FieldError::Invalid(Child(path, "image"), c.image,
                                            "must not have leading or trailing whitespace"));
    }
    if (c.image_pull_policy.empty()) {
      errors_.push_back(FieldError::Required(Child(path, "imagePullPolicy")));
    } else if (c.image_pull_policy != kPullAlways && c.image_pull_policy != kPullIfNotPresent &&
               c.image_pull_policy != kPullNever) {
      errors_.push_back(FieldError::NotSupported(Child(path, "imagePullPolicy"),
                                                 c.image_pull_policy,
                                                 {"Always", "IfNotPresent", "Never"}));
    }
    for (size_t i = 0; i < c.env.size(); ++i) Env(c.env[i], Index(Child(path, "env"), i));
    for (size_t i = 0; i < c.env_from.size(); ++i) {
      EnvFrom(c.env_from[i], Index(Child(path, "envFrom"), i));
    }
    if (c.termination_message_policy.empty()) {
      errors_.push_back(FieldError::Required(Child(path, "terminationMessagePolicy")));
    } else if (c.termination_message_policy != kTerminationMessageReadFile &&
               c.termination_message_policy != kTerminationMessageFallbackToLogsOnError) {
      errors_.push_back(FieldError::NotSupported(Child(path, "terminationMessagePolicy"),
                                                 c.termination_message_policy,
                                                 {"File", "FallbackToLogsOnError"}));
    }
    if (c.lifecycle) {
      std::string p = Child(path, "lifecycle");
      if (init) {
        errors_.push_back(FieldError::Forbidden(p, "may not be set for init containers"));
      } else {
        if (c.lifecycle->post_start) Handler(*c.lifecycle->post_start, Child(p, "postStart"));
        if (c.lifecycle->pre_stop) Handler(*c.lifecycle->pre_stop, Child(p, "preStop"));
      }
    }
    Ports(c, path, host_network);
    Resources(c.resources, Child(path, "resources"));
    Mounts(c, path, volumes);
    const std::pair<const std::optional<Probe>*, const char*> probes[] = {
        {&c.liveness_probe, "livenessProbe"},
        {&c.readiness_probe, "readinessProbe"},
        {&c.startup_probe, "startupProbe"}};
    for (const auto& [probe, field] : probes) {
      if (!*probe) continue;
      std::string p = Child(path, field);
      if (init) {
        errors_.push_back(FieldError::Forbidden(p, "may not be set for init containers"));
        continue;
      }
      ProbeFields(**probe, p, std::string_view(field) != "readinessProbe");
    }
    if (c.security_context) Security(*c.security_context, Child(path, "securityContext"));
  }

  void Ports(const Container& c, const std::string& path, bool host_network) {
    std::set<std::string> port_names;
    for (size_t i = 0; i < c.ports.size(); ++i) {
      const ContainerPort& port = c.ports[i];
      std::string p = Index(Child(path, "ports"), i);
      if (!port.name.empty()) {
        Invalid(Child(p, "name"), port.name, IsValidPortName(port.name));
        if (!port_names.insert(port.name).second) {
          errors_.push_back(FieldError::Duplicate(Child(p, "name"), port.name));
        }
      }
      if (port.container_port < 1 || port.container_port > 65535) {
        errors_.push_back(
            FieldError::Invalid(Child(p, "containerPort"), port.container_port, kPortRange));
      }
      if (port.host_port != 0 && (port.host_port < 1 || port.host_port > 65535)) {
        errors_.push_back(FieldError::Invalid(Child(p, "hostPort"), port.host_port, kPortRange));
      }
      if (!port.host_ip.empty()) Invalid(Child(p, "hostIP"), port.host_ip, IsValidIp(port.host_ip));
      if (host_network && port.host_port != port.container_port) {
        errors_.push_back(FieldError::Invalid(Child(p, "hostPort"), port.host_port,
                                              "must match containerPort when hostNetwork is true"));
      }
      if (port.protocol.empty()) {
        errors_.push_back(FieldError::Required(Child(p, "protocol")));
      } else if (port.protocol != kProtocolTcp && port.protocol != kProtocolUdp &&
                 port.protocol != kProtocolSctp) {
        errors_.push_back(
            FieldError::NotSupported(Child(p, "protocol"), port.protocol, {"SCTP", "TCP", "UDP"}));
      }
    }
  }

  void ResourceName(const std::string& path, const std::string& name) {
    static const std::set<std::string_view> kStandard = {"cpu", "memory", "ephemeral-storage"};
    if (kStandard.count(name) || name.rfind("hugepages-", 0) == 0) return;
    if (name.find('/') == std::string::npos) {
      errors_.push_back(
          FieldError::Invalid(path, name, "must be a standard resource type or fully qualified"));
      return;
    }
    Invalid(path, name, IsQualifiedName(name));
  }

  void Resources(const ResourceRequirements& r, const std::string& path) {
    std::string limits_path = Child(path, "limits");
    std::string requests_path = Child(path, "requests");
    for (const auto& [name, q] : r.limits) {
      std::string p = Key(limits_path, name);
      ResourceName(p, name);
      if (q.IsNegative()) errors_.push_back(FieldError::Invalid(p, q.text(), kNonNegative));
    }
    for (const auto& [name, q] : r.requests) {
      std::string p = Key(requests_path, name);
      ResourceName(p, name);
      if (q.IsNegative()) errors_.push_back(FieldError::Invalid(p, q.text(), kNonNegative));
      auto limit = r.limits.find(name);
      if (limit != r.limits.end() && q.Compare(limit->second) > 0) {
        errors_.push_back(FieldError::Invalid(
            p, q.text(),
            "must be less than or equal to " + name + " limit of " + limit->second.text()));
      }
    }
  }

  // A path inside a volume: relative, no '..' element.
  void RelativePath(const std::string& path, const std::string& value, bool required) {
    if (value.empty()) {
      if (required) errors_.push_back(FieldError::Required(path));
      return;
    }
    if (value[0] == '/') {
      errors_.push_back(FieldError::Invalid(path, value, "must be a relative path"));
    }
    if (HasDotDot(value)) {
      errors_.push_back(FieldError::Invalid(path, value, "must not contain '..'"));
    } else if (value.rfind("..", 0) == 0) {
      errors_.push_back(FieldError::Invalid(path, value, "must not start with '..'"));
    }
  }

  static bool HasDotDot(std::string_view p) {
    size_t start = 0;
    for (;;) {
      size_t slash = p.find('/', start);
      if (p.substr(start, slash == std::string_view::npos ? slash : slash - start) == "..") {
        return true;
      }
      if (slash == std::string_view::npos) return false;
      start = slash + 1;
    }
  }

  void Mounts(const Container& c, const std::string& path, const std::set<std::string>& volumes) {
    std::set<std::string> mount_paths;
    for (size_t i = 0; i < c.volume_mounts.size(); ++i) {
      const VolumeMount& m = c.volume_mounts[i];
      std::string p = Index(Child(path, "volumeMounts"), i);
      if (m.name.empty()) {
        errors_.push_back(FieldError::Required(Child(p, "name")));
      } else if (!volumes.count(m.name)) {
        errors_.push_back(FieldError::NotFound(Child(p, "name"), m.name));
      }
      std::string mp = Child(p, "mountPath");
      if (m.mount_path.empty()) {
        errors_.push_back(FieldError::Required(mp));
      } else {
        if (m.mount_path[0] != '/') {
          errors_.push_back(FieldError::Invalid(mp, m.mount_path, "must be an absolute path"));
        }
        if (!mount_paths.insert(m.mount_path).second) {
          errors_.push_back(FieldError::Invalid(mp, m.mount_path, "must be unique"));
        }
      }
      if (!m.sub_path.empty()) RelativePath(Child(p, "subPath"), m.sub_path, false);
    }
  }

  void PortRef(const IntOrString& port, const std::string& path) {
    if (port.is_string) {
      if (port.str_value.empty()) {
        errors_.push_back(FieldError::Required(path));
      } else {
        Invalid(path, port.str_value, IsValidPortName(port.str_value));
      }
    } else if (port.int_value < 1 || port.int_value > 65535) {
      errors_.push_back(FieldError::Invalid(path, port.int_value, kPortRange));
    }
  }

  // Counts a handler of a probe or hook; a second one is an error.
  void OneHandler(int& handlers, const std::string& p) {
    if (handlers++ > 0) {
      errors_.push_back(FieldError::Forbidden(p, "may not specify more than 1 handler type"));
    }
  }

  void ExecAndHttpGet(const std::optional<ExecAction>& exec,
                      const std::optional<HttpGetAction>& http_get, const std::string& path,
                      int& handlers) {
    if (exec) {
      OneHandler(handlers, Child(path, "exec"));
      if (exec->command.empty()) {
        errors_.push_back(FieldError::Required(Child(Child(path, "exec"), "command")));
      }
    }
    if (http_get) {
      std::string p = Child(path, "httpGet");
      OneHandler(handlers, p);
      PortRef(http_get->port, Child(p, "port"));
      const std::string& scheme = http_get->scheme;
      if (scheme != kSchemeHttp && scheme != kSchemeHttps) {
        errors_.push_back(FieldError::NotSupported(Child(p, "scheme"), scheme, {"HTTP", "HTTPS"}));
      }
      for (size_t i = 0; i < http_get->http_headers.size(); ++i) {
        const std::string& name = http_get->http_headers[i].name;
        Invalid(Child(Index(Child(p, "httpHeaders"), i), "name"), name, IsHttpHeaderName(name));
      }
    }
  }

  void Handler(const LifecycleHandler& h, const std::string& path) {
    int handlers = 0;
    ExecAndHttpGet(h.exec, h.http_get, path, handlers);
    if (h.sleep) {
      std::string p = Child(path, "sleep");
      OneHandler(handlers, p);
      const int64_t grace = grace_period_.value_or(kDefaultTerminationGracePeriodSeconds);
      if (h.sleep->seconds < 1 || h.sleep->seconds > grace) {
        errors_.push_back(FieldError::Invalid(
            Child(p, "seconds"), h.sleep->seconds,
            "must be greater than 0 and less than terminationGracePeriodSeconds (" +
                std::to_string(grace) + ")"));
      }
    }
    if (handlers == 0) {
      errors_.push_back(FieldError::Required(path, "must specify a handler type"));
    }
  }

  void Env(const EnvVar& e, const std::string& path) {
    std::string name_path = Child(path, "name");
    if (e.name.empty()) {
      errors_.push_back(FieldError::Required(name_path));
    } else {
      Invalid(name_path, e.name, IsEnvVarName(e.name));
    }
    if (!e.value_from) return;
    std::string p = Child(path, "valueFrom");
    if (!e.value.empty()) {
      errors_.push_back(
          FieldError::Invalid(p, "", "may not be specified when `value` is not empty"));
    }
    const EnvVarSource& v = *e.value_from;
    int sources = (v.field_ref ? 1 : 0) + (v.resource_field_ref ? 1 : 0) +
                  (v.config_map_key_ref ? 1 : 0) + (v.secret_key_ref ? 1 : 0);
    if (sources == 0) {
      errors_.push_back(FieldError::Invalid(p, "",
                                            "must specify one of: `fieldRef`, "
                                            "`resourceFieldRef`, `configMapKeyRef` or "
                                            "`secretKeyRef`"));
    } else if (sources > 1) {
      errors_.push_back(FieldError::Invalid(p, "",
                                            "may not have more than one field specified "
                                            "at a time"));
    }
    if (v.field_ref) FieldPathRef(*v.field_ref, Child(p, "fieldRef"), /*env=*/true);
    if (v.resource_field_ref) {
      ResourceRef(*v.resource_field_ref, Child(p, "resourceFieldRef"), /*env=*/true);
    }
    const std::pair<const std::optional<KeySelector>*, const char*> refs[] = {
        {&v.config_map_key_ref, "configMapKeyRef"}, {&v.secret_key_ref, "secretKeyRef"}};
    for (const auto& [ref, field] : refs) {
      if (!*ref) continue;
      std::string rp = Child(p, field);
      if ((*ref)->name.empty()) errors_.push_back(FieldError::Required(Child(rp, "name")));
      if ((*ref)->key.empty()) {
        errors_.push_back(FieldError::Required(Child(rp, "key")));
      } else {
        Invalid(Child(rp, "key"), (*ref)->key, IsConfigMapKey((*ref)->key));
      }
    }
  }

  void EnvFrom(const EnvFromSource& e, const std::string& path) {
    if (!e.prefix.empty()) Invalid(Child(path, "prefix"), e.prefix, IsEnvVarName(e.prefix));
    if (e.config_map_ref && e.secret_ref) {
      errors_.push_back(FieldError::Invalid(path, "",
                                            "may not have more than one field specified "
                                            "at a time"));
    } else if (!e.config_map_ref && !e.secret_ref) {
      errors_.push_back(
          FieldError::Invalid(path, "", "must specify one of: `configMapRef` or `secretRef`"));
    }
    const std::pair<const std::optional<EnvFromRef>*, const char*> refs[] = {
        {&e.config_map_ref, "configMapRef"}, {&e.secret_ref, "secretRef"}};
    for (const auto& [ref, field] : refs) {
      if (*ref && (*ref)->name.empty()) {
        errors_.push_back(FieldError::Required(Child(Child(path, field), "name")));
      }
    }
  }

  void ProbeFields(const Probe& probe, const std::string& path, bool success_must_be_one) {
    int handlers = 0;
    ExecAndHttpGet(probe.exec, probe.http_get, path, handlers);
    if (probe.grpc) {
      std::string p = Child(path, "grpc");
      OneHandler(handlers, p);
      if (probe.grpc->port < 1 || probe.grpc->port > 65535) {
        errors_.push_back(FieldError::Invalid(Child(p, "port"), probe.grpc->port, kPortRange));
      }
    }
    if (probe.tcp_socket) {
      std::string p = Child(path, "tcpSocket");
      OneHandler(handlers, p);
      PortRef(probe.tcp_socket->port, Child(p, "port"));
    }
    if (handlers == 0) {
      errors_.push_back(FieldError::Required(path, "must specify a handler type"));
    }
    NonNegative(Child(path, "initialDelaySeconds"), probe.initial_delay_seconds);
    NonNegative(Child(path, "periodSeconds"), probe.period_seconds);
    NonNegative(Child(path, "timeoutSeconds"), probe.timeout_seconds);
    NonNegative(Child(path, "successThreshold"), probe.success_threshold);
    NonNegative(Child(path, "failureThreshold"), probe.failure_threshold);
    if (success_must_be_one && probe.success_threshold != 1) {
      errors_.push_back(FieldError::Invalid(Child(path, "successThreshold"),
                                            probe.success_threshold, "must be 1"));
    }
  }

  void Security(const SecurityContext& sc, const std::string& path) {
    const std::pair<const std::optional<int64_t>*, const char*> ids[] = {
        {&sc.run_as_user, "runAsUser"}, {&sc.run_as_group, "runAsGroup"}};
    for (const auto& [id, field] : ids) {
      if (*id && (**id < 0 || **id > 2147483647)) {
        errors_.push_back(FieldError::Invalid(Child(path, field), **id,
                                              "must be between 0 and 2147483647, inclusive"));
      }
    }
    if (sc.privileged.value_or(false) && sc.allow_privilege_escalation &&
        !*sc.allow_privilege_escalation) {
      errors_.push_back(FieldError::InvalidRendered(
          Child(path, "allowPrivilegeEscalation"), "false",
          "cannot set allowPrivilegeEscalation to false and privileged to true"));
    }
    if (sc.capabilities) {
      std::string caps = Child(path, "capabilities");
      for (const auto& [list, field] :
           {std::pair{&sc.capabilities->add, "add"}, std::pair{&sc.capabilities->drop, "drop"}}) {
        for (size_t i = 0; i < list->size(); ++i) {
          if (!CanonicalCapability((*list)[i])) {
            errors_.push_back(FieldError::Invalid(
                Index(Child(caps, field), i), (*list)[i],
                "not a Linux capability (a name such as NET_ADMIN or CAP_NET_ADMIN, or ALL)"));
          }
        }
      }
    }
    if (sc.seccomp_profile) Profile(*sc.seccomp_profile, Child(path, "seccompProfile"), true);
    if (sc.app_armor_profile) {
      Profile(*sc.app_armor_profile, Child(path, "appArmorProfile"), false);
    }
    if (sc.proc_mount == "Unmasked") {
      errors_.push_back(FieldError::Forbidden(
          Child(path, "procMount"),
          "Unmasked needs the pod's own user namespace (hostUsers: false), which nodelet does not "
          "support"));
    } else if (!sc.proc_mount.empty() && sc.proc_mount != "Default") {
      errors_.push_back(FieldError::NotSupported(Child(path, "procMount"), sc.proc_mount,
                                                 {"Default", "Unmasked"}));
    }
  }

  // seccompProfile or appArmorProfile.
  void Profile(const SecurityProfile& p, const std::string& path, bool seccomp) {
    std::string type = Child(path, "type");
    std::string local = Child(path, "localhostProfile");
    if (p.type.empty()) {
      errors_.push_back(FieldError::Required(type));
      return;
    }
    if (p.type != kProfileRuntimeDefault && p.type != kProfileUnconfined &&
        p.type != kProfileLocalhost) {
      errors_.push_back(
          FieldError::NotSupported(type, p.type, {"Localhost", "RuntimeDefault", "Unconfined"}));
      return;
    }
    if (p.type != kProfileLocalhost) {
      if (!p.localhost_profile.empty()) {
        errors_.push_back(FieldError::Forbidden(local, "can only be set if the type is Localhost"));
      }
      return;
    }
    if (p.localhost_profile.empty()) {
      errors_.push_back(FieldError::Required(local, "must be set when the type is Localhost"));
    } else if (seccomp) {
      // A file under ROOT-DIR/seccomp: never a way out of it.
      RelativePath(local, p.localhost_profile, true);
    } else if (std::any_of(p.localhost_profile.begin(), p.localhost_profile.end(),
                           [](char ch) { return static_cast<unsigned char>(ch) < 0x20; })) {
      errors_.push_back(
          FieldError::Invalid(local, p.localhost_profile, "must not contain control characters"));
    }
  }

  void PodSecurity(const PodSpec& s) {
    const std::string path = "spec.securityContext";
    if (s.share_process_namespace.value_or(false) && s.host_pid) {
      errors_.push_back(
          FieldError::InvalidRendered("spec.shareProcessNamespace", "true",
                                      "ShareProcessNamespace and HostPID cannot both be enabled"));
    }
    if (!s.security_context) return;
    const PodSecurityContext& sc = *s.security_context;
    const std::pair<const std::optional<int64_t>*, const char*> ids[] = {
        {&sc.run_as_user, "runAsUser"},
        {&sc.run_as_group, "runAsGroup"},
        {&sc.fs_group, "fsGroup"}};
    for (const auto& [id, field] : ids) {
      if (*id && (**id < 0 || **id > 2147483647)) {
        errors_.push_back(FieldError::Invalid(Child(path, field), **id,
                                              "must be between 0 and 2147483647, inclusive"));
      }
    }
    for (size_t i = 0; i < sc.supplemental_groups.size(); ++i) {
      if (sc.supplemental_groups[i] > 2147483647) {
        errors_.push_back(FieldError::Invalid(Index(Child(path, "supplementalGroups"), i),
                                              sc.supplemental_groups[i],
                                              "must be between 0 and 2147483647, inclusive"));
      }
    }
    if (!sc.fs_group_change_policy.empty() && sc.fs_group_change_policy != "Always" &&
        sc.fs_group_change_policy != "OnRootMismatch") {
      errors_.push_back(FieldError::NotSupported(Child(path, "fsGroupChangePolicy"),
                                                 sc.fs_group_change_policy,
                                                 {"Always", "OnRootMismatch"}));
    }
    std::set<std::string> names;
    for (size_t i = 0; i < sc.sysctls.size(); ++i) {
      std::string p = Child(Index(Child(path, "sysctls"), i), "name");
      const std::string& name = sc.sysctls[i].name;
      if (name.empty()) {
        errors_.push_back(FieldError::Required(p));
        continue;
      }
      if (!IsSysctlName(name)) {
        errors_.push_back(FieldError::Invalid(
            p, name,
            "must have at most 253 characters and match regex "
            "^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$"));
        continue;
      }
      std::string dotted = SysctlDotted(name);
      // Which sysctls a pod may set, and with which host namespaces, is the node's to say:
      // admission (SysctlForbidden), as the kubelet does.
      if (!names.insert(dotted).second) errors_.push_back(FieldError::Duplicate(p, name));
    }
    if (sc.seccomp_profile) Profile(*sc.seccomp_profile, Child(path, "seccompProfile"), true);
    if (sc.app_armor_profile) {
      Profile(*sc.app_armor_profile, Child(path, "appArmorProfile"), false);
    }
  }

  static bool IsSysctlName(std::string_view name) {
    if (name.size() > 253) return false;
    // Segments of [a-z0-9] with - and _ inside, separated by . or /.
    size_t start = 0;
    for (;;) {
      size_t end = name.find_first_of("./", start);
      std::string_view seg = name.substr(start, end == std::string_view::npos ? end : end - start);
      if (seg.empty()) return false;
      auto alnum = [](char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9'); };
      if (!alnum(seg.front()) || !alnum(seg.back())) return false;
      for (char ch : seg) {
        if (!alnum(ch) && ch != '-' && ch != '_') return false;
      }
      if (end == std::string_view::npos) return true;
      start = end + 1;
    }
  }

  // container.apparmor.security.beta.kubernetes.io/NAME: NAME is a container of the pod, the
  // value one of the three forms.
  void AppArmorAnnotations(const Pod& pod) {
    for (const auto& [key, value] : pod.metadata.annotations) {
      if (key.rfind(kAppArmorAnnotationPrefix, 0) != 0) continue;
      std::string p = "metadata.annotations[" + key + "]";
      std::string name = key.substr(std::string_view(kAppArmorAnnotationPrefix).size());
      bool found = false;
      for (const auto* list : {&pod.spec.init_containers, &pod.spec.containers}) {
        for (const auto& c : *list) found = found || c.name == name;
      }
      if (!found) {
        errors_.push_back(FieldError::Invalid(p, name, "container not found"));
      } else if (!AppArmorFromAnnotation(value)) {
        errors_.push_back(FieldError::Invalid(
            p, value,
            "invalid AppArmor profile name: must be runtime/default, unconfined or "
            "localhost/PROFILE"));
      }
    }
  }

  void Mode(const std::string& path, const std::optional<int32_t>& mode) {
    if (mode && (*mode < 0 || *mode > 0777)) {
      errors_.push_back(FieldError::Invalid(path, *mode, kFileModeError));
    }
  }

  void Items(const std::vector<KeyToPath>& items, const std::string& path) {
    for (size_t i = 0; i < items.size(); ++i) {
      std::string p = Index(Child(path, "items"), i);
      if (items[i].key.empty()) errors_.push_back(FieldError::Required(Child(p, "key")));
      RelativePath(Child(p, "path"), items[i].path, true);
      Mode(Child(p, "mode"), items[i].mode);
    }
  }

  // `env`: an env var's fieldRef, which may also name spec.* and status.* fields but not the
  // whole label or annotation maps.
  void FieldPathRef(const ObjectFieldSelector& ref, const std::string& path, bool env = false) {
    if (ref.api_version.empty()) {
      errors_.push_back(FieldError::Required(Child(path, "apiVersion")));
    } else if (ref.api_version != "v1") {
      errors_.push_back(
          FieldError::NotSupported(Child(path, "apiVersion"), ref.api_version, {"v1"}));
    }
    std::string p = Child(path, "fieldPath");
    const std::string& f = ref.field_path;
    if (f.empty()) {
      errors_.push_back(FieldError::Required(p));
      return;
    }
    static const std::vector<std::string_view> kPlain = {"metadata.annotations", "metadata.labels",
                                                         "metadata.name", "metadata.namespace",
                                                         "metadata.uid"};
    static const std::vector<std::string_view> kEnv = {"metadata.name",
                                                       "metadata.namespace",
                                                       "metadata.uid",
                                                       "spec.nodeName",
                                                       "spec.serviceAccountName",
                                                       "status.hostIP",
                                                       "status.hostIPs",
                                                       "status.podIP",
                                                       "status.podIPs"};
    const auto& allowed = env ? kEnv : kPlain;
    if (std::find(allowed.begin(), allowed.end(), f) != allowed.end()) return;
    for (std::string_view prefix : {"metadata.labels['", "metadata.annotations['"}) {
      if (f.size() > prefix.size() + 2 && f.compare(0, prefix.size(), prefix) == 0 &&
          f.compare(f.size() - 2, 2, "']") == 0) {
        std::string key = f.substr(prefix.size(), f.size() - prefix.size() - 2);
        Invalid(p, key, IsQualifiedName(key));
        return;
      }
    }
    errors_.push_back(FieldError::NotSupported(p, f, allowed));
  }

  // `env`: an env var's resourceFieldRef, whose containerName defaults to its own container.
  void ResourceRef(const ResourceFieldSelector& ref, const std::string& path, bool env = false) {
    if (ref.container_name.empty() && !env) {
      errors_.push_back(FieldError::Required(Child(path, "containerName")));
    }
    static const std::vector<std::string_view> kResources = {
        "limits.cpu",   "limits.ephemeral-storage",   "limits.memory",
        "requests.cpu", "requests.ephemeral-storage", "requests.memory"};
    std::string p = Child(path, "resource");
    if (ref.resource.empty()) {
      errors_.push_back(FieldError::Required(p));
      return;
    }
    bool known = false;
    for (auto r : kResources) known = known || r == ref.resource;
    if (!known) {
      errors_.push_back(FieldError::NotSupported(p, ref.resource, kResources));
      return;
    }
    if (!ref.divisor) return;
    const __int128 n = ref.divisor->Nanos();
    constexpr __int128 kUnit = 1000000000;
    bool ok;
    if (ref.resource.find("cpu") != std::string::npos) {
      ok = n == kUnit || n == kUnit / 1000;
      if (!ok) {
        errors_.push_back(FieldError::Invalid(Child(path, "divisor"), ref.divisor->text(),
                                              "only divisor's values 1m and 1 are supported with "
                                              "the cpu resource"));
      }
      return;
    }
    ok = false;
    __int128 d = kUnit, b = kUnit;
    for (int i = 0; i <= 6; ++i, d *= 1000, b *= 1024) ok = ok || n == d || (i > 0 && n == b);
    if (!ok) {
      errors_.push_back(FieldError::Invalid(
          Child(path, "divisor"), ref.divisor->text(),
          "only divisor's values 1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi, 1Ei are "
          "supported with the " +
              ref.resource.substr(ref.resource.find('.') + 1) + " resource"));
    }
  }

  void VolumeFields(const Volume& v, const std::string& path, std::set<std::string>& names) {
    std::string name_path = Child(path, "name");
    if (v.name.empty()) {
      errors_.push_back(FieldError::Required(name_path));
    } else {
      Invalid(name_path, v.name, IsDns1123Label(v.name));
      if (!names.insert(v.name).second) errors_.push_back(FieldError::Duplicate(name_path, v.name));
    }
    int sources = 0;
    auto count = [&](bool present, const char* field) {
      if (!present) return;
      if (sources++ > 0) {
        errors_.push_back(
            FieldError::Forbidden(Child(path, field), "may not specify more than 1 volume type"));
      }
    };
    count(v.empty_dir.has_value(), "emptyDir");
    count(v.host_path.has_value(), "hostPath");
    count(v.config_map.has_value(), "configMap");
    count(v.secret.has_value(), "secret");
    count(v.downward_api.has_value(), "downwardAPI");
    if (sources == 0) errors_.push_back(FieldError::Required(path, "must specify a volume type"));
    if (v.empty_dir) {
      std::string p = Child(path, "emptyDir");
      const std::string& medium = v.empty_dir->medium;
      if (!medium.empty() && medium != "Memory" && medium.rfind("HugePages", 0) != 0) {
        errors_.push_back(
            FieldError::NotSupported(Child(p, "medium"), medium, {"", "HugePages", "Memory"}));
      }
      if (v.empty_dir->size_limit && v.empty_dir->size_limit->IsNegative()) {
        errors_.push_back(FieldError::Invalid(Child(p, "sizeLimit"),
                                              v.empty_dir->size_limit->text(), kNonNegative));
      }
    }
    if (v.host_path) {
      std::string p = Child(path, "hostPath");
      if (v.host_path->path.empty()) {
        errors_.push_back(FieldError::Required(Child(p, "path")));
      } else if (HasDotDot(v.host_path->path)) {
        errors_.push_back(
            FieldError::Invalid(Child(p, "path"), v.host_path->path, "must not contain '..'"));
      }
      static const std::vector<std::string_view> kTypes = {
          "",     "BlockDevice",  "CharDevice", "Directory", "DirectoryOrCreate",
          "File", "FileOrCreate", "Socket"};
      bool known = false;
      for (auto t : kTypes) known = known || t == v.host_path->type;
      if (!known)
        errors_.push_back(FieldError::NotSupported(Child(p, "type"), v.host_path->type, kTypes));
    }
    if (v.config_map) {
      std::string p = Child(path, "configMap");
      if (v.config_map->name.empty()) errors_.push_back(FieldError::Required(Child(p, "name")));
      Items(v.config_map->items, p);
      Mode(Child(p, "defaultMode"), v.config_map->default_mode);
    }
    if (v.secret) {
      std::string p = Child(path, "secret");
      if (v.secret->secret_name.empty()) {
        errors_.push_back(FieldError::Required(Child(p, "secretName")));
      }
      Items(v.secret->items, p);
      Mode(Child(p, "defaultMode"), v.secret->default_mode);
    }
    if (v.downward_api) {
      std::string p = Child(path, "downwardAPI");
      for (size_t i = 0; i < v.downward_api->items.size(); ++i) {
        const DownwardApiVolumeFile& file = v.downward_api->items[i];
        std::string ip = Index(Child(p, "items"), i);
        RelativePath(Child(ip, "path"), file.path, true);
        if (file.field_ref && file.resource_field_ref) {
          errors_.push_back(FieldError::Invalid(
              ip, "resource", "fieldRef and resourceFieldRef can not be specified simultaneously"));
        } else if (file.field_ref) {
          FieldPathRef(*file.field_ref, Child(ip, "fieldRef"));
        } else if (file.resource_field_ref) {
          ResourceRef(*file.resource_field_ref, Child(ip, "resourceFieldRef"));
        } else {
          errors_.push_back(
              FieldError::Required(ip, "one of fieldRef and resourceFieldRef is required"));
        }
        Mode(Child(ip, "mode"), file.mode);
      }
      Mode(Child(p, "defaultMode"), v.downward_api->default_mode);
    }
  }

  FieldErrors& errors_;
  std::optional<int64_t> grace_period_;
};

}  // namespace

FieldErrors ValidatePod(const Pod& pod) {
  FieldErrors errors;
  PodValidator(errors).Run(pod);
  return errors;
}

}  // namespace nodelet::pod
