#include "svc-volumed/volumed_service.h"

#include "lib/common/logging.h"
#include "lib/ipc/channel_limits.h"
#include "lib/ipc/endpoints.h"
#include "lib/ipc/router_receive.h"
#include "lib/ipc/supervisor_peer.h"
#include "lib/pod/config_objects.h"
#include "lib/pod/pod_flatbuffers.h"

namespace nodelet::volumed {
namespace {

constexpr size_t kMaxBytes = ipc::kVolumeChannel.requests.max_message_bytes;

}  // namespace

DesiredState DesiredFromMessage(const ipc::podwork::DesiredPods& msg, std::string* error) {
  DesiredState d;
  d.sources_ready = msg.sources_ready();
  if (msg.pods()) {
    for (const auto* dp : *msg.pods()) {
      if (!dp->pod()) continue;
      // An evicted pod keeps no volume (the kubelet removes an evicted pod's content): it is
      // not desired here, and its volumes go once podworkerd no longer has it in use.
      if (dp->eviction_message() && dp->eviction_message()->size() > 0) continue;
      auto p = pod::PodFromFlatBuffer(dp->pod());
      if (!p.ok() || p->metadata.uid.empty()) {
        if (error)
          *error =
              "undecodable desired pod: " + (p.ok() ? std::string("no uid") : p.status().message());
        continue;
      }
      std::string uid = p->metadata.uid;
      d.pods[uid] = std::make_shared<const pod::Pod>(std::move(*p));
    }
  }
  if (msg.in_use_uids()) {
    for (const auto* uid : *msg.in_use_uids()) d.in_use.insert(uid->str());
  }
  d.in_use_known = msg.in_use_known();
  d.config_maps = pod::DecodeConfigObjects(msg.config_maps());
  d.secrets = pod::DecodeConfigObjects(msg.secrets());
  return d;
}

Result<std::unique_ptr<VolumedService>> VolumedService::Create(ServiceContext& ctx) {
  std::unique_ptr<VolumedService> service(new VolumedService());
  if (Status s = service->Start(ctx); !s.ok()) return s;
  VolumedService* v = service.get();
  v->router_source_ = ctx.loop.AddSocket(v->router_->raw(), [v] { v->HandleRequests(); });
  v->reconcile_ = ctx.loop.AddTimer([v] { v->Reconcile(); });
  return service;
}

Status VolumedService::Start(ServiceContext& ctx) {
  manager_ = std::make_unique<VolumeManager>(ctx.options.root_dir, ctx.clock);
  router_ = std::make_unique<ipc::RouterServer>(ctx.ipc, ipc::kVolumeChannel);
  if (Status s = router_->Bind(ipc::kVolumeEndpoint.Uri(ctx.options.run_dir)); !s.ok()) return s;
  events_ = std::make_unique<ipc::Publisher>(ctx.ipc, ipc::kVolumeEvents);
  if (Status s = events_->Bind(ipc::kVolumeEventsEndpoint.Uri(ctx.options.run_dir)); !s.ok()) {
    return s;
  }
  envelope_ = std::make_unique<ipc::EnvelopeWriter>(ipc::ServiceId::Volumed, ctx.incarnation);
  return Status::Ok();
}

void VolumedService::Reconcile() {
  if (!have_desired_) return;  // nothing is torn down before the supervisor said what it wants
  for (const auto& uid : manager_->Reconcile()) Publish(uid, manager_->Get(uid).ready);
  ArmReconcile();
}

void VolumedService::ArmReconcile() {
  // The manager says when it has work next: a marked pod (now), a retry or the sweep.
  const MonoTime next = manager_->NextReconcile();
  if (next == MonoTime::max()) {
    reconcile_.Cancel();
  } else {
    reconcile_.ArmAt(next);
  }
}

void VolumedService::Publish(const std::string& uid, bool ready) {
  flatbuffers::FlatBufferBuilder fbb(128);
  auto ev = ipc::volume::CreateVolumesChangedDirect(fbb, uid.c_str(), ready);
  (void)ipc::PublishMessage(*events_, fbb, *envelope_, ipc::volume::Body::VolumesChanged,
                            ev.Union());
}

void VolumedService::SendVolumeReply(const std::string& peer, flatbuffers::FlatBufferBuilder& fbb,
                                     ipc::volume::Body type, flatbuffers::Offset<void> body) {
  (void)ipc::SendMessage(*router_, peer, fbb, *envelope_, type, body);
}

void VolumedService::HandleRequests() {
  auto log = GetLogger("volumed");
  for (int i = 0; i < 64 && router_->Readable(); ++i) {
    std::optional<ipc::PeerCredentials> sender;
    auto in = ipc::ReceiveWithCredentials(*router_, std::chrono::milliseconds(0), &sender);
    if (!in.ok()) break;
    const auto* data = in->payload.data();
    const size_t size = in->payload.size();
    if (size >= 8 &&
        flatbuffers::BufferHasIdentifier(data, ipc::podwork::PodWorkMessageIdentifier())) {
      auto msg = ipc::DecodeMessage<ipc::podwork::PodWorkMessage>(
          data, size, ipc::podwork::PodWorkMessageIdentifier(), kMaxBytes);
      if (msg.ok() && (*msg)->body_type() == ipc::podwork::Body::DesiredPods) {
        // As podworkerd: the desired set (what is mounted) only from the supervisor.
        if (auto from =
                ipc::CheckSupervisorPeer(ipc::SupervisorPeerCheck::ForThisProcess(), sender);
            !from.allowed) {
          const std::string why = "DesiredPods is taken only from the supervisor: " + from.reason;
          if (foreign_desired_.Count()) log->warn("Refused: {}", why);
          flatbuffers::FlatBufferBuilder fbb(256);
          auto err = ipc::podwork::CreateErrorReplyDirect(fbb, 0, why.c_str());
          (void)ipc::SendMessage(*router_, in->peer, fbb, *envelope_,
                                 ipc::podwork::Body::ErrorReply, err.Union());
          continue;
        }
        std::string error;
        manager_->SetDesired(DesiredFromMessage(*(*msg)->body_as_DesiredPods(), &error));
        if (!error.empty()) log->warn("{}", error);
        have_desired_ = true;
        // What changed is reconciled at the next turn of the loop (the timer is due then).
        ArmReconcile();
        flatbuffers::FlatBufferBuilder fbb(128);
        auto ack =
            ipc::podwork::CreateWorkAck(fbb, (*msg)->body_as_DesiredPods()->generation(), 0, 0);
        (void)ipc::SendMessage(*router_, in->peer, fbb, *envelope_, ipc::podwork::Body::WorkAck,
                               ack.Union());
        continue;
      }
    }
    auto msg = ipc::DecodeMessage<ipc::volume::VolumeMessage>(
        data, size, ipc::volume::VolumeMessageIdentifier(), kMaxBytes);
    flatbuffers::FlatBufferBuilder fbb(1024);
    if (!msg.ok()) {
      if (bad_messages_.Count()) log->warn("Refusing a bad message: {}", msg.status().message());
      auto err = ipc::volume::CreateErrorReplyDirect(fbb, 0, msg.status().message().c_str());
      SendVolumeReply(in->peer, fbb, ipc::volume::Body::ErrorReply, err.Union());
      continue;
    }
    ++requests_;
    if (const auto* req = (*msg)->body_as_PodVolumesRequest()) {
      std::string uid = req->pod_uid() ? req->pod_uid()->str() : "";
      PodVolumesInfo info = manager_->Get(uid);
      std::vector<flatbuffers::Offset<ipc::volume::VolumePath>> paths;
      for (const auto& v : info.volumes) {
        paths.push_back(ipc::volume::CreateVolumePathDirect(fbb, v.name.c_str(),
                                                            v.host_path.c_str(), v.plugin.c_str()));
      }
      auto reply = ipc::volume::CreatePodVolumesDirect(
          fbb, req->request_id(), uid.c_str(), info.known, info.ready, info.reason.c_str(), &paths);
      SendVolumeReply(in->peer, fbb, ipc::volume::Body::PodVolumes, reply.Union());
    } else if (const auto* q = (*msg)->body_as_VolumesQuery()) {
      std::vector<flatbuffers::Offset<ipc::volume::VolumeState>> states;
      for (const auto& [uid, v] : manager_->Report(q->pod_uid() ? q->pod_uid()->str() : "")) {
        states.push_back(ipc::volume::CreateVolumeStateDirect(
            fbb, uid.c_str(), v.pod_name.c_str(), v.name.c_str(), v.plugin.c_str(), v.state.c_str(),
            v.error.c_str(), v.host_path.c_str()));
      }
      auto reply = ipc::volume::CreateVolumesReportDirect(fbb, q->request_id(), &states);
      SendVolumeReply(in->peer, fbb, ipc::volume::Body::VolumesReport, reply.Union());
    } else {
      auto err = ipc::volume::CreateErrorReplyDirect(fbb, 0, "unexpected message");
      SendVolumeReply(in->peer, fbb, ipc::volume::Body::ErrorReply, err.Union());
    }
  }
}

CounterList VolumedService::Counters() const {
  CounterList c;
  c.emplace_back("operations", manager_->operations());
  c.emplace_back("failures", manager_->failures());
  c.emplace_back("requests", requests_);
  c.emplace_back("bad_messages", bad_messages_.count());
  c.emplace_back("desired_refused", foreign_desired_.count());
  return c;
}

ServiceSpec MakeSpec() {
  ServiceSpec spec;
  spec.name = "volumed";
  spec.id = ipc::ServiceId::Volumed;
  spec.description = "nodelet-volumed: volume desired/actual state and the reconciler that mounts";
  spec.create = [](ServiceContext& ctx) -> Result<std::unique_ptr<Service>> {
    auto service = VolumedService::Create(ctx);
    if (!service.ok()) return service.status();
    return std::unique_ptr<Service>(std::move(service).value());
  };
  return spec;
}

}  // namespace nodelet::volumed
