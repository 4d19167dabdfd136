// PodManager's admission, as the kubelet admits pods: creation order, max pods, CPU and memory
// requests against allocatable, sysctls and AppArmor; rejected pods and their statuses;
// evictions.
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <tuple>

#include "lib/common/fs.h"
#include "lib/common/logging.h"
#include "lib/common/rfc3339.h"
#include "lib/ipc/endpoints.h"
#include "lib/ipc/message.h"
#include "lib/pod/canonical.h"
#include "lib/pod/downward_api.h"
#include "lib/pod/pod_flatbuffers.h"
#include "lib/pod/qos.h"
#include "lib/pod/security.h"
#include "lib/pod/static_pod.h"
#include "lib/status/status_client.h"
#include "podwork_generated.h"
#include "supervisor/pod_manager.h"

namespace nodelet::supervisor {

namespace {

// The wall clock in milliseconds: when a pod was first seen, as its status says it.
int64_t NowMs(const Clock& clock) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(clock.WallNow().time_since_epoch())
      .count();
}

// The kubelet admits new pods in the order they were created (HandlePodAdditions sorts them by
// creationTimestamp), so the pod that fits first is the older one whatever the order of files.
// Only the additions are reordered, among the places they hold.
std::vector<PodChange<pod::Pod>> InAdmissionOrder(std::vector<PodChange<pod::Pod>> changes) {
  // The creation time as written, else when nodelet first saw the manifest (the config-seen
  // annotation, RFC 3339 with nanoseconds in UTC, so its text sorts as its time); then the name.
  auto created = [](const PodChange<pod::Pod>& c) {
    if (!c.pod) return std::make_tuple(int64_t{0}, std::string(), std::string(), c.uid);
    const auto& md = c.pod->metadata;
    auto seen = md.annotations.find(pod::kConfigSeenAnnotation);
    std::string seen_text = seen != md.annotations.end() ? seen->second : std::string();
    int64_t when = md.creation_timestamp.value_or(0);
    if (!md.creation_timestamp) {
      if (auto t = ParseRfc3339(seen_text)) when = t->seconds;
    }
    return std::make_tuple(when, md.creation_timestamp ? std::string() : seen_text,
                           md.namespace_name, md.name);
  };
  // Each key is made once (not per comparison), then the adds are sorted by it.
  using Key = decltype(created(changes.front()));
  std::vector<size_t> slots;
  std::vector<std::pair<Key, size_t>> keyed;
  for (size_t i = 0; i < changes.size(); ++i) {
    if (changes[i].op != PodOp::kAdd) continue;
    slots.push_back(i);
    keyed.emplace_back(created(changes[i]), i);
  }
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<PodChange<pod::Pod>> adds;
  adds.reserve(keyed.size());
  for (const auto& [_, i] : keyed) adds.push_back(std::move(changes[i]));
  for (size_t k = 0; k < slots.size(); ++k) changes[slots[k]] = std::move(adds[k]);
  return changes;
}

}  // namespace

NodeResources ReadNodeCapacity() {
  pod::NodeAllocatable node = pod::ReadNodeAllocatable();
  return NodeResources{node.cpu_milli, node.memory_bytes};
}

bool AppArmorEnabled() {
  auto text = ReadFileBounded("/sys/module/apparmor/parameters/enabled", 16);
  return text.ok() && !text->empty() && (*text)[0] == 'Y';
}

AdmissionResult AdmitSecurity(const pod::Pod& p, const std::vector<std::string>& unsafe_sysctls,
                              bool apparmor_enabled) {
  AdmissionResult r;
  if (std::string why = pod::ForbiddenSysctls(p, unsafe_sysctls); !why.empty()) {
    r.admitted = false;
    r.reason = "SysctlForbidden";
    r.message = why;
  } else if (!apparmor_enabled && pod::NeedsAppArmor(p)) {
    r.admitted = false;
    r.reason = "AppArmor";
    r.message = "Cannot enforce AppArmor: AppArmor is not enabled on the host";
  }
  return r;
}

