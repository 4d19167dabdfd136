// VolumeClient: podworkerd's side of volumed's request socket (volume.fbs). Before it starts a
// pod's containers, a pod worker asks whether the pod's volumes are set up and where each one is
// on the host. Safe to call from any thread: each call uses its own short-lived connection, so a
// worker blocked on volumed holds up no one else.
#pragma once

#include <chrono>
#include <map>
#include <string>

#include "lib/common/status.h"
#include "lib/ipc/sockets.h"

namespace nodelet::volume {

// A pod's volumes as volumed reports them.
struct PodVolumeSet {
  bool ready = false;
  std::string reason;                        // why not ready
  std::map<std::string, std::string> paths;  // volume name -> host path
};

struct VolumeClientOptions {
  std::chrono::milliseconds attempt_timeout{300};  // each try (volumed may be restarting)
  std::chrono::milliseconds deadline{1000};        // the whole call
};

class VolumeClient {
 public:
  VolumeClient(ipc::Context& ctx, std::string run_dir, VolumeClientOptions options = {});

  // The pod's volumes. Not ready, with a reason, when volumed does not know the pod yet.
  // DeadlineExceeded or Unavailable when volumed does not answer; InvalidArgument for an answer
  // that does not verify.
  Result<PodVolumeSet> PodVolumes(const std::string& pod_uid) const;

 private:
  ipc::Context& ctx_;
  std::string run_dir_;
  VolumeClientOptions options_;
};

}  // namespace nodelet::volume
