// nodelet-podworkerd's service: takes the desired pods from the supervisor (podwork.fbs, a
// ROUTER at kPodWorkerEndpoint), keeps a replica of plegd's pod cache (PlegMirror), runs one
// serialized worker per pod (PodDispatcher and its PodLifecycle: syncing → terminating →
// terminated) on a thread pool (WorkerPool) through CRI (PodSyncer), kills orphaned runtime pods
// (the podKiller, once sources are ready), and sends each pod's status to statusd from its own
// thread (so a slow statusd never holds a worker back).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "lib/cri/containerd_tasks.h"
#include "lib/cri/grpc_cri_client.h"
#include "lib/ipc/codec.h"
#include "lib/ipc/message.h"
#include "lib/ipc/sockets.h"
#include "lib/pleg/pleg_mirror.h"
#include "lib/pod/pod.h"
#include "lib/service/service_runtime.h"
#include "lib/status/pod_status.h"
#include "lib/status/status_client.h"
#include "podwork_generated.h"
#include "svc-podworkerd/container_log_manager.h"
#include "svc-podworkerd/counting_runtime.h"
#include "svc-podworkerd/garbage_collector.h"
#include "svc-podworkerd/image_puller.h"
#include "svc-podworkerd/orphan_shims.h"
#include "svc-podworkerd/pod_dispatcher.h"
#include "svc-podworkerd/pod_dns.h"
#include "svc-podworkerd/pod_lifecycle.h"
#include "svc-podworkerd/pod_sync.h"
#include "svc-podworkerd/probe_manager.h"
#include "svc-podworkerd/status_sender.h"
#include "svc-podworkerd/stream_sessions.h"
#include "svc-podworkerd/worker_pool.h"

namespace nodelet::podworkerd {

struct PodworkerdConfig {
  // The pods' DNS: --cluster-dns, --cluster-domain, --resolv-conf.
  NodeDnsSettings dns;
  std::string runtime_endpoint = "unix:///run/containerd/containerd.sock";
  cri::CriTimeouts cri_timeouts;
  CrashLoopPolicy backoff;
  int workers = 16;
  int max_dead_per_container = 1;
  // --node-ip: checked and, when empty, chosen (lib/common/node_ip.h) at creation.
  std::string node_ip;
  ImagePullerConfig image_pulls;
  // Node-wide dead-container cap and image GC (svc-podworkerd/garbage_collector.h).
  GarbageCollectionConfig gc;
  // A pod is synced at least this often even without events.
  std::chrono::milliseconds resync_period{60000};
  // How often shims of the runtime that nothing can reach are looked for (orphan_shims.h); an
  // orphan is ended at its second sighting, and at podworkerd's stop.
  // Also the pod cgroup sweep's. A minute: each sweep reads every process's /proc entry and
  // every pod cgroup, and what it finds is rare (docs/runtime.md, "Orphaned shims").
  std::chrono::milliseconds orphan_shim_period{std::chrono::minutes(1)};
  // Container log rotation: --container-log-max-size, --container-log-max-files,
  // --container-log-monitor-interval (container_log_manager.h).
  ContainerLogPolicy container_logs;
  PodCgroupConfig pod_cgroups;           // --cgroups-per-qos, --cgroup-root (pod_cgroups.h)
  bool enforce_pods_allocatable = true;  // --enforce-node-allocatable pods
  std::string system_reserved;           // --system-reserved, --kube-reserved
  std::string kube_reserved;
};

// The container runtime podworkerd drives: CRI's two services and, when the runtime is
// containerd, its task service (repairs of stuck tasks, ends shims nothing reaches). The
// referenced objects outlive the service; `owner` keeps them alive when the service owns them.
struct PodworkerdRuntime {
  cri::RuntimeService* runtime = nullptr;
  cri::ImageService* images = nullptr;
  cri::ContainerdTasks* tasks = nullptr;  // optional
  std::shared_ptr<void> owner;
};

// The real runtime at config.runtime_endpoint: a GrpcCriClient, and containerd's task service
// when it answers there.
Result<PodworkerdRuntime> ConnectRuntime(const PodworkerdConfig& config, const Clock& clock);

// The pods of nodelet's (not foreign, not removed) with a container plegd's last relist shows
// as not exited (running, created or unknown): in use, whatever the dispatcher knows.
// The running containers of nodelet's pods in plegd's view (ids).
std::set<std::string> RunningContainers(const std::map<std::string, ipc::pleg::PodRecordT>& pods);
std::set<std::string> PodsWithLiveContainers(
    const std::map<std::string, ipc::pleg::PodRecordT>& pods);

class PodworkerdService : public Service {
 public:
  // Connects to the real runtime (ConnectRuntime), then as below.
  static Result<std::unique_ptr<PodworkerdService>> Create(ServiceContext& ctx,
                                                           PodworkerdConfig config);
  // Drives `runtime`; binds and connects podworkerd's sockets, starts the worker pool and
  // registers on ctx.loop.
  static Result<std::unique_ptr<PodworkerdService>> Create(ServiceContext& ctx,
                                                           PodworkerdConfig config,
                                                           PodworkerdRuntime runtime);
  ~PodworkerdService() override;
  HealthReport Health() const override;
  CounterList Counters() const override;
  void Stop() override;

