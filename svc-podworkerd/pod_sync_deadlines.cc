// PodSyncer's ends decided by time or by the node: activeDeadlineSeconds and evictions.
#include <algorithm>
#include <future>
#include <set>
#include <vector>

#include "lib/common/fs.h"
#include "lib/common/logging.h"
#include "lib/common/utf8.h"
#include "lib/pod/canonical.h"
#include "lib/pod/qos.h"
#include "lib/pod/security.h"
#include "svc-podworkerd/container_log_manager.h"
#include "svc-podworkerd/cri_configs.h"
#include "svc-podworkerd/lifecycle_hooks.h"
#include "svc-podworkerd/pod_phase.h"
#include "svc-podworkerd/pod_records.h"
#include "svc-podworkerd/pod_sync.h"
#include "svc-podworkerd/pull_secrets.h"
#include "svc-podworkerd/termination_message.h"

namespace nodelet::podworkerd {
namespace {

namespace v1 = cri::v1;

}  // namespace

void PodSyncer::SeedStartTime(const std::string& uid, int64_t unix_s) {
  if (unix_s <= 0) return;
  std::lock_guard<std::mutex> lock(deadline_mu_);
  auto [it, added] = start_times_.emplace(uid, unix_s);
  if (!added) it->second = std::min(it->second, unix_s);
}

int64_t PodSyncer::StartTime(const pod::Pod& pod, const PodRecordT* rec) {
  int64_t start = clock_.WallSeconds();
  if (rec != nullptr) {
    for (const auto& sb : rec->sandboxes) {
      const int64_t created = sb->created_at_ns / 1000000000;
      if (created > 0) start = std::min(start, created);
    }
  }
  std::lock_guard<std::mutex> lock(deadline_mu_);
  auto [it, added] = start_times_.emplace(pod.metadata.uid, start);
  if (!added) it->second = std::min(it->second, start);
  return it->second;
}

bool PodSyncer::DeadlineExceeded(const std::string& uid) const {
  std::lock_guard<std::mutex> lock(deadline_mu_);
  return deadline_exceeded_.count(uid) != 0;
}

SyncOutcome PodSyncer::FailDeadlineExceeded(const pod::Pod& pod, const PodRecordT* rec,
                                            int64_t grace) {
  SyncOutcome out;
  const bool first = [&] {
    std::lock_guard<std::mutex> lock(deadline_mu_);
    return deadline_exceeded_.insert(pod.metadata.uid).second;
  }();
  if (first) {
    out.events.push_back(MakeEvent(pod, "Warning", "DeadlineExceeded", kDeadlineMessage));
  }
  // The kubelet kills the pod (its containers with their grace period, then the sandbox); the
  // containers are kept, as for any finished pod.
  if (Status s = KillPod(pod.metadata.uid, grace); !s.ok()) {
    out.error = "stop the pod past its deadline: " + s.message();
  }
  out.changed_runtime = true;
  out.pod_finished = out.error.empty();
  out.status = MakeStatus(pod, rec, {}, true);
  return out;
}

void PodSyncer::MarkEvicted(const std::string& uid, const std::string& message,
                            int64_t grace_seconds) {
  std::lock_guard<std::mutex> lock(deadline_mu_);
  evicted_.emplace(
      uid, Eviction{message, std::max<int64_t>(0, grace_seconds), clock_.WallSeconds(), false});
}

std::optional<PodSyncer::Eviction> PodSyncer::EvictionOf(const std::string& uid) const {
  std::lock_guard<std::mutex> lock(deadline_mu_);
  auto it = evicted_.find(uid);
  if (it == evicted_.end()) return std::nullopt;
  return it->second;
}

SyncOutcome PodSyncer::FailEvicted(const pod::Pod& pod, const PodRecordT* rec) {
  SyncOutcome out;
  Eviction e;
  {
    std::lock_guard<std::mutex> lock(deadline_mu_);
    auto& held = evicted_.at(pod.metadata.uid);
    e = held;
    held.reported = true;
  }
  if (!e.reported) out.events.push_back(MakeEvent(pod, "Warning", "Evicted", e.message));
  // As the kubelet's killPodFunc: every container with the eviction's grace period (0 for a
  // hard threshold), then the sandbox; the containers are kept, as for any finished pod.
  if (Status s = KillPod(pod.metadata.uid, e.grace_seconds); !s.ok()) {
    out.error = "stop the evicted pod: " + s.message();
  }
  out.changed_runtime = true;
  out.pod_finished = out.error.empty();
  out.status = MakeStatus(pod, rec, {}, true);
  return out;
}

}  // namespace nodelet::podworkerd
