// The ConfigMaps and Secrets the pod sources carry (podwork.fbs DesiredPods.config_maps /
// secrets), as volumed (configMap and secret volumes) and podworkerd (env valueFrom and envFrom)
// read them: by "namespace/name", each key with its value (a Secret's decoded).
#pragma once

#include <flatbuffers/flatbuffers.h>

#include <map>
#include <string>

#include "podwork_generated.h"

namespace nodelet::pod {

struct ConfigObject {
  std::string namespace_name;
  std::string name;
  std::map<std::string, std::string> data;
  std::string type;  // a Secret's type; empty for a ConfigMap
  bool operator==(const ConfigObject&) const = default;
};

// "namespace/name" -> object. Entries without a key are skipped; a missing namespace is
// "default".
using ConfigObjectMap = std::map<std::string, ConfigObject>;

ConfigObjectMap DecodeConfigObjects(
    const flatbuffers::Vector<flatbuffers::Offset<ipc::podwork::ConfigObject>>* list);

}  // namespace nodelet::pod
