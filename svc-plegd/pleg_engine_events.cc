// PlegEngine's runtime events: what a containerd topic says, an event turned into a request for
// its id (due at once, or later: its look is a time the relist timer is armed for), a round of
// requests (pods by name, then the ids that are due) relisting the pods concerned step by step,
// whether the view or the runtime shows an event's change yet, and the looks again until it does.
#include <algorithm>

#include "svc-plegd/pleg_engine.h"

namespace nodelet::plegd {

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
  OnLoop([this, id, change] {
    QueueIdRequest(id, change);
    Schedule();
  });
}

void PlegEngine::QueueIdRequest(const std::string& id, RuntimeChange change) {
  auto it = id_requests_.find(id);
  // An exit waiting for its look stays one when another event of the id comes (its task's
  // delete): the later of the two changes is looked for.
  if (it != id_requests_.end()) change = std::max(change, it->second.change);
  MonoTime due = clock_.Now();
  if (change == RuntimeChange::kStarted) due += kStartLookAfter;
  id_requests_[id] = IdRequest{due, 0, change};
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

bool PlegEngine::RuntimeMovedOn(PlegRuntime& runtime, const std::string& id, RuntimeChange change,
                                std::optional<SandboxState> sandbox,
                                std::optional<ContainerState> container) {
  if (sandbox) {
    auto status = runtime.InspectSandbox(id);
    if (!status.ok()) return true;  // gone, or unanswered: the pod's listing decides
    switch (change) {
      case RuntimeChange::kExited:
        return status->state != SandboxState::Ready;
      case RuntimeChange::kAny:
        return status->state != *sandbox;
      default:
        return false;  // listed (started), and not removed yet
    }
  }
  if (!container) return true;
  auto c = runtime.InspectContainer(id);
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
  return *container != c->state;
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

void PlegEngine::ContinueRound() {
  for (;;) {
    Round& r = *round_;
    if (r.next_id < r.ids.size()) {
      if (!ClassifyNext(r)) return;
      continue;
    }
    if (!r.listing_asked) {
      r.listing_asked = true;
      if (r.wanted.size() + r.unresolved >= kShareListingAt) {
        auto listed = std::make_shared<Listed>();
        Call(
            lister_,
            [this, listed] {
              listed->at = clock_.MonoNanos();
              listed->listing = runtime_.List();
            },
            [this, listed] {
              // When it fails, each pod is asked alone (and fails or not on its own).
              if (listed->listing.ok()) {
                round_->shared = Index(std::move(*listed->listing), listed->at);
                ++shared_listings_;
              }
              ContinueRound();
            });
        return;
      }
      continue;
    }
    if (r.next_pod < r.pods.size()) {
      const std::string uid = r.pods[r.next_pod++];
      r.relisted.insert(uid);
      const SharedListing* from = r.shared ? &*r.shared : nullptr;
      if (!RelistPod(uid, true, "", from, [this](bool) { ContinueRound(); })) return;
      continue;
    }
    if (r.next_look < r.looks.size()) {
      if (!LookNext(r)) return;
      continue;
    }
    break;
  }
  round_.reset();
  busy_ = false;
  Schedule();
}

bool PlegEngine::ClassifyNext(Round& r) {
  const size_t index = r.next_id++;
  const auto& [id, request] = r.ids[index];
  std::optional<std::string> uid = diff_.UidOf(id);
  const PodView* view = uid ? diff_.Find(*uid) : nullptr;
  // A pod the view holds as not nodelet's: its relist could never change it.
  if (view != nullptr && view->foreign) return true;
  // What the event says is in the view already (a relist saw it first: podworkerd asks for
  // one after each change it makes, and a container's exit brings its task's delete).
  if (uid && ViewShows(*uid, id, request.change)) {
    ++events_seen_already_;
    return true;
  }
  // A start of an id new to the view: most are of a sandbox or container podworkerd is
  // making, whose pod it asks to have relisted once its sync is done; asking the runtime now
  // would cost a listing of the node (or two calls) for what that relist shows anyway.
  if (!uid && request.change == RuntimeChange::kStarted && !request.deferred) {
    PutOff(id, request);
    return true;
  }
  // A look again: the container alone is asked (ContainerStatus costs a fraction of the pod's
  // listing) until it shows what the event says, and only then is the pod relisted.
  if (uid && request.attempt > 0 && view != nullptr) {
    std::optional<SandboxState> sandbox;
    std::optional<ContainerState> container;
    if (auto s = view->sandboxes.find(id); s != view->sandboxes.end()) {
      sandbox = s->second;
    } else if (auto c = view->containers.find(id); c != view->containers.end()) {
      container = c->second;
    }
    if (sandbox || container) {
      auto moved = std::make_shared<bool>(true);
      Call(
          lister_,
          [this, moved, id = id, change = request.change, sandbox, container] {
            *moved = RuntimeMovedOn(runtime_, id, change, sandbox, container);
          },
          [this, moved, index, uid] {
            Round& round = *round_;
            const auto& [asked, asked_request] = round.ids[index];
            if (*moved) {
              AddLook(round, asked, asked_request, uid);
            } else {
              LookAgain(asked, asked_request);
            }
            ContinueRound();
          });
      return false;
    }
  }
  AddLook(r, id, request, uid);
  return true;
}

void PlegEngine::AddLook(Round& r, const std::string& id, const IdRequest& request,
                         const std::optional<std::string>& uid) {
  if (uid) {
    r.wanted.insert(*uid);
  } else {
    ++r.unresolved;
  }
  r.looks.push_back(Look{id, request, uid, uid ? ViewState(*uid, id) : -1, "", false});
}

bool PlegEngine::LookNext(Round& r) {
  const size_t index = r.next_look;
  Look& look = r.looks[index];
  const SharedListing* from = r.shared ? &*r.shared : nullptr;
  if (!look.resolved) {
    look.resolved = true;
    if (!look.uid && from != nullptr) {
      if (auto ref = from->refs.find(look.id); ref != from->refs.end()) {
        look.uid = ref->second.uid;
        look.sandbox = ref->second.sandbox_id;
      }
    } else if (!look.uid) {
      auto of = std::make_shared<Result<PodRef>>(NotFound(""));
      Call(
          lister_, [this, of, id = look.id] { *of = runtime_.PodOf(id); },
          [this, of, index] {
            if (of->ok()) {
              Look& asked = round_->looks[index];
              asked.uid = (*of)->uid;
              asked.sandbox = (*of)->sandbox_id;
            }
            ContinueRound();
          });
      return false;
    }
  }
  ++r.next_look;
  // Not nodelet's (the full relist reports it), or an id CRI does not know (yet): a sandbox
  // or container being created, whose containerd events come before RunPodSandbox or
  // CreateContainer has stored it in CRI. podworkerd asks for a relist of its pod once its
  // sync is done, and the full relist covers anyone else's; looking again cost 14 CRI calls
  // per new id (docs/plegd.md).
  if (!look.uid) return true;
  bool changed = false;
  if (from == nullptr || r.relisted.insert(*look.uid).second) {
    std::optional<bool> now =
        RelistPod(*look.uid, false, look.sandbox, from, [this, index](bool c) {
          FinishLook(round_->looks[index], c);
          ContinueRound();
        });
    if (!now) return false;
    changed = *now;
  }
  FinishLook(look, changed);
  return true;
}

void PlegEngine::FinishLook(const Look& look, bool changed) {
  const std::string& uid = *look.uid;
  // Seen: the view shows what the event says; for an event that says nothing in particular,
  // the pod changed at this look, or the id moved in this round (another request's relist of
  // its pod). A start seen only as a new container still created is looked at again.
  if (ViewShows(uid, look.id, look.request.change)) return;
  if (look.request.change == RuntimeChange::kAny &&
      (changed || ViewState(uid, look.id) != look.before)) {
    return;
  }
  LookAgain(look.id, look.request);
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
  // A newer event of the id keeps its own look, with the later of the two changes.
  auto [pending, fresh] = id_requests_.emplace(id, later);
  if (!fresh) pending->second.change = std::max(pending->second.change, request.change);
}

}  // namespace nodelet::plegd
