#include "svc-volumed/volume_manager.h"

#include <algorithm>
#include <filesystem>

#include "lib/common/logging.h"
#include "lib/common/safe_path.h"

namespace nodelet::volumed {
namespace {

namespace fs = std::filesystem;

}  // namespace

void RetryBackoff::Failed(MonoTime now) {
  backoff_ = backoff_.count() == 0 ? kInitial : std::min(backoff_ * 2, kMax);
  next_ = now + backoff_;
}

VolumeManager::VolumeManager(std::string root_dir, const Clock& clock)
    : root_(std::move(root_dir)),
      clock_(clock),
      own_mounter_(std::make_unique<MounterImpl>()),
      mounter_(*own_mounter_),
      plugins_(root_, mounter_, clock_) {}

VolumeManager::VolumeManager(std::string root_dir, const Clock& clock, Mounter& mounter)
    : root_(std::move(root_dir)),
      clock_(clock),
      mounter_(mounter),
      plugins_(root_, mounter_, clock_) {}

Result<std::string> VolumeManager::PodDir(const std::string& uid) const {
  return JoinComponent(root_ + "/pods", uid);
}

void VolumeManager::SetDesired(DesiredState desired) {
  DesiredState old = std::move(desired_);
  desired_ = std::move(desired);
  const size_t marked = changed_pods_.size();
  const ConfigObjects before{old.config_maps, old.secrets};
  const ConfigObjects after{desired_.config_maps, desired_.secrets};
  for (const auto& [uid, pod] : desired_.pods) {
    auto o = old.pods.find(uid);
    auto held = pods_.find(uid);
    if (o == old.pods.end() || held == pods_.end() || (o->second != pod && *o->second != *pod)) {
      changed_pods_.insert(uid);
      continue;
    }
    // The same pod: it changes only when a ConfigMap or Secret it uses does (its plugin knows).
    for (const auto& v : pod->spec.volumes) {
      auto vol = held->second.volumes.find(v.name);
      if (vol == held->second.volumes.end() || vol->second.plugin == nullptr ||
          vol->second.plugin->ReadsChangedObject(v, pod->metadata.namespace_name, before, after)) {
        changed_pods_.insert(uid);
        break;
      }
    }
  }
  bool went = false;
  for (const auto& [uid, _] : pods_) went = went || !desired_.pods.count(uid);
  // A pod that is no longer in use may be torn down now.
  const bool in_use_changed =
      old.in_use != desired_.in_use || old.in_use_known != desired_.in_use_known;
  teardown_pending_ =
      teardown_pending_ || went || in_use_changed || old.sources_ready != desired_.sources_ready;
  const bool changed = changed_pods_.size() != marked || went || in_use_changed ||
                       old.sources_ready != desired_.sources_ready ||
                       old.pods.size() != desired_.pods.size();
  // A change is a good moment to look for leftovers too (a pod that went may have left some).
  if (desired_.sources_ready && changed) sweep_pending_ = true;
}

std::set<std::string> VolumeManager::Reconcile() {
  const MonoTime now = clock_.Now();
  std::set<std::string> changed;
  removal_budget_ = kRemovalOpsPerPass;
  removal_going_ = false;
  // Tear down first: pods volumed holds that are no longer desired.
  TearDownUndesired(now, &changed);
  teardown_pending_ = false;
  // Pod directories on disk that nobody wants: only once every source has reported and
  // podworkerd has said which pods it still runs.
  if (Removing()) {
    bool retry_due = false;
    for (const auto& [_, l] : leftovers_) retry_due = retry_due || l.retry.Due(now);
    if (sweep_pending_ || now >= next_sweep_ || retry_due) SweepLeftovers(now);
  }
  sweep_pending_ = false;  // also when the sources are no longer ready (a restarted supervisor)
  // Then set up what is desired: pods that changed, and volumes whose retry is due.
  for (const auto& [uid, pod] : desired_.pods) {
    if (SetUpPod(*pod, changed_pods_.count(uid) > 0, now)) changed.insert(uid);
  }
  changed_pods_.clear();
  ScheduleNext();
  return changed;
}

MonoTime VolumeManager::NextReconcile() const {
  if (!changed_pods_.empty() || teardown_pending_ || sweep_pending_ || removal_going_)
    return MonoTime{};
  MonoTime next = next_retry_;
  if (Removing()) next = std::min(next, next_sweep_);
  return next;
}

bool VolumeManager::Removing() const { return desired_.sources_ready && desired_.in_use_known; }

bool VolumeManager::MayTearDown(const std::string& uid) const {
  return Removing() && !desired_.pods.count(uid) && !desired_.in_use.count(uid);
}

void VolumeManager::TearDownUndesired(MonoTime now, std::set<std::string>* changed) {
  for (auto it = pods_.begin(); it != pods_.end();) {
    if (!MayTearDown(it->first) || !it->second.teardown.Due(now)) {
      ++it;
      continue;
    }
    if (!it->second.removal.tree) ++operations_;  // counted once, not at every step
    auto gone = TearDownPod(it->first, it->second);
    if (!gone.ok()) {
      ++failures_;
      it->second.teardown.Failed(now);
      ++it;
      continue;
    }
    if (!*gone) {
      ++it;
      continue;
    }
    changed->insert(it->first);
    it = pods_.erase(it);
  }
}

Result<bool> VolumeManager::TearDownPod(const std::string& uid, PodState& ps) {
  auto pod_dir = PodDir(uid);
  if (!pod_dir.ok()) return pod_dir.status();
  if (removal_budget_ == 0) {
    removal_going_ = true;  // this pass removed enough: the next one goes on
    return false;
  }
  // Each volume by its plugin (only those whose set-up got as far as a path), then whatever
  // else the pod directory holds: podworkerd's subPath staging mounts, leftovers of a volume
  // that left the spec. Once, before the removal's first step.
  if (!ps.removal.tree) {
    for (const auto& [name, vol] : ps.volumes) {
      if (vol.plugin == nullptr || vol.plugin_state.host_path.empty()) continue;
      if (Status s = vol.plugin->Unmount(uid, name); !s.ok()) {
        RemovalFailed("tear down volume \"" + name + "\" of pod " + uid, s, ps.removal);
        return s;
      }
    }
  }
  return RemovePodDir(*pod_dir, ps.removal);
}

Result<bool> VolumeManager::RemovePodDir(const std::string& dir, Removal& removal) {
  if (removal_budget_ == 0) {
    removal_going_ = true;
    return false;
  }
  if (!removal.tree) {
    if (Status s = UnmountUnder(mounter_, dir); !s.ok()) {
      RemovalFailed("unmount under " + dir, s, removal);
      return s;
    }
    removal.tree = std::make_unique<TreeRemover>(dir);
  }
  const size_t before = removal.tree->operations();
  auto gone = removal.tree->Step(removal_budget_);
  const size_t used = removal.tree->operations() - before;
  removal_budget_ -= std::min(used, removal_budget_);
  if (!gone.ok()) {
    RemovalFailed("remove " + dir, gone.status(), removal);
    removal.tree.reset();  // the next attempt unmounts again and starts from the top
    return gone.status();
  }
  if (!*gone) {
    removal_going_ = true;
    return false;
  }
  if (!removal.error.empty()) {
    GetLogger("volumed.volumes")->info("removed {} after all", dir);
  }
  removal = Removal{};
  return true;
}

void VolumeManager::RemovalFailed(const std::string& what, const Status& s, Removal& removal) {
  if (removal.error == s.message()) return;  // said already; retried with back-off
  removal.error = s.message();
  GetLogger("volumed.volumes")
      ->warn("{}: {} (retried with back-off up to {} s)", what, s.message(),
             std::chrono::duration_cast<std::chrono::seconds>(RetryBackoff::kMax).count());
}

void VolumeManager::SweepLeftovers(MonoTime now) {
  sweep_pending_ = false;
  next_sweep_ = now + kSweepPeriod;
  std::set<std::string> seen;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root_ + "/pods", ec)) {
    std::string uid = entry.path().filename();
    if (pods_.count(uid) || !MayTearDown(uid)) continue;
    seen.insert(uid);
    Leftover& left = leftovers_[uid];
    if (!left.retry.Due(now)) continue;
    auto dir = PodDir(uid);
    Result<bool> gone = dir.ok() ? RemovePodDir(*dir, left.removal) : Result<bool>(dir.status());
    if (gone.ok() && *gone) {
      leftovers_.erase(uid);
      continue;
    }
    if (gone.ok()) continue;  // goes on at the next pass
    // Reported once, not at every retry.
    if (!left.reported) ++failures_;
    left.reported = true;
    left.retry.Failed(now);
  }
  std::erase_if(leftovers_, [&](const auto& kv) { return !seen.count(kv.first); });
}

