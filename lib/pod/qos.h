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

// `memory_capacity_bytes` <= 0 (unknown) counts as a request of nothing.
int ContainerOomScoreAdj(const Pod& pod, const Container& c, int64_t memory_capacity_bytes);

}  // namespace nodelet::pod
