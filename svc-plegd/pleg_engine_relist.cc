// PlegEngine's relists: the full relist (its listing on the executor; the diff, the inspection
// jobs and the wait for them up to inspect_wait on the loop), one pod's relist (from the runtime
// or from a round's shared listing of the node), and the queueing of their changes as inspection
// jobs.
#include <algorithm>

#include "svc-plegd/pleg_engine.h"

namespace nodelet::plegd {

PlegEngine::SharedListing PlegEngine::Index(RuntimeListing listing, int64_t listed_at) {
  SharedListing out;
  out.listed_at_mono_ns = listed_at;
  // Each sandbox goes to the pod its metadata names (as ListPod keeps them), and each container
  // to its sandbox's pod; a container whose sandbox is not listed belongs to no pod (PodOf:
  // not found). Only nodelet's pods are named by id (PodOf: the others are foreign).
  std::map<std::string, std::pair<std::string, bool>> pod_of_sandbox;  // id -> uid, managed
  for (auto& sb : listing.sandboxes) {
    const bool managed = sb.labels.count(kManagedLabel) != 0;
    pod_of_sandbox[sb.id] = {sb.pod_uid, managed};
    if (managed) out.refs[sb.id] = PodRef{sb.pod_uid, sb.id};
    RuntimeListing& pod = out.pods[sb.pod_uid];
    pod.sandboxes.push_back(std::move(sb));
  }
  for (auto& c : listing.containers) {
    auto it = pod_of_sandbox.find(c.sandbox_id);
    if (it == pod_of_sandbox.end()) continue;
    const auto& [uid, managed] = it->second;
    if (managed) out.refs[c.id] = PodRef{uid, c.sandbox_id};
    out.pods[uid].containers.push_back(std::move(c));
  }
  return out;
}

std::optional<bool> PlegEngine::RelistPod(const std::string& uid, bool force,
                                          const std::string& sandbox, const SharedListing* shared,
                                          std::function<void(bool)> then) {
  const PodView* known = diff_.Find(uid);
  if (known != nullptr && known->foreign) return false;  // listed by labels it does not have
  if (shared != nullptr) {
    auto it = shared->pods.find(uid);
    return ApplyPodListing(uid, force, it != shared->pods.end() ? it->second : RuntimeListing{},
                           shared->listed_at_mono_ns);
  }
  std::vector<std::string> sandboxes;
  if (known != nullptr) sandboxes = known->sandbox_ids;
  if (!sandbox.empty() &&
      std::find(sandboxes.begin(), sandboxes.end(), sandbox) == sandboxes.end()) {
    sandboxes.push_back(sandbox);
  }
  auto listed = std::make_shared<Listed>();
  Call(
      lister_,
      [this, listed, uid, sandboxes = std::move(sandboxes)] {
        listed->at = clock_.MonoNanos();
        listed->listing = runtime_.ListPod(uid, sandboxes);
      },
      [this, listed, uid, force, then = std::move(then)] {
        then(ApplyPodListing(uid, force, listed->listing, listed->at));
      });
  return std::nullopt;
}

bool PlegEngine::ApplyPodListing(const std::string& uid, bool force,
                                 const Result<RuntimeListing>& listing, int64_t listed_at) {
  if (!listing.ok()) {
    ++relist_errors_;
    return false;
  }
  ++pod_relists_;
  std::optional<PodChange> change = diff_.UpdatePod(uid, *listing);
  const bool changed = change.has_value();
  if (!change && force) {
    // Asked for by name (podworkerd after changing the pod): inspected and published all the
    // same, so the record says the pod was listed after the change.
    const PodView* view = diff_.Find(uid);
    if (view == nullptr) return false;
    change = PodChange{*view, false, {}};
  }
  if (!change) return false;
  std::vector<PodChange> changes;
  changes.push_back(std::move(*change));
  std::vector<PodResult> removed;
  QueueJobs(changes, relist_seq_, listed_at, &uid, false, &removed);
  DispatchJobs();
  for (auto& r : removed) Emit(std::move(r));
  return changed;
}

size_t PlegEngine::QueueJobs(std::vector<PodChange>& changes, uint64_t relist, int64_t listed_at,
                             const std::string* only_uid, bool counted,
                             std::vector<PodResult>* removed) {
  std::map<std::string, std::vector<PlegEvent>> wanted;
  for (auto& change : changes) {
    if (change.removed) {
      PodResult r;
      r.record.uid = change.view.uid;
      r.record.name = change.view.name;
      r.record.namespace_ = change.view.pod_namespace;
      r.record.foreign = change.view.foreign;
      r.record.removed = true;
      r.record.relist = relist;
      r.record.listed_at_mono_ns = listed_at;
      r.events = std::move(change.events);
      reinspect_.erase(change.view.uid);
      removed->push_back(std::move(r));
      continue;
    }
    auto& ev = wanted[change.view.uid];
    ev.insert(ev.end(), change.events.begin(), change.events.end());
  }
  // Pods that failed before, or changed while their inspection was in flight.
  for (auto it = reinspect_.begin(); it != reinspect_.end();) {
    if (only_uid != nullptr && it->first != *only_uid) {
      ++it;
      continue;
    }
    if (diff_.Find(it->first) == nullptr) {
      it = reinspect_.erase(it);
      continue;
    }
    auto& ev = wanted[it->first];
    ev.insert(ev.begin(), it->second.begin(), it->second.end());
    ++it;
  }
  size_t queued = 0;
  for (auto& [uid, events] : wanted) {
    if (in_flight_.count(uid) != 0) {
      // Still being inspected (maybe hung): these events go with the next inspection, which
      // starts when this one ends.
      reinspect_[uid] = events;  // includes what was pending before
      continue;
    }
    reinspect_.erase(uid);
    const PodView* view = diff_.Find(uid);
    if (view == nullptr) continue;
    in_flight_.insert(uid);
    jobs_.push_back(Job{*view, std::move(events), relist, listed_at, counted});
    ++queued;
  }
  if (counted && queued > 0) outstanding_[relist] = static_cast<int>(queued);
  return queued;
}

void PlegEngine::StartFullRelist() {
  busy_ = true;
  auto full = std::make_shared<FullRelist>();
  full->relist = ++relist_seq_;
  full->done.relist = full->relist;
  Call(
      lister_,
      [this, full] {
        full->t0 = clock_.Now();
        full->done.started_at_ns = clock_.WallNanos();
        full->done.started_at_mono_ns = clock_.MonoNanos();
        full->listing = runtime_.List();
      },
      [this, full] { OnListed(full); });
}

void PlegEngine::OnListed(std::shared_ptr<FullRelist> full) {
  full_ = std::move(full);
  RelistResult& done = full_->done;
  const Result<RuntimeListing>& listing = full_->listing;
  if (!listing.ok()) {
    ++relist_errors_;
    done.error = listing.status().ToString();
    last_error_ = done.error;
    runtime_unreachable_ = listing.status().code() == StatusCode::kUnavailable ||
                           listing.status().code() == StatusCode::kDeadlineExceeded;
    FinishFullRelist();
    return;
  }
  const uint64_t relist = full_->relist;
  done.containers = static_cast<uint32_t>(listing->containers.size());
  std::vector<PodChange> changes = diff_.Update(*listing);
  done.pods = static_cast<uint32_t>(diff_.pod_count());

  std::vector<PodResult> removed;
  QueueJobs(changes, relist, done.started_at_mono_ns, nullptr, true, &removed);
  std::erase_if(inspected_,
                [this](const auto& entry) { return diff_.Find(entry.first) == nullptr; });
  last_success_ = clock_.Now();
  last_error_.clear();
  runtime_unreachable_ = false;
  DispatchJobs();
  for (auto& r : removed) Emit(std::move(r));
  ++relists_;

  // Wait for this relist's inspections, but never past inspect_wait: a hung pod is output when
  // it returns and does not hold back the RelistDone or the next relist.
  if (outstanding_.count(relist) == 0) {
    FinishFullRelist();
    return;
  }
  inspect_timer_.ArmAt(full_->t0 + options_.inspect_wait);
}

void PlegEngine::FinishFullRelist() {
  inspect_timer_.Cancel();
  std::shared_ptr<FullRelist> full = std::move(full_);
  full_.reset();
  // Late jobs of this relist count down an entry no longer there.
  outstanding_.erase(full->relist);
  full->done.duration =
      std::chrono::duration_cast<std::chrono::microseconds>(clock_.Now() - full->t0);
  if (full->done.error.empty()) last_duration_us_ = full->done.duration.count();
  next_full_ = full->t0 + options_.relist_period;
  busy_ = false;
  EmitRelist(std::move(full->done));
  Schedule();
}

}  // namespace nodelet::plegd
