// StatsCollector: one sample of what the node and each of its pods use (lib/stats/usage.h), in
// the shape of the kubelet's Summary API (k8s.io/kubelet/pkg/apis/stats/v1alpha1), for
// /stats/summary, `nodeletctl top` and the usage metrics, and for the eviction manager.
//
// A pod's CPU and memory come from its pod cgroup and each container's from the container's
// cgroup inside it (containerd names it by the container's id under the pod's cgroup_parent);
// its ephemeral storage is its containers' logs (LOG-DIR/pods/NS_NAME_UID) plus its local
// volumes (emptyDir without medium Memory, under ROOT/pods/UID/volumes) plus, when the runtime
// reports it, its containers' writable layers.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lib/common/clock.h"
#include "lib/pod/eviction.h"
#include "lib/stats/usage.h"

namespace nodelet::cri {
class ImageService;
class RuntimeService;
}  // namespace nodelet::cri
namespace nodelet::pleg {
class PlegMirror;
}  // namespace nodelet::pleg
namespace nodelet::ipc::pleg {
struct PodRecordT;
}  // namespace nodelet::ipc::pleg

namespace nodelet::supervisor {

struct ContainerStats {
  std::string name;
  std::string id;
  int64_t start_time_unix_s = 0;
  std::optional<stats::CpuUsage> cpu;
  std::optional<stats::MemoryUsage> memory;
  std::optional<stats::DirUsage> logs;
  std::optional<stats::DirUsage> rootfs;  // writable layer, when known
};

struct VolumeStats {
  std::string name;
  stats::DirUsage used;
};

struct PodStats {
  std::string uid;
  std::string name;
  std::string namespace_name;
  int64_t start_time_unix_s = 0;
  std::optional<stats::CpuUsage> cpu;
  std::optional<stats::MemoryUsage> memory;
  std::optional<int64_t> processes;  // tasks in the pod's cgroup (pids.current)
  std::vector<ContainerStats> containers;
  std::vector<VolumeStats> volumes;  // local (disk-backed) volumes only
  // logs + local volumes + writable layers: the pod's use of nodefs.
  stats::DirUsage ephemeral_storage;
};

struct NodeStats {
  int64_t time_unix_ms = 0;  // when the sample was taken
  std::string node_name;
  std::optional<stats::CpuUsage> cpu;
  std::optional<stats::NodeMemory> memory;
  std::optional<stats::NodePids> pids;
  std::optional<stats::FsStats> nodefs;   // the filesystem of --root-dir
  std::optional<stats::FsStats> imagefs;  // the runtime's image filesystem (CRI ImageFsInfo)
  bool dedicated_image_fs = false;        // imagefs is not nodefs's filesystem
  // False in a node-only sample (StatsSource::SampleNode): `pods` is then empty because no pod
  // was read, not because there is none.
  bool pods_sampled = true;
  std::vector<PodStats> pods;
};

// The part of a pod's disk use that `signal` ranks it by, as the kubelet's buildSignalToRankFunc:
// on a node whose image filesystem is nodefs's, all of it (writable layers, logs, local volumes)
// for every disk signal; with a dedicated image filesystem, nodefs signals count the logs and
// local volumes only, imagefs signals the writable layers only.
stats::DirUsage PodDiskUseFor(pod::EvictionSignal signal, bool dedicated_image_fs,
                              const PodStats& pod);

// The source of samples. Implementations must be callable from any thread.
class StatsSource {
 public:
  virtual ~StatsSource() = default;
  virtual NodeStats Sample() = 0;
  // The node's own figures only (CPU, memory, PIDs, the filesystems), which the eviction
  // thresholds are judged on: no pod's cgroup or directory is read (pods_sampled false). A
  // source without a cheaper way gives a whole sample.
  virtual NodeStats SampleNode() { return Sample(); }
};

// A pod as the runtime runs it: what StatsCollector samples.
struct PodRef {
  struct Container {
    std::string name;
    std::string id;
    int64_t start_time_unix_s = 0;
  };
  std::string uid;
  std::string name;
  std::string namespace_name;
  int64_t start_time_unix_s = 0;
  std::vector<Container> containers;  // the running ones
};

// The pods to sample from plegd's records (the supervisor's PlegMirror): nodelet's own pods (not
// foreign ones) that have a ready sandbox or a running container, with their running
// containers. A pod's start time is its newest sandbox's creation.
std::vector<PodRef> PodRefsFromPleg(const std::map<std::string, ipc::pleg::PodRecordT>& records);

struct StatsCollectorOptions {
  std::string node_name;
  std::string root_dir = "/var/lib/nodelet";  // --root-dir: nodefs, ROOT/pods/UID/volumes
  std::string log_dir = "/var/log/nodelet";   // --log-dir: LOG-DIR/pods/NS_NAME_UID
  std::string cgroup_root = "/";              // --cgroup-root
  bool cgroup_systemd = false;                // --cgroup-driver systemd: slice names
  std::string cgroup_fs_root = "/sys/fs/cgroup";
  std::string proc = "/proc";
  // The walks of a sample (pod log directories, local volumes, etc-hosts) are bounded: each
  // looks at most `max_walk_entries` entries (then reports what it counted, a lower bound), all
  // of one sample together start no walk past `max_sample_entries` (the rest keep the figure of
  // their last walk and go first next time), and a path is walked again only after
  // `walk_period` (between, its last figure is reported).
  int64_t max_walk_entries = 100000;
  int64_t max_sample_entries = 500000;
  std::chrono::milliseconds walk_period{10000};
};

// Samples the node and the pods of the last SetPods from the kernel (lib/stats), the runtime's
// image filesystem through CRI ImageFsInfo (none without `images`; its answer kept for
// walk_period), the containers' writable layers through CRI ListContainerStats (none without
// `runtime`; kept for walk_period), and the directories above.
// Callable from any thread; samples are taken one at a time.
class StatsCollector : public StatsSource {
 public:
  StatsCollector(const Clock& clock, StatsCollectorOptions options,
                 cri::ImageService* images = nullptr, cri::RuntimeService* runtime = nullptr);
  ~StatsCollector() override;
  StatsCollector(const StatsCollector&) = delete;
  StatsCollector& operator=(const StatsCollector&) = delete;

  // Replaces the pods to sample (any thread).
  void SetPods(std::vector<PodRef> pods);
  // SetPods from the mirror when it heard from plegd since the last call; on the mirror's
  // (the loop's) thread, cheap when nothing changed.
  void UpdateFromPleg(const pleg::PlegMirror& mirror);
  NodeStats Sample() override;
  NodeStats SampleNode() override;

  // Walks a limit cut short, and walks postponed to a later sample, since the start.
  uint64_t truncated_walks() const;
  uint64_t deferred_walks() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nodelet::supervisor
