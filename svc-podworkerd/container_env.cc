#include "svc-podworkerd/container_env.h"

#include <map>
#include <optional>

#include "lib/pod/names.h"

namespace nodelet::podworkerd {
namespace {

// The environment as it is built: values by name, and the names in first-definition order.
class EnvBuilder {
 public:
  void Set(const std::string& name, std::string value) {
    auto [it, added] = values_.insert_or_assign(name, std::move(value));
    if (added) order_.push_back(name);
  }
  std::optional<std::string> Get(std::string_view name) const {
    auto it = values_.find(std::string(name));
    if (it == values_.end()) return std::nullopt;
    return it->second;
  }
  std::vector<std::pair<std::string, std::string>> List() const {
    std::vector<std::pair<std::string, std::string>> out;
    out.reserve(order_.size());
    for (const auto& name : order_) out.emplace_back(name, values_.at(name));
    return out;
  }

 private:
  std::map<std::string, std::string> values_;
  std::vector<std::string> order_;
};

const pod::ConfigObject* Find(const pod::ConfigObjectMap& objects, const pod::Pod& pod,
                              const std::string& name) {
  auto it = objects.find(pod.metadata.namespace_name + "/" + name);
  return it == objects.end() ? nullptr : &it->second;
}

// A configMapKeyRef or secretKeyRef: the value, nullopt when it is optional and missing.
Result<std::optional<std::string>> KeyValue(const pod::ConfigObjectMap& objects,
                                            const pod::Pod& pod, const pod::KeySelector& ref,
                                            const char* kind, const char* lower_kind) {
  const pod::ConfigObject* obj = Find(objects, pod, ref.name);
  if (obj == nullptr) {
    if (ref.optional.value_or(false)) return std::optional<std::string>();
    return NotFound(std::string(lower_kind) + " \"" + ref.name + "\" not found");
  }
  auto it = obj->data.find(ref.key);
  if (it == obj->data.end()) {
    if (ref.optional.value_or(false)) return std::optional<std::string>();
    return NotFound("couldn't find key " + ref.key + " in " + kind + " " +
                    pod.metadata.namespace_name + "/" + ref.name);
  }
  return std::optional<std::string>(it->second);
}

}  // namespace

Result<ContainerEnvironment> MakeContainerEnvironment(const pod::Pod& pod, const pod::Container& c,
                                                      const EnvSources& sources) {
  ContainerEnvironment out;
  EnvBuilder env;
  for (const auto& from : c.env_from) {
    const bool is_secret = from.secret_ref.has_value();
    const pod::EnvFromRef& ref = is_secret ? *from.secret_ref : *from.config_map_ref;
    const pod::ConfigObject* obj =
        Find(is_secret ? sources.secrets : sources.config_maps, pod, ref.name);
    if (obj == nullptr) {
      if (ref.optional.value_or(false)) continue;
      return NotFound(std::string(is_secret ? "secret" : "configmap") + " \"" + ref.name +
                      "\" not found");
    }
    std::vector<std::string> invalid;
    for (const auto& [key, value] : obj->data) {
      std::string name = from.prefix + key;
      if (!pod::IsEnvVarName(name).empty()) {
        invalid.push_back(name);
        continue;
      }
      env.Set(name, value);
    }
    if (!invalid.empty()) {
      std::string keys;
      for (const auto& k : invalid) keys += (keys.empty() ? "" : ", ") + k;
      out.warnings.push_back("Keys [" + keys + "] from the EnvFrom " +
                             (is_secret ? "secret " : "configMap ") + pod.metadata.namespace_name +
                             "/" + ref.name +
                             " were skipped since they are considered invalid environment "
                             "variable names.");
    }
  }
  auto lookup = [&env](std::string_view name) { return env.Get(name); };
  for (const auto& var : c.env) {
    if (!var.value_from) {
      env.Set(var.name, pod::ExpandReferences(var.value, lookup));
      continue;
    }
    const pod::EnvVarSource& from = *var.value_from;
    if (from.field_ref) {
      auto v = pod::PodFieldValue(pod, from.field_ref->field_path, sources.runtime);
      if (!v.ok()) return InvalidArgument("env " + var.name + ": " + v.status().message());
      env.Set(var.name, *v);
    } else if (from.resource_field_ref) {
      auto v = pod::ResourceFieldValue(pod, *from.resource_field_ref, c.name, sources.node);
      if (!v.ok()) return InvalidArgument("env " + var.name + ": " + v.status().message());
      env.Set(var.name, *v);
    } else if (from.config_map_key_ref || from.secret_key_ref) {
      const bool is_secret = from.secret_key_ref.has_value();
      auto v = is_secret ? KeyValue(sources.secrets, pod, *from.secret_key_ref, "Secret", "secret")
                         : KeyValue(sources.config_maps, pod, *from.config_map_key_ref, "ConfigMap",
                                    "configmap");
      if (!v.ok()) return v.status();
      if (*v) env.Set(var.name, **v);
    }
  }
  for (const auto& a : c.command) out.command.push_back(pod::ExpandReferences(a, lookup));
  for (const auto& a : c.args) out.args.push_back(pod::ExpandReferences(a, lookup));
  out.env = env.List();
  return out;
}

}  // namespace nodelet::podworkerd
