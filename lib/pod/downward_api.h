// The downward API and the environment's references, as the kubelet resolves them: a pod field
// by its fieldPath (env vars and downwardAPI volumes), a container's resource by a
// resourceFieldRef (with the node's allocatable standing in for a missing limit), and the
// API's $(VAR) expansion in command, args and env values.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "lib/common/status.h"
#include "lib/pod/pod.h"

namespace nodelet::pod {

// What a pod field needs beyond the spec: the addresses the pod's status reports.
struct PodRuntimeFields {
  std::string pod_ip;   // status.podIP ("" before the sandbox has one)
  std::string host_ip;  // status.hostIP
};

// The node's allocatable resources, the value of a limit the container does not set.
struct NodeAllocatable {
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  int64_t ephemeral_storage_bytes = 0;
};

// The node's capacity: the online CPUs, MemTotal, and the size of the filesystem holding
// `root_dir` (ephemeral storage). Allocatable equals capacity (no reserved resources).
NodeAllocatable ReadNodeAllocatable(const std::string& root_dir = "/");

// The value of `field_path`: metadata.name, .namespace, .uid, .labels, .annotations (the
// `key="value"` lines of a downwardAPI file), .labels['K'], .annotations['K'] (empty when
// missing), spec.nodeName, spec.serviceAccountName, status.podIP, status.podIPs, status.hostIP,
// status.hostIPs. Anything else is an error naming the path.
Result<std::string> PodFieldValue(const Pod& pod, std::string_view field_path,
                                  const PodRuntimeFields& runtime);

// The value of a resourceFieldRef as a decimal string: the named container's (or, when
// containerName is empty, `default_container`'s) limit or request, divided by the divisor
// (default 1) and rounded up; a missing limit is the node's allocatable, a missing request 0.
Result<std::string> ResourceFieldValue(const Pod& pod, const ResourceFieldSelector& ref,
                                       const std::string& default_container,
                                       const NodeAllocatable& node);

// The API's expansion of $(VAR) references (k8s.io/kubernetes third_party expansion):
// `$(NAME)` becomes lookup(NAME) when it has a value and stays as written when not; `$$`
// becomes `$` (so `$$(NAME)` is the literal `$(NAME)`); any other `$` stays, as does an
// unterminated `$(`.
std::string ExpandReferences(
    std::string_view input,
    const std::function<std::optional<std::string>(std::string_view)>& lookup);

}  // namespace nodelet::pod