AdmissionResult Admit(const pod::Pod& p, const std::vector<const pod::Pod*>& admitted, int max_pods,
                      const NodeResources& allocatable) {
  AdmissionResult r;
  if (static_cast<int>(admitted.size()) >= max_pods) {
    r.admitted = false;
    r.reason = "OutOfpods";
    r.message = "Node didn't have enough resource: pods, requested: 1, used: " +
                std::to_string(admitted.size()) + ", capacity: " + std::to_string(max_pods);
    return r;
  }
  struct Check {
    const char* name;
    bool milli;
    int64_t capacity;
    const char* reason;
  };
  for (const Check& c : {Check{"cpu", true, allocatable.cpu_milli, "OutOfcpu"},
                         Check{"memory", false, allocatable.memory_bytes, "OutOfmemory"}}) {
    int64_t want = pod::PodResourceTotal(p, c.name, true, c.milli);
    if (want == 0) continue;
    int64_t used = 0;
    for (const auto* a : admitted) used += pod::PodResourceTotal(*a, c.name, true, c.milli);
    if (used + want > c.capacity) {
      r.admitted = false;
      r.reason = c.reason;
      r.message = std::string("Node didn't have enough resource: ") + c.name +
                  ", requested: " + std::to_string(want) + ", used: " + std::to_string(used) +
                  ", capacity: " + std::to_string(c.capacity);
      return r;
    }
  }
  return r;
}

void PodManager::Apply(const std::vector<PodChange<pod::Pod>>& unordered) {
  auto log = GetLogger("supervisor");
  const std::vector<PodChange<pod::Pod>> changes = InAdmissionOrder(unordered);
  std::optional<std::set<std::string>> terminal;  // asked of statusd once per merge, if needed
  std::optional<std::map<std::string, std::string>> rejected_before;  // likewise
  for (const auto& c : changes) {
    const std::string& name = c.pod ? c.pod->metadata.name : c.uid;
    switch (c.op) {
      case PodOp::kAdd: {
        // Rejected before (by an earlier supervisor: statusd holds its Failed status, and a
        // terminal phase is final): it stays rejected, as the kubelet's rejected pod stays
        // Failed.
        if (!rejected_before) {
          rejected_before = RejectedPods().value_or(std::map<std::string, std::string>{});
        }
        if (auto it = rejected_before->find(c.uid);
            it != rejected_before->end() && evictions_.count(c.uid) == 0) {
          rejected_[c.uid] = it->second;
          continue;
        }
        std::vector<const pod::Pod*> admitted;
        for (const auto& [_, p] : admitted_) admitted.push_back(p.get());
        AdmissionResult r = AdmitSecurity(*c.pod, options_.allowed_unsafe_sysctls,
                                          options_.apparmor.value_or(apparmor_enabled_));
        if (r.admitted && options_.admit_under_pressure) r = options_.admit_under_pressure(*c.pod);
        if (r.admitted) r = Admit(*c.pod, admitted, options_.max_pods, allocatable_);
        if (!r.admitted && r.reason.rfind("OutOf", 0) == 0) {
          // Pods that have finished (Succeeded, Failed) use nothing any more (the kubelet's
          // filterOutInactivePods): they do not count. Asked only when a pod does not fit.
          if (!terminal) terminal = TerminalPods();
          admitted.clear();
          for (const auto& [uid, p] : admitted_) {
            if (!terminal->count(uid)) admitted.push_back(p.get());
          }
          r = Admit(*c.pod, admitted, options_.max_pods, allocatable_);
        }
        if (!r.admitted) {
          log->warn("Pod {} not admitted: {}: {}", name, r.reason, r.message);
          rejected_[c.uid] = r.reason;
          ReportRejected(*c.pod, r);
          continue;
        }
        log->info("ADD pod {} ({}) from {}", name, c.uid, c.source);
        admitted_[c.uid] = c.pod;
        source_of_[c.uid] = c.source;
        first_seen_ms_[c.uid] = NowMs(clock_);
        admitted_seq_[c.uid] = ++next_admitted_seq_;
        break;
      }
      case PodOp::kUpdate:
      case PodOp::kReconcile:
      case PodOp::kDelete:
        if (admitted_.count(c.uid)) {
          log->info("{} pod {} ({})", PodOpName(c.op), name, c.uid);
          admitted_[c.uid] = c.pod;
        }
        break;
      case PodOp::kRemove:
        log->info("REMOVE pod {} ({})", name, c.uid);
        DropAdmitted(c.uid);
        rejected_.erase(c.uid);
        break;
    }
    dirty_ = true;
    ++generation_;
  }
}

