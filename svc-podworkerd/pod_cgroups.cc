#include "svc-podworkerd/pod_cgroups.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "lib/pod/qos.h"
#include "lib/service/cgroup_flags.h"
#include "svc-podworkerd/leftover_cgroups.h"

namespace nodelet::podworkerd {

namespace {

constexpr int64_t kMinShares = 2;
constexpr int64_t kMaxShares = 262144;
constexpr int64_t kMinQuotaUs = 1000;
const std::vector<CgroupName> kQosParents = {{}, {"burstable"}, {"besteffort"}};

// ROOT's components (a valid --cgroup-root: checked at start) then "kubepods", then `more`.
CgroupName KubepodsAnd(const PodCgroupConfig& config, const CgroupName& more = {}) {
  CgroupName name;
  (void)ParseCgroupRoot(config.root, config.systemd, &name);
  name.push_back("kubepods");
  name.insert(name.end(), more.begin(), more.end());
  return name;
}

std::string Path(const PodCgroupConfig& config, const CgroupName& name) {
  return CgroupPath(config.systemd, name);
}

bool IsCgroup2(const std::string& fs_root) {
  struct statfs st {};
  constexpr long kCgroup2SuperMagic = 0x63677270;
  return statfs(fs_root.c_str(), &st) == 0 && static_cast<long>(st.f_type) == kCgroup2SuperMagic;
}

Status WriteControl(const std::string& path, const std::string& value) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_TRUNC | O_CREAT, 0644);
  if (fd < 0) return Internal("open '" + path + "': " + std::strerror(errno));
  ssize_t n = write(fd, value.data(), value.size());
  int err = errno;
  close(fd);
  if (n != static_cast<ssize_t>(value.size())) {
    return Internal("write '" + value + "' to '" + path + "': " + std::strerror(err));
  }
  return Status::Ok();
}

// mkdir -p of `path` (a cgroupfs path) under `hierarchy`; with `enable` (v2), the controllers
// are enabled in each parent's cgroup.subtree_control on the way down.
Status MakeCgroup(const std::string& hierarchy, const std::string& path, bool enable) {
  std::string at = hierarchy;
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    if (enable) {
      // Best effort: a controller the kernel lacks is left out, the others still go on.
      for (const char* c : {"+cpu", "+memory", "+pids"}) {
        (void)WriteControl(at + "/cgroup.subtree_control", c);
      }
    }
    at += "/" + path.substr(start, end - start);
    if (mkdir(at.c_str(), 0755) != 0 && errno != EEXIST) {
      return Internal("mkdir '" + at + "': " + std::strerror(errno));
    }
    start = end + 1;
  }
  return Status::Ok();
}

// Every directory under `dir`, deepest first, then `dir`, removed with rmdir. The first one that
// stays is named in the error.
Status RemoveTree(const std::string& dir) {
  Status first;
  if (DIR* d = opendir(dir.c_str())) {
    std::vector<std::string> children;
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      struct stat st {};
      std::string full = dir + "/" + name;
      if (lstat(full.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) children.push_back(full);
    }
    closedir(d);
    for (const auto& c : children) {
      Status s = RemoveTree(c);
      if (first.ok() && !s.ok()) first = s;
    }
  } else {
    return errno == ENOENT ? Status::Ok() : Internal("open '" + dir + "': " + std::strerror(errno));
  }
  if (rmdir(dir.c_str()) != 0 && errno != ENOENT && first.ok()) {
    first = Internal("rmdir '" + dir + "': " + std::strerror(errno));
  }
  return first;
}

}  // namespace

Status ValidateCgroupRoot(const std::string& root) {
  std::string problem = CgroupRootProblem(root);
  return problem.empty() ? Status::Ok() : InvalidArgument("--cgroup-root " + problem);
}

Result<std::string> PodCgroupName(const PodCgroupConfig& config, const pod::Pod& pod) {
  if (!IsPlainCgroupComponent(pod.metadata.uid)) {
    return InvalidArgument("pod UID \"" + pod.metadata.uid + "\" cannot name a cgroup");
  }
  CgroupName name = KubepodsAnd(config);
  switch (pod::PodQos(pod)) {
    case pod::QosClass::kGuaranteed:
      break;
    case pod::QosClass::kBurstable:
      name.push_back("burstable");
      break;
    case pod::QosClass::kBestEffort:
      name.push_back("besteffort");
      break;
  }
  name.push_back("pod" + pod.metadata.uid);
  return Path(config, name);
}

