// nodelet-plegd's service: owns the PlegEngine (relists scheduled on the loop, runtime calls on
// its executors), the pod cache, the event publisher (PUB, sequenced) and the snapshot server
// (ROUTER), inside the shared service runtime (lib/service).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "lib/common/histogram.h"
#include "lib/cri/runtime_events.h"
#include "lib/ipc/codec.h"
#include "lib/ipc/message.h"
#include "lib/ipc/sockets.h"
#include "lib/service/service_runtime.h"
#include "svc-plegd/pleg_engine.h"
#include "svc-plegd/pod_cache.h"

namespace nodelet::plegd {

struct PlegdConfig {
  std::string runtime_endpoint = "unix:///run/containerd/containerd.sock";
  std::chrono::milliseconds relist_period{1000};
  std::chrono::milliseconds relist_threshold{180000};
  // Deadline of each status/list CRI call.
  std::chrono::milliseconds call_timeout{10000};
  int inspect_workers = 8;
  // Relist at once on each runtime event (containerd's event service), the period being the
  // safety net (docs/plegd.md, "Runtime events").
  bool runtime_events = true;
};

using RuntimeFactory =
    std::function<Result<std::unique_ptr<PlegRuntime>>(const PlegdConfig& config)>;

// The real runtime: CRI over gRPC at config.runtime_endpoint (does not connect yet).
Result<std::unique_ptr<PlegRuntime>> MakeCriPlegRuntime(const PlegdConfig& config);

class PlegdService : public Service {
 public:
  // Binds plegd's sockets, starts the engine and registers on ctx.loop.
  static Result<std::unique_ptr<PlegdService>> Create(ServiceContext& ctx, PlegdConfig config,
                                                      const RuntimeFactory& factory);
  ~PlegdService() override;
  HealthReport Health() const override;
  CounterList Counters() const override;
  void Stop() override;

 private:
  PlegdService(ServiceContext& ctx, PlegdConfig config);
  Status Start(const RuntimeFactory& factory);
  void Publish(flatbuffers::FlatBufferBuilder& fbb, ipc::pleg::Body type,
               flatbuffers::Offset<void> body);
  void HandleEngineOutput();
  void HandleSnapshotRequests();
  // podworkerd's RelistRequest: the pods relisted alone, now (no reply).
  Status HandleRelistRequest(const ipc::pleg::RelistRequest& request);
  static constexpr size_t kMaxRelistRequestPods = 1024;

  ServiceContext& ctx_;
  PlegdConfig config_;
  std::unique_ptr<PlegRuntime> runtime_;
  std::unique_ptr<PlegEngine> engine_;
  std::unique_ptr<cri::RuntimeEventWatcher> events_;  // null: relisting only
  std::unique_ptr<ipc::Publisher> publisher_;
  std::unique_ptr<ipc::RouterServer> snapshots_;
  std::unique_ptr<ipc::EnvelopeWriter> envelope_;
  PodCache cache_;
  uint64_t events_published_ = 0;
  uint64_t snapshots_served_ = 0;
  uint64_t relist_requests_ = 0;
  ipc::BadMessageCounter bad_requests_;
  // Updates over ipc::kPlegEvents' limit (subscribers resync from a snapshot instead).
  uint64_t publish_refused_ = 0;
  // Snapshots not sent: over kPlegSnapshots' reply limit, or the peer's queue full.
  uint64_t snapshot_send_failures_ = 0;
  bool publish_refused_logged_ = false;
  bool snapshot_too_large_logged_ = false;
  Histogram relist_duration_{Histogram::LatencyBuckets()};
  Histogram relist_interval_{{0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 5, 10, 30}};
  int64_t last_relist_started_ns_ = 0;       // wall clock: last_relist_unix_ms
  int64_t last_relist_started_mono_ns_ = 0;  // monotonic: the relist interval
  EventLoop::Handle snapshot_source_;
};

// Flags: --runtime-endpoint, --relist-period, --relist-threshold, --runtime-request-timeout.
// The default full relist period: 10 s when runtime events drive single-pod relists (the full
// relist is then the safety net, as the kubelet's evented PLEG keeps one), 1 s without them.
inline constexpr std::chrono::milliseconds kEventedRelistPeriod{10000};
inline constexpr std::chrono::milliseconds kRelistPeriod{1000};
ServiceSpec MakeSpec();

}  // namespace nodelet::plegd
