// PodManager: the supervisor's half of the kubelet's sync loop. It reads the pod sources (the
// manifest directory and the manifest URL), turns each manifest into static pods (lib/pod),
// merges the sources' snapshots (PodConfig: ADD, UPDATE, DELETE, REMOVE), admits new pods
// (maxPods, CPU and memory requests against the node's allocatable; a rejected pod gets phase
// Failed with reason OutOfpods, OutOfcpu or OutOfmemory in statusd), and sends the whole
// desired set to podworkerd (podwork.fbs) whenever it changes, every housekeeping tick (2 s) until
// podworkerd acknowledges it, every minute after that, and when podworkerd or volumed (re)starts:
// level-triggered, so nothing lost in a crash stays lost.
//
// Runs on the supervisor's EventLoop: Start() registers the sockets to podworkerd and volumed and
// the manifest directory's inotify fd there, and the URL source's thread posts its snapshots to
// it. The owner calls Tick() after each iteration and wakes the loop at NextTick().
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "lib/common/clock.h"
#include "lib/common/rfc3339.h"
#include "lib/etcd/etcd_client.h"
#include "lib/ipc/codec.h"
#include "lib/ipc/sockets.h"
#include "lib/pod/config_documents.h"
#include "lib/pod/pod.h"
#include "lib/service/event_loop.h"
#include "lib/status/status_client.h"
#include "supervisor/manifest_book.h"
#include "supervisor/pod_config.h"
#include "supervisor/service_control.h"
#include "supervisor/sources/etcd_source.h"
#include "supervisor/sources/manifest_dir_source.h"
#include "supervisor/sources/manifest_url_source.h"

namespace nodelet::ipc::podwork {
struct WorkAck;
}  // namespace nodelet::ipc::podwork

namespace nodelet::supervisor {

struct NodeResources {
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
};

// The node's capacity: the online CPUs and MemTotal. Allocatable equals capacity (no reserved
// resources yet).
NodeResources ReadNodeCapacity();

struct AdmissionResult {
  bool admitted = true;
  std::string reason;   // SysctlForbidden, AppArmor, OutOfpods, OutOfcpu, OutOfmemory
  std::string message;  // the kubelet's wording
};

// Whether this kernel enforces AppArmor (/sys/module/apparmor/parameters/enabled is Y).
bool AppArmorEnabled();

// The kubelet's admission checks that look at the pod alone, before its resources are counted:
// sysctls outside the safe set and --allowed-unsafe-sysctls (SysctlForbidden), and AppArmor
// profiles on a kernel without AppArmor (AppArmor).
AdmissionResult AdmitSecurity(const pod::Pod& pod, const std::vector<std::string>& unsafe_sysctls,
                              bool apparmor_enabled);

// The kubelet's admission for a new pod against those already admitted.
AdmissionResult Admit(const pod::Pod& pod, const std::vector<const pod::Pod*>& admitted,
                      int max_pods, const NodeResources& allocatable);

struct PodManagerOptions {
  std::string run_dir;
  std::string manifest_dir;     // --pod-manifest-path; empty: none
  std::string manifest_url;     // --manifest-url; empty: none
  std::string manifest_url_ca;  // --manifest-url-ca: PEM bundle for an https URL
  std::chrono::milliseconds manifest_url_period{20000};                   // --http-check-frequency
  std::vector<std::pair<std::string, std::string>> manifest_url_headers;  // --manifest-url-header
  // The fleet's etcd source (--etcd-endpoints and the TLS flags); nullopt: none.
  std::optional<etcd::ClientOptions> etcd;
  std::string etcd_prefix = "/nodelet/v1";  // --etcd-prefix
  std::string etcd_cache_file;              // the source's last snapshot (ROOT-DIR/etcd-pods.json)
  std::string node_name;
  int max_pods = 110;
  std::vector<std::string> allowed_unsafe_sysctls;  // --allowed-unsafe-sysctls
  std::optional<bool> apparmor;  // whether the kernel enforces AppArmor; default: AppArmorEnabled()
  std::optional<NodeResources> allocatable;  // default: ReadNodeCapacity()
  // How soon the desired set goes again while podworkerd has not acknowledged its generation
  // (or statuses and events wait for statusd).
  std::chrono::milliseconds housekeeping{2000};
  // How often an acknowledged, unchanged set goes again: a safety net only (the kubelet's
  // --sync-frequency). A change goes at once, and a podworkerd or volumed that (re)starts says
  // hello and is sent the set then.
  std::chrono::milliseconds resync{60000};
  // The eviction manager's admission (node pressure), asked after the other checks pass; may be
  // empty.
  std::function<AdmissionResult(const pod::Pod&)> admit_under_pressure;
};

// An eviction decided by the eviction manager: podworkerd kills the pod for good.
struct PodEviction {
  std::string message;  // the Evicted status's
  int64_t grace_seconds = 0;
  bool operator==(const PodEviction&) const = default;
};

class PodManager : public ManifestsView {
 public:
  // `loop` must outlive the manager.
  PodManager(ipc::Context& ctx, EventLoop& loop, const Clock& clock, PodManagerOptions options);
  ~PodManager() override;
  // Starts the sources, connects to podworkerd and volumed, and registers on the loop.
  Status Start();
  // Re-reads the manifest directory when its resync is due and sends the desired set when it
  // changed or the housekeeping period passed.
  void Tick();
  // Queues a node event (pod uid "node") for statusd; sent with the next housekeeping, never
  // from here (statusd may be the service that just restarted). At most 100 wait.
  void RecordNodeEvent(status::PodEvent event);
  MonoTime NextTick() const;
  // podworkerd or volumed said hello: send the desired set at once.
  void OnPodworkerdReady();
  // A reloaded configuration's manifest sources (manifest_dir, manifest_url and the URL's CA,
  // period and headers of `next`; nothing else of it is read). A source whose settings changed
  // is started again with the new ones and its pods become those of its first read (the manifest
  // directory's at once, the URL's when it is fetched: until then its pods stay); a source
  // removed has its pods removed. An error (a new source that does not start) changes nothing.
  // Returns what changed, for the log: "file", "http".
  Result<std::vector<std::string>> ReconfigureSources(const PodManagerOptions& next);

