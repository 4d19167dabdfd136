// PodValidator's checks of security settings (validation.h): a container's and the pod's
// securityContext (ids, privilege, capabilities, seccomp and AppArmor profiles, procMount,
// supplemental groups, sysctls), shareProcessNamespace with hostPID, and the AppArmor
// annotations.
#include <algorithm>
#include <set>
#include <string_view>
#include <utility>

#include "lib/pod/names.h"
#include "lib/pod/pod_validator.h"
#include "lib/pod/security.h"

namespace nodelet::pod::validation_internal {

void PodValidator::Security(const SecurityContext& sc, const std::string& path) {
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
    errors_.push_back(
        FieldError::NotSupported(Child(path, "procMount"), sc.proc_mount, {"Default", "Unmasked"}));
  }
}

// seccompProfile or appArmorProfile.
void PodValidator::Profile(const SecurityProfile& p, const std::string& path, bool seccomp) {
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

void PodValidator::PodSecurity(const PodSpec& s) {
  const std::string path = "spec.securityContext";
  if (s.share_process_namespace.value_or(false) && s.host_pid) {
    errors_.push_back(
        FieldError::InvalidRendered("spec.shareProcessNamespace", "true",
                                    "ShareProcessNamespace and HostPID cannot both be enabled"));
  }
  if (!s.security_context) return;
  const PodSecurityContext& sc = *s.security_context;
  const std::pair<const std::optional<int64_t>*, const char*> ids[] = {
      {&sc.run_as_user, "runAsUser"}, {&sc.run_as_group, "runAsGroup"}, {&sc.fs_group, "fsGroup"}};
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

bool PodValidator::IsSysctlName(std::string_view name) {
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
void PodValidator::AppArmorAnnotations(const Pod& pod) {
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

}  // namespace nodelet::pod::validation_internal
