// A pod's quality-of-service class and its containers' OOM score adjustment, as the kubelet
// computes them (docs/resources.md).
//
// QoS (the kubelet's ComputePodQOS): over every container and init container, only cpu and
// memory, only quantities above zero. No request and no limit anywhere: BestEffort. Every
// container with both a cpu and a memory limit, and for each resource the pod's sum of requests
// equal to its sum of limits: Guaranteed. Anything else: Burstable. Requests are the defaulted
// ones (a limit without a request is also the request, lib/pod/defaults.h).
//
// OOM score adjustment (the kubelet's GetContainerOOMScoreAdjust): a node-critical pod
// (priorityClassName system-node-critical; every nodelet pod is a static pod, and static pods
// are critical) and a Guaranteed pod -997; BestEffort 1000; Burstable
// 1000 - 1000 * (the container's memory request) / (the node's memory capacity), kept within
// [3, 999].
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "lib/pod/pod.h"

namespace nodelet::pod {

enum class QosClass { kGuaranteed, kBurstable, kBestEffort };

// "Guaranteed", "Burstable", "BestEffort" (the v1 PodQOSClass values).
std::string_view QosClassName(QosClass qos);

QosClass PodQos(const Pod& pod);

inline constexpr int kGuaranteedOomScoreAdj = -997;
inline constexpr int kBestEffortOomScoreAdj = 1000;

// The priority class that makes a static pod node-critical.
inline constexpr std::string_view kSystemNodeCritical = "system-node-critical";
inline constexpr std::string_view kSystemClusterCritical = "system-cluster-critical";

bool IsNodeCritical(const Pod& pod);

// The pod's priority: nodelet has no PriorityClass objects, so only the two built-in classes
// carry one (system-node-critical 2000001000, system-cluster-critical 2000000000); any other
// name, or none, is 0.
int32_t PodPriority(const Pod& pod);
inline constexpr int32_t kSystemCriticalPriority = 2000000000;

// The pod's effective request (or limit) of `resource`: the sum over its containers, or its
// largest init container's when that is larger (the kubelet's PodRequests), in thousandths
// (`milli`) or units.
int64_t PodResourceTotal(const Pod& pod, const std::string& resource, bool requests, bool milli);

// `memory_capacity_bytes` <= 0 (unknown) counts as a request of nothing.
int ContainerOomScoreAdj(const Pod& pod, const Container& c, int64_t memory_capacity_bytes);

}  // namespace nodelet::pod
