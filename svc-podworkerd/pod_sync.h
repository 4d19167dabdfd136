// PodSyncer: one pod's sync, termination and status, through CRI (the kubelet's
// kuberuntime_manager SyncPod / KillPod and its computePodActions, in one class).
//
// SyncPod compares the pod's spec with plegd's record of it (the pod cache entry, never older
// than the pod's last sync) and acts: a new sandbox when there is no ready one (stopping what
// still runs of the old one), init containers one at a time in order, then every app
// container; a running container whose spec hash changed is restarted; an exited one is
// restarted per restartPolicy under crash-loop backoff; images per imagePullPolicy (ImagePuller).
// It returns the v1 PodStatus to report and whether the pod is finished for good.
//
// Thread-safe: pod workers call it from several threads, one pod per thread at a time.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "lib/common/clock.h"
#include "lib/cri/runtime_service.h"
#include "lib/pod/pod.h"
#include "lib/status/pod_status.h"
#include "lib/volume/volume_client.h"
#include "pleg_generated.h"
#include "svc-podworkerd/container_env.h"
#include "svc-podworkerd/crash_loop_backoff.h"
#include "svc-podworkerd/cri_configs.h"
#include "svc-podworkerd/cut_starts.h"
#include "svc-podworkerd/image_puller.h"
#include "svc-podworkerd/pod_cgroups.h"
#include "svc-podworkerd/pod_dns.h"
#include "svc-podworkerd/probe_manager.h"
#include "svc-podworkerd/sandbox_decision.h"

namespace nodelet::podworkerd {

// An event's message at most (cut on a character boundary).
inline constexpr size_t kMaxEventMessageBytes = 4096;

struct SyncOutcome {
  status::PodStatus status;
  // Every container exited and none will be restarted: the pod is done (Succeeded/Failed).
  bool pod_finished = false;
  // The earliest time a resync can make progress (a crash-loop or image backoff expiring).
  std::optional<MonoTime> retry_at;
  // The sync changed the runtime (created, started or stopped something): the next sync must
  // wait for a pod cache newer than this one.
  bool changed_runtime = false;
  // What failed, for the log ("" when nothing did).
  std::string error;
  // Events for statusd (Created, Started, Killing, BackOff, Pulling, ...).
  std::vector<status::PodEvent> events;
  // Dead containers removed by garbage collection in this sync.
  int containers_removed = 0;
  // Container starts this sync attempted, by type ("container", "init_container"), and those
  // that failed, by type and the kubelet's code (the waiting reason: ErrImagePull,
  // CreateContainerConfigError, CreateContainerError, RunContainerError, ...): the kubelet's
  // kubelet_started_containers_total and kubelet_started_containers_errors_total.
  std::map<std::string, int> container_starts;
  std::map<std::pair<std::string, std::string>, int> container_start_errors;
};

using volume::PodVolumeSet;
// Asks volumed (from a worker thread, with a deadline).
using VolumeLookup = std::function<Result<PodVolumeSet>(const std::string& pod_uid)>;

class PodSyncer {
 public:
  PodSyncer(cri::RuntimeService& runtime, cri::ImageService& images, const Clock& clock,
            CrashLoopPolicy backoff, std::string log_dir, VolumeLookup volumes = nullptr,
            ProbeManager* probes = nullptr);

  SyncOutcome SyncPod(const pod::Pod& pod, const ipc::pleg::PodRecordT* record);

  // Stops every container of the pod with `grace_seconds` (SIGTERM, SIGKILL after it; the
  // containers in parallel; negative: each container's own grace period as stamped on it at
  // creation, for orphans), then its sandboxes. Reads the runtime directly (by the pod UID
  // label), so it works while plegd is down. Idempotent.
  // Each running container's preStop hook runs first, inside its grace period
  // (lifecycle_hooks.h); a hook that failed is reported in `hook_failures` (the container is
  // stopped all the same).
  Status KillPod(const std::string& uid, int64_t grace_seconds,
                 std::vector<std::string>* hook_failures = nullptr);
  // Removes the pod's sandboxes and containers (after KillPod). Idempotent.
  Status RemovePod(const std::string& uid);

  // The status of a pod from the record alone (no action), e.g. after a kill.
  status::PodStatus BuildStatus(const pod::Pod& pod, const ipc::pleg::PodRecordT* record,
                                bool terminal) const;