  // Evicts an admitted pod (or re-applies a recorded eviction): sent to podworkerd with every
  // desired set while the pod is desired. A pod not (yet) admitted keeps the mark for when it
  // is.
  void Evict(const std::string& uid, PodEviction eviction);
  const std::map<std::string, PodEviction>& evictions() const { return evictions_; }
  // Drops the marks of pods no source has any more (their records may go).
  std::set<std::string> ForgetGoneEvictions();
  // Asks podworkerd for an immediate container and image garbage collection.
  void RequestReclaim();
  const std::map<std::string, std::shared_ptr<const pod::Pod>>& admitted() const {
    return admitted_;
  }
  bool sources_ready() const;
  // The pods statusd holds in a terminal phase (Succeeded, Failed); empty when it is away.
  std::set<std::string> TerminalPods();
  // The pods statusd holds as rejected at admission (Failed with an admission reason), by uid;
  // nullopt when statusd does not answer.
  std::optional<std::map<std::string, std::string>> RejectedPods();

  size_t desired() const { return admitted_.size(); }
  size_t rejected() const { return rejected_.size(); }
  uint64_t generation() const { return generation_; }
  uint64_t acked_generation() const { return acked_; }
  // podworkerd has reported a complete set of the pods whose containers may exist.
  bool in_use_known() const { return in_use_complete_; }
  // What each manifest of each source became (`nodeletctl manifests`): its pods and whether
  // each was admitted, or why it was rejected; and each source's last failure.
  ManifestReport Manifests() const override;
  // Failed reads of each source, by (source, reason): nodelet_pod_source_failures_total.
  std::map<std::pair<std::string, std::string>, uint64_t> source_failures() const {
    return config_ ? config_->failures()
                   : std::map<std::pair<std::string, std::string>, uint64_t>{};
  }

 private:
  // A source or a reply socket has something: drains the replies, takes the sources' new
  // snapshots, and sends the desired set if it changed.
  void OnReadable();
  // The sources as `options` configure them, started (pod_manager_sources.cc).
  Result<std::unique_ptr<ManifestDirSource>> StartDirSource(const std::string& dir);
  Result<std::unique_ptr<ManifestUrlSource>> StartUrlSource(const PodManagerOptions& options);
  // Watches dir_'s inotify descriptor on the loop (none: nothing).
  void WatchDirSource();
  void TakeSnapshot(const SourceSnapshot& snapshot);
  // The source could not be read: keep its pods; log and send a node event once per new reason.
  void SourceFailed(const std::string& source, const SourceFailure& failure);
  // Each new conflict between sources (a uid, or a namespace/name, served twice): a log line
  // and a PodSourceConflict node event naming both pods and the winner.
  void ReportConflicts();
  // A Warning event (IgnoredFields) naming the fields of the pod's manifest nodelet ignores;
  // once per pod and list.
  void WarnIgnoredFields(const std::string& origin, const pod::Pod& pod,
                         const std::vector<std::string>& fields);
  // Manifests (or documents of them) rejected for the first time since they last were: one log
  // line and one FailedToParseManifest node event each.
  void ManifestsRejected(const std::vector<std::string>& errors);
  // The status client, connected on first use; false when statusd cannot be reached now.
  bool ConnectStatusClient();
  void FlushEvents();