void PodManager::ReportRejected(const pod::Pod& p, const AdmissionResult& why) {
  status::PodIdentity id;
  id.namespace_ = p.metadata.namespace_name;
  id.name = p.metadata.name;
  id.uid = p.metadata.uid;
  id.container_count = static_cast<uint32_t>(p.spec.containers.size());
  id.init_container_count = static_cast<uint32_t>(p.spec.init_containers.size());
  status::PodStatus st;
  st.phase = status::PodPhase::kFailed;
  st.reason = why.reason;
  st.message = why.message;
  unreported_[id.uid] = {id, st};
  FlushRejected();
  // And an event, as the kubelet's rejectPod records one.
  status::PodEvent e;
  e.pod_uid = p.metadata.uid;
  e.namespace_ = p.metadata.namespace_name;
  e.pod_name = p.metadata.name;
  e.type = "Warning";
  e.reason = why.reason;
  e.message = why.message;
  e.source = "nodelet";
  e.first_unix_s = e.last_unix_s = clock_.WallSeconds();
  if (events_.size() < 100) events_.push_back(std::move(e));
  FlushEvents();
}

void PodManager::FlushRejected() {
  if (unreported_.empty()) return;
  if (!ConnectStatusClient()) return;
  // statusd may not be up yet (pods are admitted before the services start): what fails is
  // tried again at the next housekeeping tick.
  for (auto it = unreported_.begin(); it != unreported_.end();) {
    if (!rejected_.count(it->first)) {
      it = unreported_.erase(it);
      continue;
    }
    auto r = status_client_->SetPodStatus(it->second.first, it->second.second);
    if (!r.ok()) break;
    it = unreported_.erase(it);
  }
}

void PodManager::DropAdmitted(const std::string& uid) {
  admitted_.erase(uid);
  source_of_.erase(uid);
  first_seen_ms_.erase(uid);
  admitted_seq_.erase(uid);
}

bool PodManager::CheckRejectedBefore() {
  if (rejections_checked_) return true;
  const MonoTime now = clock_.Now();
  auto before = RejectedPods();
  if (!before) {
    if (now < rejections_deadline_) {
      rejections_retry_at_ = now + std::chrono::milliseconds(200);
      return false;
    }
    GetLogger("supervisor")
        ->warn("statusd did not answer: pods refused at admission before this start may run");
    rejections_checked_ = true;
    return true;
  }
  for (const auto& [uid, reason] : *before) {
    auto it = admitted_.find(uid);
    if (it == admitted_.end() || evictions_.count(uid) > 0) continue;
    GetLogger("supervisor")
        ->info("Pod {} stays refused ({}): statusd holds it Failed", it->second->metadata.name,
               reason);
    DropAdmitted(uid);
    rejected_[uid] = reason;
    ++generation_;
    dirty_ = true;
  }
  rejections_checked_ = true;
  return true;
}

std::optional<std::map<std::string, std::string>> PodManager::RejectedPods() {
  std::map<std::string, std::string> uids;
  if (!ConnectStatusClient()) return std::nullopt;
  auto list = status_client_->ListPodStatuses();
  if (!list.ok()) return std::nullopt;
  for (const auto& r : list->records) {
    if (r.status.phase != status::PodPhase::kFailed) continue;
    const std::string& why = r.status.reason;
    if (why.rfind("OutOf", 0) == 0 || why == "SysctlForbidden" || why == "AppArmor" ||
        (why == "Evicted" && r.status.message.rfind("The node had condition:", 0) == 0)) {
      uids[r.pod.uid] = why;
    }
  }
  return uids;
}

std::set<std::string> PodManager::TerminalPods() {
  std::set<std::string> uids;
  if (!ConnectStatusClient()) return uids;
  auto list = status_client_->ListPodStatuses();
  if (!list.ok()) return uids;
  for (const auto& r : list->records) {
    if (r.status.phase == status::PodPhase::kSucceeded ||
        r.status.phase == status::PodPhase::kFailed) {
      uids.insert(r.pod.uid);
    }
  }
  return uids;
}

void PodManager::Evict(const std::string& uid, PodEviction eviction) {
  auto [it, added] = evictions_.emplace(uid, eviction);
  if (!added) return;
  dirty_ = true;
  ++generation_;
}

std::set<std::string> PodManager::ForgetGoneEvictions() {
  std::set<std::string> gone;
  if (!config_ || !config_->AllSourcesReady()) return gone;
  for (auto it = evictions_.begin(); it != evictions_.end();) {
    if (admitted_.count(it->first) == 0 && rejected_.count(it->first) == 0) {
      gone.insert(it->first);
      it = evictions_.erase(it);
    } else {
      ++it;
    }
  }
  return gone;
}

void PodManager::RequestReclaim() {
  ++reclaim_requests_;
  dirty_ = true;
}

}  // namespace nodelet::supervisor
