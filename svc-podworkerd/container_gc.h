// ContainerGc: the node-wide pass of dead-container garbage collection (the kubelet's
// containerGC). Each pod's sync already keeps at most N exited instances per container; this pass
// runs periodically over every container nodelet manages (label nodelet.io/managed) and enforces
// that per-container limit and the node-wide maximum (--maximum-dead-containers, -1 = none):
// over it, each container's dead instances are first cut to max(1, maximum / containers), then
// the oldest dead instances node-wide go until the total is within the maximum.
//
// One deliberate difference from the kubelet: the newest instance of each container of a pod
// nodelet still runs is never removed, even when it is dead: nodelet reads a container's restart
// count, crash-loop back-off and a finished pod's result from the runtime (the kubelet can fall
// back on the API server's status). So the node-wide maximum cannot go below one dead instance
// per such container.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <utility>

#include "lib/common/status.h"
#include "lib/cri/runtime_service.h"

namespace nodelet::podworkerd {

struct ContainerGcPolicy {
  // Dead instances kept per container of a pod (the kubelet's MaxPerPodContainer); at least 1.
  int max_per_pod_container = 1;
  // Dead containers kept on the node (the kubelet's MaxContainers); negative: no limit.
  int max_containers = -1;
};

struct ContainerGcResult {
  int removed = 0;
  int dead_before = 0;  // dead managed containers found
  Status status;        // the first failure (listing, or a removal)
};

class ContainerGc {
 public:
  ContainerGc(cri::RuntimeService& runtime, ContainerGcPolicy policy)
      : runtime_(runtime), policy_(policy) {}

  // `live_pods`: the uids of the pods podworkerd runs (desired ones), whose newest container
  // instances are protected.
  ContainerGcResult GarbageCollect(const std::set<std::string>& live_pods);
  // Called with the id of each container removed (podworkerd removes its log symlink).
  void set_on_removed(std::function<void(const std::string&)> on_removed) {
    on_removed_ = std::move(on_removed);
  }

 private:
  cri::RuntimeService& runtime_;
  ContainerGcPolicy policy_;
  std::function<void(const std::string&)> on_removed_;
};

}  // namespace nodelet::podworkerd
