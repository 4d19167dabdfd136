// StatusManager: the kubelet's status manager rules for nodelet-statusd, in memory and without
// I/O. It keeps one versioned PodStatusRecord per pod uid and decides what a write does:
//   - the version increases by one on every accepted change; an identical status is ignored;
//   - startTime never changes once set; a condition's lastTransitionTime changes only when its
//     status changes (statusd's own clock, as the kubelet does);
//   - guards: a terminal phase (Succeeded, Failed) is final; a terminated container does not
//     leave the terminated state under restartPolicy Never, nor after exit code 0 under
//     OnFailure; an illegal update is refused with FailedPrecondition and changes nothing;
//   - TerminatePod: every container not terminated becomes terminated (ContainerStatusUnknown,
//     exit code 137) and the phase Failed unless already terminal.
// Batches make it transactional with the store: BeginBatch() remembers each pod as it was
// before its first change, RollbackBatch() puts them back when the commit failed.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "lib/common/clock.h"
#include "lib/common/status.h"
#include "lib/status/pod_status.h"

namespace nodelet::statusd {

using status::PodIdentity;
using status::PodStatus;
using status::PodStatusRecord;

// One accepted change, in the order it was made: what the store writes and the watch stream
// and sinks see.
struct StatusChange {
  enum class Kind { kUpdated, kRemoved };
  Kind kind = Kind::kUpdated;
  // kUpdated: the new record. kRemoved: the record as it was when removed.
  PodStatusRecord record;
};

// What SetPodStatus and TerminatePod did.
struct SetOutcome {
  uint64_t version = 0;
  bool changed = false;
};

class StatusManager {
 public:
  explicit StatusManager(const Clock& clock) : clock_(clock) {}
  // statusd's clock, for whatever else statusd stamps (events, the node status).
  const Clock& clock() const { return clock_; }

  // Replaces the whole state with records read from the store (at start).
  void Load(std::vector<PodStatusRecord> records);
  // A pod whose stored record could not be read: its next version starts above `version`.
  void SetVersionFloor(const std::string& uid, uint64_t version);

  // Validates, normalizes and guards `status` for `pod`; on a change stores it and appends a
  // StatusChange to `changes`. InvalidArgument (malformed) or FailedPrecondition (illegal
  // transition) change nothing.
  Result<SetOutcome> SetPodStatus(const PodIdentity& pod, PodStatus status,
                                  std::vector<StatusChange>* changes);
  // NotFound for an unknown uid.
  Result<SetOutcome> TerminatePod(const std::string& uid, std::vector<StatusChange>* changes);
  // Removes every pod whose uid is not in `keep`; returns the removed uids, sorted.
  std::vector<std::string> RemoveOrphans(const std::set<std::string>& keep,
                                         std::vector<StatusChange>* changes);

  // nullptr for an unknown uid.
  const PodStatusRecord* Get(const std::string& uid) const;
  // Every pod (of `namespace_filter` when not empty), sorted by namespace then name then uid.
  std::vector<const PodStatusRecord*> List(const std::string& namespace_filter = "") const;
  size_t size() const { return pods_.size(); }

  void BeginBatch();
  // Keeps the batch's changes.
  void CommitBatch();
  // Puts every pod the batch changed back as it was at BeginBatch().
  void RollbackBatch();
  // True when the current batch changed (or removed) this pod.
  bool TouchedInBatch(const std::string& uid) const { return saved_.count(uid) != 0; }

 private:
  // Remembers the pod's pre-batch state on its first change in a batch.
  void Save(const std::string& uid);
  Status CheckTransition(const PodStatusRecord& old, const PodIdentity& pod,
                         const PodStatus& status) const;

  const Clock& clock_;
  std::unordered_map<std::string, PodStatusRecord> pods_;
  std::unordered_map<std::string, uint64_t> version_floor_;
  bool in_batch_ = false;
  std::unordered_map<std::string, std::optional<PodStatusRecord>> saved_;
};

}  // namespace nodelet::statusd