  // Applies a merge's changes; new pods are admitted in the order they were created.
  void Apply(const std::vector<PodChange<pod::Pod>>& changes);
  void Send();
  // Once per supervisor, before its first send: admitted pods that statusd holds as refused at
  // admission (by an earlier supervisor) go back to refused. False while statusd does not answer
  // (retried every 200 ms, for at most 10 s after Start: then pods are sent anyway).
  bool CheckRejectedBefore();
  void DrainReplies();
  void ReportRejected(const pod::Pod& pod, const AdmissionResult& why);
  void FlushRejected();
  // podworkerd's WorkAck: what it applied and the pods whose containers may still exist.
  void TakeAck(const ipc::podwork::WorkAck& ack);
  // The pods whose containers may exist, for volumed: podworkerd's last report and every pod
  // sent to it since. Meaningful only when in_use_complete_.
  std::set<std::string> InUse() const;
  // Removes from statusd the status of every pod that is neither desired, rejected nor in use
  // (deleted pods once podworkerd has stopped and forgotten them; rejected pods whose manifest
  // went), once every source has reported and podworkerd's report is complete.
  void CleanUpStatuses();

  ipc::Context& ctx_;
  EventLoop& loop_;
  const Clock& clock_;
  PodManagerOptions options_;
  NodeResources allocatable_;
  bool apparmor_enabled_ = false;
  std::unique_ptr<ManifestDirSource> dir_;
  std::unique_ptr<ManifestUrlSource> url_;
  // URL sources a reload replaced, their threads asked to stop; joined by the destructor.
  std::vector<std::unique_ptr<ManifestUrlSource>> retired_urls_;
  std::unique_ptr<EtcdPodSource> etcd_;
  std::unique_ptr<PodConfig<pod::Pod>> config_;
  std::unique_ptr<ipc::DealerClient> work_;
  std::unique_ptr<ipc::DealerClient> volumes_;
  // ConfigMaps and Secrets by source, then by kind/namespace/name.
  std::map<std::string, std::map<std::string, pod::ConfigData>> configs_;
  ipc::EnvelopeWriter envelope_;

  std::map<std::string, std::shared_ptr<const pod::Pod>> admitted_;  // uid -> pod
  std::map<std::string, std::string> source_of_;                     // uid -> "file"/"http"
  std::map<std::string, int64_t> first_seen_ms_;                     // uid
  std::map<std::string, uint64_t> admitted_seq_;  // uid -> the order it was admitted in
  uint64_t next_admitted_seq_ = 0;
  // Forgets an admitted pod: admitted_ and the maps kept beside it.
  void DropAdmitted(const std::string& uid);
  std::map<std::string, std::string> rejected_;   // uid -> reason
  std::map<std::string, PodEviction> evictions_;  // uid
  uint64_t reclaim_requests_ = 0;
  bool rejections_checked_ = false;
  MonoTime rejections_deadline_{};
  MonoTime rejections_retry_at_{};
  std::map<std::string, UnixTime> file_seen_;  // manifest -> first seen
  // By source: what its last snapshot read (SnapshotKey), once that snapshot was taken whole
  // (not a failure, not refused): the same bytes again are not parsed again.
  std::map<std::string, unsigned __int128> taken_;
  std::set<std::string> warned_ignored_;  // uid + "\n" + message of IgnoredFields events sent
  // What each manifest became, and which rejections were already reported.
  ManifestBook book_;
  // Rejections not yet recorded in statusd.
  std::map<std::string, std::pair<status::PodIdentity, status::PodStatus>> unreported_;
  std::vector<status::PodEvent> events_;  // node events not yet recorded in statusd
  std::unique_ptr<status::StatusClient> status_client_;
  uint64_t generation_ = 0, acked_ = 0;
  // podworkerd's last WorkAck: the pods in use, and whether that set is complete.
  std::set<std::string> podworkerd_in_use_;
  bool in_use_complete_ = false;
  // The admitted pods of each desired set sent whose generation podworkerd has not acked yet.
  std::map<uint64_t, std::set<std::string>> unacked_;
  // What the last successful status clean-up kept.
  std::optional<std::set<std::string>> status_keep_;
  bool dirty_ = true;
  MonoTime next_send_{};
  // What the URL source's posted callbacks check: still queued when the manager is gone, they
  // do nothing.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  // The loop's sources (declared last: removed before the sockets and sources they read). The
  // sockets and the inotify fd stay the same from Start() on, so they are registered once.
  EventLoop::Handle work_source_, volumes_source_, dir_source_;
};

}  // namespace nodelet::supervisor
