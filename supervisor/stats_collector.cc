#include "supervisor/stats_collector.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <utility>

#include "lib/common/logging.h"
#include "lib/common/safe_path.h"
#include "lib/common/unique_fd.h"
#include "lib/cri/runtime_service.h"
#include "lib/pleg/pleg_mirror.h"
#include "lib/service/cgroup_flags.h"

namespace nodelet::supervisor {
namespace {

constexpr char kEmptyDirPlugin[] = "kubernetes.io~empty-dir";

int64_t Seconds(int64_t ns) { return ns / 1000000000; }

// The emptyDir volumes of pod `uid` that live on the node's disk: the directories in
// ROOT/pods/UID/volumes/kubernetes.io~empty-dir that are on that directory's own filesystem. A
// medium Memory (tmpfs) volume is a mountpoint there and is left out: it is the pod's memory,
// not its disk. Each component is opened without following a link.
std::vector<std::pair<std::string, std::string>> LocalVolumes(const std::string& root_dir,
                                                              const std::string& uid) {
  std::vector<std::pair<std::string, std::string>> out;
  UniqueFd dir(open((root_dir + "/pods").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  for (const std::string& component : {uid, std::string("volumes"), std::string(kEmptyDirPlugin)}) {
    if (!dir.valid() || !JoinComponent("", component).ok()) return out;
    dir = UniqueFd(
        openat(dir.get(), component.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  }
  if (!dir.valid()) return out;
  struct stat parent {};
  if (fstat(dir.get(), &parent) != 0) return out;
  const std::string base = root_dir + "/pods/" + uid + "/volumes/" + kEmptyDirPlugin + "/";
  DIR* d = fdopendir(dir.get());
  if (d == nullptr) return out;
  (void)dir.release();
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st {};
    if (fstatat(dirfd(d), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!S_ISDIR(st.st_mode) || st.st_dev != parent.st_dev) continue;
    out.emplace_back(name, base + name);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

void Add(stats::DirUsage& total, const stats::DirUsage& more) {
  total.used_bytes += more.used_bytes;
  total.inodes_used += more.inodes_used;
}

}  // namespace

std::vector<PodRef> PodRefsFromPleg(const std::map<std::string, ipc::pleg::PodRecordT>& records) {
  std::vector<PodRef> out;
  for (const auto& [uid, record] : records) {
    if (record.foreign || record.removed || record.uid.empty()) continue;
    PodRef pod;
    pod.uid = record.uid;
    pod.name = record.name;
    pod.namespace_name = record.namespace_;
    bool ready = false;
    int64_t newest_sandbox_ns = 0;
    for (const auto& sb : record.sandboxes) {
      if (!sb) continue;
      if (sb->state == ipc::pleg::SandboxState::Ready) ready = true;
      newest_sandbox_ns = std::max(newest_sandbox_ns, sb->created_at_ns);
    }
    pod.start_time_unix_s = Seconds(newest_sandbox_ns);
    for (const auto& c : record.containers) {
      if (!c || c->state != ipc::pleg::ContainerState::Running) continue;
      pod.containers.push_back({c->name, c->id, Seconds(c->started_at_ns)});
    }
    if (!ready && pod.containers.empty()) continue;
    std::sort(pod.containers.begin(), pod.containers.end(),
              [](const auto& a, const auto& b) { return a.name < b.name; });
    out.push_back(std::move(pod));
  }
  return out;
}

struct StatsCollector::Impl {
  // The last walk of a path, and what it found under each of its top-level entries.
  struct Walk {
    stats::DirMeasurement measured;
    std::map<std::string, stats::DirUsage> by_child;
    MonoTime at{};
    bool done = false;
    bool warned = false;  // its truncation was logged (once per path)
  };

  Impl(const Clock& c, StatsCollectorOptions o, cri::ImageService* i, cri::RuntimeService* r)
      : clock(c), options(std::move(o)), images(i), runtime(r) {}

  // The walks of this sample: each path's figure from the cache when it is fresh, else walked
  // (those never walked first, then the stalest) until the sample's budget is spent.
  void RunWalks(const std::vector<std::string>& paths) {
    const MonoTime now = clock.Now();
    std::vector<std::string> due;
    for (const auto& p : paths) {
      const Walk& w = walks[p];
      if (!w.done || now - w.at >= options.walk_period) due.push_back(p);
    }
    std::stable_sort(due.begin(), due.end(), [&](const std::string& a, const std::string& b) {
      const Walk& wa = walks[a];
      const Walk& wb = walks[b];
      if (wa.done != wb.done) return !wa.done;
      return wa.at < wb.at;
    });
    int64_t spent = 0;
    stats::DirWalkLimits limits;
    limits.max_entries = options.max_walk_entries;
    for (const auto& p : due) {
      if (spent >= options.max_sample_entries) {
        ++deferred;
        continue;
      }
      Walk& w = walks[p];
      w.by_child.clear();
      w.measured = stats::MeasureDirectoryBounded(p, limits, &w.by_child);
      w.at = clock.Now();
      w.done = true;
      spent += w.measured.entries;
      if (!w.measured.complete) {
        ++truncated;
        if (std::exchange(w.warned, true)) continue;
        log->warn("usage of {} counted only in part (a walk stops after {} entries)", p,
                  options.max_walk_entries);
      }
    }
    // Forget the paths no pod has any more.
    std::set<std::string> wanted(paths.begin(), paths.end());
    for (auto it = walks.begin(); it != walks.end();) {
      it = wanted.count(it->first) ? std::next(it) : walks.erase(it);
    }
  }

  const Walk* WalkOf(const std::string& path) const {
    auto it = walks.find(path);
    return it == walks.end() || !it->second.done ? nullptr : &it->second;
  }

  // The runtime's answer is kept for walk_period: it changes slowly, and a runtime that is down
  // would otherwise hold every sample for the call's timeout.
  std::optional<stats::FsStats> ImageFs() {
    if (images == nullptr) return std::nullopt;
    const MonoTime now = clock.Now();
    if (image_fs_at && now - *image_fs_at < options.walk_period) return image_fs;
    image_fs_at = now;
    image_fs = AskImageFs();
    dedicated_image_fs = false;
    struct stat root {
    }, images_st{};
    if (image_fs && stat(options.root_dir.c_str(), &root) == 0 &&
        stat(image_fs_mountpoint.c_str(), &images_st) == 0) {
      dedicated_image_fs = root.st_dev != images_st.st_dev;
    }
    return image_fs;
  }

  // The containers' writable layers by id (CRI ListContainerStats), kept for walk_period:
  // containerd itself measures them only every stats_collect_period (10 s).
  const std::map<std::string, stats::DirUsage>& WritableLayers() {
    if (runtime == nullptr) return layers;
    const MonoTime now = clock.Now();
    if (layers_at && now - *layers_at < options.walk_period) return layers;
    layers_at = now;
    layers.clear();
    auto list = runtime->ListContainerStats(cri::v1::ContainerStatsFilter());
    if (!list.ok()) {
      if (!layers_failed) log->warn("writable layers unknown: {}", list.status().message());
      layers_failed = true;
      return layers;
    }
    layers_failed = false;
    for (const auto& st : *list) {
      if (!st.has_writable_layer() || st.attributes().id().empty()) continue;
      stats::DirUsage u;
      u.used_bytes = static_cast<int64_t>(st.writable_layer().used_bytes().value());
      u.inodes_used = static_cast<int64_t>(st.writable_layer().inodes_used().value());
      layers[st.attributes().id()] = u;
    }
    return layers;
  }

  std::optional<stats::FsStats> AskImageFs() {
    auto info = images->ImageFsInfo();
    if (!info.ok() || info->image_filesystems_size() == 0) return std::nullopt;
    const auto& usage = info->image_filesystems(0);
    const std::string& mountpoint = usage.fs_id().mountpoint();
    if (mountpoint.empty() || mountpoint.front() != '/') return std::nullopt;
    image_fs_mountpoint = mountpoint;
    auto fs = stats::StatFilesystem(mountpoint);
    if (!fs.ok()) return std::nullopt;
    // As the kubelet: the images' own bytes and inodes, the rest from the filesystem.
    if (usage.has_used_bytes()) fs->used_bytes = static_cast<int64_t>(usage.used_bytes().value());
    if (usage.has_inodes_used()) {
      fs->inodes_used = static_cast<int64_t>(usage.inodes_used().value());
    }
    return *fs;
  }

  // The node's counters, then (when asked) its pods' counters, close together in time.
  NodeStats SampleCounters() {
    const std::string& fs_root = options.cgroup_fs_root;
    NodeStats s;
    s.node_name = options.node_name;
    s.time_unix_ms = clock.WallNanos() / 1000000;
    if (auto cpu = stats::ReadNodeCpu(fs_root, options.proc); cpu.ok()) s.cpu = *cpu;
    if (auto mem = stats::ReadNodeMemory(fs_root, options.proc); mem.ok()) s.memory = *mem;
    if (auto pids = stats::ReadNodePids(options.proc); pids.ok()) s.pids = *pids;
    return s;
  }

  void SampleFilesystems(NodeStats& s) {
    if (auto fs = stats::StatFilesystem(options.root_dir); fs.ok()) s.nodefs = *fs;
    s.imagefs = ImageFs();
    s.dedicated_image_fs = dedicated_image_fs;
  }

  NodeStats SampleNode() {
    std::lock_guard<std::mutex> lock(sample_mu);
    NodeStats s = SampleCounters();
    s.pods_sampled = false;
    SampleFilesystems(s);
    return s;
  }

  NodeStats Sample() {
    std::lock_guard<std::mutex> lock(sample_mu);
    std::vector<PodRef> refs;
    {
      std::lock_guard<std::mutex> pods_lock(pods_mu);
      refs = pods;
    }
    const std::string& fs_root = options.cgroup_fs_root;
    NodeStats s = SampleCounters();
    for (const auto& ref : refs) {
      PodStats p;
      p.uid = ref.uid;
      p.name = ref.name;
      p.namespace_name = ref.namespace_name;
      p.start_time_unix_s = ref.start_time_unix_s;
      auto cgroup =
          stats::FindPodCgroup(fs_root, options.cgroup_root, ref.uid, options.cgroup_systemd);
      if (cgroup) {
        auto usage = stats::ReadCgroupUsage(fs_root, *cgroup);
        p.cpu = usage.cpu;
        p.memory = usage.memory;
        p.processes = usage.processes;
      }
      for (const auto& c : ref.containers) {
        ContainerStats cs;
        cs.name = c.name;
        cs.id = c.id;
        cs.start_time_unix_s = c.start_time_unix_s;
        // The runtime makes each container's cgroup inside the sandbox's cgroup_parent, the
        // pod's cgroup: by its id with cgroupfs; with systemd a scope, containerd's
        // "cri-containerd-<id>.scope" (CRI-O's "crio-<id>.scope").
        if (cgroup && IsPlainCgroupComponent(c.id)) {
          std::vector<std::string> names = {c.id};
          if (options.cgroup_systemd) {
            names = {"cri-containerd-" + c.id + ".scope", "crio-" + c.id + ".scope"};
          }
          for (const auto& name : names) {
            auto usage = stats::ReadCgroupUsage(fs_root, *cgroup + "/" + name);
            if (!usage.cpu && !usage.memory) continue;
            cs.cpu = usage.cpu;
            cs.memory = usage.memory;
            break;
          }
        }
        p.containers.push_back(std::move(cs));
      }
      s.pods.push_back(std::move(p));
    }
    SampleFilesystems(s);

    // The pods' directories: LOG-DIR/pods/NS_NAME_UID (one walk, split by container), the local
    // volumes and ROOT/pods/UID/etc-hosts.
    struct PodPaths {
      std::string logs;
      std::vector<std::pair<std::string, std::string>> volumes;
      std::string etc_hosts;
    };
    std::vector<PodPaths> paths(refs.size());
    std::vector<std::string> all;
    for (size_t i = 0; i < refs.size(); ++i) {
      const PodRef& ref = refs[i];
      auto logs = JoinComponent(options.log_dir + "/pods",
                                ref.namespace_name + "_" + ref.name + "_" + ref.uid);
      auto pod_dir = JoinComponent(options.root_dir + "/pods", ref.uid);
      if (logs.ok()) paths[i].logs = *logs;
      if (pod_dir.ok()) {
        paths[i].volumes = LocalVolumes(options.root_dir, ref.uid);
        paths[i].etc_hosts = *pod_dir + "/etc-hosts";
      }
      for (const std::string* p : {&paths[i].logs, &paths[i].etc_hosts}) {
        if (!p->empty()) all.push_back(*p);
      }
      for (const auto& v : paths[i].volumes) all.push_back(v.second);
    }
    RunWalks(all);
    for (size_t i = 0; i < refs.size(); ++i) {
      PodStats& p = s.pods[i];
      if (const Walk* w = WalkOf(paths[i].logs)) {
        Add(p.ephemeral_storage, w->measured.usage);
        for (auto& c : p.containers) {
          auto it = w->by_child.find(c.name);
          c.logs = it == w->by_child.end() ? stats::DirUsage{} : it->second;
        }
      }
      for (const auto& [name, path] : paths[i].volumes) {
        if (const Walk* w = WalkOf(path)) {
          p.volumes.push_back({name, w->measured.usage});
          Add(p.ephemeral_storage, w->measured.usage);
        }
      }
      if (const Walk* w = WalkOf(paths[i].etc_hosts)) Add(p.ephemeral_storage, w->measured.usage);
    }
    const auto& writable = WritableLayers();
    for (auto& p : s.pods) {
      for (auto& c : p.containers) {
        auto it = writable.find(c.id);
        if (it == writable.end()) continue;
        c.rootfs = it->second;
        Add(p.ephemeral_storage, it->second);
      }
    }
    return s;
  }

  const Clock& clock;
  const StatsCollectorOptions options;
  cri::ImageService* images;
  cri::RuntimeService* runtime;
  std::shared_ptr<spdlog::logger> log = GetLogger("stats");

  std::mutex pods_mu;
  std::vector<PodRef> pods;
  // The mirror's state at the last UpdateFromPleg (its thread only).
  MonoTime mirror_heard{};
  uint64_t mirror_snapshots = 0;
  bool mirror_seen = false;

  std::mutex sample_mu;  // one sample at a time; guards what follows
  std::map<std::string, Walk> walks;
  std::optional<MonoTime> image_fs_at;
  std::optional<stats::FsStats> image_fs;
  std::string image_fs_mountpoint;
  bool dedicated_image_fs = false;
  std::optional<MonoTime> layers_at;
  std::map<std::string, stats::DirUsage> layers;
  bool layers_failed = false;  // logged once until it works again
  std::atomic<uint64_t> truncated{0}, deferred{0};
};

StatsCollector::StatsCollector(const Clock& clock, StatsCollectorOptions options,
                               cri::ImageService* images, cri::RuntimeService* runtime)
    : impl_(std::make_unique<Impl>(clock, std::move(options), images, runtime)) {}

StatsCollector::~StatsCollector() = default;

void StatsCollector::SetPods(std::vector<PodRef> pods) {
  std::lock_guard<std::mutex> lock(impl_->pods_mu);
  impl_->pods = std::move(pods);
}

void StatsCollector::UpdateFromPleg(const pleg::PlegMirror& mirror) {
  // Every message from plegd (an update, a snapshot, a relist's end) moves last_heard.
  if (impl_->mirror_seen && mirror.last_heard() == impl_->mirror_heard &&
      mirror.snapshots() == impl_->mirror_snapshots) {
    return;
  }
  impl_->mirror_seen = true;
  impl_->mirror_heard = mirror.last_heard();
  impl_->mirror_snapshots = mirror.snapshots();
  SetPods(PodRefsFromPleg(mirror.pods()));
}

NodeStats StatsCollector::Sample() { return impl_->Sample(); }

NodeStats StatsCollector::SampleNode() { return impl_->SampleNode(); }

uint64_t StatsCollector::truncated_walks() const { return impl_->truncated.load(); }
uint64_t StatsCollector::deferred_walks() const { return impl_->deferred.load(); }

stats::DirUsage PodDiskUseFor(pod::EvictionSignal signal, bool dedicated_image_fs,
                              const PodStats& s) {
  stats::DirUsage layers;
  for (const auto& c : s.containers) {
    if (c.rootfs) {
      layers.used_bytes += c.rootfs->used_bytes;
      layers.inodes_used += c.rootfs->inodes_used;
    }
  }
  if (!dedicated_image_fs) return s.ephemeral_storage;
  if (signal == pod::EvictionSignal::kImageFsAvailable ||
      signal == pod::EvictionSignal::kImageFsInodesFree) {
    return layers;
  }
  stats::DirUsage rest;
  rest.used_bytes = std::max<int64_t>(0, s.ephemeral_storage.used_bytes - layers.used_bytes);
  rest.inodes_used = std::max<int64_t>(0, s.ephemeral_storage.inodes_used - layers.inodes_used);
  return rest;
}

}  // namespace nodelet::supervisor