bool VolumeManager::SetUpPod(const pod::Pod& pod, bool spec_changed, MonoTime now) {
  const std::string& uid = pod.metadata.uid;
  auto held = pods_.find(uid);
  if (held == pods_.end()) {
    held = pods_.emplace(uid, PodState{}).first;
    spec_changed = true;
  }
  PodState& ps = held->second;
  ps.teardown.Succeeded();  // desired (again)
  ps.removal = Removal{};   // a removal under way stops (the set-up makes what it needs again)
  if (!spec_changed) {
    // Only a due retry brings an unchanged pod here.
    bool due = false;
    for (const auto& [_, vol] : ps.volumes) due = due || (!vol.ready && vol.retry.Due(now));
    if (!due) return false;
  }
  const bool was_ready = AllReady(ps, pod.spec.volumes.size());
  std::set<std::string> names;
  bool pod_changed = false;
  for (const auto& v : pod.spec.volumes) {
    names.insert(v.name);
    Vol& vol = ps.volumes[v.name];
    if (spec_changed) {
      // The plugin follows the volume's source; a volume whose source changed starts afresh.
      VolumePlugin& plugin = plugins_.For(v);
      if (vol.plugin != &plugin) vol = Vol{.plugin = &plugin};
    }
    if (!vol.retry.Due(now)) continue;         // backing off
    if (!spec_changed && vol.ready) continue;  // nothing changed for it
    ++operations_;
    bool content_changed = false;
    const VolumeSpec spec{pod, v, {desired_.config_maps, desired_.secrets}};
    if (Status s = vol.plugin->SetUp(spec, vol.plugin_state, &content_changed); s.ok()) {
      pod_changed = pod_changed || content_changed || !vol.ready;
      vol.ready = true;
      vol.error.clear();
      vol.retry.Succeeded();
    } else {
      ++failures_;
      if (vol.ready || vol.error != s.message()) pod_changed = true;
      vol.ready = false;
      vol.error = s.message();
      vol.plugin_state.content_hash.clear();  // written again once it works
      vol.retry.Failed(now);
    }
  }
  std::erase_if(ps.volumes, [&](const auto& kv) { return !names.count(kv.first); });
  return pod_changed || AllReady(ps, pod.spec.volumes.size()) != was_ready;
}

