// PodCache: plegd's pod status cache (the kubelet's kubecontainer.Cache), owned by the main
// loop. Applies inspection results, keeps the last good record when an inspection fails, and
// serialises pods for updates and snapshots.
#pragma once

#include <flatbuffers/flatbuffers.h>

#include <map>
#include <string>

#include "pleg_generated.h"
#include "svc-plegd/pleg_engine.h"

namespace nodelet::plegd {

class PodCache {
 public:
  // Applies one result and returns the record now cached (or, for a removed pod, the removal
  // record). A failed inspection keeps the previous good sandboxes and containers and carries
  // the error.
  const ipc::pleg::PodRecordT& Apply(PodResult& result);
  const std::map<std::string, ipc::pleg::PodRecordT>& pods() const { return pods_; }
  uint64_t last_relist() const { return last_relist_; }
  void set_last_relist(uint64_t r) { last_relist_ = r; }
  size_t container_count() const;

 private:
  std::map<std::string, ipc::pleg::PodRecordT> pods_;
  ipc::pleg::PodRecordT removed_;
  uint64_t last_relist_ = 0;
};

}  // namespace nodelet::plegd
