// What a pod's securityContext means, as the kubelet reads it: capability names, the sysctls a
// pod may set, and the effective settings of one container (its own field, else the pod's,
// else AppArmor's legacy annotation). Pure functions of the model; podworkerd turns them into
// the CRI's security context and the supervisor's admission checks sysctls and AppArmor with
// them (docs/security.md).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lib/pod/pod.h"

namespace nodelet::pod {

inline constexpr char kProfileRuntimeDefault[] = "RuntimeDefault";
inline constexpr char kProfileUnconfined[] = "Unconfined";
inline constexpr char kProfileLocalhost[] = "Localhost";

// container.apparmor.security.beta.kubernetes.io/CONTAINER: runtime/default, unconfined or
// localhost/PROFILE (the field appArmorProfile replaced it; a field wins over the annotation).
inline constexpr char kAppArmorAnnotationPrefix[] =
    "container.apparmor.security.beta.kubernetes.io/";

// A capability as the CRI takes it: the name in capitals without "CAP_" (containerd adds the
// prefix; "net_raw", "NET_RAW" and "CAP_NET_RAW" are all NET_RAW), or "ALL". nullopt for a name
// Linux does not have.
std::optional<std::string> CanonicalCapability(std::string_view name);

// kernel/shm_rmid_forced → kernel.shm_rmid_forced (the kubelet's conversion: a name that uses
// slashes has its dots and slashes swapped).
std::string SysctlDotted(std::string_view name);

// The kubelet's safe set: allowed for every pod.
bool IsSafeSysctl(std::string_view dotted);

// Which of the pod's namespaces a sysctl lives in: "net", "ipc", or "" (the node's: never
// settable for a pod).
std::string_view SysctlNamespace(std::string_view dotted);

// Patterns as given to --allowed-unsafe-sysctls: a name, or a prefix ending in "*".
bool SysctlMatches(std::string_view dotted, const std::vector<std::string>& patterns);

// Why the pod may not set its sysctls (the kubelet's SysctlForbidden message), or "" when it
// may.
std::string ForbiddenSysctls(const Pod& pod, const std::vector<std::string>& allowed_unsafe);

// The container's settings after the pod's defaults (a container's own field wins).
std::optional<int64_t> EffectiveRunAsUser(const Pod& pod, const Container& c);
std::optional<int64_t> EffectiveRunAsGroup(const Pod& pod, const Container& c);
bool EffectiveRunAsNonRoot(const Pod& pod, const Container& c);
// No profile anywhere: Unconfined, the kubelet's default (its seccompDefault is off).
SecurityProfile EffectiveSeccomp(const Pod& pod, const Container& c);
// The field, else the pod's field, else the annotation; nullopt when none is set (the
// runtime's default).
std::optional<SecurityProfile> EffectiveAppArmor(const Pod& pod, const Container& c);
// An annotation's value as a profile; nullopt when it is not one of the three forms.
std::optional<SecurityProfile> AppArmorFromAnnotation(std::string_view value);

// True when some container asks for an AppArmor profile other than Unconfined.
bool NeedsAppArmor(const Pod& pod);

}  // namespace nodelet::pod
