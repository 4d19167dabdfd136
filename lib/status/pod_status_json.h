// Kubernetes v1 JSON for nodelet's pod statuses: a Pod (metadata + status) and a PodList, as
// `kubectl get pods -o json` prints them. Used by `nodeletctl pods -o json`, and the shape an
// API-server sink would send.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lib/common/rfc3339.h"
#include "lib/status/pod_status.h"

namespace nodelet::status {

// v1 PodStatus.
nlohmann::json PodStatusToJson(const PodStatus& status);

// A v1 Pod with metadata (name, namespace, uid, creationTimestamp, resourceVersion = the
// status version) and status.
nlohmann::json PodToJson(const PodStatusRecord& record);

// A v1 PodList of PodToJson items.
nlohmann::json PodListToJson(const std::vector<PodStatusRecord>& records);

}  // namespace nodelet::status
