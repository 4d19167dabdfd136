#include "svc-podworkerd/container_gc.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include "svc-podworkerd/cri_configs.h"

namespace nodelet::podworkerd {
namespace {

struct Instance {
  std::string id;
  uint32_t attempt = 0;
  int64_t created_at = 0;
  bool dead = false;
  bool is_protected = false;
};

// Newest first: the higher attempt, then the later creation.
bool Newer(const Instance& a, const Instance& b) {
  return std::tie(a.attempt, a.created_at, a.id) > std::tie(b.attempt, b.created_at, b.id);
}

std::string LabelOf(const cri::v1::Container& c, const char* key) {
  auto it = c.labels().find(key);
  return it == c.labels().end() ? std::string() : it->second;
}

}  // namespace

ContainerGcResult ContainerGc::GarbageCollect(const std::set<std::string>& live_pods) {
  ContainerGcResult result;
  auto list = runtime_.ListContainers({});
  if (!list.ok()) {
    result.status = list.status();
    return result;
  }
  // Every instance of each (pod uid, container name), newest first.
  std::map<std::pair<std::string, std::string>, std::vector<Instance>> units;
  for (const auto& c : *list) {
    if (LabelOf(c, kManagedLabel).empty()) continue;  // never touch what nodelet did not create
    const std::string uid = LabelOf(c, kPodUidLabel);
    const std::string name = LabelOf(c, kContainerNameLabel);
    if (uid.empty() || name.empty()) continue;
    Instance i;
    i.id = c.id();
    i.attempt = c.metadata().attempt();
    i.created_at = c.created_at();
    i.dead = c.state() == cri::v1::CONTAINER_EXITED;
    units[{uid, name}].push_back(std::move(i));
  }
  // Per unit: the dead instances, newest first; the newest instance of a live pod's container is
  // protected.
  std::vector<std::vector<Instance>> dead_units;
  for (auto& [key, instances] : units) {
    std::sort(instances.begin(), instances.end(), Newer);
    if (live_pods.count(key.first) > 0) instances.front().is_protected = true;
    std::vector<Instance> dead;
    for (const auto& i : instances) {
      if (i.dead) dead.push_back(i);
    }
    result.dead_before += static_cast<int>(dead.size());
    if (!dead.empty()) dead_units.push_back(std::move(dead));
  }

  std::set<std::string> removed;
  auto remove = [&](const Instance& i) {
    if (i.is_protected || removed.count(i.id) > 0) return false;
    Status s = runtime_.RemoveContainer(i.id);
    if (!s.ok()) {
      if (result.status.ok()) result.status = s;
      return false;
    }
    removed.insert(i.id);
    ++result.removed;
    if (on_removed_) on_removed_(i.id);
    return true;
  };
  // Keeps the newest `keep` dead instances of each unit.
  auto enforce_per_unit = [&](int keep) {
    for (auto& dead : dead_units) {
      for (size_t n = static_cast<size_t>(std::max(keep, 0)); n < dead.size(); ++n) remove(dead[n]);
    }
  };
  enforce_per_unit(std::max(1, policy_.max_per_pod_container));

  const int max = policy_.max_containers;
  auto remaining = [&] { return result.dead_before - static_cast<int>(removed.size()); };
  if (max >= 0 && remaining() > max && !dead_units.empty()) {
    enforce_per_unit(std::max(1, max / static_cast<int>(dead_units.size())));
  }
  if (max >= 0 && remaining() > max) {
    // Node-wide, the oldest first.
    std::vector<Instance> all;
    for (const auto& dead : dead_units) {
      for (const auto& i : dead) {
        if (!removed.count(i.id) && !i.is_protected) all.push_back(i);
      }
    }
    std::sort(all.begin(), all.end(), [](const Instance& a, const Instance& b) {
      return std::tie(a.created_at, a.id) < std::tie(b.created_at, b.id);
    });
    for (const auto& i : all) {
      if (remaining() <= max) break;
      remove(i);
    }
  }
  return result;
}

}  // namespace nodelet::podworkerd
