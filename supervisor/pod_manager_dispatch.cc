// PodManager's delivery: the desired set sent to podworkerd and volumed, their acknowledgements
// and the pods in use, the events and statuses it writes to statusd.
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <tuple>

#include "lib/common/fs.h"
#include "lib/common/logging.h"
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

void PodManager::Send() {
  // Before the first send of this supervisor: pods an earlier one refused stay refused.
  if (!CheckRejectedBefore()) return;
  FlushRejected();
  FlushEvents();
  flatbuffers::FlatBufferBuilder fbb(16 * 1024);
  std::vector<flatbuffers::Offset<ipc::podwork::DesiredPod>> pods;
  // In the order they were admitted (the kubelet's creation order): podworkerd starts new pods
  // in the order it is sent them, so the first pod seen is the first started.
  std::vector<std::pair<uint64_t, const std::string*>> order;
  order.reserve(admitted_.size());
  for (const auto& [uid, _] : admitted_) order.emplace_back(admitted_seq_[uid], &uid);
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [_, uid_ptr] : order) {
    const std::string& uid = *uid_ptr;
    const auto& p = admitted_.at(uid);
    auto fp = pod::PodToFlatBuffer(fbb, *p);
    auto source = fbb.CreateString(source_of_[uid]);
    auto ev = evictions_.find(uid);
    auto message = ev == evictions_.end() ? 0 : fbb.CreateString(ev->second.message);
    pods.push_back(
        ipc::podwork::CreateDesiredPod(fbb, fp, source, first_seen_ms_[uid], message,
                                       ev == evictions_.end() ? 0 : ev->second.grace_seconds));
  }
  std::vector<flatbuffers::Offset<ipc::podwork::RejectedPod>> rejected;
  for (const auto& [uid, reason] : rejected_) {
    rejected.push_back(ipc::podwork::CreateRejectedPodDirect(fbb, uid.c_str(), reason.c_str()));
  }
  std::vector<flatbuffers::Offset<ipc::podwork::ConfigObject>> config_maps, secrets;
  for (const auto& [_, by_key] : configs_) {
    for (const auto& [key, cd] : by_key) {
      std::vector<flatbuffers::Offset<ipc::podwork::ConfigEntry>> entries;
      for (const auto& [k, v] : cd.data) {
        entries.push_back(ipc::podwork::CreateConfigEntry(
            fbb, fbb.CreateString(k),
            fbb.CreateVector(reinterpret_cast<const uint8_t*>(v.data()), v.size())));
      }
      auto obj = ipc::podwork::CreateConfigObject(
          fbb, fbb.CreateString(cd.namespace_name), fbb.CreateString(cd.name),
          fbb.CreateVector(entries), cd.type.empty() ? 0 : fbb.CreateString(cd.type));
      (cd.kind == "Secret" ? secrets : config_maps).push_back(obj);
    }
  }
  std::set<std::string>& unacked = unacked_[generation_];
  unacked.clear();
  // An evicted pod is sent with its mark: podworkerd never starts it again, so from this
  // generation on only its own report keeps it in use (and its volumes with it).
  for (const auto& [uid, _] : admitted_) {
    if (evictions_.count(uid) == 0) unacked.insert(uid);
  }
  // While podworkerd does not answer, the oldest sets are merged: the union is what counts.
  while (unacked_.size() > 32) {
    auto oldest = unacked_.begin();
    std::next(oldest)->second.merge(oldest->second);
    unacked_.erase(oldest);
  }
  std::vector<flatbuffers::Offset<flatbuffers::String>> in_use;
  for (const auto& uid : InUse()) in_use.push_back(fbb.CreateString(uid));
  auto desired = ipc::podwork::CreateDesiredPods(
      fbb, generation_, fbb.CreateVector(pods), config_->AllSourcesReady(),
      fbb.CreateVector(rejected), fbb.CreateVector(config_maps), fbb.CreateVector(secrets),
      fbb.CreateVector(in_use), in_use_complete_, reclaim_requests_);
  // One message, sent to both podworkerd and volumed.
  ipc::FinishMessage(fbb, envelope_, ipc::podwork::Body::DesiredPods, desired.Union());
  // Fails while a service is not there (ZMQ_IMMEDIATE); the next tick sends again.
  bool sent = work_->Send(fbb.GetBufferPointer(), fbb.GetSize()).ok();
  sent = volumes_->Send(fbb.GetBufferPointer(), fbb.GetSize()).ok() && sent;
  if (sent) dirty_ = false;
  // Resending an applied set costs every side a decode or a check (at 100 idle pods a tenth
  // of the supervisor's CPU at 2 s): once podworkerd acknowledged this generation and nothing
  // waits for statusd, only the slow safety-net resend remains.
  const bool settled = sent && acked_ == generation_ && events_.empty() && unreported_.empty();
  next_send_ = clock_.Now() + (settled ? options_.resync : options_.housekeeping);
}

