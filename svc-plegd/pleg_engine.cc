#include "svc-plegd/pleg_engine.h"

#include <algorithm>

#include "lib/common/check.h"

namespace nodelet::plegd {

PlegEngine::PlegEngine(PlegRuntime& runtime, const Clock& clock, PlegOptions options,
                       std::function<void()> on_output)
    : runtime_(runtime), clock_(clock), options_(options), on_output_(std::move(on_output)) {
  NODELET_CHECK(on_output_) << "PlegEngine needs an on_output callback";
  last_success_ = clock_.Now();
  if (options_.inspect_workers < 1) options_.inspect_workers = 1;
}

PlegEngine::~PlegEngine() { Stop(); }

void PlegEngine::StartInspectors() {
  for (int i = 0; i < options_.inspect_workers; ++i) {
    inspectors_.emplace_back([this] { InspectorLoop(); });
  }
}

void PlegEngine::Start() {
  StartInspectors();
  relist_thread_ = std::thread([this] { RelistLoop(); });
}

void PlegEngine::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  work_cv_.notify_all();
  done_cv_.notify_all();
  stop_cv_.notify_all();
  if (relist_thread_.joinable()) relist_thread_.join();
  for (auto& t : inspectors_) {
    if (t.joinable()) t.join();
  }
}

void PlegEngine::Wake() { on_output_(); }

bool PlegEngine::PushLocked(PodResult result) {
  const bool was_empty = output_.pods.empty() && output_.relists.empty();
  output_.pods.push_back(std::move(result));
  return was_empty;
}

PlegOutput PlegEngine::Drain() {
  std::lock_guard<std::mutex> lock(mu_);
  PlegOutput out = std::move(output_);
  output_ = {};
  return out;
}

void PlegEngine::Emit(PodResult result) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    wake = PushLocked(std::move(result));
  }
  if (wake) Wake();
}

void PlegEngine::EmitRelist(RelistResult result) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    wake = output_.pods.empty() && output_.relists.empty();
    output_.relists.push_back(std::move(result));
  }
  if (wake) Wake();
}

void PlegEngine::RelistLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  MonoTime next_full = clock_.Now();  // the first relist at once
  // What a wait that ran out was waiting for is due, whatever the clock reads after it.
  bool full_due = false;
  MonoTime ids_due_by{};
  while (!stopping_) {
    const MonoTime now = clock_.Now();
    if (nudged_ || full_due || now >= next_full) {
      const bool nudged = nudged_;
      nudged_ = false;
      full_due = false;
      if (nudged) ++nudged_relists_;
      lock.unlock();
      const MonoTime started = clock_.Now();
      RelistOnce();
      lock.lock();
      next_full = started + options_.relist_period;
      continue;
    }
    // A relist of single pods: asked for (RelistPods, or an inspection that ended after its
    // pod changed again), or the pods of runtime events whose time has come.
    std::set<std::string> pods = std::move(pod_requests_);
    pod_requests_.clear();
    std::vector<std::pair<std::string, IdRequest>> ids;
    MonoTime next_id = MonoTime::max();
    const MonoTime ids_due = std::max(now, ids_due_by);
    for (auto it = id_requests_.begin(); it != id_requests_.end();) {
      if (it->second.due <= ids_due) {
        ids.emplace_back(it->first, it->second);
        it = id_requests_.erase(it);
      } else {
        next_id = std::min(next_id, it->second.due);
        ++it;
      }
    }
    if (!pods.empty() || !ids.empty()) {
      lock.unlock();
      HandleRound(pods, ids);
      lock.lock();
      continue;
    }
    woken_ = false;
    const MonoTime target = std::min(next_full, next_id);
    if (!stop_cv_.wait_for(lock, TimeUntil(clock_, target),
                           [this] { return stopping_ || nudged_ || woken_; })) {
      if (target == next_full) {
        full_due = true;
      } else {
        ids_due_by = target;
      }
    }
  }
}

void PlegEngine::Nudge() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    nudged_ = true;
  }
  stop_cv_.notify_all();
}

std::optional<RuntimeChange> ChangeOfTopic(const std::string& topic) {
  if (topic == "/containers/create" || topic == "/tasks/create") return std::nullopt;
  if (topic == "/tasks/start") return RuntimeChange::kStarted;
  if (topic == "/tasks/exit" || topic == "/tasks/delete") return RuntimeChange::kExited;
  if (topic == "/containers/delete") return RuntimeChange::kRemoved;
  return RuntimeChange::kAny;
}

