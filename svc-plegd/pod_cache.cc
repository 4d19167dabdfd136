#include "svc-plegd/pod_cache.h"

namespace nodelet::plegd {

const ipc::pleg::PodRecordT& PodCache::Apply(PodResult& result) {
  auto& rec = result.record;
  if (rec.removed) {
    pods_.erase(rec.uid);
    removed_ = rec;
    return removed_;
  }
  auto it = pods_.find(rec.uid);
  if (result.inspect_failed && it != pods_.end()) {
    // Keep what we knew; say why it may be stale.
    it->second.inspect_error = rec.inspect_error;
    return it->second;
  }
  auto& slot = pods_[rec.uid];
  slot = rec;
  return slot;
}

size_t PodCache::container_count() const {
  size_t n = 0;
  for (const auto& [_, p] : pods_) n += p.containers.size();
  return n;
}

}  // namespace nodelet::plegd