PodCgroupLimits PodLimits(const pod::Pod& pod) {
  PodCgroupLimits out;
  const pod::QosClass qos = pod::PodQos(pod);
  if (qos == pod::QosClass::kBestEffort) return out;  // the minimum shares, nothing else
  const int64_t cpu_requests = pod::PodResourceTotal(pod, "cpu", true, true);
  const int64_t cpu_limits = pod::PodResourceTotal(pod, "cpu", false, true);
  const int64_t memory_limits = pod::PodResourceTotal(pod, "memory", false, false);
  out.cpu_shares = cpu_requests == 0
                       ? kMinShares
                       : std::clamp<int64_t>(cpu_requests * 1024 / 1000, kMinShares, kMaxShares);
  bool cpu_declared = true;
  bool memory_declared = true;
  for (const auto& c : pod.spec.containers) {
    auto cpu = c.resources.limits.find("cpu");
    if (cpu == c.resources.limits.end() || cpu->second.IsZero()) cpu_declared = false;
    auto mem = c.resources.limits.find("memory");
    if (mem == c.resources.limits.end() || mem->second.IsZero()) memory_declared = false;
  }
  const bool guaranteed = qos == pod::QosClass::kGuaranteed;
  if ((guaranteed || cpu_declared) && cpu_limits > 0) {
    out.cpu_quota_us = std::max(kMinQuotaUs, cpu_limits * kCpuPeriodUs / 1000);
  }
  if ((guaranteed || memory_declared) && memory_limits > 0) out.memory_bytes = memory_limits;
  return out;
}

Status EnsurePodCgroup(const PodCgroupConfig& config, const std::string& name,
                       const PodCgroupLimits& limits) {
  if (config.systemd) {
    if (!config.slices) return FailedPrecondition("no connection to systemd for " + name);
    SliceLimits slice;
    slice.cpu_shares = static_cast<uint64_t>(limits.cpu_shares);
    if (limits.cpu_quota_us) {
      slice.cpu_quota_per_sec_usec = static_cast<uint64_t>(*limits.cpu_quota_us) * 1000000 /
                                     static_cast<uint64_t>(kCpuPeriodUs);
    }
    if (limits.memory_bytes) slice.memory_bytes = static_cast<uint64_t>(*limits.memory_bytes);
    slice.cgroup_v2 = IsCgroup2(config.fs_root);
    const std::string unit = name.substr(name.rfind('/') + 1);
    return config.slices->Ensure(unit, "nodelet cgroup " + name, slice);
  }
  if (IsCgroup2(config.fs_root)) {
    if (Status s = MakeCgroup(config.fs_root, name, true); !s.ok()) return s;
    const std::string dir = config.fs_root + name;
    const int64_t weight = 1 + ((limits.cpu_shares - 2) * 9999) / 262142;
    if (Status s = WriteControl(dir + "/cpu.weight", std::to_string(weight)); !s.ok()) return s;
    std::string max = limits.cpu_quota_us ? std::to_string(*limits.cpu_quota_us) : "max";
    if (Status s = WriteControl(dir + "/cpu.max", max + " " + std::to_string(kCpuPeriodUs));
        !s.ok()) {
      return s;
    }
    return WriteControl(dir + "/memory.max",
                        limits.memory_bytes ? std::to_string(*limits.memory_bytes) : "max");
  }
  for (const char* controller : {"cpu", "memory", "pids"}) {
    if (Status s = MakeCgroup(config.fs_root + "/" + controller, name, false); !s.ok()) return s;
  }
  const std::string cpu = config.fs_root + "/cpu" + name;
  if (Status s = WriteControl(cpu + "/cpu.shares", std::to_string(limits.cpu_shares)); !s.ok()) {
    return s;
  }
  if (Status s = WriteControl(cpu + "/cpu.cfs_period_us", std::to_string(kCpuPeriodUs)); !s.ok()) {
    return s;
  }
  if (Status s =
          WriteControl(cpu + "/cpu.cfs_quota_us", std::to_string(limits.cpu_quota_us.value_or(-1)));
      !s.ok()) {
    return s;
  }
  return WriteControl(config.fs_root + "/memory" + name + "/memory.limit_in_bytes",
                      std::to_string(limits.memory_bytes.value_or(-1)));
}

