// Pods and volumes for the volumed tests (volume_manager_test.cc, volume_reconciler_test.cc),
// filled in field by field as a manifest would set them.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lib/pod/pod.h"
#include "tests/testing/harness.h"

namespace nodelet::volumed::test_pods {

inline std::string Read(const std::string& path) { return testing::ReadTextFile(path); }

// A pod "web" in the default namespace with `volumes`.
inline std::shared_ptr<const pod::Pod> MakePod(const std::string& uid,
                                               std::vector<pod::Volume> volumes,
                                               std::map<std::string, std::string> labels = {}) {
  auto p = std::make_shared<pod::Pod>();
  p->metadata.name = "web";
  p->metadata.namespace_name = "default";
  p->metadata.uid = uid;
  p->metadata.labels = std::move(labels);
  p->spec.volumes = std::move(volumes);
  return p;
}

inline pod::Volume EmptyDir(const std::string& name, const std::string& medium = "") {
  pod::Volume v;
  v.name = name;
  v.empty_dir = pod::EmptyDirVolumeSource{};
  v.empty_dir->medium = medium;
  return v;
}

inline pod::Volume HostPath(const std::string& name, const std::string& path,
                            const std::string& type) {
  pod::Volume v;
  v.name = name;
  v.host_path = pod::HostPathVolumeSource{path, type};
  return v;
}

inline pod::Volume ConfigMap(const std::string& name, const std::string& object) {
  pod::Volume v;
  v.name = name;
  v.config_map = pod::ConfigMapVolumeSource{};
  v.config_map->name = object;
  return v;
}

inline pod::Volume Secret(const std::string& name, const std::string& object) {
  pod::Volume v;
  v.name = name;
  v.secret = pod::SecretVolumeSource{};
  v.secret->secret_name = object;
  return v;
}

// A downwardAPI volume with one file, "labels", holding the pod's labels.
inline pod::Volume DownwardApi(const std::string& name) {
  pod::Volume v;
  v.name = name;
  v.downward_api = pod::DownwardApiVolumeSource{};
  pod::DownwardApiVolumeFile f;
  f.path = "labels";
  f.field_ref = pod::ObjectFieldSelector{"v1", "metadata.labels"};
  v.downward_api->items.push_back(f);
  return v;
}

}  // namespace nodelet::volumed::test_pods
