#include "lib/pod/security.h"

#include <algorithm>
#include <array>
#include <cctype>

namespace nodelet::pod {
namespace {

// Linux's capabilities (capability.h, 0..40), without CAP_.
constexpr std::array<std::string_view, 41> kCapabilities = {"CHOWN",
                                                            "DAC_OVERRIDE",
                                                            "DAC_READ_SEARCH",
                                                            "FOWNER",
                                                            "FSETID",
                                                            "KILL",
                                                            "SETGID",
                                                            "SETUID",
                                                            "SETPCAP",
                                                            "LINUX_IMMUTABLE",
                                                            "NET_BIND_SERVICE",
                                                            "NET_BROADCAST",
                                                            "NET_ADMIN",
                                                            "NET_RAW",
                                                            "IPC_LOCK",
                                                            "IPC_OWNER",
                                                            "SYS_MODULE",
                                                            "SYS_RAWIO",
                                                            "SYS_CHROOT",
                                                            "SYS_PTRACE",
                                                            "SYS_PACCT",
                                                            "SYS_ADMIN",
                                                            "SYS_BOOT",
                                                            "SYS_NICE",
                                                            "SYS_RESOURCE",
                                                            "SYS_TIME",
                                                            "SYS_TTY_CONFIG",
                                                            "MKNOD",
                                                            "LEASE",
                                                            "AUDIT_WRITE",
                                                            "AUDIT_CONTROL",
                                                            "SETFCAP",
                                                            "MAC_OVERRIDE",
                                                            "MAC_ADMIN",
                                                            "SYSLOG",
                                                            "WAKE_ALARM",
                                                            "BLOCK_SUSPEND",
                                                            "AUDIT_READ",
                                                            "PERFMON",
                                                            "BPF",
                                                            "CHECKPOINT_RESTORE"};

// The kubelet's safe sysctls (pkg/kubelet/sysctl), all namespaced on kernels since 4.15.
constexpr std::array<std::string_view, 12> kSafeSysctls = {"kernel.shm_rmid_forced",
                                                           "net.ipv4.ip_local_port_range",
                                                           "net.ipv4.tcp_syncookies",
                                                           "net.ipv4.ping_group_range",
                                                           "net.ipv4.ip_unprivileged_port_start",
                                                           "net.ipv4.ip_local_reserved_ports",
                                                           "net.ipv4.tcp_keepalive_time",
                                                           "net.ipv4.tcp_fin_timeout",
                                                           "net.ipv4.tcp_keepalive_intvl",
                                                           "net.ipv4.tcp_keepalive_probes",
                                                           "net.ipv4.tcp_rmem",
                                                           "net.ipv4.tcp_wmem"};

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

std::optional<SecurityProfile> ContainerProfile(const Container& c, bool seccomp) {
  if (!c.security_context) return std::nullopt;
  return seccomp ? c.security_context->seccomp_profile : c.security_context->app_armor_profile;
}

std::optional<SecurityProfile> PodProfile(const Pod& pod, bool seccomp) {
  if (!pod.spec.security_context) return std::nullopt;
  return seccomp ? pod.spec.security_context->seccomp_profile
                 : pod.spec.security_context->app_armor_profile;
}

template <typename T>
std::optional<T> Pick(const std::optional<T>& container, const std::optional<T>& pod) {
  return container ? container : pod;
}

}  // namespace

std::optional<std::string> CanonicalCapability(std::string_view name) {
  std::string upper;
  upper.reserve(name.size());
  for (char ch : name)
    upper.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(ch))));
  if (upper == "ALL") return upper;
  if (StartsWith(upper, "CAP_")) upper.erase(0, 4);
  if (std::find(kCapabilities.begin(), kCapabilities.end(), upper) == kCapabilities.end()) {
    return std::nullopt;
  }
  return upper;
}

std::string SysctlDotted(std::string_view name) {
  std::string out(name);
  size_t first = out.find_first_of("./");
  if (first == std::string::npos || out[first] == '.') return out;
  for (char& ch : out) {
    if (ch == '.') {
      ch = '/';
    } else if (ch == '/') {
      ch = '.';
    }
  }
  return out;
}