 private:
  PodworkerdService(ServiceContext& ctx, PodworkerdConfig config, PodworkerdRuntime runtime);
  Status Start();
  void Register();
  void HandleVolumeEvents();
  void OnTick();
  // When the tick runs next: kTick away while work is parked or statuses wait to be sent, else
  // at the dispatcher's next retry or resync but at most kIdleTick away.
  MonoTime NextTickAt() const;
  // Pulls the tick in when something that just happened makes it due sooner.
  void WakeTick();
  void HandleWork();
  // Decodes the desired pods for the dispatcher; "" or what could not be decoded.
  std::string ApplyDesired(const ipc::podwork::DesiredPods& desired);
  // nodeletctl's exec, attach or port-forward: answers with the session's URL or why not.
  void HandleStreamRequest(const std::string& peer, const ipc::podwork::StreamRequest& request);
  // Runs a dispatched work item on a worker thread; its result is taken on the loop.
  void RunWork(DispatchedWork work);
  void EnsureProbes(const std::string& uid, const pod::Pod& pod);
  void SeedReadiness(const std::string& uid);
  void Reply(const std::string& peer, flatbuffers::FlatBufferBuilder& fbb, ipc::podwork::Body type,
             flatbuffers::Offset<void> body);
  // The pods whose containers may exist (the dispatcher's) or whose status is still to be sent.
  std::set<std::string> InUse() const;
  // WorkAck of `generation_` to `peer`, with the pods in use.
  void SendAck(const std::string& peer, const std::set<std::string>& in_use);
  // Tells the supervisor at once when the pods in use changed (the last one is what volumed and
  // the status clean-up go by).
  void ReportInUse();

  ServiceContext& ctx_;
  PodworkerdConfig config_;
  PodworkerdRuntime runtime_;
  cri::RuntimeService& cri_;
  cri::ContainerdTasks* tasks_;                      // null when the runtime is not containerd
  std::unique_ptr<OrphanShimSweeper> orphan_shims_;  // when the runtime is containerd
  void SweepOrphanShims(bool final_sweep);  // repairs stuck tasks (lib/cri/containerd_tasks.h)
  // The repairs of what containerd leaves (tasks and shims of removed sandboxes, cgroups of a
  // cancelled start, stuck tasks) and the orphan shim sweeper: podworkerd_host.cc.
  void InstallRuntimeRepairs();
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
  std::optional<uint64_t> reclaim_seen_;  // DesiredPods.reclaim_requests last seen
  // The burstable QoS cgroup's cpu requests as last written, and when to write them again.
  std::optional<int64_t> qos_burstable_milli_;
  MonoTime qos_next_update_{};
  bool qos_failed_ = false;
  std::unique_ptr<ContainerLogManager> container_logs_;  // when there is a log directory