std::string KubepodsName(const PodCgroupConfig& config) {
  return Path(config, KubepodsAnd(config));
}

Status EnsureQosCgroups(const PodCgroupConfig& config, int64_t burstable_cpu_requests_milli) {
  PodCgroupLimits burstable;
  burstable.cpu_shares =
      std::clamp<int64_t>(burstable_cpu_requests_milli * 1024 / 1000, kMinShares, kMaxShares);
  if (Status s =
          EnsurePodCgroup(config, Path(config, KubepodsAnd(config, {"burstable"})), burstable);
      !s.ok()) {
    return Status(s.code(), "the burstable QoS cgroup: " + s.message());
  }
  if (Status s = EnsurePodCgroup(config, Path(config, KubepodsAnd(config, {"besteffort"})),
                                 PodCgroupLimits{});
      !s.ok()) {
    return Status(s.code(), "the besteffort QoS cgroup: " + s.message());
  }
  return Status::Ok();
}

int64_t BurstableCpuRequests(const std::vector<const pod::Pod*>& pods) {
  int64_t sum = 0;
  for (const pod::Pod* p : pods) {
    if (pod::PodQos(*p) == pod::QosClass::kBurstable) {
      sum += pod::PodResourceTotal(*p, "cpu", true, true);
    }
  }
  return sum;
}

PodCgroupLimits KubepodsLimits(const pod::NodeResourceList& allocatable) {
  PodCgroupLimits out;
  out.cpu_shares = std::clamp<int64_t>(allocatable.cpu_milli * 1024 / 1000, kMinShares, kMaxShares);
  if (allocatable.memory_bytes > 0) out.memory_bytes = allocatable.memory_bytes;
  return out;
}

Status RemovePodCgroup(const PodCgroupConfig& config, const std::string& uid) {
  if (!IsPlainCgroupComponent(uid))
    return InvalidArgument("pod UID \"" + uid + "\" cannot name a cgroup");
  Status first;
  for (const auto& parent : kQosParents) {
    CgroupName name = KubepodsAnd(config, parent);
    name.push_back("pod" + uid);
    // systemd first: stopping the slice removes the cgroups it manages; what runc made in the
    // other hierarchies (cpuset, freezer, ...) is left for the rmdirs below.
    if (config.systemd && config.slices) {
      if (Status s = config.slices->Stop(SystemdSliceName(name)); !s.ok()) {
        if (first.ok()) first = s;
        continue;
      }
    }
    const std::string path = Path(config, name);
    for (const auto& h : CgroupHierarchies(config.fs_root)) {
      Status s = RemoveTree(h + path);
      if (first.ok() && !s.ok()) first = s;
    }
  }
  return first;
}

std::set<std::string> PodCgroupUids(const PodCgroupConfig& config) {
  std::set<std::string> out;
  for (const auto& parent : kQosParents) {
    const CgroupName parent_name = KubepodsAnd(config, parent);
    // A pod's cgroup is "pod<UID>", or with systemd "<parent slice's stem>-pod<UID>.slice".
    std::string prefix = "pod";
    std::string suffix;
    if (config.systemd) {
      const std::string slice = SystemdSliceName(parent_name);
      prefix = slice.substr(0, slice.size() - 6) + "-pod";
      suffix = ".slice";
    }
    for (const auto& h : CgroupHierarchies(config.fs_root)) {
      const std::string dir = h + Path(config, parent_name);
      DIR* d = opendir(dir.c_str());
      if (d == nullptr) continue;
      while (dirent* e = readdir(d)) {
        std::string name = e->d_name;
        if (name.size() > prefix.size() + suffix.size() && name.rfind(prefix, 0) == 0 &&
            name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
            IsPlainCgroupComponent(name)) {
          std::string uid = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
          // An escaped UID has no '-': a name with one is not a pod slice nodelet made.
          if (!config.systemd || uid.find('-') == std::string::npos) out.insert(uid);
        }
      }
      closedir(d);
    }
  }
  return out;
}

std::string PodCgroupKey(const PodCgroupConfig& config, const std::string& uid) {
  return config.systemd ? EscapeSystemdComponent(uid) : uid;
}

}  // namespace nodelet::podworkerd
