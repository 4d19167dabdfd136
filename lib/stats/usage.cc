#include "lib/stats/usage.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <initializer_list>
#include <set>
#include <string_view>
#include <utility>

#include "lib/common/unique_fd.h"
#include "lib/service/cgroup_flags.h"

namespace nodelet::stats {
namespace {

// Kernel counter files are small (memory.stat is about 2 KiB); anything larger is not one.
constexpr size_t kMaxCounterFileBytes = 64 * 1024;

// The whole of a small kernel file, or nullopt when it cannot be read. The last component is
// never followed (cgroupfs and procfs hold no symlinks where we read; a link there is not ours).
std::optional<std::string> ReadSmallFile(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) return std::nullopt;
  std::string out;
  char buf[4096];
  while (out.size() < kMaxCounterFileBytes) {
    ssize_t n = read(fd.get(), buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return std::nullopt;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

std::optional<uint64_t> ParseU64(std::string_view s) {
  s = Trim(s);
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// A single number in a file (memory.usage_in_bytes, cpuacct.usage, memory.current).
std::optional<uint64_t> ReadU64File(const std::string& path) {
  auto text = ReadSmallFile(path);
  if (!text) return std::nullopt;
  return ParseU64(*text);
}

// "key value" lines (memory.stat, cpu.stat) and "Key:   value kB" lines (meminfo; the value in
// bytes). Lines that are neither are skipped, and so are keys not in `only` when it is given
// (memory.stat has some forty lines, of which a sample wants four, for every pod and container).
std::map<std::string, uint64_t> ParseKeyValues(const std::string& text,
                                               std::initializer_list<std::string_view> only = {}) {
  std::map<std::string, uint64_t> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + start, end - start);
    start = end + 1;
    size_t sep = line.find_first_of(" \t");
    if (sep == std::string_view::npos || sep == 0) continue;
    std::string_view key = line.substr(0, sep);
    if (key.back() == ':') key.remove_suffix(1);
    if (only.size() != 0 && std::find(only.begin(), only.end(), key) == only.end()) continue;
    std::string_view rest = Trim(line.substr(sep));
    uint64_t scale = 1;
    if (rest.size() > 3 && rest.substr(rest.size() - 3) == " kB") {
      rest = Trim(rest.substr(0, rest.size() - 3));
      scale = 1024;
    }
    if (auto v = ParseU64(rest)) out[std::string(key)] = *v * scale;
  }
  return out;
}

int64_t Clamp(uint64_t v) {
  return v > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(v);
}

uint64_t Get(const std::map<std::string, uint64_t>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? 0 : it->second;
}

// `cgroup` ("/" or "/a/b") as a path below a hierarchy ("" or "/a/b"); nullopt unless every
// component is a plain cgroup component, so that nothing here can be steered out of the
// hierarchy.
std::optional<std::string> CgroupSuffix(const std::string& cgroup) {
  if (cgroup == "/") return std::string();
  if (cgroup.empty() || cgroup.front() != '/' || cgroup.back() == '/') return std::nullopt;
  size_t start = 1;
  while (start <= cgroup.size()) {
    size_t end = cgroup.find('/', start);
    if (end == std::string::npos) end = cgroup.size();
    if (!IsPlainCgroupComponent(cgroup.substr(start, end - start))) return std::nullopt;
    start = end + 1;
  }
  return cgroup;
}

bool IsDirectory(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool Exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

// Where the counters are: on v2 one unified hierarchy; on v1 the memory hierarchy and the one
// that has cpuacct (its own mount, or joined with cpu as "cpu,cpuacct", under either name).
struct Hierarchies {
  bool unified = false;
  std::string cpuacct;  // "" when there is none
  std::string memory;
  std::string pids;
};

Hierarchies FindHierarchies(const std::string& fs_root) {
  Hierarchies h;
  if (IsCgroupV2(fs_root)) {
    h.unified = true;
    h.cpuacct = h.memory = h.pids = fs_root;
    return h;
  }
  h.memory = fs_root + "/memory";
  h.pids = fs_root + "/pids";
  for (const char* name : {"cpuacct", "cpu,cpuacct", "cpuacct,cpu", "cpu"}) {
    const std::string dir = fs_root + "/" + name;
    if (Exists(dir + "/cpuacct.usage")) {
      h.cpuacct = dir;
      break;
    }
  }
  return h;
}

std::optional<MemoryUsage> ReadMemory(const Hierarchies& h, const std::string& suffix) {
  const std::string dir = h.memory + suffix;
  auto usage = ReadU64File(dir + (h.unified ? "/memory.current" : "/memory.usage_in_bytes"));
  if (!usage) return std::nullopt;
  MemoryUsage m;
  m.usage_bytes = Clamp(*usage);
  m.working_set_bytes = m.usage_bytes;
  auto text = ReadSmallFile(dir + "/memory.stat");
  if (text) {
    // v1's hierarchical totals count the cgroup's descendants, as its usage does.
    const char* inactive_key = h.unified ? "inactive_file" : "total_inactive_file";
    const char* rss_key = h.unified ? "anon" : "total_rss";
    const char* faults_key = h.unified ? "pgfault" : "total_pgfault";
    const char* major_key = h.unified ? "pgmajfault" : "total_pgmajfault";
    auto stat = ParseKeyValues(*text, {inactive_key, rss_key, faults_key, major_key});
    const int64_t inactive = Clamp(Get(stat, inactive_key));
    m.working_set_bytes = std::max<int64_t>(0, m.usage_bytes - inactive);
    m.rss_bytes = Clamp(Get(stat, rss_key));
    m.page_faults = Clamp(Get(stat, faults_key));
    m.major_page_faults = Clamp(Get(stat, major_key));
  }
  return m;
}

std::optional<CpuUsage> ReadCpu(const Hierarchies& h, const std::string& suffix) {
  if (h.unified) {
    auto text = ReadSmallFile(h.cpuacct + suffix + "/cpu.stat");
    if (!text) return std::nullopt;
    auto stat = ParseKeyValues(*text, {"usage_usec"});
    auto it = stat.find("usage_usec");
    if (it == stat.end()) return std::nullopt;
    return CpuUsage{it->second * 1000};
  }
  if (h.cpuacct.empty()) return std::nullopt;
  auto ns = ReadU64File(h.cpuacct + suffix + "/cpuacct.usage");
  if (!ns) return std::nullopt;
  return CpuUsage{*ns};
}

// Adds one inode's blocks to the totals, a hard-linked file only the first time it is seen.
class UsageCounter {
 public:
  bool Count(const struct stat& st, DirUsage* total, DirUsage* child) {
    if (!S_ISDIR(st.st_mode) && st.st_nlink > 1 && !seen_.insert({st.st_dev, st.st_ino}).second) {
      return false;
    }
    const int64_t bytes = static_cast<int64_t>(st.st_blocks) * 512;
    total->used_bytes += bytes;
    total->inodes_used += 1;
    if (child != nullptr) {
      child->used_bytes += bytes;
      child->inodes_used += 1;
    }
    return true;
  }

 private:
  std::set<std::pair<dev_t, ino_t>> seen_;
};

// Opens the directory `name` in `parent` without following a link, and only when it is still
// the inode `expected` (a rename between the stat and the open is refused).
DIR* OpenChildDir(int parent, const char* name, const struct stat& expected) {
  int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_dev != expected.st_dev || st.st_ino != expected.st_ino) {
    close(fd);
    return nullptr;
  }
  DIR* dir = fdopendir(fd);
  if (dir == nullptr) close(fd);
  return dir;
}

}  // namespace

bool IsCgroupV2(const std::string& fs_root) { return Exists(fs_root + "/cgroup.controllers"); }

CgroupUsage ReadCgroupUsage(const std::string& fs_root, const std::string& cgroup) {
  CgroupUsage u;
  auto suffix = CgroupSuffix(cgroup);
  if (!suffix) return u;
  const Hierarchies h = FindHierarchies(fs_root);
  u.cpu = ReadCpu(h, *suffix);
  u.memory = ReadMemory(h, *suffix);
  if (auto n = ReadU64File(h.pids + *suffix + "/pids.current")) u.processes = Clamp(*n);
  return u;
}

std::optional<std::string> FindPodCgroup(const std::string& fs_root, const std::string& cgroup_root,
                                         const std::string& uid, bool systemd) {
  if (!IsPlainCgroupComponent("pod" + uid)) return std::nullopt;
  CgroupName root;
  if (!ParseCgroupRoot(cgroup_root, systemd, &root).empty()) return std::nullopt;
  const Hierarchies h = FindHierarchies(fs_root);
  // podworkerd makes the pod cgroup in cpu, memory and pids (v1) before the sandbox.
  std::vector<std::string> hierarchies = {h.memory};
  if (!h.unified) hierarchies.push_back(fs_root + "/cpu");
  for (const CgroupName& qos : std::vector<CgroupName>{{}, {"burstable"}, {"besteffort"}}) {
    CgroupName name = root;
    name.push_back("kubepods");
    name.insert(name.end(), qos.begin(), qos.end());
    name.push_back("pod" + uid);
    const std::string path = CgroupPath(systemd, name);
    for (const auto& dir : hierarchies) {
      if (IsDirectory(dir + path)) return path;
    }
  }
  return std::nullopt;
}

Result<NodeMemory> ReadNodeMemory(const std::string& fs_root, const std::string& proc) {
  auto text = ReadSmallFile(proc + "/meminfo");
  if (!text) return Unavailable("cannot read " + proc + "/meminfo");
  auto info = ParseKeyValues(*text);
  if (info.count("MemTotal") == 0) return Unavailable(proc + "/meminfo has no MemTotal");
  NodeMemory m;
  m.capacity_bytes = Clamp(info["MemTotal"]);
  const Hierarchies h = FindHierarchies(fs_root);
  std::optional<MemoryUsage> root;
  if (!h.unified) root = ReadMemory(h, "");
  if (root) {
    m.usage_bytes = root->usage_bytes;
    m.working_set_bytes = root->working_set_bytes;
  } else {
    // The v2 root cgroup has no memory.current: the kernel's own figures for the whole node.
    m.usage_bytes = std::max<int64_t>(0, m.capacity_bytes - Clamp(Get(info, "MemFree")));
    m.working_set_bytes = std::max<int64_t>(0, m.usage_bytes - Clamp(Get(info, "Inactive(file)")));
  }
  m.available_bytes = std::max<int64_t>(0, m.capacity_bytes - m.working_set_bytes);
  return m;
}

Result<CpuUsage> ReadNodeCpu(const std::string& fs_root, const std::string& proc) {
  const Hierarchies h = FindHierarchies(fs_root);
  if (!h.unified) {
    if (auto cpu = ReadCpu(h, "")) return *cpu;
  }
  auto text = ReadSmallFile(proc + "/stat");
  if (!text) return Unavailable("cannot read " + proc + "/stat");
  // "cpu  user nice system idle iowait irq softirq steal guest guest_nice", in USER_HZ ticks;
  // guest time is already inside user and nice.
  std::string_view line(*text);
  line = line.substr(0, line.find('\n'));
  if (line.substr(0, 4) != "cpu ") return Unavailable(proc + "/stat has no cpu line");
  std::vector<uint64_t> fields;
  size_t pos = 4;
  while (pos < line.size()) {
    while (pos < line.size() && line[pos] == ' ') ++pos;
    size_t end = line.find(' ', pos);
    if (end == std::string_view::npos) end = line.size();
    if (end > pos) {
      auto v = ParseU64(line.substr(pos, end - pos));
      if (!v) return Unavailable(proc + "/stat: bad cpu line");
      fields.push_back(*v);
    }
    pos = end;
  }
  if (fields.size() < 8) return Unavailable(proc + "/stat: short cpu line");
  const uint64_t busy = fields[0] + fields[1] + fields[2] + fields[5] + fields[6] + fields[7];
  const long hz = sysconf(_SC_CLK_TCK);
  return CpuUsage{busy * (1000000000ULL / static_cast<uint64_t>(hz > 0 ? hz : 100))};
}

Result<int64_t> ReadBootTime(const std::string& proc) {
  auto text = ReadSmallFile(proc + "/stat");
  if (!text) return Unavailable("cannot read " + proc + "/stat");
  auto values = ParseKeyValues(*text);
  auto it = values.find("btime");
  if (it == values.end()) return Unavailable(proc + "/stat has no btime");
  return Clamp(it->second);
}

Result<FsStats> StatFilesystem(const std::string& path) {
  struct statvfs vfs {};
  if (statvfs(path.c_str(), &vfs) != 0) return ErrnoStatus("statvfs " + path, errno);
  const auto frsize = static_cast<uint64_t>(vfs.f_frsize);
  FsStats fs;
  fs.capacity_bytes = Clamp(static_cast<uint64_t>(vfs.f_blocks) * frsize);
  fs.available_bytes = Clamp(static_cast<uint64_t>(vfs.f_bavail) * frsize);
  fs.used_bytes = Clamp(static_cast<uint64_t>(vfs.f_blocks - vfs.f_bfree) * frsize);
  fs.inodes = Clamp(vfs.f_files);
  fs.inodes_free = Clamp(vfs.f_ffree);
  fs.inodes_used = Clamp(vfs.f_files - std::min(vfs.f_files, vfs.f_ffree));
  return fs;
}

DirMeasurement MeasureDirectoryBounded(const std::string& path, const DirWalkLimits& limits,
                                       std::map<std::string, DirUsage>* by_child) {
  DirMeasurement m;
  struct stat top {};
  if (lstat(path.c_str(), &top) != 0) return m;  // missing (or unreadable): nothing
  UsageCounter counter;
  counter.Count(top, &m.usage, nullptr);
  if (!S_ISDIR(top.st_mode)) return m;
  UniqueFd top_fd(open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!top_fd.valid()) return m;
  struct stat check {};
  if (fstat(top_fd.get(), &check) != 0 || check.st_ino != top.st_ino ||
      check.st_dev != top.st_dev) {
    return m;
  }
  DIR* root = fdopendir(top_fd.get());
  if (root == nullptr) return m;
  (void)top_fd.release();  // the DIR owns it now

  // One open directory per level of the walk, with the top-level entry it lies under.
  struct Frame {
    DIR* dir;
    std::string top_name;
  };
  std::vector<Frame> stack;
  stack.push_back({root, ""});
  while (!stack.empty()) {
    errno = 0;
    dirent* e = readdir(stack.back().dir);
    if (e == nullptr) {
      closedir(stack.back().dir);
      stack.pop_back();
      continue;
    }
    const char* name = e->d_name;
    if (std::string_view(name) == "." || std::string_view(name) == "..") continue;
    if (m.entries >= limits.max_entries) {
      m.complete = false;
      break;
    }
    ++m.entries;
    const int parent = dirfd(stack.back().dir);
    struct stat st {};
    if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    // Another filesystem mounted here (a tmpfs, a bind mount): neither counted nor entered.
    if (st.st_dev != top.st_dev) continue;
    const std::string top_name = stack.size() == 1 ? std::string(name) : stack.back().top_name;
    DirUsage* child = by_child != nullptr ? &(*by_child)[top_name] : nullptr;
    counter.Count(st, &m.usage, child);
    if (!S_ISDIR(st.st_mode)) continue;
    if (static_cast<int>(stack.size()) > limits.max_depth) {
      m.complete = false;
      continue;
    }
    DIR* sub = OpenChildDir(parent, name, st);
    if (sub != nullptr) stack.push_back({sub, top_name});
  }
  for (auto& f : stack) closedir(f.dir);
  return m;
}

DirUsage MeasureDirectory(const std::string& path) {
  return MeasureDirectoryBounded(path, DirWalkLimits{}).usage;
}

Result<NodePids> ReadNodePids(const std::string& proc) {
  auto pid_max = ReadU64File(proc + "/sys/kernel/pid_max");
  if (!pid_max) return Unavailable("cannot read " + proc + "/sys/kernel/pid_max");
  NodePids p;
  p.max = Clamp(*pid_max);
  if (auto threads_max = ReadU64File(proc + "/sys/kernel/threads-max")) {
    p.max = std::min(p.max, Clamp(*threads_max));
  }
  // "0.12 0.08 0.05 2/345 6789": the fourth field's total is the number of tasks.
  auto loadavg = ReadSmallFile(proc + "/loadavg");
  const size_t slash = loadavg ? loadavg->find('/') : std::string::npos;
  if (slash == std::string::npos) return Unavailable("cannot read " + proc + "/loadavg");
  const char* start = loadavg->c_str() + slash + 1;
  char* end = nullptr;
  const long long tasks = std::strtoll(start, &end, 10);
  if (end == start || tasks < 0) return Unavailable(proc + "/loadavg: no task count");
  p.in_use = tasks;
  return p;
}

}  // namespace nodelet::stats
