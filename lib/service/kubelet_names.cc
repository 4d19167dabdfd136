#include "lib/service/kubelet_names.h"

#include <iterator>

namespace nodelet {
namespace {

// From the kubelet's cmd/kubelet/app/options/options.go and config/v1beta1/types.go.
const KubeletName kKubeletNames[] = {
    {"root-dir", "--root-dir", ""},
    {"log-level", "-v", "logging.verbosity"},
    {"log-format", "--logging-format", "logging.format"},
    {"runtime-endpoint", "--container-runtime-endpoint", "containerRuntimeEndpoint"},
    {"runtime-request-timeout", "--runtime-request-timeout", "runtimeRequestTimeout"},
    {"runtime-events", "", "featureGates.EventedPLEG"},
    {"pod-manifest-path", "--pod-manifest-path", "staticPodPath"},
    {"manifest-url", "--manifest-url", "staticPodURL"},
    {"manifest-url-header", "--manifest-url-header", "staticPodURLHeader"},
    {"http-check-frequency", "--http-check-frequency", "httpCheckFrequency"},
    {"node-name", "--hostname-override", ""},
    {"node-ip", "--node-ip", ""},
    {"node-lease-duration-seconds", "", "nodeLeaseDurationSeconds"},
    {"max-pods", "--max-pods", "maxPods"},
    {"allowed-unsafe-sysctls", "--allowed-unsafe-sysctls", "allowedUnsafeSysctls"},
    {"http-address", "--address, --read-only-port", "address, readOnlyPort"},
    {"enable-debugging-handlers", "--enable-debugging-handlers", "enableDebuggingHandlers"},
    {"cluster-dns", "--cluster-dns", "clusterDNS"},
    {"cluster-domain", "--cluster-domain", "clusterDomain"},
    {"resolv-conf", "--resolv-conf", "resolvConf"},
    {"container-log-max-size", "--container-log-max-size", "containerLogMaxSize"},
    {"container-log-max-files", "--container-log-max-files", "containerLogMaxFiles"},
    {"container-log-monitor-interval", "", "containerLogMonitorInterval"},
    {"cgroup-driver", "--cgroup-driver", "cgroupDriver"},
    {"cgroup-root", "--cgroup-root", "cgroupRoot"},
    {"cgroups-per-qos", "--cgroups-per-qos", "cgroupsPerQOS"},
    {"enforce-node-allocatable", "--enforce-node-allocatable", "enforceNodeAllocatable"},
    {"system-reserved", "--system-reserved", "systemReserved"},
    {"kube-reserved", "--kube-reserved", "kubeReserved"},
    {"eviction-hard", "--eviction-hard", "evictionHard"},
    {"eviction-soft", "--eviction-soft", "evictionSoft"},
    {"eviction-soft-grace-period", "--eviction-soft-grace-period", "evictionSoftGracePeriod"},
    {"eviction-minimum-reclaim", "--eviction-minimum-reclaim", "evictionMinimumReclaim"},
    {"eviction-pressure-transition-period", "--eviction-pressure-transition-period",
     "evictionPressureTransitionPeriod"},
    {"eviction-max-pod-grace-period", "--eviction-max-pod-grace-period",
     "evictionMaxPodGracePeriod"},
    {"resync-period", "--sync-frequency", "syncFrequency"},
    {"image-gc-high-threshold", "--image-gc-high-threshold", "imageGCHighThresholdPercent"},
    {"image-gc-low-threshold", "--image-gc-low-threshold", "imageGCLowThresholdPercent"},
    {"image-minimum-gc-age", "--minimum-image-ttl-duration", "imageMinimumGCAge"},
    {"serialize-image-pulls", "--serialize-image-pulls", "serializeImagePulls"},
    {"max-parallel-image-pulls", "", "maxParallelImagePulls"},
    {"pod-infra-container-image", "--pod-infra-container-image", ""},
    {"maximum-dead-containers", "--maximum-dead-containers", ""},
    {"maximum-dead-containers-per-container", "--maximum-dead-containers-per-container", ""},
};

}  // namespace

const KubeletName* KubeletNameOf(const std::string& key) {
  for (const auto& name : kKubeletNames) {
    if (key == name.key) return &name;
  }
  return nullptr;
}

std::string HttpAddressOf(const std::string& host, const std::string& port) {
  if (port == "0") return "";
  const bool v6 = host.find(':') != std::string::npos && host.front() != '[';
  return (v6 ? "[" + host + "]" : host) + ":" + port;
}

const char* LogLevelOfVerbosity(int verbosity) {
  if (verbosity >= 5) return "trace";
  if (verbosity >= 3) return "debug";
  return "info";
}

}  // namespace nodelet
