#include "lib/pod/qos.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

namespace nodelet::pod {

namespace {

bool IsQosResource(const std::string& name) { return name == "cpu" || name == "memory"; }

// Adds the positive cpu and memory quantities of `list` into `sums`; the names added go into
// `found` when it is given.
void AddPositive(const ResourceList& list, std::map<std::string, __int128>& sums,
                 std::set<std::string>* found) {
  for (const auto& [name, q] : list) {
    if (!IsQosResource(name) || q.Nanos() <= 0) continue;
    sums[name] += q.Nanos();
    if (found != nullptr) found->insert(name);
  }
}

}  // namespace

std::string_view QosClassName(QosClass qos) {
  switch (qos) {
    case QosClass::kGuaranteed:
      return "Guaranteed";
    case QosClass::kBurstable:
      return "Burstable";
    case QosClass::kBestEffort:
      return "BestEffort";
  }
  return "BestEffort";
}

QosClass PodQos(const Pod& pod) {
  std::map<std::string, __int128> requests;
  std::map<std::string, __int128> limits;
  bool guaranteed = true;
  for (const auto* list : {&pod.spec.containers, &pod.spec.init_containers}) {
    for (const auto& c : *list) {
      AddPositive(c.resources.requests, requests, nullptr);
      std::set<std::string> limited;
      AddPositive(c.resources.limits, limits, &limited);
      if (limited.count("cpu") == 0 || limited.count("memory") == 0) guaranteed = false;
    }
  }
  if (requests.empty() && limits.empty()) return QosClass::kBestEffort;
  if (guaranteed) {
    for (const auto& [name, sum] : requests) {
      auto lim = limits.find(name);
      if (lim == limits.end() || lim->second != sum) {
        guaranteed = false;
        break;
      }
    }
  }
  return guaranteed && requests.size() == limits.size() ? QosClass::kGuaranteed
                                                        : QosClass::kBurstable;
}

bool IsNodeCritical(const Pod& pod) { return pod.spec.priority_class_name == kSystemNodeCritical; }

int32_t PodPriority(const Pod& pod) {
  if (pod.spec.priority_class_name == kSystemNodeCritical) return kSystemCriticalPriority + 1000;
  if (pod.spec.priority_class_name == kSystemClusterCritical) return kSystemCriticalPriority;
  return 0;
}

int64_t PodResourceTotal(const Pod& pod, const std::string& resource, bool requests, bool milli) {
  auto value = [&](const Container& c) -> int64_t {
    const auto& list = requests ? c.resources.requests : c.resources.limits;
    auto it = list.find(resource);
    if (it == list.end()) return 0;
    return milli ? it->second.MilliValue() : it->second.Value();
  };
  int64_t sum = 0;
  for (const auto& c : pod.spec.containers) sum += value(c);
  for (const auto& c : pod.spec.init_containers) sum = std::max(sum, value(c));
  return sum;
}

int ContainerOomScoreAdj(const Pod& pod, const Container& c, int64_t memory_capacity_bytes) {
  if (IsNodeCritical(pod)) return kGuaranteedOomScoreAdj;
  switch (PodQos(pod)) {
    case QosClass::kGuaranteed:
      return kGuaranteedOomScoreAdj;
    case QosClass::kBestEffort:
      return kBestEffortOomScoreAdj;
    case QosClass::kBurstable:
      break;
  }
  int64_t request = 0;
  if (auto it = c.resources.requests.find("memory"); it != c.resources.requests.end()) {
    request = it->second.Value();
  }
  int64_t adj = 1000;
  if (memory_capacity_bytes > 0 && request > 0) {
    adj = 1000 -
          static_cast<int64_t>((static_cast<__int128>(1000) * request) / memory_capacity_bytes);
  }
  // A Guaranteed pod using all the memory has 3 (1000 - 997): Burstable stays above it, and
  // below BestEffort.
  if (adj < 1000 + kGuaranteedOomScoreAdj) return 1000 + kGuaranteedOomScoreAdj;
  if (adj >= kBestEffortOomScoreAdj) return kBestEffortOomScoreAdj - 1;
  return static_cast<int>(adj);
}

}  // namespace nodelet::pod
