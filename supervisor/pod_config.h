// PodConfig: merges the full snapshots of each pod source into the kubelet's pod updates
// (pkg/kubelet/config): ADD (new uid), UPDATE (its spec hash changed), DELETE (a deletion
// timestamp appeared: graceful delete), REMOVE (gone from its source), RECONCILE (same spec,
// other metadata changed, e.g. labels or annotations). A source is ready once it has delivered
// its first snapshot that could be read; housekeeping waits until every configured source is.
// A source that could not be read (Failed) keeps the pods it served last, and stays not ready if
// it never was: a restart while a manifest URL is down removes none of its pods.
//
// Pod is the pod type carried along (lib/pod's Pod in the supervisor; anything in tests).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace nodelet::supervisor {

enum class PodOp { kAdd, kUpdate, kDelete, kRemove, kReconcile };

inline const char* PodOpName(PodOp op) {
  switch (op) {
    case PodOp::kAdd:
      return "ADD";
    case PodOp::kUpdate:
      return "UPDATE";
    case PodOp::kDelete:
      return "DELETE";
    case PodOp::kRemove:
      return "REMOVE";
    case PodOp::kReconcile:
      return "RECONCILE";
  }
  return "?";
}

template <typename Pod>
struct SourcePod {
  std::string uid;
  std::string spec_hash;      // what the pod worker acts on
  std::string metadata_hash;  // labels, annotations: RECONCILE when only this changes
  bool deleting = false;      // deletionTimestamp set
  std::shared_ptr<const Pod> pod;
};

template <typename Pod>
struct PodChange {
  PodOp op;
  std::string source;
  std::string uid;
  std::shared_ptr<const Pod> pod;
};

template <typename Pod>
class PodConfig {
 public:
  explicit PodConfig(std::set<std::string> sources) : expected_(std::move(sources)) {}

  // Replaces `source`'s pods with `pods` and returns what changed, in a stable order (by uid).
  // A uid claimed by another source is ignored (first source wins), as the kubelet does.
  // `read` false: the pods come from the source's own cache, not from a read of the source,
  // which is then no more ready (nor less failing) than it was.
  std::vector<PodChange<Pod>> Merge(const std::string& source, std::vector<SourcePod<Pod>> pods,
                                    bool read = true) {
    if (read) {
      seen_.insert(source);
      failing_.erase(source);
    }
    auto& current = by_source_[source];
    std::map<std::string, SourcePod<Pod>> next;
    for (auto& p : pods) {
      auto owner = owner_.find(p.uid);
      if (owner != owner_.end() && owner->second != source) continue;
      next[p.uid] = std::move(p);
    }
    std::vector<PodChange<Pod>> changes;
    for (auto& [uid, p] : next) {
      auto it = current.find(uid);
      if (it == current.end()) {
        owner_[uid] = source;
        changes.push_back({p.deleting ? PodOp::kDelete : PodOp::kAdd, source, uid, p.pod});
        continue;
      }
      const auto& old = it->second;
      if (p.deleting && !old.deleting) {
        changes.push_back({PodOp::kDelete, source, uid, p.pod});
      } else if (p.spec_hash != old.spec_hash) {
        changes.push_back({PodOp::kUpdate, source, uid, p.pod});
      } else if (p.metadata_hash != old.metadata_hash) {
        changes.push_back({PodOp::kReconcile, source, uid, p.pod});
      }
    }
    for (auto& [uid, old] : current) {
      if (next.count(uid) == 0) {
        owner_.erase(uid);
        changes.push_back({PodOp::kRemove, source, uid, old.pod});
      }
    }
    current = std::move(next);
    return changes;
  }

  // `source` could not be read (`reason`: a short label such as fetch, http_status, parse):
  // nothing changes. Returns true when this is a new reason for the source (not the one of its
  // previous failure, with no successful read in between): the caller logs it and sends an event
  // once per new reason, not once per attempt.
  bool Failed(const std::string& source, const std::string& reason) {
    ++failures_[{source, reason}];
    auto [it, inserted] = failing_.emplace(source, reason);
    if (inserted) return true;
    if (it->second == reason) return false;
    it->second = reason;
    return true;
  }
  // Failed reads by (source, reason), since start.
  const std::map<std::pair<std::string, std::string>, uint64_t>& failures() const {
    return failures_;
  }
  // How many pods `source` serves now.
  size_t PodsOf(const std::string& source) const {
    auto it = by_source_.find(source);
    return it == by_source_.end() ? 0 : it->second.size();
  }
  bool Ready(const std::string& source) const { return seen_.count(source) != 0; }

  // True once every configured source delivered a snapshot.
  bool AllSourcesReady() const {
    for (const auto& s : expected_) {
      if (seen_.count(s) == 0) return false;
    }
    return true;
  }
  // Every desired pod, by uid.
  std::map<std::string, std::shared_ptr<const Pod>> Pods() const {
    std::map<std::string, std::shared_ptr<const Pod>> out;
    for (const auto& [_, pods] : by_source_) {
      for (const auto& [uid, p] : pods) out[uid] = p.pod;
    }
    return out;
  }

 private:
  std::set<std::string> expected_;
  std::set<std::string> seen_;
  std::map<std::string, std::map<std::string, SourcePod<Pod>>> by_source_;
  std::map<std::string, std::string> owner_;    // uid -> source
  std::map<std::string, std::string> failing_;  // source -> reason of its current failure
  std::map<std::pair<std::string, std::string>, uint64_t> failures_;
};

}  // namespace nodelet::supervisor