void PodManager::DrainReplies() {
  // volumed's acks carry nothing we act on.
  for (int i = 0; i < 64 && volumes_->Readable(); ++i) {
    if (!volumes_->Receive(std::chrono::milliseconds(0)).ok()) break;
  }
  for (int i = 0; i < 64 && work_->Readable(); ++i) {
    auto frame = work_->Receive(std::chrono::milliseconds(0));
    if (!frame.ok()) break;
    auto m = ipc::DecodeMessage<ipc::podwork::PodWorkMessage>(
        frame->data(), frame->size(), ipc::podwork::PodWorkMessageIdentifier());
    if (!m.ok()) continue;
    if (const auto* ack = (*m)->body_as_WorkAck()) TakeAck(*ack);
    if (const auto* err = (*m)->body_as_ErrorReply()) {
      GetLogger("supervisor")
          ->warn("podworkerd refused desired pods (generation {}): {}", err->generation(),
                 err->error() ? err->error()->str() : "");
    }
  }
}

void PodManager::TakeAck(const ipc::podwork::WorkAck& ack) {
  acked_ = ack.generation();
  // What podworkerd acked it reports itself from now on.
  unacked_.erase(unacked_.begin(), unacked_.upper_bound(acked_));
  std::set<std::string> in_use;
  if (ack.in_use_uids()) {
    for (const auto* uid : *ack.in_use_uids()) in_use.insert(uid->str());
  }
  if (in_use != podworkerd_in_use_ || ack.in_use_complete() != in_use_complete_) {
    podworkerd_in_use_ = std::move(in_use);
    in_use_complete_ = ack.in_use_complete();
    dirty_ = true;  // volumed hears of it with the next send, at once
  }
  CleanUpStatuses();
}

std::set<std::string> PodManager::InUse() const {
  std::set<std::string> uids = podworkerd_in_use_;
  for (const auto& [_, pods] : unacked_) uids.insert(pods.begin(), pods.end());
  return uids;
}

bool PodManager::ConnectStatusClient() {
  if (status_client_) return true;
  status::StatusClientOptions opts;
  opts.sender = ipc::ServiceId::Supervisor;
  opts.attempt_timeout = std::chrono::milliseconds(200);
  opts.deadline = std::chrono::milliseconds(400);
  status_client_ = std::make_unique<status::StatusClient>(ctx_, options_.run_dir, opts);
  if (status_client_->Connect().ok()) return true;
  status_client_.reset();
  return false;
}

void PodManager::RecordNodeEvent(status::PodEvent event) {
  if (events_.size() < 100) events_.push_back(std::move(event));
}

void PodManager::FlushEvents() {
  if (events_.empty()) return;
  if (!ConnectStatusClient()) return;
  // statusd may not be up yet: what fails is tried again at the next housekeeping tick.
  if (status_client_->RecordEvents(events_).ok()) events_.clear();
}

void PodManager::CleanUpStatuses() {
  if (!in_use_complete_ || !config_->AllSourcesReady()) return;
  std::set<std::string> keep = InUse();
  for (const auto& [uid, _] : admitted_) keep.insert(uid);
  for (const auto& [uid, _] : rejected_) keep.insert(uid);
  // A status is orphaned only when its pod leaves the kept set: nothing to do while that set
  // only grew since the last clean-up (a pod added, a pod sent).
  if (status_keep_ &&
      std::includes(keep.begin(), keep.end(), status_keep_->begin(), status_keep_->end())) {
    status_keep_ = std::move(keep);
    return;
  }
  if (!ConnectStatusClient()) return;
  auto removed = status_client_->RemoveOrphanedStatuses({keep.begin(), keep.end()});
  if (!removed.ok()) return;  // statusd is away: again with the next ack
  for (const auto& uid : *removed) {
    GetLogger("supervisor")->info("Removed the status of pod {}: it is stopped and gone", uid);
  }
  status_keep_ = std::move(keep);
}

}  // namespace nodelet::supervisor
