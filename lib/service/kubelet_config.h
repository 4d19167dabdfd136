// A kubelet configuration file (KubeletConfiguration, kubelet.config.k8s.io/v1beta1) as nodelet's
// --config: the fields nodelet has are translated into its own keys, a field whose value is what
// nodelet does anyway is accepted, and every other field is refused by name (docs/flags.md,
// "A KubeletConfiguration as --config").
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

#include "lib/common/status.h"

namespace nodelet {

// Whether the document is a KubeletConfiguration (its `kind`).
bool IsKubeletConfiguration(const YAML::Node& root);

// nodelet's form of the KubeletConfiguration `root`: top-level keys, and a `podworkerd:` section
// for the keys that only podworkerd means (runtimeRequestTimeout: plegd has a key of that name
// with another meaning). An error names `file`, the field and why.
Result<YAML::Node> FromKubeletConfiguration(const YAML::Node& root, const std::string& file);

}  // namespace nodelet
