// GarbageCollector: podworkerd's periodic garbage collection, scheduled by a timer on the
// service's loop and run on a thread of its own executor (so CRI removals never hold the loop or
// a pod worker up): the node-wide dead-container pass (ContainerGc) every container GC period
// and image GC (ImageGc) every image GC period, and the periodic sweep. It learns the desired
// pods from the service (SetDesired), reports warnings as node events (`FreeDiskSpaceFailed`,
// `ImageGCFailed`, `ContainerGCFailed`), and keeps counters for the service's heartbeat. Nothing
// runs before the first SetDesired: until podworkerd knows which pods are wanted, it cannot tell
// whose containers and images to protect. One pass runs at a time; each period counts from the
// end of its last pass. Every method is called on the loop's thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "lib/common/clock.h"
#include "lib/cri/runtime_service.h"
#include "lib/service/blocking_executor.h"
#include "lib/service/event_loop.h"
#include "lib/status/pod_status.h"
#include "svc-podworkerd/container_gc.h"
#include "svc-podworkerd/image_gc.h"

namespace nodelet::podworkerd {

struct GarbageCollectionConfig {
  ImageGcPolicy image;
  std::chrono::milliseconds image_gc_period{std::chrono::minutes(5)};
  ContainerGcPolicy containers;
  std::chrono::milliseconds container_gc_period{std::chrono::minutes(1)};
  // The sandbox (pause) image, never removed; empty: read from the runtime's verbose Status
  // (containerd's config "sandboxImage").
  std::string pod_infra_container_image;
};

// The sandbox image a CRI runtime is configured with, from its verbose Status info ("config"
// JSON, key "sandboxImage", as containerd reports it); empty when it does not say.
std::string RuntimeSandboxImage(cri::RuntimeService& runtime);

class GarbageCollector {
 public:
  using EventSink = std::function<void(status::PodEvent)>;
  GarbageCollector(EventLoop& loop, cri::RuntimeService& runtime, cri::ImageService& images,
                   FsStatsSource& fs, GarbageCollectionConfig config, EventSink events);
  // Waits for a pass in flight to return; none starts afterwards.
  ~GarbageCollector();
  GarbageCollector(const GarbageCollector&) = delete;
  GarbageCollector& operator=(const GarbageCollector&) = delete;

  // A further periodic pass (podworkerd's orphaned-shim sweep): `sweep` runs every `period`, the
  // first time soon after the first SetDesired (at most 5 s, as the first image pass: a restart
  // must not postpone it by a whole period). Before the first SetDesired.
  void set_periodic_sweep(std::chrono::milliseconds period, std::function<void()> sweep) {
    sweep_period_ = period;
    sweep_ = std::move(sweep);
  }

  // Called on the executor's thread with the id of each container the node-wide pass removed.
  // Before the first SetDesired.
  void set_on_container_removed(std::function<void(const std::string&)> on_removed) {
    container_gc_.set_on_removed(std::move(on_removed));
  }

  // The pods podworkerd runs (uids) and the images they name. The first call starts the
  // schedule: the container pass at once, the image pass and the sweep within 5 s.
  void SetDesired(std::set<std::string> pod_uids, std::set<std::string> images);
  // The eviction manager's node-level reclaim under disk pressure: a container pass and an
  // image pass now (once the desired pods are known), then the periods go on.
  void RequestReclaim();
  // Heartbeat counters (name, value).
  std::vector<std::pair<std::string, uint64_t>> Counters() const;
  // Whether a pass is on the executor (its continuation not yet run on the loop).
  bool pass_running() const { return running_; }

 private:
  // Starts the passes that are due, unless one is running; arms the timer for the next.
  void Schedule();
  void RunImageGc();
  void RunContainerGc(const std::set<std::string>& live);
  void Warn(const std::string& reason, const std::string& message);

  cri::RuntimeService& runtime_;
  const Clock& clock_;
  GarbageCollectionConfig config_;
  EventSink events_;
  ImageGc image_gc_;
  ContainerGc container_gc_;
  std::string node_name_;
  std::chrono::milliseconds sweep_period_{0};
  std::function<void()> sweep_;

  std::optional<std::set<std::string>> desired_pods_;
  std::set<std::string> desired_images_;
  MonoTime next_containers_ = MonoTime::max();
  MonoTime next_image_ = MonoTime::max();
  MonoTime next_sweep_ = MonoTime::max();
  bool running_ = false;             // a pass is on the executor
  bool reclaim_after_pass_ = false;  // RequestReclaim while it ran
  EventLoop::Timer timer_;

  std::atomic<uint64_t> image_gc_runs_{0}, image_gc_failures_{0}, images_removed_{0},
      image_bytes_freed_{0}, image_fs_capacity_{0}, image_fs_available_{0}, container_gc_runs_{0},
      container_gc_failures_{0}, containers_removed_{0};
  // Last: stopped (and its thread joined) before the members its work uses go.
  BlockingExecutor executor_;
};

}  // namespace nodelet::podworkerd