  void ForgetPod(const std::string& uid);
  // The pod's start time (Unix seconds) as statusd stored it (status.startTime, kept from the
  // first status on), for activeDeadlineSeconds across restarts of podworkerd. Without it the
  // start time is the oldest sandbox in the record, else the first sync in this incarnation.
  void SeedStartTime(const std::string& uid, int64_t unix_s);
  // The supervisor's eviction manager evicted the pod (DesiredPod.eviction_message): its next
  // sync kills it with `grace_seconds` and it ends Failed, reason Evicted, with `message`, for
  // good. Kept until ForgetPod; a later mark of the same pod changes nothing.
  void MarkEvicted(const std::string& uid, const std::string& message, int64_t grace_seconds);
  // Dead containers kept per container of a pod (the kubelet's MaxPerPodContainer, 1).
  void set_max_dead_per_container(int n) { max_dead_per_container_ = n; }
  // Image pulls: serialization, parallelism, back-off (before the first sync).
  void set_image_puller_config(const ImagePullerConfig& config) {
    puller_ = std::make_unique<ImagePuller>(images_, clock_, config);
  }
  const ImagePuller& image_puller() const { return *puller_; }
  // The pod is being stopped: its worker stops waiting for an image pull (now, or when its
  // sync reaches one), and a pull no one else waits for is cancelled. Until ForgetPod. Any
  // thread.
  void CancelPulls(const std::string& uid);
  // podworkerd is stopping: every pull ends (ImagePuller::CancelAll).
  void CancelAllPulls() {
    if (puller_) puller_->CancelAll();
  }
  // The image pulls' durations (ImagePuller::ExportPullDurations); nothing before the puller is
  // made.
  void ExportPullDurations(std::vector<std::pair<std::string, uint64_t>>& out) const {
    if (puller_) puller_->ExportPullDurations(out);
  }
  // The ConfigMaps and Secrets of the latest desired set (env valueFrom and envFrom read them
  // when a container is created). Any thread.
  void SetConfigObjects(std::shared_ptr<const EnvSources> objects);
  // Where events go that must not wait for the end of the sync (the Pulling event of a pull that
  // may take long); without it they come with the sync's outcome. Called from worker threads.
  // A status to send while a sync is still running, from its worker thread: the pod's status
  // when an image pull begins (the container waits in ContainerCreating while the pull runs, as
  // the kubelet shows it).
  void set_progress_status(std::function<void(const pod::Pod&, status::PodStatus)> send) {
    progress_status_ = std::move(send);
  }
  void set_progress_events(std::function<void(std::vector<status::PodEvent>)> send) {
    progress_events_ = std::move(send);
  }
  // nodelet's root directory, where subPath mounts are staged (before the first sync).
  // Also where ephemeral storage is measured for resourceFieldRef (as volumed measures it).
  // Pod cgroups (pod_cgroups.h); disabled unless set (before the first sync).
  void set_pod_cgroups(PodCgroupConfig config) { pod_cgroups_ = std::move(config); }
  // Also where the ledger of cut starts is kept (ROOT/podworkerd/cut-starts, cut_starts.h).
  void set_root_dir(std::string dir);

  // The node's IP (lib/common/node_ip.h): every pod's hostIP and the podIP of host-network
  // pods (before the first sync).
  void set_node_ip(std::string ip) { node_ip_ = std::move(ip); }
  const std::string& node_ip() const { return node_ip_; }
  // The node's DNS settings (--cluster-dns, --cluster-domain, --resolv-conf), before the first
  // sync.
  void set_dns_settings(NodeDnsSettings settings) { dns_ = std::move(settings); }
  // The node's hosts file, copied into hostNetwork pods' /etc/hosts (tests point it elsewhere).
  void set_node_hosts_file(std::string path) { node_hosts_file_ = std::move(path); }

  // An event about `pod`, stamped now (the wall clock), from podworkerd; the message is made
  // valid UTF-8 and cut to kMaxEventMessageBytes.
  status::PodEvent MakeEvent(const pod::Pod& pod, const std::string& type,
                             const std::string& reason, const std::string& message) const;

