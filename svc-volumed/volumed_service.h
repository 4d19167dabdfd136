// nodelet-volumed's service: a ROUTER at volumed.sock takes the supervisor's DesiredPods
// (podwork.fbs) and answers podworkerd's PodVolumesRequest and the supervisor's VolumesQuery
// (volume.fbs); a PUB at volumed-events.sock tells podworkerd when a pod's volumes change. The
// VolumeManager reconciles on the main loop when it has work (a changed desired state, a retry
// or sweep timer: volume_manager.h), never on a fixed poll.
#pragma once

#include <memory>

#include "lib/ipc/codec.h"
#include "lib/ipc/sockets.h"
#include "lib/service/service_runtime.h"
#include "podwork_generated.h"
#include "svc-volumed/volume_manager.h"
#include "volume_generated.h"

namespace nodelet::volumed {

// DesiredPods (podwork.fbs) as the volume manager's desired state; a pod that does not decode
// is skipped and named in `error`.
DesiredState DesiredFromMessage(const ipc::podwork::DesiredPods& msg, std::string* error);

class VolumedService : public ServiceHooks {
 public:
  Status Start(ServiceContext& ctx) override;
  std::vector<zmq::pollitem_t> PollItems() override;
  void OnPoll(const std::vector<zmq::pollitem_t>& items) override;
  // The reconciler's timer: when the manager has work, once the supervisor has sent a desired
  // state (nothing is torn down before it said what it wants).
  MonoTime NextTimer() const override;
  void OnTimer(MonoTime now) override;
  CounterList Counters() const override;

 private:
  void HandleRequests();
  // One reconciler pass; publishes VolumesChanged for every pod it changed.
  void Reconcile();
  void Publish(const std::string& uid, bool ready);
  void SendVolumeReply(const std::string& peer, flatbuffers::FlatBufferBuilder& fbb,
                       ipc::volume::Body type, flatbuffers::Offset<void> body);

  ServiceContext* ctx_ = nullptr;
  std::unique_ptr<VolumeManager> manager_;
  std::unique_ptr<ipc::RouterServer> router_;
  std::unique_ptr<ipc::Publisher> events_;
  std::unique_ptr<ipc::EnvelopeWriter> envelope_;
  bool have_desired_ = false;
  uint64_t bad_messages_ = 0, requests_ = 0;
  bool bad_logged_ = false;
};

ServiceSpec MakeSpec();

}  // namespace nodelet::volumed