bool IsSafeSysctl(std::string_view dotted) {
  return std::find(kSafeSysctls.begin(), kSafeSysctls.end(), dotted) != kSafeSysctls.end();
}

std::string_view SysctlNamespace(std::string_view dotted) {
  if (dotted == "kernel.sem" || StartsWith(dotted, "kernel.shm") ||
      StartsWith(dotted, "kernel.msg") || StartsWith(dotted, "fs.mqueue.")) {
    return "ipc";
  }
  if (StartsWith(dotted, "net.")) return "net";
  return "";
}

bool SysctlMatches(std::string_view dotted, const std::vector<std::string>& patterns) {
  for (const auto& p : patterns) {
    std::string pattern = SysctlDotted(p);
    if (!pattern.empty() && pattern.back() == '*') {
      if (StartsWith(dotted, std::string_view(pattern).substr(0, pattern.size() - 1))) {
        return true;
      }
    } else if (pattern == dotted) {
      return true;
    }
  }
  return false;
}

std::string ForbiddenSysctls(const Pod& pod, const std::vector<std::string>& allowed_unsafe) {
  if (!pod.spec.security_context) return "";
  for (const auto& s : pod.spec.security_context->sysctls) {
    std::string name = SysctlDotted(s.name);
    std::string_view ns = SysctlNamespace(name);
    if (ns.empty()) return "forbidden sysctl: \"" + name + "\" not a namespaced sysctl";
    if (ns == "net" && pod.spec.host_network) {
      return "forbidden sysctl: \"" + name + "\" not allowed with host net enabled";
    }
    if (ns == "ipc" && pod.spec.host_ipc) {
      return "forbidden sysctl: \"" + name + "\" not allowed with host ipc enabled";
    }
    if (!IsSafeSysctl(name) && !SysctlMatches(name, allowed_unsafe)) {
      return "forbidden sysctl: \"" + name + "\" not allowlisted";
    }
  }
  return "";
}

std::optional<int64_t> EffectiveRunAsUser(const Pod& pod, const Container& c) {
  return Pick(c.security_context ? c.security_context->run_as_user : std::nullopt,
              pod.spec.security_context ? pod.spec.security_context->run_as_user : std::nullopt);
}

std::optional<int64_t> EffectiveRunAsGroup(const Pod& pod, const Container& c) {
  return Pick(c.security_context ? c.security_context->run_as_group : std::nullopt,
              pod.spec.security_context ? pod.spec.security_context->run_as_group : std::nullopt);
}

bool EffectiveRunAsNonRoot(const Pod& pod, const Container& c) {
  return Pick(c.security_context ? c.security_context->run_as_non_root : std::nullopt,
              pod.spec.security_context ? pod.spec.security_context->run_as_non_root : std::nullopt)
      .value_or(false);
}

SecurityProfile EffectiveSeccomp(const Pod& pod, const Container& c) {
  return Pick(ContainerProfile(c, true), PodProfile(pod, true))
      .value_or(SecurityProfile{kProfileUnconfined, ""});
}

std::optional<SecurityProfile> AppArmorFromAnnotation(std::string_view value) {
  if (value == "runtime/default") return SecurityProfile{kProfileRuntimeDefault, ""};
  if (value == "unconfined") return SecurityProfile{kProfileUnconfined, ""};
  if (StartsWith(value, "localhost/") && value.size() > 10) {
    return SecurityProfile{kProfileLocalhost, std::string(value.substr(10))};
  }
  return std::nullopt;
}

std::optional<SecurityProfile> EffectiveAppArmor(const Pod& pod, const Container& c) {
  if (auto p = Pick(ContainerProfile(c, false), PodProfile(pod, false))) return p;
  auto it = pod.metadata.annotations.find(kAppArmorAnnotationPrefix + c.name);
  if (it == pod.metadata.annotations.end()) return std::nullopt;
  return AppArmorFromAnnotation(it->second);
}

bool NeedsAppArmor(const Pod& pod) {
  for (const auto* list : {&pod.spec.init_containers, &pod.spec.containers}) {
    for (const auto& c : *list) {
      auto p = EffectiveAppArmor(pod, c);
      if (p && p->type != kProfileUnconfined) return true;
    }
  }
  return false;
}

}  // namespace nodelet::pod
