#include "lib/service/config_keys.h"

#include <algorithm>
#include <cstdint>
#include <set>

namespace nodelet {
namespace {

// The flags AddCommonOptions gives every binary (lib/service/options.cc).
const std::vector<std::string> kCommonKeys = {"admin-group", "heartbeat-interval", "log-dir",
                                              "log-format",  "log-level",          "root-dir",
                                              "run-dir"};
// lib/service/cgroup_flags.h, container_log_flags.h, dns_flags.h: the supervisor passes these
// on to podworkerd.
const std::vector<std::string> kCgroupKeys = {"cgroup-driver", "cgroup-root", "cgroups-per-qos",
                                              "enforce-node-allocatable"};
const std::vector<std::string> kContainerLogKeys = {
    "container-log-max-files", "container-log-max-size", "container-log-monitor-interval"};
const std::vector<std::string> kDnsKeys = {"cluster-dns", "cluster-domain", "resolv-conf"};

ConfigSection Section(std::string name, std::vector<std::vector<std::string>> groups) {
  ConfigSection s;
  s.name = std::move(name);
  for (auto& group : groups) s.keys.insert(s.keys.end(), group.begin(), group.end());
  s.keys.insert(s.keys.end(), kCommonKeys.begin(), kCommonKeys.end());
  std::sort(s.keys.begin(), s.keys.end());
  s.keys.erase(std::unique(s.keys.begin(), s.keys.end()), s.keys.end());
  return s;
}

std::vector<ConfigSection> BuildSections() {
  std::vector<ConfigSection> out;
  // supervisor/supervisor_options.cc
  out.push_back(Section("supervisor", {{"allowed-unsafe-sysctls",
                                        "backoff-initial",
                                        "backoff-max",
                                        "backoff-reset-after",
                                        "ctl-group",
                                        "enable-debugging-handlers",
                                        "etcd-allow-insecure",
                                        "etcd-cafile",
                                        "etcd-certfile",
                                        "etcd-endpoints",
                                        "etcd-keyfile",
                                        "etcd-prefix",
                                        "eviction-hard",
                                        "eviction-max-pod-grace-period",
                                        "eviction-minimum-reclaim",
                                        "eviction-monitoring-period",
                                        "eviction-pressure-transition-period",
                                        "eviction-soft",
                                        "eviction-soft-grace-period",
                                        "failing-grace",
                                        "fatal-cooldown",
                                        "heartbeat-deadline",
                                        "http-address",
                                        "http-check-frequency",
                                        "kube-reserved",
                                        "log-backups",
                                        "log-max-bytes",
                                        "manifest-url",
                                        "manifest-url-ca",
                                        "manifest-url-header",
                                        "max-pods",
                                        "mode",
                                        "node-ip",
                                        "node-lease-duration-seconds",
                                        "node-name",
                                        "pod-manifest-path",
                                        "relist-period",
                                        "restart-intensity",
                                        "resync-period",
                                        "restart-period",
                                        "runtime-endpoint",
                                        "runtime-events",
                                        "service-dir",
                                        "start-timeout",
                                        "stop-timeout",
                                        "system-reserved",
                                        "unit-prefix"},
                                       kCgroupKeys,
                                       kContainerLogKeys,
                                       kDnsKeys}));
  // svc-plegd/plegd_service.cc
  out.push_back(Section("plegd", {{"relist-period", "relist-threshold", "runtime-endpoint",
                                   "runtime-events", "runtime-request-timeout"}}));
  // svc-podworkerd/podworkerd_service.cc
  out.push_back(Section("podworkerd", {{"container-gc-period",
                                        "crashloop-initial",
                                        "crashloop-max",
                                        "image-gc-high-threshold",
                                        "image-gc-low-threshold",
                                        "image-gc-period",
                                        "image-minimum-gc-age",
                                        "image-pull-backoff-initial",
                                        "image-pull-backoff-max",
                                        "kube-reserved",
                                        "max-parallel-image-pulls",
                                        "maximum-dead-containers",
                                        "maximum-dead-containers-per-container",
                                        "node-ip",
                                        "orphan-shim-period",
                                        "pod-infra-container-image",
                                        "pod-workers",
                                        "resync-period",
                                        "runtime-endpoint",
                                        "runtime-request-timeout",
                                        "serialize-image-pulls",
                                        "system-reserved"},
                                       kCgroupKeys,
                                       kContainerLogKeys,
                                       kDnsKeys}));
  // svc-statusd/statusd_service.cc
  out.push_back(Section("statusd", {{"db-check-period"}}));
  // svc-volumed/volumed_service.cc: the shared keys only.
  out.push_back(Section("volumed", {}));
  return out;
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string Path(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

Status UnknownKey(const std::string& file, const std::string& path, const std::string& key,
                  const std::vector<std::string>& known, const std::string& where) {
  std::string nearest = NearestKey(key, known);
  return InvalidArgument(file + ": unknown key '" + path + "'" + where +
                         (nearest.empty() ? "" : "; nearest known key: '" + nearest + "'"));
}

// A section's keys: scalars or lists of scalars, and for the supervisor its services table.
Status CheckSection(const YAML::Node& node, const ConfigSection& section, const std::string& file) {
  if (node.IsNull()) return Status::Ok();
  if (!node.IsMap()) return InvalidArgument(file + ": '" + section.name + "' must be a mapping");
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    const std::string path = Path(section.name, key);
    if (section.name == "supervisor" && key == kServicesKey) {
      if (kv.second.IsNull()) continue;
      if (!kv.second.IsMap()) return InvalidArgument(file + ": '" + path + "' must be a mapping");
      std::vector<std::string> services;
      for (const auto& s : ConfigSections()) {
        if (s.name != "supervisor") services.push_back(s.name);
      }
      for (const auto& entry : kv.second) {
        const std::string name = entry.first.as<std::string>();
        if (std::find(services.begin(), services.end(), name) == services.end()) {
          return UnknownKey(file, Path(path, name), name, services, " (not a service)");
        }
        if (entry.second.IsNull()) continue;
        if (!entry.second.IsMap()) {
          return InvalidArgument(file + ": '" + Path(path, name) + "' must be a mapping");
        }
        for (const auto& field : entry.second) {
          const std::string f = field.first.as<std::string>();
          const auto& keys = ServiceEntryKeys();
          if (std::find(keys.begin(), keys.end(), f) == keys.end()) {
            return UnknownKey(file, Path(Path(path, name), f), f, keys, "");
          }
        }
      }
      continue;
    }
    if (!std::binary_search(section.keys.begin(), section.keys.end(), key)) {
      std::vector<std::string> known = section.keys;
      if (section.name == "supervisor") known.emplace_back(kServicesKey);
      const std::string binary =
          section.name == "supervisor" ? "nodelet" : "nodelet-" + section.name;
      return UnknownKey(file, path, key, known, " (" + binary + " has no such key)");
    }
    if (kv.second.IsMap()) {
      return InvalidArgument(file + ": '" + path + "' takes a value or a list, not a mapping");
    }
  }
  return Status::Ok();
}

}  // namespace

const std::vector<ConfigSection>& ConfigSections() {
  static const std::vector<ConfigSection> kSections = BuildSections();
  return kSections;
}

const std::vector<std::string>* ConfigSectionKeys(std::string_view section) {
  for (const auto& s : ConfigSections()) {
    if (s.name == section) return &s.keys;
  }
  return nullptr;
}

const std::vector<std::string>& ServiceEntryKeys() {
  static const std::vector<std::string> kKeys = {"args", "command"};
  return kKeys;
}

std::string NearestKey(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const auto& c : candidates) {
    size_t d = EditDistance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

Status CheckConfigKeys(const YAML::Node& root, const std::string& file) {
  if (!root || root.IsNull()) return Status::Ok();
  if (!root.IsMap()) return InvalidArgument(file + ": the configuration must be a YAML mapping");
  std::set<std::string> top;  // every binary's keys, and the sections
  for (const auto& s : ConfigSections()) {
    top.insert(s.name);
    top.insert(s.keys.begin(), s.keys.end());
  }
  for (const auto& kv : root) {
    if (!kv.first.IsScalar()) return InvalidArgument(file + ": a key must be a plain name");
    const std::string key = kv.first.as<std::string>();
    if (const auto* keys = ConfigSectionKeys(key); keys != nullptr) {
      for (const auto& s : ConfigSections()) {
        if (s.name != key) continue;
        if (Status st = CheckSection(kv.second, s, file); !st.ok()) return st;
      }
      continue;
    }
    if (top.count(key) == 0) {
      return UnknownKey(file, key, key, std::vector<std::string>(top.begin(), top.end()),
                        " (neither a section nor any binary's key)");
    }
    if (kv.second.IsMap()) {
      return InvalidArgument(file + ": '" + key + "' takes a value or a list, not a mapping");
    }
  }
  return Status::Ok();
}

}  // namespace nodelet
