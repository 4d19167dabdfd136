#include "svc-podworkerd/pod_dispatcher.h"

#include <algorithm>
#include <utility>

#include "lib/common/logging.h"
#include "lib/pod/canonical.h"
#include "lib/pod/static_pod.h"

namespace nodelet::podworkerd {
namespace {

std::string ConfigHash(const pod::Pod& p) {
  auto it = p.metadata.annotations.find(pod::kConfigHashAnnotation);
  if (it != p.metadata.annotations.end()) return it->second;
  return pod::Hex128(pod::Fnv1a128(pod::CanonicalPod(p)));
}

int64_t GraceOf(const pod::Pod& p) {
  return p.spec.termination_grace_period_seconds.value_or(
      pod::kDefaultTerminationGracePeriodSeconds);
}

}  // namespace

PodDispatcher::PodDispatcher(const Clock& clock, const PodCacheView& cache,
                             DispatcherEffects& effects, std::chrono::milliseconds resync_period)
    : clock_(clock), cache_(cache), effects_(effects), resync_period_(resync_period) {}

void PodDispatcher::ApplyDesired(const std::vector<std::shared_ptr<const pod::Pod>>& pods,
                                 bool sources_ready, const std::set<std::string>& evicted) {
  sources_ready_ = sources_ready;
  std::set<std::string> seen;
  for (const auto& p : pods) {
    const std::string uid = p->metadata.uid;
    seen.insert(uid);
    const std::string hash = ConfigHash(*p);
    Entry& e = pods_[uid];
    const bool known = e.pod != nullptr && e.desired;
    e.desired = true;
    const bool newly_evicted = !e.evicted && evicted.count(uid) > 0;
    e.evicted = evicted.count(uid) > 0;
    if (p->metadata.deletion_timestamp) {
      e.pod = p;
      e.config_hash = hash;
      int64_t grace = p->metadata.deletion_grace_period_seconds.value_or(GraceOf(*p));
      Update({uid, UpdateType::kKill, p, grace});
      continue;
    }
    if (!known) {
      e.pod = p;
      e.config_hash = hash;
      e.created = clock_.Now();
      e.arrival = ++arrivals_;
      e.next_resync = clock_.Now() + resync_period_;
      Update({uid, UpdateType::kCreate, p, std::nullopt});
    } else if (hash != e.config_hash) {
      e.pod = p;
      e.config_hash = hash;
      e.finished = false;
      Update({uid, UpdateType::kUpdate, p, std::nullopt});
    } else if (newly_evicted && !e.finished) {
      // Synced at once: the sync stops the pod for good (PodSyncer::MarkEvicted).
      Update({uid, UpdateType::kUpdate, p, std::nullopt});
    }
  }
  for (auto& [uid, e] : pods_) {
    if (!e.desired || seen.count(uid)) continue;
    // Until every source has reported, a missing pod may belong to a source that has not been
    // read yet (a manifest URL that is down across a supervisor restart): keep it.
    if (!sources_ready_) continue;
    e.desired = false;
    ++counters_.kills;
    // A finished pod (every container done for good) is terminated but kept while desired; its
    // worker ignores updates until forgotten, so forget it: the kill runs again and removes it.
    if (lifecycle_.Phase(uid) == LifecyclePhase::kTerminated && !lifecycle_.Busy(uid)) {
      lifecycle_.Forget(uid);
    }
    Update({uid, UpdateType::kKill, nullptr,
            e.pod ? GraceOf(*e.pod) : pod::kDefaultTerminationGracePeriodSeconds});
  }
  if (sources_ready_) {
    KillOrphans();
    // Garbage collection protects the desired pods' containers and images.
    std::set<std::string> uids, images;
    for (const auto& [uid, e] : pods_) {
      if (!e.desired || !e.pod || (e.evicted && e.finished)) continue;
      uids.insert(uid);
      for (const auto& c : e.pod->spec.init_containers) images.insert(c.image);
      for (const auto& c : e.pod->spec.containers) images.insert(c.image);
    }
    effects_.SetGcDesired(std::move(uids), std::move(images));
  }
}

void PodDispatcher::Housekeep() {
  if (sources_ready_) KillOrphans();
}

void PodDispatcher::KillOrphans() {
  if (!cache_.ready()) return;
  for (const auto& [uid, rec] : cache_.pods()) {
    if (rec.foreign || pods_.count(uid)) continue;
    // Live or dead leftovers alike are killed and removed.
    GetLogger("podworkerd")
        ->info("Killing orphaned pod {}/{} ({}): no desired pod owns it", rec.namespace_, rec.name,
               uid);
    ++counters_.orphans_killed;
    Entry& e = pods_[uid];
    e.desired = false;
    Update({uid, UpdateType::kKill, nullptr, std::nullopt});
  }
  orphans_scanned_ = true;
}

void PodDispatcher::SyncChanged(const std::set<std::string>& changed) {
  for (const auto& uid : changed) {
    auto it = pods_.find(uid);
    if (it == pods_.end()) continue;
    const auto phase = lifecycle_.Phase(uid);
    if (phase == LifecyclePhase::kTerminating ||
        (phase == LifecyclePhase::kTerminated && it->second.finished && it->second.desired)) {
      // Being stopped: its status follows the containers as they stop, one by one. A pod that
      // finished (its containers done, or past its activeDeadlineSeconds) is terminal already.
      ReportStopping(it->second, uid, it->second.finished);
      continue;
    }
    if (it->second.finished) continue;
    if (lifecycle_.Phase(uid) != LifecyclePhase::kSyncing) continue;
    Update({uid, UpdateType::kSync, nullptr, std::nullopt});
  }
  RunParked();
}

void PodDispatcher::ReportStopping(const Entry& e, const std::string& uid, bool terminal) {
  // Not for orphans (no spec, no status) nor while the view is older than the last action.
  if (e.pod == nullptr || !cache_.ready() || Stale(uid, e)) return;
  auto rec = cache_.pods().find(uid);
  effects_.ReportStoppingStatus(*e.pod, rec == cache_.pods().end() ? nullptr : &rec->second,
                                terminal);
}

std::set<std::string> PodDispatcher::Known() const {
  std::set<std::string> uids;
  for (const auto& [uid, _] : pods_) uids.insert(uid);
  return uids;
}

std::set<std::string> PodDispatcher::InUse() const {
  std::set<std::string> uids;
  for (const auto& [uid, e] : pods_) {
    if (!(e.desired && e.evicted && e.finished)) uids.insert(uid);
  }
  return uids;
}

void PodDispatcher::OnTick() {
  const MonoTime now = clock_.Now();
  RunParked();
  for (auto& [uid, e] : pods_) {
    if (!e.desired || e.finished || !e.pod) continue;
    if (lifecycle_.Phase(uid) != LifecyclePhase::kSyncing || lifecycle_.Busy(uid)) continue;
    bool due = now >= e.next_resync || (e.retry_at && now >= *e.retry_at);
    if (!due) continue;
    e.next_resync = now + resync_period_;
    e.retry_at.reset();
    Update({uid, UpdateType::kSync, nullptr, std::nullopt});
  }
}

std::optional<MonoTime> PodDispatcher::NextDue() const {
  if (!parked_.empty()) return clock_.Now();
  std::optional<MonoTime> due;
  for (const auto& [uid, e] : pods_) {
    if (!e.desired || e.finished || !e.pod) continue;
    MonoTime at = e.next_resync;
    if (e.retry_at && *e.retry_at < at) at = *e.retry_at;
    if (!due || at < *due) due = at;
  }
  return due;
}

void PodDispatcher::Update(PodUpdate<pod::Pod> update) {
  // A pod that must stop while its worker syncs it: the sync gives up what it waits for
  // without end (an image pull), so that the kill comes next.
  if (update.type == UpdateType::kKill && lifecycle_.Busy(update.uid)) {
    effects_.CancelSync(update.uid);
  }
  auto work = lifecycle_.Update(std::move(update));
  if (work) Dispatch(std::move(*work));
}

bool PodDispatcher::Stale(const std::string& uid, const Entry& e) const {
  if (e.fresh_after_mono_ns == 0 || cache_.relist_started_mono_ns() > e.fresh_after_mono_ns) {
    return false;
  }
  // A relist of this pod alone that started after the change will do too.
  auto it = cache_.pods().find(uid);
  return it == cache_.pods().end() || it->second.listed_at_mono_ns <= e.fresh_after_mono_ns;
}

bool PodDispatcher::WaitsForRelist(const Work<pod::Pod>& work) const {
  auto it = pods_.find(work.uid);
  if (it == pods_.end()) return false;
  const Entry& e = it->second;
  // A sync acts on the runtime's view; the removal of a stopped pod that is not desired first
  // reports the pod's final status, read from the view of the runtime after the stop.
  const bool needs_view =
      work.kind == WorkKind::kSync || (work.kind == WorkKind::kTerminated && !e.desired && e.pod);
  return needs_view && (!cache_.ready() || Stale(work.uid, e));
}

void PodDispatcher::Dispatch(Work<pod::Pod> work) {
  if (WaitsForRelist(work)) {
    parked_[work.uid] = std::move(work);
    return;
  }
  std::optional<ipc::pleg::PodRecordT> record;
  auto it = cache_.pods().find(work.uid);
  if (it != cache_.pods().end()) record = it->second;
  Execute(std::move(work), std::move(record));
}

void PodDispatcher::RunParked() {
  if (parked_.empty() || !cache_.ready()) return;
  // In the order the pods came (first seen, first started), not by uid.
  std::vector<std::pair<uint64_t, std::string>> ready;
  for (const auto& [uid, work] : parked_) {
    if (WaitsForRelist(work)) continue;
    auto e = pods_.find(uid);
    ready.emplace_back(e == pods_.end() ? 0 : e->second.arrival, uid);
  }
  std::sort(ready.begin(), ready.end());
  for (const auto& [_, uid] : ready) {
    auto it = parked_.find(uid);
    if (it == parked_.end()) continue;
    Work<pod::Pod> work = std::move(it->second);
    parked_.erase(it);
    Dispatch(std::move(work));
  }
}

void PodDispatcher::Execute(Work<pod::Pod> work, std::optional<ipc::pleg::PodRecordT> record) {
  Entry& entry = pods_[work.uid];
  if (work.kind == WorkKind::kTerminated && !entry.desired) {
    // Every container and the sandbox are stopped (as this relist shows): the final status,
    // before the pod is removed from the runtime and forgotten.
    ReportStopping(entry, work.uid, true);
  }
  DispatchedWork d;
  d.desired = entry.desired;
  // The first sync of a pod in this incarnation carries readiness over from statusd.
  d.seed_readiness = work.kind == WorkKind::kSync && !entry.seeded;
  d.arrival = entry.arrival;
  entry.seeded = entry.seeded || d.seed_readiness;
  d.work = std::move(work);
  d.record = std::move(record);
  effects_.Run(std::move(d));
}

void PodDispatcher::HandleDone(WorkDone& d) {
  auto log = GetLogger("podworkerd");
  auto it = pods_.find(d.uid);
  if (it == pods_.end()) return;
  Entry& e = it->second;
  std::optional<Work<pod::Pod>> next;
  switch (d.kind) {
    case WorkKind::kSync: {
      ++counters_.syncs;
      const SyncOutcome& o = d.outcome;
      worker_duration_.Observe(d.took);
      counters_.containers_gc += static_cast<uint64_t>(o.containers_removed);
      for (const auto& [type, n] : o.container_starts) {
        counters_.container_starts[type] += static_cast<uint64_t>(n);
      }
      for (const auto& [key, n] : o.container_start_errors) {
        counters_.container_start_errors[key] += static_cast<uint64_t>(n);
      }
      if (!e.start_recorded && o.status.phase == status::PodPhase::kRunning) {
        e.start_recorded = true;
        pod_start_.Observe(
            std::chrono::duration_cast<std::chrono::microseconds>(clock_.Now() - e.created));
      }
      if (!o.error.empty()) {
        ++counters_.sync_errors;
        if (e.logged_errors.size() >= 32) e.logged_errors.clear();  // errors naming ids vary
        if (e.logged_errors.insert(o.error).second) {
          log->warn("Failed to sync pod {} ({}): {}", d.uid,
                    e.pod ? e.pod->metadata.namespace_name + "/" + e.pod->metadata.name : "",
                    o.error);
        }
        e.last_error = o.error;
      }
      if (o.changed_runtime) {
        e.fresh_after_mono_ns = d.completed_mono_ns;
        effects_.RequestRelist(d.uid);
      }
      e.retry_at = o.retry_at;
      // A failed sync (the runtime down, a create that failed) is retried by itself, 100 ms
      // doubling to 5 s, so a runtime that comes back is used at once; success resets it.
      if (!o.error.empty()) {
        e.error_backoff = e.error_backoff.count() == 0
                              ? kErrorBackoffInitial
                              : std::min(e.error_backoff * 2, kErrorBackoffMax);
        MonoTime at = clock_.Now() + e.error_backoff;
        if (!e.retry_at || at < *e.retry_at) e.retry_at = at;
      } else {
        e.error_backoff = std::chrono::milliseconds(0);
        if (!e.last_error.empty()) log->info("Pod {} synced again after: {}", d.uid, e.last_error);
        e.last_error.clear();
        e.logged_errors.clear();
      }
      if (o.pod_finished) e.finished = true;
      if (e.pod) effects_.ReportStatus(*e.pod, o.status);
      effects_.SendEvents(o.events);
      if (e.pod) effects_.EnsureProbes(d.uid, *e.pod);
      next = lifecycle_.Complete(d.uid, WorkKind::kSync, o.pod_finished);
      break;
    }
    case WorkKind::kTerminating:
      if (!d.error.ok()) log->warn("Failed to stop pod {}: {}", d.uid, d.error.ToString());
      if (!d.outcome.events.empty()) effects_.SendEvents(d.outcome.events);
      if (e.pod) effects_.PodStopped(*e.pod);
      e.fresh_after_mono_ns = d.completed_mono_ns;
      effects_.RequestRelist(d.uid);
      next = lifecycle_.Complete(d.uid, WorkKind::kTerminating, false);
      break;
    case WorkKind::kTerminated:
      if (!d.error.ok()) log->warn("Failed to remove pod {}: {}", d.uid, d.error.ToString());
      lifecycle_.Complete(d.uid, WorkKind::kTerminated, false);
      effects_.RemoveProbes(d.uid);
      if (e.desired && !e.finished && e.pod) {
        // Deleted and re-added while terminating: start over.
        lifecycle_.Forget(d.uid);
        auto p = e.pod;
        Update({d.uid, UpdateType::kCreate, p, std::nullopt});
      } else if (!e.desired) {
        lifecycle_.Forget(d.uid);
        effects_.ForgetPod(d.uid);
        parked_.erase(d.uid);
        pods_.erase(it);
      }
      break;
  }
  if (next) Dispatch(std::move(*next));
}

}  // namespace nodelet::podworkerd
