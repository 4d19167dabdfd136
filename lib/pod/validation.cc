// ValidatePod (validation.h) and PodValidator's checks of the metadata (name, namespace, uid,
// labels, annotations) and of the pod spec's own fields (restart policy, deadlines, the names it
// refers to, hostname, host aliases, DNS policy and config). Containers, volumes and security
// contexts are checked in the validation_*.cc files next to this one.
#include "lib/pod/validation.h"

#include <cctype>
#include <set>
#include <string_view>

#include "lib/pod/names.h"
#include "lib/pod/pod_validator.h"

namespace nodelet::pod::validation_internal {
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

constexpr size_t kTotalAnnotationSizeLimit = 256 * 1024;

}  // namespace

void PodValidator::Run(const Pod& pod) {
  Meta(pod.metadata);
  Spec(pod.spec);
  PodSecurity(pod.spec);
  AppArmorAnnotations(pod);
}

void PodValidator::Invalid(std::string path, std::string_view value,
                           const std::vector<std::string>& msgs) {
  for (const auto& m : msgs) errors_.push_back(FieldError::Invalid(path, value, m));
}

void PodValidator::NonNegative(const std::string& path, int64_t v) {
  if (v < 0) errors_.push_back(FieldError::Invalid(path, v, kNonNegative));
}

void PodValidator::Meta(const ObjectMeta& m) {
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

void PodValidator::Spec(const PodSpec& s) {
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
    errors_.push_back(FieldError::Invalid("spec.activeDeadlineSeconds", *s.active_deadline_seconds,
                                          "must be between 1 and 2147483647, inclusive"));
  }
  if (!s.node_name.empty()) Invalid("spec.nodeName", s.node_name, IsDns1123Subdomain(s.node_name));
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
void PodValidator::Dns(const PodSpec& s) {
  if (!s.hostname.empty()) Invalid("spec.hostname", s.hostname, IsDns1123Label(s.hostname));
  if (!s.subdomain.empty()) Invalid("spec.subdomain", s.subdomain, IsDns1123Label(s.subdomain));
  for (size_t i = 0; i < s.host_aliases.size(); ++i) {
    const HostAlias& a = s.host_aliases[i];
    std::string p = Index("spec.hostAliases", i);
    Invalid(Child(p, "ip"), a.ip, IsValidIp(a.ip));
    for (size_t j = 0; j < a.hostnames.size(); ++j) {
      Invalid(Index(Child(p, "hostnames"), j), a.hostnames[j], IsDns1123Subdomain(a.hostnames[j]));
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
std::string PodValidator::Join(const std::vector<std::string>& list) {
  std::string out = "[";
  for (size_t i = 0; i < list.size(); ++i) out += (i ? " " : "") + list[i];
  return out + "]";
}

}  // namespace nodelet::pod::validation_internal

namespace nodelet::pod {

FieldErrors ValidatePod(const Pod& pod) {
  FieldErrors errors;
  validation_internal::PodValidator(errors).Run(pod);
  return errors;
}

}  // namespace nodelet::pod