void PlegEngine::OnRuntimeEvent(const std::string& id, const std::string& topic) {
  if (id.empty()) return Nudge();
  std::optional<RuntimeChange> change = ChangeOfTopic(topic);
  if (!change) {
    ++runtime_events_unlooked_;
    return;
  }
  NudgeRuntimeId(id, *change);
}

void PlegEngine::NudgeRuntimeId(const std::string& id, RuntimeChange change) {
  if (id.empty()) return Nudge();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = id_requests_.find(id);
    // An exit waiting for its look stays one when another event of the id comes (its task's
    // delete): the later of the two changes is looked for.
    if (it != id_requests_.end()) change = std::max(change, it->second.change);
    MonoTime due = clock_.Now();
    if (change == RuntimeChange::kStarted) due += kStartLookAfter;
    id_requests_[id] = IdRequest{due, 0, change};
    woken_ = true;
  }
  stop_cv_.notify_all();
}

void PlegEngine::RelistPods(const std::vector<std::string>& uids) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pod_requests_.insert(uids.begin(), uids.end());
    woken_ = true;
  }
  stop_cv_.notify_all();
}

bool PlegEngine::ViewShows(const std::string& uid, const std::string& id,
                           RuntimeChange change) const {
  if (change == RuntimeChange::kAny) return false;
  const PodView* view = diff_.Find(uid);
  if (view != nullptr) {
    if (auto c = view->containers.find(id); c != view->containers.end()) {
      switch (change) {
        case RuntimeChange::kStarted:
          return c->second == ContainerState::Running || c->second == ContainerState::Exited;
        case RuntimeChange::kExited:
          return c->second == ContainerState::Exited;
        default:
          return false;
      }
    }
    if (auto s = view->sandboxes.find(id); s != view->sandboxes.end()) {
      // CRI lists a sandbox only once it has started.
      if (change == RuntimeChange::kStarted) return true;
      return change == RuntimeChange::kExited && s->second != SandboxState::Ready;
    }
  }
  // Not in the view: an exit or a removal leaves nothing more to see.
  return change == RuntimeChange::kExited || change == RuntimeChange::kRemoved;
}

Duration PlegEngine::ExitRetryDelay(int attempt, int exits) {
  if (attempt < kExitPolls) return Duration(kExitPollEvery) * std::max(1, exits);
  return Duration(kEventRetryFirst) * (1 << std::min(attempt - kExitPolls, 6));
}

bool PlegEngine::RuntimeMovedOn(const std::string& uid, const std::string& id,
                                RuntimeChange change) {
  const PodView* view = diff_.Find(uid);
  if (view == nullptr) return true;
  if (auto s = view->sandboxes.find(id); s != view->sandboxes.end()) {
    auto status = runtime_.InspectSandbox(id);
    if (!status.ok()) return true;  // gone, or unanswered: the pod's listing decides
    switch (change) {
      case RuntimeChange::kExited:
        return status->state != SandboxState::Ready;
      case RuntimeChange::kAny:
        return status->state != s->second;
      default:
        return false;  // listed (started), and not removed yet
    }
  }
  auto known = view->containers.find(id);
  if (known == view->containers.end()) return true;
  auto c = runtime_.InspectContainer(id);
  if (!c.ok()) return true;  // gone, or unanswered: the pod's listing decides
  switch (change) {
    case RuntimeChange::kStarted:
      return c->state == ContainerState::Running || c->state == ContainerState::Exited;
    case RuntimeChange::kExited:
      return c->state != ContainerState::Running && c->state != ContainerState::Created;
    case RuntimeChange::kRemoved:
      return false;  // still there
    case RuntimeChange::kAny:
      break;
  }
  return known->second != c->state;
}

int PlegEngine::ViewState(const std::string& uid, const std::string& id) const {
  const PodView* view = diff_.Find(uid);
  if (view == nullptr) return -1;
  if (auto c = view->containers.find(id); c != view->containers.end()) {
    return static_cast<int>(c->second);
  }
  if (auto s = view->sandboxes.find(id); s != view->sandboxes.end()) {
    return 100 + static_cast<int>(s->second);
  }
  return -1;
}

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

