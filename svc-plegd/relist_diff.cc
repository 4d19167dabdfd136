#include "svc-plegd/relist_diff.h"

#include <algorithm>

namespace nodelet::plegd {
namespace {

using ipc::pleg::EventType;

// The kubelet's state for "not in the listing".
enum class Seen { kRunning, kExited, kCreated, kUnknown, kNonExistent };

Seen ToSeen(const std::map<std::string, ContainerState>& m, const std::string& id) {
  auto it = m.find(id);
  if (it == m.end()) return Seen::kNonExistent;
  switch (it->second) {
    case ContainerState::Running:
      return Seen::kRunning;
    case ContainerState::Exited:
      return Seen::kExited;
    case ContainerState::Created:
      return Seen::kCreated;
    case ContainerState::Unknown:
      return Seen::kUnknown;
  }
  return Seen::kUnknown;
}

void ContainerEvents(const std::string& uid, const std::string& id, const std::string& name,
                     Seen old_state, Seen new_state, std::vector<PlegEvent>& out) {
  if (old_state == new_state) return;
  switch (new_state) {
    case Seen::kRunning:
      out.push_back({uid, EventType::ContainerStarted, id, name});
      break;
    case Seen::kExited:
      out.push_back({uid, EventType::ContainerDied, id, name});
      break;
    case Seen::kCreated:
    case Seen::kUnknown:
      out.push_back({uid, EventType::ContainerChanged, id, name});
      break;
    case Seen::kNonExistent:
      // A container that vanished without being seen exited still died first.
      if (old_state != Seen::kExited) out.push_back({uid, EventType::ContainerDied, id, name});
      out.push_back({uid, EventType::ContainerRemoved, id, name});
      break;
  }
}

void SandboxEvents(const std::string& uid, const std::string& id, const SandboxState* old_state,
                   const SandboxState* new_state, std::vector<PlegEvent>& out) {
  if (new_state == nullptr) {
    if (old_state != nullptr) {
      if (*old_state == SandboxState::Ready) {
        out.push_back({uid, EventType::SandboxNotReady, id, ""});
      }
      out.push_back({uid, EventType::SandboxRemoved, id, ""});
    }
    return;
  }
  if (old_state != nullptr && *old_state == *new_state) return;
  out.push_back(
      {uid,
       *new_state == SandboxState::Ready ? EventType::SandboxReady : EventType::SandboxNotReady, id,
       ""});
}

}  // namespace

std::map<std::string, PodView> RelistDiff::Group(const RuntimeListing& listing) {
  std::map<std::string, PodView> next;
  std::map<std::string, std::string> sandbox_to_uid;
  // Newest sandbox first, so a pod's current sandbox is sandbox_ids[0].
  std::vector<const SandboxListing*> sandboxes;
  for (const auto& s : listing.sandboxes) sandboxes.push_back(&s);
  std::sort(sandboxes.begin(), sandboxes.end(), [](const auto* a, const auto* b) {
    return a->created_at_ns != b->created_at_ns ? a->created_at_ns > b->created_at_ns
                                                : a->id < b->id;
  });
  for (const auto* s : sandboxes) {
    // Pods without a uid (made by hand) are keyed by their sandbox id.
    std::string uid = s->pod_uid.empty() ? "sandbox:" + s->id : s->pod_uid;
    PodView& v = next[uid];
    if (v.uid.empty()) {
      v.uid = uid;
      v.name = s->pod_name;
      v.pod_namespace = s->pod_namespace;
      auto it = s->labels.find(kManagedLabel);
      v.foreign = it == s->labels.end();
    }
    v.sandbox_ids.push_back(s->id);
    v.sandboxes[s->id] = s->state;
    sandbox_to_uid[s->id] = uid;
  }
  for (const auto& c : listing.containers) {
    auto it = sandbox_to_uid.find(c.sandbox_id);
    // A container whose sandbox is already gone from the listing belongs to an unknown pod.
    std::string uid = it != sandbox_to_uid.end() ? it->second : "sandbox:" + c.sandbox_id;
    PodView& v = next[uid];
    if (v.uid.empty()) {
      v.uid = uid;
      v.foreign = true;
    }
    v.container_ids.push_back(c.id);
    v.containers[c.id] = c.state;
    v.container_names[c.id] = c.name;
  }
  return next;
}

std::optional<PodChange> RelistDiff::Compare(const std::string& uid, const PodView* old_view,
                                             const PodView* view) {
  static const PodView kEmpty;
  const PodView& old = old_view != nullptr ? *old_view : kEmpty;
  PodChange change;
  if (view == nullptr) {
    if (old_view == nullptr) return std::nullopt;
    change.removed = true;
    change.view.uid = uid;
    change.view.name = old.name;
    change.view.pod_namespace = old.pod_namespace;
    change.view.foreign = old.foreign;
    for (const auto& [id, state] : old.containers) {
      ContainerEvents(uid, id, old.container_names.at(id), ToSeen(old.containers, id),
                      Seen::kNonExistent, change.events);
    }
    for (const auto& [id, state] : old.sandboxes) {
      SandboxEvents(uid, id, &state, nullptr, change.events);
    }
    return change;
  }
  std::set<std::string> ids;
  for (const auto& [id, _] : old.containers) ids.insert(id);
  for (const auto& [id, _] : view->containers) ids.insert(id);
  for (const auto& id : ids) {
    auto name_it = view->container_names.find(id);
    const std::string& name =
        name_it != view->container_names.end() ? name_it->second : old.container_names.at(id);
    ContainerEvents(uid, id, name, ToSeen(old.containers, id), ToSeen(view->containers, id),
                    change.events);
  }
  std::set<std::string> sids;
  for (const auto& [id, _] : old.sandboxes) sids.insert(id);
  for (const auto& [id, _] : view->sandboxes) sids.insert(id);
  for (const auto& id : sids) {
    auto o = old.sandboxes.find(id);
    auto n = view->sandboxes.find(id);
    SandboxEvents(uid, id, o == old.sandboxes.end() ? nullptr : &o->second,
                  n == view->sandboxes.end() ? nullptr : &n->second, change.events);
  }
  if (old_view != nullptr && change.events.empty()) return std::nullopt;
  change.view = *view;
  return change;
}

std::vector<PodChange> RelistDiff::Update(const RuntimeListing& listing) {
  std::map<std::string, PodView> next = Group(listing);
  std::vector<PodChange> changes;
  // Pods present now, then pods gone.
  for (const auto& [uid, view] : next) {
    if (auto c = Compare(uid, Find(uid), &view)) changes.push_back(std::move(*c));
  }
  for (const auto& [uid, old] : pods_) {
    if (next.count(uid) != 0) continue;
    if (auto c = Compare(uid, &old, nullptr)) changes.push_back(std::move(*c));
  }
  pods_ = std::move(next);
  return changes;
}

std::optional<PodChange> RelistDiff::UpdatePod(const std::string& uid,
                                               const RuntimeListing& listing) {
  std::map<std::string, PodView> next = Group(listing);
  auto it = next.find(uid);
  const PodView* view = it == next.end() ? nullptr : &it->second;
  std::optional<PodChange> change = Compare(uid, Find(uid), view);
  if (view != nullptr) {
    pods_[uid] = std::move(it->second);
  } else {
    pods_.erase(uid);
  }
  return change;
}

std::optional<std::string> RelistDiff::UidOf(const std::string& runtime_id) const {
  for (const auto& [uid, view] : pods_) {
    if (view.containers.count(runtime_id) != 0 || view.sandboxes.count(runtime_id) != 0) {
      return uid;
    }
  }
  return std::nullopt;
}

const PodView* RelistDiff::Find(const std::string& uid) const {
  auto it = pods_.find(uid);
  return it == pods_.end() ? nullptr : &it->second;
}

}  // namespace nodelet::plegd
