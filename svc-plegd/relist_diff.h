// RelistDiff: the kubelet's generic PLEG event generation, as a pure function of two listings.
// It keeps the previous relist's per-pod view and, for a new listing, says which pods changed
// and with which lifecycle events (ContainerStarted/Died/Removed/Changed, sandbox events).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "svc-plegd/pleg_runtime.h"

namespace nodelet::plegd {

struct PlegEvent {
  std::string pod_uid;
  ipc::pleg::EventType type;
  std::string id;
  std::string container_name;
};

// What the previous relist saw of one pod: each container's and sandbox's state by id.
struct PodView {
  std::string uid;
  std::string name;
  std::string pod_namespace;
  bool foreign = false;
  std::vector<std::string> sandbox_ids;  // newest first
  std::vector<std::string> container_ids;
  std::map<std::string, ContainerState> containers;
  std::map<std::string, SandboxState> sandboxes;
  std::map<std::string, std::string> container_names;
};

struct PodChange {
  PodView view;  // the new view (empty maps and removed=true when the pod is gone)
  bool removed = false;
  std::vector<PlegEvent> events;
};

class RelistDiff {
 public:
  // Groups the listing by pod, compares with the previous call's, and returns the pods that
  // changed (new, gone, or any container/sandbox whose state moved). The first call reports
  // every pod, with events for running containers (ContainerStarted) as the kubelet does.
  std::vector<PodChange> Update(const RuntimeListing& listing);
  // The same for one pod only, from a listing of that pod (its sandboxes and containers; what
  // else it holds is ignored): its change, if any (removed when the listing has none of it).
  // Every other pod's view stays as it was.
  std::optional<PodChange> UpdatePod(const std::string& uid, const RuntimeListing& listing);
  // The pod whose view holds this container or sandbox id.
  std::optional<std::string> UidOf(const std::string& runtime_id) const;
  // The current view of a pod (after the last Update), or nullptr.
  const PodView* Find(const std::string& uid) const;
  size_t pod_count() const { return pods_.size(); }

 private:
  static std::map<std::string, PodView> Group(const RuntimeListing& listing);
  // The change from `old_view` to `view` (either may be null: new, gone); nothing when a known
  // pod has no event.
  static std::optional<PodChange> Compare(const std::string& uid, const PodView* old_view,
                                          const PodView* view);
  std::map<std::string, PodView> pods_;
};

}  // namespace nodelet::plegd