void PlegEngine::HandleRound(const std::set<std::string>& pods,
                             const std::vector<std::pair<std::string, IdRequest>>& ids) {
  // The events whose pod is to be relisted, with what the view showed of their id before.
  struct Look {
    std::string id;
    IdRequest request;
    std::optional<std::string> uid;  // from the view; else the runtime names it
    int before = -1;
  };
  std::vector<Look> looks;
  std::set<std::string> wanted(pods.begin(), pods.end());
  size_t unresolved = 0;
  for (const auto& [id, request] : ids) {
    std::optional<std::string> uid = diff_.UidOf(id);
    const PodView* view = uid ? diff_.Find(*uid) : nullptr;
    // A pod the view holds as not nodelet's: its relist could never change it.
    if (view != nullptr && view->foreign) continue;
    // What the event says is in the view already (a relist saw it first: podworkerd asks for
    // one after each change it makes, and a container's exit brings its task's delete).
    if (uid && ViewShows(*uid, id, request.change)) {
      ++events_seen_already_;
      continue;
    }
    // A start of an id new to the view: most are of a sandbox or container podworkerd is
    // making, whose pod it asks to have relisted once its sync is done; asking the runtime now
    // would cost a listing of the node (or two calls) for what that relist shows anyway.
    if (!uid && request.change == RuntimeChange::kStarted && !request.deferred) {
      PutOff(id, request);
      continue;
    }
    // A look again: the container alone is asked (ContainerStatus costs a fraction of the pod's
    // listing) until it shows what the event says, and only then is the pod relisted.
    if (uid && request.attempt > 0 && !RuntimeMovedOn(*uid, id, request.change)) {
      LookAgain(id, request);
      continue;
    }
    if (uid) {
      wanted.insert(*uid);
    } else {
      ++unresolved;
    }
    looks.push_back(Look{id, request, uid, uid ? ViewState(*uid, id) : -1});
  }
  std::optional<SharedListing> shared;
  if (wanted.size() + unresolved >= kShareListingAt) {
    const int64_t listed_at = clock_.MonoNanos();
    auto listing = runtime_.List();
    // When it fails, each pod is asked alone (and fails or not on its own).
    if (listing.ok()) {
      shared = Index(std::move(*listing), listed_at);
      ++shared_listings_;
    }
  }
  const SharedListing* from = shared ? &*shared : nullptr;
  std::set<std::string> relisted;  // pods already taken from the shared listing
  for (const auto& uid : pods) {
    RelistPod(uid, true, "", from);
    relisted.insert(uid);
  }
  for (const auto& look : looks) {
    std::optional<std::string> uid = look.uid;
    std::string sandbox;  // the id's sandbox, when the runtime named it
    if (!uid && from != nullptr) {
      if (auto ref = from->refs.find(look.id); ref != from->refs.end()) {
        uid = ref->second.uid;
        sandbox = ref->second.sandbox_id;
      }
    } else if (!uid) {
      auto of = runtime_.PodOf(look.id);
      if (of.ok()) {
        uid = of->uid;
        sandbox = of->sandbox_id;
      }
    }
    // Not nodelet's (the full relist reports it), or an id CRI does not know (yet): a sandbox
    // or container being created, whose containerd events come before RunPodSandbox or
    // CreateContainer has stored it in CRI. podworkerd asks for a relist of its pod once its
    // sync is done, and the full relist covers anyone else's; looking again cost 14 CRI calls
    // per new id (docs/plegd.md).
    if (!uid) continue;
    bool changed = false;
    if (from == nullptr || relisted.insert(*uid).second) {
      changed = RelistPod(*uid, false, sandbox, from);
    }
    // Seen: the view shows what the event says; for an event that says nothing in particular,
    // the pod changed at this look, or the id moved in this round (another request's relist of
    // its pod). A start seen only as a new container still created is looked at again.
    if (ViewShows(*uid, look.id, look.request.change)) continue;
    if (look.request.change == RuntimeChange::kAny &&
        (changed || ViewState(*uid, look.id) != look.before)) {
      continue;
    }
    LookAgain(look.id, look.request);
  }
}

void PlegEngine::LookAgain(const std::string& id, const IdRequest& request) {
  // Not seen yet: the runtime's CRI view may not have taken the event in (containerd publishes
  // a task's start before StartContainer has stored it, and its exit before its CRI plugin has
  // handled it): look again, 10 ms doubling, about 0.6 s in all; an exit sooner
  // (ExitRetryDelay).
  const int attempt = request.attempt;
  const bool exit = request.change == RuntimeChange::kExited;
  if (attempt + 1 >= (exit ? kExitAttempts : kEventAttempts)) {
    return;  // the full relist is the safety net
  }
  ++event_retries_;
  std::lock_guard<std::mutex> lock(mu_);
  // An exit's attempts go past 31 (its polls come first): 1 << attempt only for the others.
  Duration delay = Duration(kEventRetryFirst);
  if (exit) {
    const auto exits = std::count_if(id_requests_.begin(), id_requests_.end(), [](const auto& r) {
      return r.second.change == RuntimeChange::kExited;
    });
    delay = ExitRetryDelay(attempt, static_cast<int>(exits) + 1);
  } else {
    delay = Duration(kEventRetryFirst) * (1 << attempt);
  }
  const IdRequest retry{clock_.Now() + delay, attempt + 1, request.change, request.deferred};
  // A newer event for the same id has already asked for a fresh look; it looks for the later
  // of the two changes (an exit's task delete comes while the exit is looked at again).
  auto [pending, fresh] = id_requests_.emplace(id, retry);
  if (!fresh) pending->second.change = std::max(pending->second.change, request.change);
}

