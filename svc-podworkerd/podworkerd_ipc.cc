// podworkerd's messages: the supervisor's desired pods and stream requests on podworkerd.sock,
// its acknowledgements and in-use reports, volumed's events, and relist requests to plegd.
#include <signal.h>
#include <unistd.h>

#include <set>

#include "lib/common/check.h"
#include "lib/common/fs.h"
#include "lib/common/logging.h"
#include "lib/common/node_ip.h"
#include "lib/common/rfc3339.h"
#include "lib/ipc/endpoints.h"
#include "lib/ipc/message.h"
#include "lib/ipc/router_receive.h"
#include "lib/ipc/supervisor_peer.h"
#include "lib/pod/config_objects.h"
#include "lib/pod/downward_api.h"
#include "lib/pod/node_resources.h"
#include "lib/pod/pod_flatbuffers.h"
#include "lib/pod/static_pod.h"
#include "lib/service/cgroup_flags.h"
#include "lib/service/container_log_flags.h"
#include "lib/service/dns_flags.h"
#include "lib/status/status_client.h"
#include "svc-podworkerd/podworkerd_service.h"
#include "svc-podworkerd/registry_credentials.h"
#include "volume_generated.h"

namespace nodelet::podworkerd {

namespace {

using ipc::podwork::Body;
using ipc::podwork::PodWorkMessage;

constexpr size_t kMaxWorkBytes = ipc::kPodWorkChannel.requests.max_message_bytes;

}  // namespace

void PodworkerdService::FlushRelistRequests() {
  while (!relist_pending_.empty()) {
    // plegd takes at most 1024 pods per request.
    std::vector<std::string> uids;
    for (auto it = relist_pending_.begin(); it != relist_pending_.end() && uids.size() < 512;
         ++it) {
      uids.push_back(*it);
    }
    if (!mirror_->RequestRelist(uids).ok()) {
      // plegd away or its queue full: again shortly (the full relist covers the pods anyway).
      relist_flush_.ArmAfter(std::chrono::milliseconds(50));
      return;
    }
    for (const auto& uid : uids) relist_pending_.erase(uid);
  }
}

void PodworkerdService::HandleVolumeEvents() {
  // volumed: a pod's volumes became ready (or changed): sync it now.
  std::set<std::string> changed;
  for (int i = 0; i < 256 && volume_events_->Readable(); ++i) {
    auto frame = volume_events_->Receive(std::chrono::milliseconds(0));
    if (!frame.ok()) break;
    auto m = ipc::DecodeMessage<ipc::volume::VolumeMessage>(frame->data(), frame->size(),
                                                            ipc::volume::VolumeMessageIdentifier());
    if (!m.ok()) {
      bad_messages_.CountSilently();
      continue;
    }
    if (const auto* ev = (*m)->body_as_VolumesChanged(); ev && ev->pod_uid()) {
      changed.insert(ev->pod_uid()->str());
    }
  }
  dispatcher_->SyncChanged(changed);
  WakeTick();
}

std::set<std::string> PodworkerdService::InUse() const {
  std::set<std::string> uids = dispatcher_->InUse();
  uids.merge(status_->Unsent());
  // And every pod of nodelet's whose container the runtime last showed as not exited: a pod
  // whose kill failed (the runtime was down) and that the dispatcher then forgot is in use
  // until a relist shows its containers stopped, whatever the dispatcher knows.
  uids.merge(PodsWithLiveContainers(mirror_->pods()));
  return uids;
}

std::set<std::string> PodsWithLiveContainers(
    const std::map<std::string, ipc::pleg::PodRecordT>& pods) {
  std::set<std::string> uids;
  for (const auto& [uid, rec] : pods) {
    if (rec.foreign || rec.removed) continue;
    for (const auto& c : rec.containers) {
      if (c->state != ipc::pleg::ContainerState::Exited) {
        uids.insert(uid);
        break;
      }
    }
  }
  return uids;
}

std::set<std::string> RunningContainers(const std::map<std::string, ipc::pleg::PodRecordT>& pods) {
  std::set<std::string> ids;
  for (const auto& [uid, rec] : pods) {
    if (rec.foreign || rec.removed) continue;
    for (const auto& c : rec.containers) {
      if (c->state == ipc::pleg::ContainerState::Running) ids.insert(c->id);
    }
  }
  return ids;
}

void PodworkerdService::SendAck(const std::string& peer, const std::set<std::string>& in_use) {
  flatbuffers::FlatBufferBuilder fbb(256 + 48 * in_use.size());
  std::vector<flatbuffers::Offset<flatbuffers::String>> uids;
  for (const auto& uid : in_use) uids.push_back(fbb.CreateString(uid));
  const bool complete = dispatcher_->known_complete();
  auto ack =
      ipc::podwork::CreateWorkAck(fbb, generation_, static_cast<uint32_t>(dispatcher_->workers()),
                                  0, fbb.CreateVector(uids), complete);
  Reply(peer, fbb, Body::WorkAck, ack.Union());
  acked_in_use_ = in_use;
  acked_complete_ = complete;
}

void PodworkerdService::ReportInUse() {
  in_use_stale_ = false;
  statuses_waiting_ = status_ && !status_->Idle();
  if (work_peer_.empty()) return;
  std::set<std::string> in_use = InUse();
  if (in_use == acked_in_use_ && dispatcher_->known_complete() == acked_complete_) return;
  SendAck(work_peer_, in_use);
}

void PodworkerdService::Reply(const std::string& peer, flatbuffers::FlatBufferBuilder& fbb,
                              Body type, flatbuffers::Offset<void> body) {
  // A peer that went away takes its reply with it; the supervisor sends the desired pods again.
  (void)ipc::SendMessage(*router_, peer, fbb, *envelope_, type, body);
}

void PodworkerdService::HandleWork() {
  for (int i = 0; i < 64 && router_->Readable(); ++i) {
    std::optional<ipc::PeerCredentials> sender;
    auto in = ipc::ReceiveWithCredentials(*router_, std::chrono::milliseconds(0), &sender);
    if (!in.ok()) break;
    auto msg =
        ipc::DecodeMessage<PodWorkMessage>(in->payload.data(), in->payload.size(),
                                           ipc::podwork::PodWorkMessageIdentifier(), kMaxWorkBytes);
    flatbuffers::FlatBufferBuilder fbb(256);
    if (msg.ok() && (*msg)->body_type() == Body::StreamRequest) {
      const auto& request = *(*msg)->body_as_StreamRequest();
      // Sessions only for the supervisor, as the desired set: nodeletctl asks on the ctl socket.
      if (auto from = ipc::CheckSupervisorPeer(ipc::SupervisorPeerCheck::ForThisProcess(), sender);
          !from.allowed) {
        const std::string why =
            "stream sessions are opened only for the supervisor (nodeletctl asks it on its ctl "
            "socket): " +
            from.reason;
        if (foreign_streams_.Count()) GetLogger("podworkerd")->warn("Refused: {}", why);
        auto body = ipc::podwork::CreateStreamReplyDirect(
            fbb, "", "", why.c_str(), static_cast<uint8_t>(StatusCode::kPermissionDenied),
            request.request_id());
        Reply(in->peer, fbb, Body::StreamReply, body.Union());
        continue;
      }
      HandleStreamRequest(in->peer, request);
      continue;
    }
    if (!msg.ok() || (*msg)->body_type() != Body::DesiredPods) {
      std::string why = msg.ok() ? "expected DesiredPods" : msg.status().message();
      if (bad_messages_.Count()) {
        GetLogger("podworkerd")->warn("Refusing a bad work message: {}", why);
      }
      auto err = ipc::podwork::CreateErrorReplyDirect(fbb, 0, why.c_str());
      Reply(in->peer, fbb, Body::ErrorReply, err.Union());
      continue;
    }
    // The desired set only from the supervisor (lib/ipc/supervisor_peer.h): any other peer
    // that the socket lets in is refused, counted and named once in the log.
    if (auto from = ipc::CheckSupervisorPeer(ipc::SupervisorPeerCheck::ForThisProcess(), sender);
        !from.allowed) {
      const std::string why = "DesiredPods is taken only from the supervisor: " + from.reason;
      if (foreign_desired_.Count()) GetLogger("podworkerd")->warn("Refused: {}", why);
      auto err = ipc::podwork::CreateErrorReplyDirect(fbb, 0, why.c_str());
      Reply(in->peer, fbb, Body::ErrorReply, err.Union());
      continue;
    }
    const auto* desired = (*msg)->body_as_DesiredPods();
    // The supervisor sends its desired set every 2 s whether or not it changed. A set this
    // podworkerd has applied already (the same sender incarnation and generation, with the same
    // sources-ready and reclaim figures, which change without a new generation) is not decoded
    // and applied again (at 100 pods that was most of an idle podworkerd's CPU); only the
    // housekeeping that depends on plegd's view runs.
    const AppliedSet key{(*msg)->header() ? (*msg)->header()->incarnation() : 0,
                         desired->generation(), desired->sources_ready(),
                         desired->reclaim_requests()};
    std::string error;
    if (!applied_ || !(*applied_ == key)) {
      error = ApplyDesired(*desired);
      if (error.empty()) {
        applied_ = key;
      } else {
        applied_.reset();
      }
    } else {
      ++desired_unchanged_;
      dispatcher_->Housekeep();  // orphans plegd has found since
      if (qos_burstable_milli_) WriteQosCgroups(*qos_burstable_milli_);  // the minute's rewrite
    }
    generation_ = desired->generation();
    if (!error.empty()) {
      auto err = ipc::podwork::CreateErrorReplyDirect(fbb, generation_, error.c_str());
      Reply(in->peer, fbb, Body::ErrorReply, err.Union());
      continue;
    }
    work_peer_ = in->peer;
    SendAck(in->peer, InUse());
  }
}

void PodworkerdService::HandleStreamRequest(const std::string& peer,
                                            const ipc::podwork::StreamRequest& request) {
  StreamAsk ask = DecodeStreamAsk(request);
  auto reply = [this, peer, id = request.request_id()](
                   const std::string& url, const std::string& container, const Status& error) {
    flatbuffers::FlatBufferBuilder fbb(256 + url.size());
    auto body = ipc::podwork::CreateStreamReplyDirect(fbb, url.c_str(), container.c_str(),
                                                      error.message().c_str(),
                                                      static_cast<uint8_t>(error.code()), id);
    Reply(peer, fbb, Body::StreamReply, body.Union());
  };
  auto target = FindStreamTarget(mirror_->pods(), ask);
  if (!target.ok()) {
    reply("", ask.container, target.status());
    return;
  }
  // The runtime call runs on a worker thread (a slow runtime never stalls the loop); the reply
  // goes out from the loop, which owns the socket.
  pool_->Submit([this, ask, t = *target, reply] {
    auto url = OpenStream(cri_, ask, t);
    GetLogger("podworkerd")
        ->info("{} session for {}/{} container {}: {}", ipc::podwork::EnumNameStreamKind(ask.kind),
               ask.namespace_name, ask.pod_name, t.container,
               url.ok() ? std::string("opened") : url.status().message());
    ctx_.loop.Post([reply, container = t.container, url] {
      reply(url.ok() ? *url : std::string(), container, url.ok() ? Status::Ok() : url.status());
    });
  });
}

std::string PodworkerdService::ApplyDesired(const ipc::podwork::DesiredPods& desired) {
  std::string error;
  std::vector<std::shared_ptr<const pod::Pod>> pods;
  std::set<std::string> evicted;
  if (desired.pods()) {
    for (const auto* dp : *desired.pods()) {
      auto decoded = dp->pod() ? pod::PodFromFlatBuffer(dp->pod())
                               : Result<pod::Pod>(InvalidArgument("no pod"));
      if (!decoded.ok() || decoded->metadata.uid.empty()) {
        bad_messages_.CountSilently();
        error = "undecodable desired pod: " +
                (decoded.ok() ? std::string("no uid") : decoded.status().message());
        continue;
      }
      if (dp->eviction_message() && dp->eviction_message()->size() > 0) {
        syncer_->MarkEvicted(decoded->metadata.uid, dp->eviction_message()->str(),
                             dp->eviction_grace_seconds());
        evicted.insert(decoded->metadata.uid);
      }
      pods.push_back(std::make_shared<const pod::Pod>(std::move(*decoded)));
    }
  }
  // A raised count asks for the eviction manager's node-level reclaim (the first value seen in
  // this incarnation is only taken as the baseline).
  if (reclaim_seen_ && desired.reclaim_requests() > *reclaim_seen_ && gc_) {
    gc_->RequestReclaim();
  }
  reclaim_seen_ = desired.reclaim_requests();
  auto objects = std::make_shared<EnvSources>();
  objects->config_maps = pod::DecodeConfigObjects(desired.config_maps());
  objects->secrets = pod::DecodeConfigObjects(desired.secrets());
  syncer_->SetConfigObjects(std::move(objects));
  dispatcher_->ApplyDesired(pods, desired.sources_ready(), evicted);
  UpdateQosCgroups(pods, evicted);
  return error;
}

}  // namespace nodelet::podworkerd