  // The dispatcher's view of plegd's cache, and its effects, in terms of the pieces above.
  class MirrorView;
  class Effects;
  std::unique_ptr<MirrorView> mirror_view_;
  std::unique_ptr<Effects> effects_;
  std::unique_ptr<PodDispatcher> dispatcher_;
  uint64_t generation_ = 0;
  // The last desired set applied, by what identifies it (HandleWork).
  struct AppliedSet {
    uint64_t incarnation = 0;
    uint64_t generation = 0;
    bool sources_ready = false;
    uint64_t reclaim_requests = 0;
    bool operator==(const AppliedSet&) const = default;
  };
  std::optional<AppliedSet> applied_;
  uint64_t desired_unchanged_ = 0;      // desired sets skipped as already applied
  std::string work_peer_;               // the supervisor's routing id on the work socket
  std::set<std::string> acked_in_use_;  // the pods in use in the last WorkAck
  bool acked_complete_ = false;
  std::unique_ptr<WorkerPool> pool_;
  bool stopped_ = false;

  std::atomic<uint64_t> orphan_shims_ended_{0};  // written by the GC thread
  // The pod cgroup sweep (GC thread): the latest desired UIDs (none before the first set) and the
  // UIDs whose failed removal was already logged.
  void SweepPodCgroups();
  // The QoS cgroups' shares from the desired pods (pod_cgroups.h, EnsureQosCgroups).
  void UpdateQosCgroups(const std::vector<std::shared_ptr<const pod::Pod>>& pods,
                        const std::set<std::string>& evicted);
  // Writes the burstable QoS cgroup's shares when they change or a minute has passed.
  void WriteQosCgroups(int64_t burstable_cpu_requests_milli);
  // The kubepods cgroup's limits (pod_cgroups.h, KubepodsLimits), at start.
  Status EnforceKubepods(const std::string& root_dir);
  std::mutex cgroup_mu_;
  // SeedReadiness's client to statusd, shared by the worker threads under seed_mu_.
  std::mutex seed_mu_;
  std::unique_ptr<status::StatusClient> seed_client_;
  std::optional<std::set<std::string>> cgroup_desired_;
  std::set<std::string> cgroup_sweep_warned_;
  ipc::BadMessageCounter bad_messages_;
  // DesiredPods from a peer that is not the supervisor (refused; the first one logged).
  ipc::BadMessageCounter foreign_desired_;
  // Stream requests from a peer that is not the supervisor.
  ipc::BadMessageCounter foreign_streams_;

  // Loop sources (the mirror registers its own). What plegd's messages changed, collected by the
  // mirror's callbacks and synced once the batch is applied.
  std::set<std::string> mirror_changed_;
  bool mirror_resynced_ = false;
  EventLoop::Handle router_source_, volume_source_;
  EventLoop::Timer tick_;
  MonoTime tick_at_{};  // when tick_ is armed for
  // Something that may change the pods in use happened since ReportInUse last ran (WakeTick).
  bool in_use_stale_ = true;
  // Statuses were waiting to be sent when ReportInUse last ran: the set shrinks as they go.
  bool statuses_waiting_ = false;
  // Pods to ask plegd to relist alone (after this podworkerd changed them), sent together.
  std::set<std::string> relist_pending_;
  EventLoop::Timer relist_flush_;
  void FlushRelistRequests();
};

// Flags: --runtime-endpoint, --runtime-request-timeout, --crashloop-initial, --crashloop-max,
// --pod-workers, --resync-period, --serialize-image-pulls, --max-parallel-image-pulls,
// --image-pull-backoff-initial, --image-pull-backoff-max, --maximum-dead-containers-per-container,
// --maximum-dead-containers, --container-gc-period, --image-gc-high-threshold,
// --image-gc-low-threshold, --image-minimum-gc-age, --image-gc-period, --pod-infra-container-image,
// --orphan-shim-period.
ServiceSpec MakeSpec();

}  // namespace nodelet::podworkerd