 private:
  struct Waiting {
    std::string reason;
    std::string message;
  };
  using WaitingMap = std::map<std::string, Waiting>;

  // The container's image per its pull policy (through puller_); fills `waiting` and the
  // events.
  Status EnsureImage(const pod::Pod& pod, const pod::Container& c, WaitingMap& waiting,
                     SyncOutcome& out);
  // Makes the pod's new sandbox per `decision` (killing what runs first when it replaces one)
  // and returns its id; `decision.attempt` ends as the attempt used. FAILED_PRECONDITION when
  // the runtime has a ready sandbox that plegd's record does not show yet (wait, not a failure).
  Result<std::string> CreateSandbox(const pod::Pod& pod, const ipc::pleg::PodRecordT* rec,
                                    SandboxDecision& decision, int64_t grace, SyncOutcome& out);
  // Creates and starts `c` in the sandbox; `previous` is its last instance (for the restart
  // count and the backoff). Fills `waiting` on failure.
  // Counts the attempt (and its failure, by the waiting reason it left) in `out`, around
  // CreateAndStart.
  bool StartContainer(const pod::Pod& pod, const pod::Container& c, const std::string& sandbox_id,
                      const cri::v1::PodSandboxConfig& sandbox_config,
                      const ipc::pleg::ContainerRecordT* previous, uint32_t next_attempt,
                      const std::map<std::string, std::string>& volume_paths, WaitingMap& waiting,
                      SyncOutcome& out);
  bool CreateAndStart(const pod::Pod& pod, const pod::Container& c, const std::string& sandbox_id,
                      const cri::v1::PodSandboxConfig& sandbox_config,
                      const ipc::pleg::ContainerRecordT* previous, uint32_t next_attempt,
                      const std::map<std::string, std::string>& volume_paths, WaitingMap& waiting,
                      SyncOutcome& out);
  // True (and `waiting` filled) when an exited container must wait before its restart.
  bool InBackoff(const pod::Pod& pod, const pod::Container& c,
                 const ipc::pleg::ContainerRecordT& exited, WaitingMap& waiting, SyncOutcome& out);
  status::PodStatus MakeStatus(const pod::Pod& pod, const ipc::pleg::PodRecordT* record,
                               const WaitingMap& waiting, bool terminal) const;
  // An exited instance's termination message (termination_message.h) appended to its
  // terminated state's message.
  void AddTerminationMessage(const pod::Pod& pod, const pod::Container& c,
                             const ipc::pleg::ContainerRecordT& record,
                             status::ContainerState& state) const;
  SyncOutcome SyncPodOnce(const pod::Pod& pod, const ipc::pleg::PodRecordT* record);
  // activeDeadlineSeconds: the pod's start time (see SeedStartTime), and the pod failed for good
  // once it is past its deadline (its running containers stopped with the grace period).
  int64_t StartTime(const pod::Pod& pod, const ipc::pleg::PodRecordT* record);
  SyncOutcome FailDeadlineExceeded(const pod::Pod& pod, const ipc::pleg::PodRecordT* record,
                                   int64_t grace);
  bool DeadlineExceeded(const std::string& uid) const;
  struct Eviction {
    std::string message;
    int64_t grace_seconds = 0;
    int64_t at_unix_s = 0;  // when podworkerd learnt of it
    bool reported = false;  // its Evicted event was made
  };
  std::optional<Eviction> EvictionOf(const std::string& uid) const;
  SyncOutcome FailEvicted(const pod::Pod& pod, const ipc::pleg::PodRecordT* record);
  struct StopResult {
    Status status;
    std::string hook_error;  // the preStop hook failed: why ("" when it ran fine or there is none)
  };
  // The kubelet's killContainer: the preStop hook stamped on the container (read from
  // `annotations`, or from the runtime when null) while it runs, within `grace`, then
  // StopContainer with the grace left (at least kMinimumGraceAfterPreStop). `host` gives the
  // pod's IP for an httpGet hook.
  StopResult StopContainerGracefully(
      const std::string& id, const std::string& name,
      const google::protobuf::Map<std::string, std::string>* annotations, int64_t grace,
      const std::function<std::string()>& host);
  // StopContainerGracefully for a container of `pod` during a sync, with its FailedPreStopHook
  // event.
  void StopForSync(const pod::Pod& pod, const std::string& id, const std::string& name,
                   int64_t grace, const std::string& sandbox_id, SyncOutcome& out);
  // Where httpGet hooks go: the pod's IP as its sandbox reports it, 127.0.0.1 for the node's
  // network or when unknown (docs/network.md: probes and hooks of host-network pods).
  std::string SandboxHost(const std::string& sandbox_id);
  // The sandbox's IPs (CRI PodSandboxStatus: ip, then additional_ips); none when it has none.
  Result<std::vector<std::string>> SandboxIps(const std::string& sandbox_id);
  // Why the runtime's network is not ready (CRI Status NetworkReady, the kubelet's message),
  // "" when it is; asked at most once a second, an error of the call itself counts as ready
  // (the sandbox call that follows reports the runtime's state better).
  std::string NetworkError();
  // The kubelet's makeHostsMount: writes ROOT/pods/UID/etc-hosts for the pod (its sandbox's
  // IPs, from `sandbox_ips`, and hostname, or the node's hosts file with the node's network;
  // then hostAliases) and returns the mount of it at /etc/hosts; nullopt when the container
  // mounts its own /etc/hosts or the sandbox has no IP (as the kubelet, which mounts none then).
  Result<std::optional<cri::v1::Mount>> EtcHostsMount(
      const pod::Pod& pod, const pod::Container& c,
      const std::function<const Result<std::vector<std::string>>&()>& sandbox_ips);
  std::shared_ptr<const EnvSources> ConfigObjects() const;
  // A StartContainer that failed because the runtime went away or was cut off mid-call
  // (UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED), or whose retry found the task the cut call had
  // made (ALREADY_EXISTS): that container's exit without ever running is not a run (it is
  // started again, also under restartPolicy Never), as with containerd's "context canceled".
  void NoteCutStart(const std::string& id, const Status& failure);
  // MakeSandboxConfig with the pod's cgroup as the cgroup parent when pod cgroups are on (the
  // same config goes with every CreateContainer, which is where containerd reads it).
  cri::v1::PodSandboxConfig SandboxConfig(const pod::Pod& pod, uint32_t attempt,
                                          const SandboxNetwork* network) const;
  std::set<std::string> CutStarts() const;

