#include "tests/testing/leak_check.h"

#include <net/if.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/testing/containerd.h"
#include "tests/testing/harness.h"

namespace nodelet::testing {

namespace fs = std::filesystem;

std::vector<std::string> MountsUnder(const std::string& dir) {
  std::vector<std::string> mounts;
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string id, parent, devno, root, mount_point;
    if (!(fields >> id >> parent >> devno >> root >> mount_point)) continue;
    // Unescape \040 (space), \011, \012, \134.
    std::string path;
    for (size_t i = 0; i < mount_point.size(); ++i) {
      if (mount_point[i] == '\\' && i + 3 < mount_point.size()) {
        path += static_cast<char>(std::strtol(mount_point.substr(i + 1, 3).c_str(), nullptr, 8));
        i += 3;
      } else {
        path += mount_point[i];
      }
    }
    if (path == dir || path.rfind(dir + "/", 0) == 0) mounts.push_back(path);
  }
  // Later mounts stack on earlier ones: unmount in reverse order of appearance.
  std::reverse(mounts.begin(), mounts.end());
  return mounts;
}

std::vector<pid_t> ProcessesMentioning(const std::string& needle, pid_t except) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    std::string name = e.path().filename();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    pid_t pid = static_cast<pid_t>(std::stol(name));
    if (pid == getpid() || pid == except) continue;
    // read(2): a filebuf throws when the process exits mid-read (ESRCH).
    const std::string cmd = ReadTextFile(e.path() / "cmdline");
    if (cmd.find(needle) != std::string::npos && ProcessAlive(pid)) out.push_back(pid);
  }
  return out;
}

std::vector<std::string> CgroupsNamed(const std::set<std::string>& ids) {
  std::vector<std::string> out;
  if (ids.empty()) return out;
  std::error_code ec;
  for (const auto& hierarchy : fs::directory_iterator("/sys/fs/cgroup", ec)) {
    std::error_code ec2;
    for (auto it = fs::recursive_directory_iterator(hierarchy.path(), ec2);
         it != fs::recursive_directory_iterator(); it.increment(ec2)) {
      if (ec2) break;
      if (!it->is_directory(ec2)) continue;
      if (ids.count(it->path().filename().string()) > 0) {
        out.push_back(it->path().string());
        it.disable_recursion_pending();
      } else if (it.depth() >= 3) {
        it.disable_recursion_pending();
      }
    }
  }
  return out;
}

std::vector<std::string> PodCgroupsUnder(const std::string& root) {
  std::vector<std::string> out;
  const std::string base = (root == "/" ? std::string() : root) + "/kubepods";
  for (const auto& h : CgroupHierarchyDirs()) {
    for (const char* qos : {"", "/burstable", "/besteffort"}) {
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(h + base + qos, ec)) {
        if (e.path().filename().string().rfind("pod", 0) == 0) out.push_back(e.path().string());
      }
    }
  }
  return out;
}

std::vector<std::string> PodNetworkBridges() {
  std::vector<std::string> out;
  struct if_nameindex* names = if_nameindex();
  if (names == nullptr) return out;
  for (auto* n = names; n->if_index != 0 && n->if_name != nullptr; ++n) {
    std::string name = n->if_name;
    std::string digits = name.substr(std::min(name.size(), sizeof(kCniBridgePrefix) - 1));
    if (name.rfind(kCniBridgePrefix, 0) == 0 && !digits.empty() &&
        std::all_of(digits.begin(), digits.end(), ::isdigit)) {
      out.push_back(name);
    }
  }
  if_freenameindex(names);
  return out;
}

std::set<std::string> AllocatedPodIps(const std::string& ipam_data_dir,
                                      const std::string& network) {
  std::set<std::string> ips;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(ipam_data_dir) / network, ec)) {
    std::string name = e.path().filename();
    // An IPv4 address: digits and dots only (last_reserved_ip.0 and lock are not).
    if (!name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
          return std::isdigit(static_cast<unsigned char>(c)) || c == '.';
        })) {
      ips.insert(name);
    }
  }
  return ips;
}

std::vector<std::string> CheckIpamHolds(const std::string& ipam_data_dir,
                                        const std::string& network,
                                        const std::set<std::string>& expected) {
  std::vector<std::string> out;
  auto allocated = AllocatedPodIps(ipam_data_dir, network);
  for (const auto& ip : allocated) {
    if (expected.count(ip) == 0)
      out.push_back("pod IP " + ip + " allocated, no live sandbox has it");
  }
  for (const auto& ip : expected) {
    if (allocated.count(ip) == 0) out.push_back("sandbox IP " + ip + " is not allocated");
  }
  return out;
}

std::vector<std::string> FindLeaks(const LeakScope& scope) {
  std::vector<std::string> leaks;
  pid_t containerd_pid = -1;
  if (scope.containerd != nullptr) {
    containerd_pid = scope.containerd->pid();
    // Shims exit by themselves once their last task is deleted: wait for each one's exit
    // (pidfd), up to the deadline, then list again.
    auto deadline = std::chrono::steady_clock::now() + scope.shim_timeout;
    for (pid_t p : scope.containerd->ShimPids()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      WaitProcessGone(p, std::max(left, std::chrono::milliseconds(0)));
    }
    std::vector<pid_t> shims = scope.containerd->ShimPids();
    for (pid_t p : shims) leaks.push_back("containerd shim " + std::to_string(p) + " left");
  }
  if (!scope.dir.empty()) {
    for (pid_t p : ProcessesMentioning(scope.dir, containerd_pid)) {
      leaks.push_back("process " + std::to_string(p) + " naming " + scope.dir + " left");
    }
  }
  for (pid_t p : scope.container_pids) {
    if (ProcessAlive(p)) leaks.push_back("container process " + std::to_string(p) + " left");
  }
  if (!scope.dir.empty()) {
    for (const auto& m : MountsUnder(scope.dir)) leaks.push_back("mount left: " + m);
  }
  for (const auto& cg : CgroupsNamed(scope.ids)) leaks.push_back("cgroup left: " + cg);
  if (scope.pod_ips && scope.containerd != nullptr && scope.containerd->has_pod_network()) {
    for (const auto& line : CheckIpamHolds(scope.containerd->ipam_data_dir(),
                                           scope.containerd->network_name(), *scope.pod_ips)) {
      leaks.push_back(line);
    }
  }
  return leaks;
}

}  // namespace nodelet::testing
