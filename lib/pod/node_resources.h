// The node's resource figures: reservations (--system-reserved, --kube-reserved), and
// allocatable as the kubelet computes it: capacity minus the reservations minus the hard
// eviction thresholds (docs/resources.md).
#pragma once

#include <cstdint>
#include <string>

#include "lib/common/status.h"

namespace nodelet::pod {

struct NodeResourceList {
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  int64_t ephemeral_storage_bytes = 0;
  bool operator==(const NodeResourceList&) const = default;
};

// "cpu=100m,memory=256Mi,ephemeral-storage=1Gi" (the kubelet's --system-reserved syntax).
Result<NodeResourceList> ParseReservation(const std::string& text);

// The kubelet's default hard eviction threshold memory.available<100Mi (nodelet's
// MemoryPressure threshold).
inline constexpr int64_t kEvictionHardMemoryAvailableBytes = int64_t{100} << 20;

// capacity - system - kube - eviction, each resource at least 0.
NodeResourceList AllocatableFrom(const NodeResourceList& capacity, const NodeResourceList& system,
                                 const NodeResourceList& kube, const NodeResourceList& eviction);

}  // namespace nodelet::pod