  cri::RuntimeService& runtime_;
  cri::ImageService& images_;
  const Clock& clock_;
  std::string log_dir_;
  std::string root_dir_;
  std::string node_ip_ = "127.0.0.1";
  std::mutex network_mu_;
  std::optional<MonoTime> network_checked_;
  std::string network_error_;
  NodeDnsSettings dns_;
  std::string node_hosts_file_ = "/etc/hosts";
  VolumeLookup volumes_;
  ProbeManager* probes_ = nullptr;
  std::mutex backoff_mu_;
  CrashLoopBackoff backoff_;
  std::unique_ptr<ImagePuller> puller_;
  // The pod's pulls' canceller (made on first use).
  std::shared_ptr<cri::CallCancel> PullCancel(const std::string& uid);
  // The record of the pod the calling worker thread is syncing (set by SyncPodOnce), for the
  // status sent while a pull runs.
  static thread_local const ipc::pleg::PodRecordT* syncing_record_;
  std::mutex pull_cancel_mu_;
  std::map<std::string, std::shared_ptr<cri::CallCancel>> pull_cancels_;  // by pod uid
  int max_dead_per_container_ = 1;
  // Containers whose OOM kill was already reported (one event each).
  std::set<std::string> oom_reported_;
  mutable std::mutex deadline_mu_;
  std::map<std::string, int64_t> start_times_;  // by pod uid, Unix seconds
  std::set<std::string> deadline_exceeded_;     // pods failed with DeadlineExceeded
  std::map<std::string, Eviction> evicted_;     // by pod uid
  std::function<void(std::vector<status::PodEvent>)> progress_events_;
  std::function<void(const pod::Pod&, status::PodStatus)> progress_status_;
  CutStartLedger cut_starts_;
  PodCgroupConfig pod_cgroups_;
  mutable std::mutex env_mu_;
  std::shared_ptr<const EnvSources> env_sources_;
  pod::NodeAllocatable node_ = pod::ReadNodeAllocatable();
};

}  // namespace nodelet::podworkerd
