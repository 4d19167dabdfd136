// PodConfig: merges the full snapshots of each pod source into the kubelet's pod updates
// (pkg/kubelet/config): ADD (new uid), UPDATE (its spec hash changed), DELETE (a deletion
// timestamp appeared: graceful delete), REMOVE (gone from its source), RECONCILE (same spec,
// other metadata changed, e.g. labels or annotations). Two sources that serve the same uid, or
// the same namespace/name under two uids, are a conflict: one winner by source rank (file, http,
// etcd), the other kept out and reported (never silently dropped). A source is ready once it has
// delivered its first snapshot that could be read; housekeeping waits until every configured source
// is. A source that could not be read (Failed) keeps the pods it served last, and stays not ready
// if it never was: a restart while a manifest URL is down removes none of its pods.
//
// Pod is the pod type carried along (lib/pod's Pod in the supervisor; anything in tests).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
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
  std::string full_name = "";  // NAMESPACE/NAME; "": not checked against other sources
};

template <typename Pod>
struct PodChange {
  PodOp op;
  std::string source;
  std::string uid;
  std::shared_ptr<const Pod> pod;
};

// A pod of one source that another source's pod keeps out: the same uid, or the same
// namespace/name under another uid.
template <typename Pod>
struct PodConflict {
  std::string kind;                    // "uid" or "name"
  std::string source, uid, full_name;  // the pod kept out
  std::string winner_source, winner_uid;
  std::shared_ptr<const Pod> pod;
  bool operator<(const PodConflict& o) const {
    return std::tie(kind, source, uid, winner_source, winner_uid) <
           std::tie(o.kind, o.source, o.uid, o.winner_source, o.winner_uid);
  }
};

// Which source wins a conflict: the node's own manifests (file), then the manifest URL (http),
// then the fleet's etcd, then any other source by name. The winner does not depend on which
// source was read first: a pod of a lower source that holds a uid or a name is replaced
// (REMOVE, then the winner's ADD) when a higher source serves a pod that claims it.
inline int SourceRank(const std::string& source) {
  if (source == "file") return 0;
  if (source == "http") return 1;
  if (source == "etcd") return 2;
  return 3;
}

template <typename Pod>
class PodConfig {
 public:
  explicit PodConfig(std::set<std::string> sources) : expected_(std::move(sources)) {}

