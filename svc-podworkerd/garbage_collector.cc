#include "svc-podworkerd/garbage_collector.h"

#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "lib/common/logging.h"

namespace nodelet::podworkerd {

std::string RuntimeSandboxImage(cri::RuntimeService& runtime) {
  auto st = runtime.RuntimeStatus(true);
  if (!st.ok()) return "";
  auto it = st->info().find("config");
  if (it == st->info().end()) return "";
  auto config = nlohmann::json::parse(it->second, nullptr, false);
  if (config.is_discarded() || !config.is_object()) return "";
  auto image = config.find("sandboxImage");
  if (image == config.end() || !image->is_string()) return "";
  return image->get<std::string>();
}

GarbageCollector::GarbageCollector(EventLoop& loop, cri::RuntimeService& runtime,
                                   cri::ImageService& images, FsStatsSource& fs,
                                   GarbageCollectionConfig config, EventSink events)
    : runtime_(runtime),
      clock_(loop.clock()),
      config_(std::move(config)),
      events_(std::move(events)),
      image_gc_(runtime, images, fs, loop.clock(), config_.image),
      container_gc_(runtime, config_.containers),
      timer_(loop.AddTimer([this] { Schedule(); })),
      executor_(loop, 1) {
  char host[256] = {};
  node_name_ = gethostname(host, sizeof host - 1) == 0 ? host : "node";
}

GarbageCollector::~GarbageCollector() { executor_.Stop(); }

void GarbageCollector::SetDesired(std::set<std::string> pod_uids, std::set<std::string> images) {
  const bool first = !desired_pods_.has_value();
  desired_pods_ = std::move(pod_uids);
  desired_images_ = std::move(images);
  if (!first) return;
  // The first image pass and the first sweep soon after start (the kubelet waits a minute; a
  // restart of podworkerd should not postpone them by a whole period either).
  auto first_within = [](std::chrono::milliseconds period) {
    return std::min<std::chrono::milliseconds>(period, std::chrono::seconds(5));
  };
  const MonoTime now = clock_.Now();
  next_containers_ = now;
  next_image_ = now + first_within(config_.image_gc_period);
  if (sweep_) next_sweep_ = now + first_within(sweep_period_);
  Schedule();
}

std::vector<std::pair<std::string, uint64_t>> GarbageCollector::Counters() const {
  return {
      {"image_gc_runs", image_gc_runs_.load()},
      {"image_gc_failures", image_gc_failures_.load()},
      {"images_garbage_collected", images_removed_.load()},
      {"image_gc_bytes_freed", image_bytes_freed_.load()},
      {"image_fs_capacity_bytes", image_fs_capacity_.load()},
      {"image_fs_available_bytes", image_fs_available_.load()},
      {"container_gc_runs", container_gc_runs_.load()},
      {"container_gc_failures", container_gc_failures_.load()},
      {"containers_garbage_collected_node", containers_removed_.load()},
  };
}

void GarbageCollector::RequestReclaim() {
  if (!desired_pods_) return;  // the first passes come with the desired pods
  if (running_) {
    reclaim_after_pass_ = true;  // the pass running may have started before the pressure
    return;
  }
  const MonoTime now = clock_.Now();
  next_containers_ = std::min(next_containers_, now);
  next_image_ = std::min(next_image_, now);
  Schedule();
}

void GarbageCollector::Schedule() {
  if (running_ || !desired_pods_) return;
  const MonoTime now = clock_.Now();
  const bool sweep = now >= next_sweep_;
  const bool containers = now >= next_containers_;
  const bool image = now >= next_image_;
  if (!sweep && !containers && !image) {
    timer_.ArmAt(std::min({next_containers_, next_image_, next_sweep_}));
    return;
  }
  running_ = true;
  timer_.Cancel();
  if (image) image_gc_.set_desired_refs(desired_images_);
  std::set<std::string> live = containers ? *desired_pods_ : std::set<std::string>();
  executor_.Submit(
      [this, sweep, containers, image, live = std::move(live)] {
        if (sweep) sweep_();
        if (containers) RunContainerGc(live);
        if (image) RunImageGc();
      },
      [this, sweep, containers, image] {
        // Each period counts from the end of its pass.
        const MonoTime done = clock_.Now();
        if (sweep) next_sweep_ = done + sweep_period_;
        if (containers) next_containers_ = done + config_.container_gc_period;
        if (image) next_image_ = done + config_.image_gc_period;
        if (reclaim_after_pass_) {
          reclaim_after_pass_ = false;
          next_containers_ = next_image_ = done;
        }
        running_ = false;
        Schedule();
      });
}

void GarbageCollector::RunContainerGc(const std::set<std::string>& live) {
  ++container_gc_runs_;
  ContainerGcResult r = container_gc_.GarbageCollect(live);
  containers_removed_ += static_cast<uint64_t>(r.removed);
  if (r.removed > 0) {
    GetLogger("podworkerd")
        ->info("Container GC removed {} of {} dead containers", r.removed, r.dead_before);
  }
  if (!r.status.ok()) {
    ++container_gc_failures_;
    Warn("ContainerGCFailed", r.status.message());
  }
}

void GarbageCollector::RunImageGc() {
  ++image_gc_runs_;
  std::vector<std::string> pinned;
  if (!config_.pod_infra_container_image.empty()) {
    pinned.push_back(config_.pod_infra_container_image);
  } else if (std::string sandbox = RuntimeSandboxImage(runtime_); !sandbox.empty()) {
    pinned.push_back(sandbox);
  }
  image_gc_.set_pinned_refs(std::move(pinned));
  ImageGcResult r = image_gc_.GarbageCollect();
  image_fs_capacity_ = r.fs.capacity_bytes;
  image_fs_available_ = r.fs.available_bytes;
  images_removed_ += r.removed.size();
  image_bytes_freed_ += r.bytes_freed;
  auto log = GetLogger("podworkerd");
  if (r.over_threshold) {
    log->info(
        "Image GC: image filesystem {} at {}% (high threshold {}%): freed {} of {} bytes, "
        "removed {} images",
        r.mountpoint, r.usage_percent, config_.image.high_threshold_percent, r.bytes_freed,
        r.bytes_to_free, r.removed.size());
  }
  if (!r.status.ok()) {
    ++image_gc_failures_;
    // Not enough eligible images is the kubelet's FreeDiskSpaceFailed; anything else (the
    // runtime or the filesystem could not be read) its ImageGCFailed.
    Warn(
        r.status.code() == StatusCode::kResourceExhausted ? "FreeDiskSpaceFailed" : "ImageGCFailed",
        r.status.message());
  }
}

void GarbageCollector::Warn(const std::string& reason, const std::string& message) {
  GetLogger("podworkerd")->warn("{}: {}", reason, message);
  if (!events_) return;
  status::PodEvent e;
  // A node event: statusd keys events by an object uid; "node" names the node itself.
  e.pod_uid = "node";
  e.pod_name = node_name_;
  e.type = "Warning";
  e.reason = reason;
  e.message = message;
  e.source = "podworkerd";
  e.first_unix_s = e.last_unix_s = clock_.WallSeconds();
  events_(std::move(e));
}

}  // namespace nodelet::podworkerd
