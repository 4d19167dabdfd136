// PodValidator's checks of the pod's volumes (validation.h): one source each, emptyDir,
// hostPath, configMap, secret and downwardAPI with their items, file modes and relative paths,
// and the downward API's field and resource selectors (also used by a container's env).
#include <algorithm>
#include <set>
#include <string_view>

#include "lib/pod/names.h"
#include "lib/pod/pod_validator.h"

namespace nodelet::pod::validation_internal {
namespace {

constexpr char kFileModeError[] = "must be a number between 0 and 0777 (octal), both inclusive";

}  // namespace

void PodValidator::VolumeFields(const Volume& v, const std::string& path,
                                std::set<std::string>& names) {
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
      errors_.push_back(FieldError::Invalid(Child(p, "sizeLimit"), v.empty_dir->size_limit->text(),
                                            kNonNegative));
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

void PodValidator::Items(const std::vector<KeyToPath>& items, const std::string& path) {
  for (size_t i = 0; i < items.size(); ++i) {
    std::string p = Index(Child(path, "items"), i);
    if (items[i].key.empty()) errors_.push_back(FieldError::Required(Child(p, "key")));
    RelativePath(Child(p, "path"), items[i].path, true);
    Mode(Child(p, "mode"), items[i].mode);
  }
}

void PodValidator::Mode(const std::string& path, const std::optional<int32_t>& mode) {
  if (mode && (*mode < 0 || *mode > 0777)) {
    errors_.push_back(FieldError::Invalid(path, *mode, kFileModeError));
  }
}

// A path inside a volume: relative, no '..' element.
void PodValidator::RelativePath(const std::string& path, const std::string& value, bool required) {
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

bool PodValidator::HasDotDot(std::string_view p) {
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

// `env`: an env var's fieldRef, which may also name spec.* and status.* fields but not the
// whole label or annotation maps.
void PodValidator::FieldPathRef(const ObjectFieldSelector& ref, const std::string& path, bool env) {
  if (ref.api_version.empty()) {
    errors_.push_back(FieldError::Required(Child(path, "apiVersion")));
  } else if (ref.api_version != "v1") {
    errors_.push_back(FieldError::NotSupported(Child(path, "apiVersion"), ref.api_version, {"v1"}));
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
void PodValidator::ResourceRef(const ResourceFieldSelector& ref, const std::string& path,
                               bool env) {
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

}  // namespace nodelet::pod::validation_internal
