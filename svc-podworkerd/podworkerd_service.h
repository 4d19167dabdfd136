// nodelet-podworkerd's service: takes the desired pods from the supervisor (podwork.fbs, a
// ROUTER at kPodWorkerEndpoint), keeps a replica of plegd's pod cache (PlegMirror), runs one
// serialized worker per pod (PodLifecycle: syncing → terminating → terminated) on a thread pool
// through CRI (PodSyncer), kills orphaned runtime pods (the podKiller, once sources are ready),
// and sends each pod's status to statusd from its own thread (so a slow statusd never holds a
// worker back).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "lib/common/histogram.h"
#include "lib/cri/containerd_tasks.h"
#include "lib/cri/grpc_cri_client.h"
#include "lib/ipc/codec.h"
#include "lib/ipc/sockets.h"
#include "lib/pleg/pleg_mirror.h"
#include "lib/pod/pod.h"
#include "lib/service/service_runtime.h"
#include "lib/status/pod_status.h"
#include "podwork_generated.h"
#include "svc-podworkerd/counting_runtime.h"
#include "svc-podworkerd/garbage_collector.h"
#include "svc-podworkerd/image_puller.h"
#include "svc-podworkerd/orphan_shims.h"
#include "svc-podworkerd/pod_lifecycle.h"
#include "svc-podworkerd/pod_sync.h"
#include "svc-podworkerd/probe_manager.h"
#include "svc-podworkerd/status_sender.h"

namespace nodelet::podworkerd {

struct PodworkerdConfig {
  std::string runtime_endpoint = "unix:///run/containerd/containerd.sock";
  cri::CriTimeouts cri_timeouts;
  CrashLoopPolicy backoff;
  int workers = 16;
  int max_dead_per_container = 1;
  ImagePullerConfig image_pulls;
  // Node-wide dead-container cap and image GC (svc-podworkerd/garbage_collector.h).
  GarbageCollectionConfig gc;
  // A pod is synced at least this often even without events.
  std::chrono::milliseconds resync_period{10000};
  // How often shims of the runtime that nothing can reach are looked for (orphan_shims.h); an
  // orphan is ended at its second sighting, and at podworkerd's stop.
  std::chrono::milliseconds orphan_shim_period{std::chrono::seconds(10)};
};

class PodworkerdService : public Service {
 public:
  // Connects to the runtime, binds and connects podworkerd's sockets, starts the worker pool and
  // registers on ctx.loop.
  static Result<std::unique_ptr<PodworkerdService>> Create(ServiceContext& ctx,
                                                           PodworkerdConfig config);
  ~PodworkerdService() override;
  HealthReport Health() const override;
  CounterList Counters() const override;
  void Stop() override;

 private:
  struct Entry {
    std::shared_ptr<const pod::Pod> pod;  // null for an orphan found in the runtime
    std::string config_hash;
    bool desired = false;
    // The next sync waits for a relist that started after this (Clock::MonoNanos(), compared
    // with plegd's monotonic relist start: the same CLOCK_MONOTONIC in both processes).
    int64_t fresh_after_mono_ns = 0;
    MonoTime next_resync{};
    std::optional<MonoTime> retry_at;
    std::chrono::milliseconds error_backoff{0};
    bool finished = false;
    bool seeded = false;  // readiness carried over from statusd
    MonoTime created{};   // when this podworkerd first got the pod (pod start-up metric)
    bool start_recorded = false;
    // The last sync error, and every error logged since the last successful sync (each is
    // logged once until a sync succeeds).
    std::string last_error;
    std::set<std::string> logged_errors;
  };
  struct Done {
    std::string uid;
    WorkKind kind;
    SyncOutcome outcome;
    int64_t completed_mono_ns = 0;
    std::chrono::microseconds took{0};
    Status error = Status::Ok();
  };

  PodworkerdService(ServiceContext& ctx, PodworkerdConfig config);
  Status Start();
  void Register();
  // Syncs the pods whose runtime view changed (events, volumes, probes), then RunParked().
  void SyncChanged(const std::set<std::string>& changed);
  void HandleVolumeEvents();
  void OnTick();
  void HandleWork();
  void ApplyDesired(const ipc::podwork::DesiredPods& desired, std::string& error);
  void KillOrphans();
  void Update(PodUpdate<pod::Pod> update);
  void Dispatch(Work<pod::Pod> work);
  void RunParked();
  void Execute(Work<pod::Pod> work, std::optional<ipc::pleg::PodRecordT> record);
  void HandleDone(Done& d);
  void ReportStatus(const std::string& uid, const status::PodStatus& status);
  void EnsureProbes(const std::string& uid);
  void SeedReadiness(const std::string& uid);
  void Reply(const std::string& peer, flatbuffers::FlatBufferBuilder& fbb, ipc::podwork::Body type,
             flatbuffers::Offset<void> body);

  ServiceContext& ctx_;
  PodworkerdConfig config_;
  std::unique_ptr<cri::GrpcCriClient> cri_;
  std::unique_ptr<cri::ContainerdTasks> tasks_;
  std::unique_ptr<OrphanShimSweeper> orphan_shims_;  // when the runtime is containerd
  void SweepOrphanShims(bool final_sweep);  // repairs stuck tasks (lib/cri/containerd_tasks.h)
  std::unique_ptr<CountingRuntime> counting_;
  std::unique_ptr<ProbeManager> probes_;
  std::unique_ptr<PodSyncer> syncer_;
  std::unique_ptr<ipc::RouterServer> router_;
  std::unique_ptr<ipc::EnvelopeWriter> envelope_;
  std::unique_ptr<pleg::PlegMirror> mirror_;
  std::unique_ptr<StatusSender> status_;
  std::unique_ptr<ipc::Subscriber> volume_events_;
  StatvfsFsStats fs_stats_;
  std::unique_ptr<GarbageCollector> gc_;

  PodLifecycle<pod::Pod> lifecycle_;
  std::map<std::string, Entry> pods_;
  std::map<std::string, Work<pod::Pod>> parked_;  // syncs waiting for a fresh cache
  bool sources_ready_ = false;
  uint64_t generation_ = 0;

  // The worker pool.
  void WorkerLoop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;

  uint64_t containers_gc_ = 0;
  std::atomic<uint64_t> orphan_shims_ended_{0};  // written by the GC thread
  uint64_t syncs_ = 0, sync_errors_ = 0, kills_ = 0, orphans_killed_ = 0, bad_messages_ = 0;
  bool bad_logged_ = false;
  Histogram pod_start_{Histogram::StartupBuckets()};
  Histogram worker_duration_{Histogram::LatencyBuckets()};

  // Loop sources (the mirror registers its own). What plegd's messages changed, collected by the
  // mirror's callbacks and synced once the batch is applied.
  std::set<std::string> mirror_changed_;
  bool mirror_resynced_ = false;
  EventLoop::Handle router_source_, volume_source_;
  EventLoop::Timer tick_;
};

// Flags: --runtime-endpoint, --runtime-request-timeout, --crashloop-initial, --crashloop-max,
// --pod-workers, --resync-period, --serialize-image-pulls, --max-parallel-image-pulls,
// --image-pull-backoff-initial, --image-pull-backoff-max, --maximum-dead-containers-per-container,
// --maximum-dead-containers, --container-gc-period, --image-gc-high-threshold,
// --image-gc-low-threshold, --image-minimum-gc-age, --image-gc-period, --pod-infra-container-image,
// --orphan-shim-period.
ServiceSpec MakeSpec();

}  // namespace nodelet::podworkerd