void PlegEngine::PutOff(const std::string& id, const IdRequest& request) {
  ++event_looks_put_off_;
  IdRequest later = request;
  later.due = clock_.Now() + kNewStartLookAgain;
  later.deferred = true;
  std::lock_guard<std::mutex> lock(mu_);
  // A newer event of the id keeps its own look, with the later of the two changes.
  auto [pending, fresh] = id_requests_.emplace(id, later);
  if (!fresh) pending->second.change = std::max(pending->second.change, request.change);
}

bool PlegEngine::RelistPod(const std::string& uid, bool force, const std::string& sandbox,
                           const SharedListing* shared) {
  const PodView* known = diff_.Find(uid);
  if (known != nullptr && known->foreign) return false;  // listed by labels it does not have
  int64_t listed_at = clock_.MonoNanos();
  Result<RuntimeListing> listing = RuntimeListing{};
  if (shared != nullptr) {
    listed_at = shared->listed_at_mono_ns;
    if (auto it = shared->pods.find(uid); it != shared->pods.end()) listing = it->second;
  } else {
    std::vector<std::string> sandboxes;
    if (known != nullptr) sandboxes = known->sandbox_ids;
    if (!sandbox.empty() &&
        std::find(sandboxes.begin(), sandboxes.end(), sandbox) == sandboxes.end()) {
      sandboxes.push_back(sandbox);
    }
    listing = runtime_.ListPod(uid, sandboxes);
  }
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    QueueLocked(changes, relist_seq_, listed_at, &uid, false, &removed);
  }
  work_cv_.notify_all();
  for (auto& r : removed) Emit(std::move(r));
  return changed;
}

size_t PlegEngine::QueueLocked(std::vector<PodChange>& changes, uint64_t relist, int64_t listed_at,
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

void PlegEngine::RelistOnce() {
  const uint64_t relist = ++relist_seq_;
  const MonoTime t0 = clock_.Now();
  RelistResult done;
  done.relist = relist;
  done.started_at_ns = clock_.WallNanos();
  done.started_at_mono_ns = clock_.MonoNanos();

  auto listing = runtime_.List();
  if (!listing.ok()) {
    ++relist_errors_;
    done.error = listing.status().ToString();
    done.duration = std::chrono::duration_cast<std::chrono::microseconds>(clock_.Now() - t0);
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_error_ = done.error;
      runtime_unreachable_ = listing.status().code() == StatusCode::kUnavailable ||
                             listing.status().code() == StatusCode::kDeadlineExceeded;
    }
    EmitRelist(std::move(done));
    return;
  }
  done.containers = static_cast<uint32_t>(listing->containers.size());
  std::vector<PodChange> changes = diff_.Update(*listing);
  done.pods = static_cast<uint32_t>(diff_.pod_count());

  std::vector<PodResult> removed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    QueueLocked(changes, relist, done.started_at_mono_ns, nullptr, true, &removed);
    std::erase_if(inspected_,
                  [this](const auto& entry) { return diff_.Find(entry.first) == nullptr; });
    last_success_ = clock_.Now();
    last_error_.clear();
    runtime_unreachable_ = false;
  }
  work_cv_.notify_all();
  for (auto& r : removed) Emit(std::move(r));
  ++relists_;

  // Wait for this relist's inspections, but never past inspect_wait: a hung pod is reported
  // when it returns and does not hold back the RelistDone or the next relist.
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait_for(lock, TimeUntil(clock_, t0 + options_.inspect_wait),
                      [&] { return stopping_ || outstanding_.count(relist) == 0; });
    // Late jobs of this relist still count down their own entry; drop ours.
    outstanding_.erase(relist);
  }
  done.duration = std::chrono::duration_cast<std::chrono::microseconds>(clock_.Now() - t0);
  last_duration_us_ = done.duration.count();
  EmitRelist(std::move(done));
}

