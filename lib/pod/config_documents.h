// The ConfigMap and Secret documents of a pod source (a manifest file's other documents, an
// etcd key's object), read into what volumed and podworkerd are sent (podwork.fbs
// ConfigObject). As the API server decodes them: a ConfigMap's `data` (text) and `binaryData`
// (base64), a Secret's `data` (base64) and `stringData` (text, which wins over `data` for the
// same key), a Secret's `type` ("Opaque" when it names none). A Secret of a type whose keys the
// API server requires is refused without them: kubernetes.io/dockerconfigjson needs a
// `.dockerconfigjson` that is a JSON object, kubernetes.io/dockercfg a `.dockercfg` that is one.
#pragma once

#include <map>
#include <string>

#include "lib/common/status.h"
#include "lib/pod/manifest_parser.h"

namespace nodelet::pod {

// A ConfigMap or Secret from a pod source (values decoded).
struct ConfigData {
  std::string kind;  // ConfigMap or Secret
  std::string namespace_name;
  std::string name;
  std::map<std::string, std::string> data;
  std::string type;  // a Secret's type ("Opaque" when it names none); empty for a ConfigMap
  bool operator==(const ConfigData&) const = default;
};

// A ConfigMap or Secret document's data, or an error naming the field.
Result<ConfigData> ParseConfigObject(const OtherDocument& doc);

}  // namespace nodelet::pod
