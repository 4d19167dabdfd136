// nodelet-volumed's service: a ROUTER at volumed.sock takes the supervisor's DesiredPods
// (podwork.fbs) and answers podworkerd's PodVolumesRequest and the supervisor's VolumesQuery
// (volume.fbs); a PUB at volumed-events.sock tells podworkerd when a pod's volumes change. The
// VolumeManager reconciles on the main loop when it has work (a changed desired state, a retry
// or sweep timer: volume_manager.h), never on a fixed poll.
#pragma once

#include <memory>

#include "lib/ipc/codec.h"
#include "lib/ipc/message.h"
#include "lib/ipc/sockets.h"
#include "lib/service/service_runtime.h"
#include "podwork_generated.h"
#include "svc-volumed/volume_manager.h"
#include "volume_generated.h"

namespace nodelet::volumed {

// DesiredPods (podwork.fbs) as the volume manager's desired state; a pod that does not decode
// is skipped and named in `error`.
DesiredState DesiredFromMessage(const ipc::podwork::DesiredPods& msg, std::string* error);

class VolumedService : public Service {
 public:
  // Binds volumed's sockets and registers on ctx.loop (requests, the reconcile timer).
  static Result<std::unique_ptr<VolumedService>> Create(ServiceContext& ctx);
  CounterList Counters() const override;

 private:
  VolumedService() = default;
  Status Start(ServiceContext& ctx);
  void HandleRequests();
  // One reconciler pass (once a desired state has arrived); publishes VolumesChanged for every
  // pod it changed, then arms the timer for the manager's next work.
  void Reconcile();
  void ArmReconcile();
  void Publish(const std::string& uid, bool ready);
  void SendVolumeReply(const std::string& peer, flatbuffers::FlatBufferBuilder& fbb,
                       ipc::volume::Body type, flatbuffers::Offset<void> body);

  std::unique_ptr<VolumeManager> manager_;
  std::unique_ptr<ipc::RouterServer> router_;
  std::unique_ptr<ipc::Publisher> events_;
  std::unique_ptr<ipc::EnvelopeWriter> envelope_;
  bool have_desired_ = false;
  uint64_t requests_ = 0;
  ipc::BadMessageCounter bad_messages_;
  // DesiredPods from a peer that is not the supervisor (refused; the first one logged).
  ipc::BadMessageCounter foreign_desired_;
  EventLoop::Handle router_source_;
  EventLoop::Timer reconcile_;
};

ServiceSpec MakeSpec();

}  // namespace nodelet::volumed
