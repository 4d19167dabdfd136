#include "svc-podworkerd/orphan_shims.h"

#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <utility>

#include "svc-podworkerd/leftover_cgroups.h"

namespace nodelet::podworkerd {
namespace {

std::string ReadSmallFile(const std::string& path, size_t limit = 65536) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::string data;
  char buf[4096];
  while (data.size() < limit && in.read(buf, sizeof buf).gcount() > 0) {
    data.append(buf, static_cast<size_t>(in.gcount()));
  }
  return data;
}

std::vector<int> NumericEntries(const std::string& proc_root) {
  std::vector<int> pids;
  DIR* d = opendir(proc_root.c_str());
  if (d == nullptr) return pids;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.empty() || name.size() > 9 ||
        name.find_first_not_of("0123456789") != std::string::npos) {
      continue;
    }
    pids.push_back(std::stoi(name));
  }
  closedir(d);
  return pids;
}

struct StatFields {
  int ppid = 0;
  uint64_t start_time = 0;
};

// /proc/PID/stat: "pid (comm) state ppid ... starttime(22) ..."; comm may hold spaces and
// parentheses, so the fields are counted after the last ')'.
std::optional<StatFields> ReadStat(const std::string& proc_root, int pid) {
  const std::string stat = ReadSmallFile(proc_root + "/" + std::to_string(pid) + "/stat", 4096);
  auto close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(stat.substr(close + 1));
  std::vector<std::string> f{std::istream_iterator<std::string>(rest), {}};
  // f[0] is field 3 (state): field N is f[N - 3].
  if (f.size() < 20) return std::nullopt;
  StatFields out;
  try {
    out.ppid = std::stoi(f[1]);
    out.start_time = std::stoull(f[19]);
  } catch (...) {
    return std::nullopt;
  }
  return out;
}

int PidfdOpen(int pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

bool PidfdKill(int pidfd) {
  return syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0) == 0 || errno == ESRCH;
}

// Waits until the process behind `pidfd` has exited (its pidfd turns readable), up to `until`.
bool WaitExited(const Clock& clock, int pidfd, MonoTime until) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - clock.Now());
    pollfd p{pidfd, POLLIN, 0};
    int r = poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

// The cgroup paths of a process, one per hierarchy line ("N:controllers:/path").
std::vector<std::string> CgroupPathsOf(const std::string& proc_root, int pid) {
  std::vector<std::string> out;
  std::istringstream in(ReadSmallFile(proc_root + "/" + std::to_string(pid) + "/cgroup"));
  for (std::string line; std::getline(in, line);) {
    auto first = line.find(':');
    auto second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    out.push_back(line.substr(second + 1));
  }
  return out;
}

constexpr char kShimComm[] = "containerd-shim";

}  // namespace

std::vector<ShimProcess> ListShims(const std::string& containerd_socket,
                                   const std::string& proc_root) {
  std::vector<ShimProcess> out;
  if (containerd_socket.empty()) return out;
  for (int pid : NumericEntries(proc_root)) {
    // comm first (the executable's name, at most 15 bytes: "containerd-shim"): the kernel has
    // it at hand, where a cmdline is read out of the process's memory. Reading every process's
    // cmdline at each sandbox removal took a third of podworkerd's CPU removing 100 pods.
    const std::string comm = ReadSmallFile(proc_root + "/" + std::to_string(pid) + "/comm");
    if (comm.rfind(kShimComm, 0) != 0) continue;
    const std::string raw = ReadSmallFile(proc_root + "/" + std::to_string(pid) + "/cmdline");
    std::vector<std::string> argv;
    size_t start = 0;
    while (start < raw.size()) {
      size_t end = raw.find('\0', start);
      if (end == std::string::npos) end = raw.size();
      argv.push_back(raw.substr(start, end - start));
      start = end + 1;
    }
    if (argv.empty()) continue;
    const std::string base = argv[0].substr(argv[0].rfind('/') + 1);
    if (base.rfind("containerd-shim", 0) != 0) continue;
    ShimProcess shim;
    shim.pid = pid;
    bool address_matches = false;
    for (size_t i = 1; i + 1 < argv.size(); ++i) {
      if (argv[i] == "-id") shim.id = argv[i + 1];
      if (argv[i] == "-namespace") shim.ns = argv[i + 1];
      if (argv[i] == "-address" && argv[i + 1] == containerd_socket) address_matches = true;
    }
    if (!address_matches || shim.id.empty()) continue;
    auto stat = ReadStat(proc_root, pid);
    if (!stat) continue;  // gone meanwhile
    shim.start_time = stat->start_time;
    out.push_back(std::move(shim));
  }
  return out;
}

std::vector<int> OrphanShimPids(const std::string& id, const std::string& containerd_socket,
                                const std::string& proc_root) {
  std::vector<int> out;
  if (id.empty()) return out;
  for (const auto& shim : ListShims(containerd_socket, proc_root)) {
    if (shim.id == id) out.push_back(shim.pid);
  }
  return out;
}

OrphanShimSweeper::OrphanShimSweeper(std::string ns, OrphanSweepDeps deps)
    : ns_(std::move(ns)), deps_(std::move(deps)) {}