void PlegEngine::InspectorLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
    if (stopping_) return;
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    InspectedPod known;
    if (auto it = inspected_.find(job.view.uid); it != inspected_.end()) {
      known = std::move(it->second);
      inspected_.erase(it);
    }
    lock.unlock();
    PodResult result = Inspect(job, known);
    known = InspectedPod{};
    if (!result.inspect_failed) {
      for (const auto& c : result.record.containers) known.containers.emplace(c->id, *c);
      for (const auto& s : result.record.sandboxes) known.sandboxes.emplace(s->id, *s);
    }
    lock.lock();
    in_flight_.erase(job.view.uid);
    if (!result.inspect_failed) inspected_[job.view.uid] = std::move(known);
    if (result.inspect_failed) {
      // Try again at the next relist; the events already go out with this (stale) result.
      reinspect_.emplace(job.view.uid, std::vector<PlegEvent>{});
    } else if (reinspect_.count(job.view.uid) != 0) {
      // It changed again while this inspection ran: look at it again now.
      pod_requests_.insert(job.view.uid);
      woken_ = true;
      stop_cv_.notify_all();
    }
    if (job.counted) {
      auto it = outstanding_.find(job.relist);
      if (it != outstanding_.end() && --it->second == 0) {
        outstanding_.erase(it);
        done_cv_.notify_all();
      }
    }
    const bool wake = PushLocked(std::move(result));
    lock.unlock();
    if (wake) Wake();
    lock.lock();
  }
}

PodResult PlegEngine::Inspect(const Job& job, const InspectedPod& known) {
  ++inspections_;
  PodResult r;
  r.events = job.events;
  r.record.uid = job.view.uid;
  r.record.name = job.view.name;
  r.record.namespace_ = job.view.pod_namespace;
  r.record.foreign = job.view.foreign;
  r.record.relist = job.relist;
  r.record.listed_at_mono_ns = job.listed_at_mono_ns;
  for (const auto& id : job.view.sandbox_ids) {
    auto listed = job.view.sandboxes.find(id);
    auto last = known.sandboxes.find(id);
    if (listed != job.view.sandboxes.end() && last != known.sandboxes.end() &&
        last->second.state == listed->second) {
      r.record.sandboxes.push_back(std::make_unique<ipc::pleg::SandboxRecordT>(last->second));
      continue;
    }
    auto s = runtime_.InspectSandbox(id);
    if (!s.ok()) {
      if (s.status().code() == StatusCode::kNotFound) continue;  // removed meanwhile
      r.inspect_failed = true;
      r.record.inspect_error = "PodSandboxStatus " + id + ": " + s.status().ToString();
      break;
    }
    r.record.sandboxes.push_back(std::make_unique<ipc::pleg::SandboxRecordT>(std::move(*s)));
  }
  if (!r.inspect_failed) {
    for (const auto& id : job.view.container_ids) {
      auto listed = job.view.containers.find(id);
      auto last = known.containers.find(id);
      if (listed != job.view.containers.end() && last != known.containers.end() &&
          listed->second != ipc::pleg::ContainerState::Unknown &&
          last->second.state == listed->second) {
        ++containers_reused_;
        r.record.containers.push_back(std::make_unique<ipc::pleg::ContainerRecordT>(last->second));
        continue;
      }
      ++containers_inspected_;
      auto c = runtime_.InspectContainer(id);
      if (!c.ok()) {
        if (c.status().code() == StatusCode::kNotFound) continue;
        r.inspect_failed = true;
        r.record.inspect_error = "ContainerStatus " + id + ": " + c.status().ToString();
        break;
      }
      r.record.containers.push_back(std::make_unique<ipc::pleg::ContainerRecordT>(std::move(*c)));
    }
  }
  if (r.inspect_failed) ++inspection_errors_;
  return r;
}

PlegHealth PlegEngine::Health() const {
  std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(mu_));
  PlegHealth h;
  if (runtime_unreachable_) {
    h.ok = false;
    h.reason = "runtime unreachable: " + last_error_;
    return h;
  }
  auto since = clock_.Now() - last_success_;
  if (since > options_.relist_threshold) {
    h.ok = false;
    h.reason = "no successful relist for " +
               std::to_string(std::chrono::duration_cast<std::chrono::seconds>(since).count()) +
               "s" + (last_error_.empty() ? "" : " (last error: " + last_error_ + ")");
  }
  return h;
}

}  // namespace nodelet::plegd