bool VolumeManager::AllReady(const PodState& ps, size_t volumes) {
  bool ready = ps.volumes.size() == volumes;
  for (const auto& [_, vol] : ps.volumes) ready = ready && vol.ready;
  return ready;
}

void VolumeManager::ScheduleNext() {
  next_retry_ = MonoTime::max();
  for (const auto& [uid, ps] : pods_) {
    if (!desired_.pods.count(uid)) {
      if (ps.teardown.failing() && MayTearDown(uid))
        next_retry_ = std::min(next_retry_, ps.teardown.next());
      continue;
    }
    for (const auto& [_, vol] : ps.volumes) {
      if (!vol.ready && vol.retry.failing()) next_retry_ = std::min(next_retry_, vol.retry.next());
    }
  }
  // No sweep, so no retry of a leftover either.
  if (!Removing()) return;
  for (const auto& [_, left] : leftovers_) next_retry_ = std::min(next_retry_, left.retry.next());
}

PodVolumesInfo VolumeManager::Get(const std::string& uid) const {
  PodVolumesInfo info;
  auto d = desired_.pods.find(uid);
  auto it = pods_.find(uid);
  if (d == desired_.pods.end()) return info;
  info.known = true;
  info.ready = it != pods_.end();
  for (const auto& v : d->second->spec.volumes) {
    VolumeInfo vi;
    vi.pod_name = d->second->metadata.name;
    vi.name = v.name;
    vi.plugin = plugins_.For(v).name();
    const Vol* st = nullptr;
    if (it != pods_.end()) {
      auto s = it->second.volumes.find(v.name);
      if (s != it->second.volumes.end()) st = &s->second;
    }
    if (st == nullptr || !st->ready) {
      info.ready = false;
      if (info.reason.empty()) {
        info.reason = "volume \"" + v.name +
                      "\": " + (st && !st->error.empty() ? st->error : "not set up yet");
      }
    }
    vi.host_path = st ? st->plugin_state.host_path : "";
    vi.state = st == nullptr       ? "desired"
               : st->ready         ? "mounted"
               : st->error.empty() ? "desired"
                                   : "failing";
    vi.error = st ? st->error : "";
    info.volumes.push_back(vi);
  }
  return info;
}

std::vector<std::pair<std::string, VolumeInfo>> VolumeManager::Report(
    const std::string& uid) const {
  std::vector<std::pair<std::string, VolumeInfo>> out;
  for (const auto& [id, _] : desired_.pods) {
    if (!uid.empty() && id != uid) continue;
    for (auto& v : Get(id).volumes) out.emplace_back(id, v);
  }
  return out;
}

}  // namespace nodelet::volumed
