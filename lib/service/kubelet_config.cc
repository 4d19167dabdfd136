#include "lib/service/kubelet_config.h"

#include <cstring>
#include <functional>
#include <vector>

#include "lib/common/duration.h"
#include "lib/service/kubelet_names.h"

namespace nodelet {
namespace {

// How a field's value becomes a key's.
enum class Kind {
  kString,           // as is
  kStringNonEmpty,   // as is; "" is the kubelet's "use the default"
  kDuration,         // a Go duration, as nodelet's
  kDurationNonZero,  // the same; 0 is the kubelet's "use the default"
  kInt,
  kIntNonZero,  // 0 is the kubelet's "use the default"
  kBool,
  kList,        // a list of strings
  kThresholds,  // {signal: value} -> signal<value,...
  kPairs,       // {name: value} -> name=value,...
};

struct Mapped {
  const char* field;
  const char* key;
  Kind kind;
  const char* section;  // "" for the top level (every binary that has the key reads it)
};

// From the kubelet's config/v1beta1/types.go and its defaults (docs/flags.md says how each
// differs).
const Mapped kMapped[] = {
    {"staticPodPath", "pod-manifest-path", Kind::kString, ""},
    {"staticPodURL", "manifest-url", Kind::kString, ""},
    {"httpCheckFrequency", "http-check-frequency", Kind::kDurationNonZero, ""},
    {"syncFrequency", "resync-period", Kind::kDurationNonZero, ""},
    {"containerRuntimeEndpoint", "runtime-endpoint", Kind::kStringNonEmpty, ""},
    // podworkerd's: the deadline of its state-changing calls (plegd's key of the same name is the
    // deadline of its listings).
    {"runtimeRequestTimeout", "runtime-request-timeout", Kind::kDurationNonZero, "podworkerd"},
    {"maxPods", "max-pods", Kind::kIntNonZero, ""},
    {"nodeLeaseDurationSeconds", "node-lease-duration-seconds", Kind::kIntNonZero, ""},
    {"clusterDomain", "cluster-domain", Kind::kString, ""},
    {"clusterDNS", "cluster-dns", Kind::kList, ""},
    {"resolvConf", "resolv-conf", Kind::kString, ""},
    {"cgroupDriver", "cgroup-driver", Kind::kStringNonEmpty, ""},
    {"cgroupRoot", "cgroup-root", Kind::kStringNonEmpty, ""},
    {"cgroupsPerQOS", "cgroups-per-qos", Kind::kBool, ""},
    {"enforceNodeAllocatable", "enforce-node-allocatable", Kind::kList, ""},
    {"systemReserved", "system-reserved", Kind::kPairs, ""},
    {"kubeReserved", "kube-reserved", Kind::kPairs, ""},
    {"evictionHard", "eviction-hard", Kind::kThresholds, ""},
    {"evictionSoft", "eviction-soft", Kind::kThresholds, ""},
    {"evictionSoftGracePeriod", "eviction-soft-grace-period", Kind::kPairs, ""},
    {"evictionMinimumReclaim", "eviction-minimum-reclaim", Kind::kPairs, ""},
    {"evictionPressureTransitionPeriod", "eviction-pressure-transition-period",
     Kind::kDurationNonZero, ""},
    {"evictionMaxPodGracePeriod", "eviction-max-pod-grace-period", Kind::kInt, ""},
    {"containerLogMaxSize", "container-log-max-size", Kind::kStringNonEmpty, ""},
    {"containerLogMaxFiles", "container-log-max-files", Kind::kInt, ""},
    {"containerLogMonitorInterval", "container-log-monitor-interval", Kind::kDuration, ""},
    {"allowedUnsafeSysctls", "allowed-unsafe-sysctls", Kind::kList, ""},
    {"imageMinimumGCAge", "image-minimum-gc-age", Kind::kDurationNonZero, ""},
    {"imageGCHighThresholdPercent", "image-gc-high-threshold", Kind::kInt, ""},
    {"imageGCLowThresholdPercent", "image-gc-low-threshold", Kind::kInt, ""},
    {"serializeImagePulls", "serialize-image-pulls", Kind::kBool, ""},
    {"maxParallelImagePulls", "max-parallel-image-pulls", Kind::kInt, ""},
    {"enableDebuggingHandlers", "enable-debugging-handlers", Kind::kBool, ""},
};

// Fields whose value nodelet takes only when it is what nodelet does anyway ("": empty, false
// or absent).
struct Fixed {
  const char* field;
  const char* value;
  bool duration;
};
const Fixed kFixed[] = {
    {"fileCheckFrequency", "20s", true},  // the manifest directory's re-read
    {"nodeStatusUpdateFrequency", "10s", true},
    {"imageMaximumGCAge", "0s", true},
    {"cpuCFSQuotaPeriod", "100ms", true},
    {"shutdownGracePeriod", "0s", true},
    {"shutdownGracePeriodCriticalPods", "0s", true},
    {"cpuManagerPolicy", "none", false},
    {"memoryManagerPolicy", "None", false},
    {"topologyManagerPolicy", "none", false},
    {"topologyManagerScope", "container", false},
    {"podPidsLimit", "-1", false},
    {"podsPerCore", "0", false},
    {"containerLogMaxWorkers", "1", false},
    {"cpuCFSQuota", "true", false},
    {"enableControllerAttachDetach", "true", false},
    {"localStorageCapacityIsolation", "true", false},
    {"memoryReservationPolicy", "None", false},
    {"hairpinMode", "none", false},
    {"tlsMinVersion", "", false},
    {"tlsCipherSuites", "", false},
    {"rotateCertificates", "", false},
    {"serverTLSBootstrap", "", false},
    {"enableContentionProfiling", "", false},
    {"kubeletCgroups", "", false},
    {"systemCgroups", "", false},
    {"cpuManagerPolicyOptions", "", false},
    {"topologyManagerPolicyOptions", "", false},
    {"qosReserved", "", false},
    {"podCIDR", "", false},
    {"runOnce", "", false},
    {"makeIPTablesUtilChains", "", false},
    {"failSwapOn", "", false},
    {"memorySwap", "", false},
    {"reservedSystemCPUs", "", false},
    {"showHiddenMetricsForVersion", "", false},
    {"systemReservedCgroup", "", false},
    {"kubeReservedCgroup", "", false},
    {"providerID", "", false},
    {"kernelMemcgNotification", "", false},
    {"enableSystemLogHandler", "", false},
    {"enableSystemLogQuery", "", false},
    {"shutdownGracePeriodByPodPriority", "", false},
    {"enableProfilingHandler", "", false},
    {"enableDebugFlagsHandler", "", false},
    {"seccompDefault", "", false},
    {"failCgroupV1", "", false},
    {"mergeDefaultEvictionSettings", "", false},
    {"imageServiceEndpoint", "", false},
};

// Fields the kubelet itself no longer reads (deprecated, without effect).
const char* const kNoEffect[] = {"streamingConnectionIdleTimeout", "iptablesMasqueradeBit",
                                 "iptablesDropBit", "cpuManagerReconcilePeriod"};

// Why some refused fields are refused, beyond "not supported by nodelet".
const char* RefusalReason(const std::string& field) {
  static const std::pair<const char*, const char*> kReasons[] = {
      {"authentication", "nodelet has no authenticated server (the kubelet's port 10250)"},
      {"authorization", "nodelet has no authenticated server (the kubelet's port 10250)"},
      {"port", "nodelet has no authenticated server (the kubelet's port 10250)"},
      {"tlsCertFile", "nodelet has no authenticated server (the kubelet's port 10250)"},
      {"tlsPrivateKeyFile", "nodelet has no authenticated server (the kubelet's port 10250)"},
      {"healthzPort", "nodelet's /healthz is on its read-only endpoint (readOnlyPort)"},
      {"healthzBindAddress", "nodelet's /healthz is on its read-only endpoint (address)"},
      {"registerNode", "nodelet has no API server to register with"},
      {"registerWithTaints", "nodelet has no API server to register with"},
      {"kubeAPIQPS", "nodelet has no API server client"},
      {"kubeAPIBurst", "nodelet has no API server client"},
      {"contentType", "nodelet has no API server client"},
  };
  for (const auto& [f, why] : kReasons) {
    if (field == f) return why;
  }
  return "not supported by nodelet";
}

bool IsEmptyOrFalse(const YAML::Node& v) {
  if (!v || v.IsNull()) return true;
  if (v.IsSequence() || v.IsMap()) return v.size() == 0;
  const std::string s = v.as<std::string>();
  return s.empty() || s == "false";
}

}  // namespace

bool IsKubeletConfiguration(const YAML::Node& root) {
  return root.IsMap() && root["kind"] && root["kind"].IsScalar() &&
         root["kind"].as<std::string>() == "KubeletConfiguration";
}

Result<YAML::Node> FromKubeletConfiguration(const YAML::Node& root, const std::string& file) {
  const std::string api = root["apiVersion"] ? root["apiVersion"].as<std::string>("") : "";
  if (api != "kubelet.config.k8s.io/v1beta1") {
    return InvalidArgument(file + ": a KubeletConfiguration of apiVersion '" + api +
                           "': nodelet reads kubelet.config.k8s.io/v1beta1");
  }
  YAML::Node out(YAML::NodeType::Map);
  std::vector<std::string> refused;
  auto field_error = [&](const std::string& field, const std::string& why) {
    refused.push_back("'" + field + "' (" + why + ")");
  };
  auto put = [&](const char* section, const std::string& key, const YAML::Node& value) {
    if (section[0] == '\0') {
      out[key] = value;
    } else {
      out[section][key] = value;
    }
  };
  std::string address, read_only_port;
  bool has_address = false, has_port = false;
  for (const auto& kv : root) {
    const std::string field = kv.first.as<std::string>();
    const YAML::Node& v = kv.second;
    if (field == "apiVersion" || field == "kind") continue;
    if (const Mapped* m = [&]() -> const Mapped* {
          for (const auto& e : kMapped) {
            if (field == e.field) return &e;
          }
          return nullptr;
        }()) {
      if (v.IsNull()) continue;
      const bool scalar_kind =
          m->kind != Kind::kList && m->kind != Kind::kThresholds && m->kind != Kind::kPairs;
      if (scalar_kind && !v.IsScalar()) {
        field_error(field, "want a single value");
        continue;
      }
      if (m->kind == Kind::kList && !v.IsSequence()) {
        field_error(field, "want a list");
        continue;
      }
      if ((m->kind == Kind::kThresholds || m->kind == Kind::kPairs) && !v.IsMap()) {
        field_error(field, "want a map");
        continue;
      }
      switch (m->kind) {
        case Kind::kString:
        case Kind::kInt:
        case Kind::kBool:
        case Kind::kDuration:
          put(m->section, m->key, YAML::Node(v.as<std::string>()));
          break;
        case Kind::kStringNonEmpty:
          if (!v.as<std::string>().empty())
            put(m->section, m->key, YAML::Node(v.as<std::string>()));
          break;
        case Kind::kIntNonZero:
          if (v.as<std::string>() != "0") put(m->section, m->key, YAML::Node(v.as<std::string>()));
          break;
        case Kind::kDurationNonZero: {
          auto d = ParseDuration(v.as<std::string>());
          if (!d.ok() || d->count() != 0) put(m->section, m->key, YAML::Node(v.as<std::string>()));
          break;
        }
        case Kind::kList: {
          YAML::Node list(YAML::NodeType::Sequence);
          for (const auto& item : v) {
            if (!item.IsScalar()) {
              field_error(field, "want a list of strings");
              break;
            }
            list.push_back(item.as<std::string>());
          }
          // An empty enforceNodeAllocatable enforces nothing: nodelet's "none".
          if (list.size() == 0 && std::strcmp(m->key, "enforce-node-allocatable") == 0) {
            list.push_back("none");
          }
          put(m->section, m->key, list);
          break;
        }
        case Kind::kThresholds:
        case Kind::kPairs: {
          std::string joined;
          for (const auto& pair : v) {
            if (!pair.second.IsScalar()) {
              field_error(field, "want a map of strings");
              break;
            }
            joined += (joined.empty() ? "" : ",") + pair.first.as<std::string>() +
                      (m->kind == Kind::kThresholds ? "<" : "=") + pair.second.as<std::string>();
          }
          put(m->section, m->key, YAML::Node(joined));
          break;
        }
      }
      continue;
    }
    if (field == "address") {
      has_address = v.IsScalar();
      address = v.as<std::string>("");
      continue;
    }
    if (field == "readOnlyPort") {
      has_port = v.IsScalar();
      read_only_port = v.as<std::string>("");
      continue;
    }
    if (field == "staticPodURLHeader") {
      YAML::Node headers(YAML::NodeType::Sequence);
      if (!v.IsMap()) {
        field_error(field, "want a map of header names to lists of values");
        continue;
      }
      for (const auto& h : v) {
        for (const auto& value : h.second) {
          headers.push_back(h.first.as<std::string>() + ": " + value.as<std::string>(""));
        }
      }
      put("", "manifest-url-header", headers);
      continue;
    }
    // Fields that are maps of their own: each entry `take`s, or is refused as FIELD.ENTRY.
    auto entries = [&](const std::function<bool(const std::string&, const YAML::Node&)>& take) {
      if (!v.IsMap()) {
        field_error(field, "want a map");
        return;
      }
      for (const auto& e : v) {
        const std::string sub = e.first.as<std::string>();
        if (!take(sub, e.second)) field_error(field + "." + sub, "not supported by nodelet");
      }
    };
    if (field == "logging") {
      entries([&](const std::string& sub, const YAML::Node& value) {
        if (sub == "verbosity" && value.IsScalar()) {
          int verbosity = -1;
          try {
            verbosity = value.as<int>();
          } catch (const YAML::Exception&) {
          }
          if (verbosity < 0) {
            field_error("logging.verbosity", "want a number of 0 or more");
          } else {
            put("", "log-level", YAML::Node(LogLevelOfVerbosity(verbosity)));
          }
          return true;
        }
        const std::string text = value.IsScalar() ? value.as<std::string>() : "";
        if (sub == "format" && (text == "text" || text == "json")) {
          put("", "log-format", YAML::Node(text));
          return true;
        }
        return IsEmptyOrFalse(value);
      });
      continue;
    }
    if (field == "featureGates") {
      entries([&](const std::string& gate, const YAML::Node& value) {
        if (gate != "EventedPLEG" || !value.IsScalar()) return false;
        put("", "runtime-events", YAML::Node(value.as<std::string>()));
        return true;
      });
      continue;
    }
    if (field == "crashLoopBackOff") {
      entries([&](const std::string& sub, const YAML::Node& value) {
        if (sub != "maxContainerRestartPeriod" || !value.IsScalar()) return false;
        put("", "crashloop-max", YAML::Node(value.as<std::string>()));
        return true;
      });
      continue;
    }
    bool handled = false;
    for (const auto& f : kFixed) {
      if (field != f.field) continue;
      handled = true;
      bool same;
      if (f.value[0] == '\0') {
        same = IsEmptyOrFalse(v);
      } else if (!v.IsScalar()) {
        same = false;
      } else if (f.duration) {
        auto have = ParseDuration(v.as<std::string>());
        auto want = ParseDuration(f.value);
        same = have.ok() && want.ok() && *have == *want;
      } else {
        same = v.as<std::string>() == f.value;
      }
      // The image service on the runtime's own socket is what nodelet uses.
      if (!same && field == "imageServiceEndpoint" && root["containerRuntimeEndpoint"]) {
        same = v.as<std::string>("") == root["containerRuntimeEndpoint"].as<std::string>("");
      }
      if (!same) {
        field_error(field, f.value[0] == '\0'
                               ? std::string("nodelet supports only its absence, false or empty")
                               : std::string("nodelet supports only ") + f.value);
      }
    }
    for (const char* none : kNoEffect) handled = handled || field == none;
    if (!handled) field_error(field, RefusalReason(field));
  }
  // The read-only endpoint: the kubelet's readOnlyPort on its address (0.0.0.0 unless given);
  // 0 turns it off. Without readOnlyPort nodelet keeps its own (127.0.0.1:10255).
  if (has_port) {
    out["http-address"] =
        HttpAddressOf(has_address && !address.empty() ? address : "0.0.0.0", read_only_port);
  } else if (has_address) {
    field_error("address", "nodelet's only server is the read-only endpoint: give readOnlyPort");
  }
  if (!refused.empty()) {
    std::string all;
    for (const auto& r : refused) all += (all.empty() ? "" : ", ") + r;
    return InvalidArgument(file + ": KubeletConfiguration fields nodelet refuses: " + all);
  }
  return out;
}

}  // namespace nodelet