OrphanSweepResult OrphanShimSweeper::Sweep(bool final_sweep) {
  OrphanSweepResult result;
  std::vector<ShimProcess> shims;
  for (auto& s : deps_.list_shims()) {
    if (s.ns == ns_) shims.push_back(std::move(s));
  }
  std::map<int, ShimProcess> suspects;
  if (shims.empty()) {
    suspects_.clear();
    return result;
  }
  // CRI first, then containerd's records: a shim whose RunPodSandbox finishes in between is
  // listed by neither only if containerd deleted its record, i.e. the creation failed.
  auto known = deps_.cri_ids();
  if (!known.ok()) {
    // No decision without the whole evidence; the suspects wait for a sweep that has it.
    result.error = known.status();
    return result;
  }
  for (const auto& shim : shims) {
    if (known->count(shim.id) != 0) continue;
    auto record = deps_.containerd_knows(shim.id);
    if (!record.ok() || *record) continue;
    auto previous = suspects_.find(shim.pid);
    const bool seen_before = previous != suspects_.end() && previous->second.id == shim.id &&
                             previous->second.start_time == shim.start_time;
    if (!seen_before && !final_sweep) {
      suspects.emplace(shim.pid, shim);
      continue;
    }
    if (Status s = deps_.end(shim); s.ok()) {
      result.ended.push_back(shim);
    } else {
      result.failed.emplace_back(shim, s);
      suspects.emplace(shim.pid, shim);  // tried again next time
    }
  }
  result.suspects = static_cast<int>(suspects.size());
  suspects_ = std::move(suspects);
  return result;
}

Status EndShimTree(const Clock& clock, const ShimProcess& shim, std::chrono::milliseconds timeout,
                   const std::string& proc_root, const std::string& cgroup_root) {
  const MonoTime until = clock.Now() + timeout;
  // Hold the shim by pidfd first, then check that it is still the same process.
  int shim_fd = PidfdOpen(shim.pid);
  if (shim_fd < 0)
    return errno == ESRCH ? Status::Ok()
                          : ErrnoStatus("pidfd_open of shim " + std::to_string(shim.pid), errno);
  auto stat = ReadStat(proc_root, shim.pid);
  if (!stat || stat->start_time != shim.start_time) {
    close(shim_fd);
    return Status::Ok();  // that shim is gone; the pid is someone else's now
  }
  std::set<std::string> shim_cgroups;
  for (auto& p : CgroupPathsOf(proc_root, shim.pid)) shim_cgroups.insert(std::move(p));
  std::set<std::string> cgroups;              // of its descendants, to remove once they are gone
  std::vector<int> held;                      // pidfds of killed descendants, waited for
  std::set<std::pair<int, uint64_t>> killed;  // (pid, start time) already sent SIGKILL
  // Descendants first: the shim is their subreaper, so while it lives a process forked meanwhile
  // stays below it, and the next round finds it. Bounded: a tree that keeps forking faster than
  // it is killed is left to the shim's own SIGKILL below and the next sweep.
  for (int round = 0; round < 20; ++round) {
    std::map<int, StatFields> table;
    for (int pid : NumericEntries(proc_root)) {
      if (auto st = ReadStat(proc_root, pid)) table[pid] = *st;
    }
    bool killed_any = false;
    for (const auto& [pid, st] : table) {
      bool below = false;
      int p = st.ppid;
      for (int depth = 0; depth < 64 && p > 1; ++depth) {
        if (p == shim.pid) {
          below = true;
          break;
        }
        auto it = table.find(p);
        p = it == table.end() ? 0 : it->second.ppid;
      }
      if (!below || !killed.insert({pid, st.start_time}).second) continue;
      int fd = PidfdOpen(pid);
      if (fd < 0) continue;
      for (auto& c : CgroupPathsOf(proc_root, pid)) {
        if (shim_cgroups.count(c) == 0) cgroups.insert(std::move(c));
      }
      if (PidfdKill(fd)) killed_any = true;
      held.push_back(fd);
    }
    if (!killed_any) break;
    for (int fd : held) WaitExited(clock, fd, until);
  }
  Status result = Status::Ok();
  for (int fd : held) {
    if (!WaitExited(clock, fd, until))
      result = DeadlineExceeded("a process below shim " + std::to_string(shim.pid) +
                                " did not exit after SIGKILL");
    close(fd);
  }
  if (!PidfdKill(shim_fd)) {
    result = ErrnoStatus("SIGKILL to shim " + std::to_string(shim.pid), errno);
  } else if (!WaitExited(clock, shim_fd, until)) {
    result = DeadlineExceeded("shim " + std::to_string(shim.pid) + " did not exit after SIGKILL");
  }
  close(shim_fd);
  std::vector<std::string> to_remove;
  for (const auto& c : cgroups) {
    const auto slash = c.rfind('/');
    if (slash != std::string::npos && c.substr(slash + 1) == shim.id &&
        c.find("/..") == std::string::npos) {
      to_remove.push_back(c);
    }
  }
  // The task's own cgroup where containerd puts it, also when nothing was in it any more (a
  // start cancelled after runc made the cgroup and before its init ran). rmdir removes only an
  // empty cgroup.
  if (auto own = NamespaceCgroupPath(shim.ns, shim.id)) to_remove.push_back(*own);
  RemoveLeftoverCgroups(to_remove, cgroup_root);
  return result;
}

}  // namespace nodelet::podworkerd
