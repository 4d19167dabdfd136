#include "lib/pod/config_documents.h"

#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>
#include <utility>

#include "lib/common/base64.h"
#include "lib/pod/pod.h"

namespace nodelet::pod {
namespace {

constexpr char kDockerConfigJsonType[] = "kubernetes.io/dockerconfigjson";
constexpr char kDockercfgType[] = "kubernetes.io/dockercfg";

}  // namespace

// A ConfigMap or Secret document's data, or an error naming the field.
Result<ConfigData> ParseConfigObject(const OtherDocument& doc) {
  ConfigData out;
  out.kind = doc.kind;
  out.namespace_name = doc.namespace_name.empty() ? kDefaultNamespace : doc.namespace_name;
  out.name = doc.name;
  if (out.name.empty()) return InvalidArgument("metadata.name: Required value");
  auto read_map = [&](const char* field, bool base64) -> Status {
    YAML::Node m = doc.object[field];
    if (!m) return Status::Ok();
    if (!m.IsMap()) return InvalidArgument(std::string(field) + ": must be a map");
    for (const auto& kv : m) {
      std::string key = kv.first.as<std::string>(), value = kv.second.as<std::string>("");
      if (base64) {
        auto decoded = DecodeBase64(value);
        if (!decoded) return InvalidArgument(std::string(field) + "." + key + ": invalid base64");
        value = *decoded;
      }
      out.data[key] = value;
    }
    return Status::Ok();
  };
  try {
    const bool secret = doc.kind == "Secret";
    if (secret) {
      YAML::Node type = doc.object["type"];
      if (type && !type.IsScalar()) return InvalidArgument("type: must be a string");
      out.type = type ? type.as<std::string>() : "";
      if (out.type.empty()) out.type = "Opaque";
    }
    if (Status s = read_map(secret ? "data" : "binaryData", true); !s.ok()) return s;
    if (Status s = read_map(secret ? "stringData" : "data", false); !s.ok()) return s;
  } catch (const YAML::Exception& e) {
    return InvalidArgument(std::string("data: ") + e.what());
  }
  // The registry credentials' types: their key must be there and hold a JSON object.
  for (const auto& [type, key] :
       {std::pair<std::string, std::string>{kDockerConfigJsonType, ".dockerconfigjson"},
        {kDockercfgType, ".dockercfg"}}) {
    if (out.type != type) continue;
    auto it = out.data.find(key);
    if (it == out.data.end()) return InvalidArgument("data[" + key + "]: Required value");
    auto json = nlohmann::json::parse(it->second, nullptr, false);
    if (json.is_discarded() || !json.is_object()) {
      return InvalidArgument("data[" + key + "]: Invalid value: must be a JSON object (" + type +
                             ")");
    }
  }
  return out;
}

}  // namespace nodelet::pod