  // Replaces `source`'s pods with `pods` and returns what changed, in a stable order (by uid,
  // removals last). Every source's pods are kept, and the desired set is chosen from all of
  // them: a pod whose uid, or whose namespace/name under another uid, another source's pod
  // holds is kept out by the source that ranks first (SourceRank), and is a conflict
  // (TakeNewConflicts) until it goes away; the pod kept out comes in by itself once the winner
  // drops its pod.
  // `read` false: the pods come from the source's own cache, not from a read of the source,
  // which is then no more ready (nor less failing) than it was.
  std::vector<PodChange<Pod>> Merge(const std::string& source, std::vector<SourcePod<Pod>> pods,
                                    bool read = true) {
    if (read) {
      seen_.insert(source);
      failing_.erase(source);
    }
    auto& mine = by_source_[source];
    mine.clear();
    for (auto& p : pods) mine[p.uid] = std::move(p);
    // The desired set from every source, the higher ranked first.
    std::vector<const std::string*> order;
    for (const auto& [name, _] : by_source_) order.push_back(&name);
    std::stable_sort(order.begin(), order.end(), [](const std::string* a, const std::string* b) {
      return SourceRank(*a) < SourceRank(*b);
    });
    std::map<std::string, Held> next;
    std::map<std::string, std::string> names;  // full name -> uid
    std::set<PodConflict<Pod>> conflicts;
    for (const std::string* src : order) {
      for (const auto& [uid, p] : by_source_[*src]) {
        if (auto held = next.find(uid); held != next.end()) {
          conflicts.insert({"uid", *src, uid, p.full_name, held->second.source, uid, p.pod});
          continue;
        }
        if (!p.full_name.empty()) {
          auto [it, added] = names.emplace(p.full_name, uid);
          // Across sources only: one source's own duplicates are its parser's business.
          if (!added && next.at(it->second).source != *src) {
            conflicts.insert(
                {"name", *src, uid, p.full_name, next.at(it->second).source, it->second, p.pod});
            continue;
          }
        }
        next.emplace(uid, Held{*src, &p});
      }
    }
    // A uid that moves to another source is removed before it is added again; pods gone are
    // removed last.
    std::vector<PodChange<Pod>> out, changes;
    for (const auto& [uid, held] : next) {
      const SourcePod<Pod>& p = *held.pod;
      auto it = desired_.find(uid);
      if (it == desired_.end() || it->second.source != held.source) {
        if (it != desired_.end()) {
          out.push_back({PodOp::kRemove, it->second.source, uid, it->second.pod.pod});
        }
        changes.push_back({p.deleting ? PodOp::kDelete : PodOp::kAdd, held.source, uid, p.pod});
        continue;
      }
      const auto& old = it->second.pod;
      if (p.deleting && !old.deleting) {
        changes.push_back({PodOp::kDelete, held.source, uid, p.pod});
      } else if (p.spec_hash != old.spec_hash) {
        changes.push_back({PodOp::kUpdate, held.source, uid, p.pod});
      } else if (p.metadata_hash != old.metadata_hash) {
        changes.push_back({PodOp::kReconcile, held.source, uid, p.pod});
      }
    }
    out.insert(out.end(), changes.begin(), changes.end());
    for (const auto& [uid, old] : desired_) {
      if (next.count(uid) == 0) out.push_back({PodOp::kRemove, old.source, uid, old.pod.pod});
    }
    desired_.clear();
    for (const auto& [uid, held] : next) desired_.emplace(uid, Desired{held.source, *held.pod});
    for (const auto& c : conflicts) {
      if (conflicts_.count(c) == 0) new_conflicts_.push_back(c);
    }
    conflicts_ = std::move(conflicts);
    return out;
  }

  // The conflicts that appeared since the last call (each once, until it is gone and comes
  // back): the caller logs each and records it as an event.
  std::vector<PodConflict<Pod>> TakeNewConflicts() { return std::exchange(new_conflicts_, {}); }

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
  // How many pods `source` serves now (in the desired set).
  size_t PodsOf(const std::string& source) const {
    size_t n = 0;
    for (const auto& [_, d] : desired_) n += d.source == source ? 1 : 0;
    return n;
  }
  bool Ready(const std::string& source) const { return seen_.count(source) != 0; }

  // A reloaded configuration added, moved or dropped `source`: it is expected (or not) and is not
  // ready until its next read. Its pods stay until that read's Merge (a dropped source's caller
  // merges it empty).
  void ResetSource(const std::string& source, bool expected) {
    seen_.erase(source);
    failing_.erase(source);
    if (expected) {
      expected_.insert(source);
    } else {
      expected_.erase(source);
    }
  }

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
    for (const auto& [uid, d] : desired_) out[uid] = d.pod.pod;
    return out;
  }

 private:
  std::set<std::string> expected_;
  std::set<std::string> seen_;
  struct Held {
    std::string source;
    const SourcePod<Pod>* pod;
  };
  struct Desired {
    std::string source;
    SourcePod<Pod> pod;
  };
  // Every source's pods as it last served them, those kept out by a conflict included.
  std::map<std::string, std::map<std::string, SourcePod<Pod>>> by_source_;
  std::map<std::string, Desired> desired_;  // uid -> the pod chosen, and its source
  std::set<PodConflict<Pod>> conflicts_;    // as of the last Merge
  std::vector<PodConflict<Pod>> new_conflicts_;
  std::map<std::string, std::string> failing_;  // source -> reason of its current failure
  std::map<std::pair<std::string, std::string>, uint64_t> failures_;
};

}  // namespace nodelet::supervisor
