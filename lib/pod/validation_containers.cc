// PodValidator's checks of a container (validation.h): name, image and policies, ports and host
// ports, env and envFrom, resource requests and limits, volume mounts, and the handlers of its
// probes and lifecycle hooks.
#include <set>
#include <string_view>
#include <utility>

#include "lib/pod/names.h"
#include "lib/pod/pod_validator.h"

namespace nodelet::pod::validation_internal {
namespace {

constexpr char kPortRange[] = "must be between 1 and 65535, inclusive";

}  // namespace

void PodValidator::ContainerFields(const Container& c, const std::string& path,
                                   std::set<std::string>& names,
                                   const std::set<std::string>& volumes, bool host_network,
                                   bool init) {
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
    errors_.push_back(FieldError::NotSupported(Child(path, "imagePullPolicy"), c.image_pull_policy,
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

void PodValidator::Ports(const Container& c, const std::string& path, bool host_network) {
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

// Host ports must be unique per protocol across the pod's containers.
void PodValidator::HostPorts(const std::vector<Container>& containers) {
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

void PodValidator::ResourceName(const std::string& path, const std::string& name) {
  static const std::set<std::string_view> kStandard = {"cpu", "memory", "ephemeral-storage"};
  if (kStandard.count(name) || name.rfind("hugepages-", 0) == 0) return;
  if (name.find('/') == std::string::npos) {
    errors_.push_back(
        FieldError::Invalid(path, name, "must be a standard resource type or fully qualified"));
    return;
  }
  Invalid(path, name, IsQualifiedName(name));
}

void PodValidator::Resources(const ResourceRequirements& r, const std::string& path) {
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

void PodValidator::Mounts(const Container& c, const std::string& path,
                          const std::set<std::string>& volumes) {
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

void PodValidator::Env(const EnvVar& e, const std::string& path) {
  std::string name_path = Child(path, "name");
  if (e.name.empty()) {
    errors_.push_back(FieldError::Required(name_path));
  } else {
    Invalid(name_path, e.name, IsEnvVarName(e.name));
  }
  if (!e.value_from) return;
  std::string p = Child(path, "valueFrom");
  if (!e.value.empty()) {
    errors_.push_back(FieldError::Invalid(p, "", "may not be specified when `value` is not empty"));
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

void PodValidator::EnvFrom(const EnvFromSource& e, const std::string& path) {
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

void PodValidator::PortRef(const IntOrString& port, const std::string& path) {
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
void PodValidator::OneHandler(int& handlers, const std::string& p) {
  if (handlers++ > 0) {
    errors_.push_back(FieldError::Forbidden(p, "may not specify more than 1 handler type"));
  }
}

void PodValidator::ExecAndHttpGet(const std::optional<ExecAction>& exec,
                                  const std::optional<HttpGetAction>& http_get,
                                  const std::string& path, int& handlers) {
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

void PodValidator::Handler(const LifecycleHandler& h, const std::string& path) {
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

void PodValidator::ProbeFields(const Probe& probe, const std::string& path,
                               bool success_must_be_one) {
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
    errors_.push_back(
        FieldError::Invalid(Child(path, "successThreshold"), probe.success_threshold, "must be 1"));
  }
}

}  // namespace nodelet::pod::validation_internal
