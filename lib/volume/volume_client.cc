#include "lib/volume/volume_client.h"

#include <atomic>

#include "lib/ipc/channel_limits.h"
#include "lib/ipc/codec.h"
#include "lib/ipc/endpoints.h"
#include "lib/ipc/message.h"
#include "volume_generated.h"

namespace nodelet::volume {
namespace {

using ipc::volume::VolumeMessage;

Result<const VolumeMessage*> Decode(const ipc::Frame& frame) {
  return ipc::DecodeMessage<VolumeMessage>(frame.data(), frame.size(),
                                           ipc::volume::VolumeMessageIdentifier());
}

}  // namespace

VolumeClient::VolumeClient(ipc::Context& ctx, std::string run_dir, VolumeClientOptions options)
    : ctx_(ctx), run_dir_(std::move(run_dir)), options_(options) {}

Result<PodVolumeSet> VolumeClient::PodVolumes(const std::string& pod_uid) const {
  // Request ids are unique in the process, so a late reply to an earlier call never matches.
  static std::atomic<uint64_t> next_id{1};
  const uint64_t id = next_id++;
  ipc::RequestClient client(ctx_, ipc::kVolumeEndpoint.Uri(run_dir_), ipc::kVolumeChannel);
  if (Status s = client.Connect(); !s.ok()) return s;
  flatbuffers::FlatBufferBuilder fbb(256);
  auto req = ipc::volume::CreatePodVolumesRequestDirect(fbb, id, pod_uid.c_str());
  ipc::EnvelopeWriter envelope(ipc::ServiceId::Podworkerd, 0);
  ipc::FinishMessage(fbb, envelope, ipc::volume::Body::PodVolumesRequest, req.Union());
  auto frame = client.Call(fbb.GetBufferPointer(), fbb.GetSize(), options_.attempt_timeout,
                           options_.deadline, [&](const ipc::Frame& f) {
                             auto m = Decode(f);
                             return m.ok() && (*m)->body_as_PodVolumes() &&
                                    (*m)->body_as_PodVolumes()->request_id() == id;
                           });
  if (!frame.ok()) return frame.status();
  // The frame matched above, so it verifies and is a PodVolumes answering this request.
  auto m = Decode(*frame);
  if (!m.ok()) return m.status();
  const ipc::volume::PodVolumes* reply = (*m)->body_as_PodVolumes();
  PodVolumeSet set;
  set.ready = reply->known() && reply->ready();
  set.reason = !reply->known()   ? "volumed does not know the pod yet"
               : reply->reason() ? reply->reason()->str()
                                 : "";
  if (reply->volumes()) {
    for (const auto* v : *reply->volumes()) {
      if (v->name() && v->host_path()) set.paths[v->name()->str()] = v->host_path()->str();
    }
  }
  return set;
}

}  // namespace nodelet::volume
