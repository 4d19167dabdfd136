#include "lib/ipc/supervisor_peer.h"

#include <unistd.h>

#include "lib/common/fs.h"

namespace nodelet::ipc {
namespace {

// /proc/PID/cgroup has one line per hierarchy; a few KiB at most.
constexpr size_t kMaxCgroupBytes = 64 * 1024;

}  // namespace

std::optional<std::string> ReadProcCgroup(pid_t pid) {
  auto text = ReadFileBounded("/proc/" + std::to_string(pid) + "/cgroup", kMaxCgroupBytes);
  if (!text.ok()) return std::nullopt;
  return *text;
}

bool CgroupIsUnit(std::string_view cgroup_text, std::string_view unit) {
  size_t pos = 0;
  while (pos < cgroup_text.size()) {
    size_t end = cgroup_text.find('\n', pos);
    if (end == std::string_view::npos) end = cgroup_text.size();
    std::string_view line = cgroup_text.substr(pos, end - pos);
    pos = end + 1;
    // "ID:CONTROLLERS:PATH"; the path may itself hold ':'.
    const size_t first = line.find(':');
    const size_t second = first == std::string_view::npos ? first : line.find(':', first + 1);
    if (second == std::string_view::npos) continue;
    std::string_view path = line.substr(second + 1);
    const size_t slash = path.rfind('/');
    if (slash != std::string_view::npos && path.substr(slash + 1) == unit) return true;
  }
  return false;
}

SupervisorPeerCheck SupervisorPeerCheck::ForThisProcess() {
  SupervisorPeerCheck c;
  c.self = getpid();
  c.parent = getppid();
  return c;
}

PeerDecision CheckSupervisorPeer(const SupervisorPeerCheck& check,
                                 const std::optional<PeerCredentials>& peer) {
  if (!peer) return {false, "the sender's credentials are unknown (not an ipc:// connection)"};
  const std::string who = "uid " + std::to_string(peer->uid) + " gid " + std::to_string(peer->gid) +
                          " pid " + std::to_string(peer->pid);
  if (peer->pid <= 0) return {false, who + " is not visible in this pid namespace"};
  if (peer->pid == check.self) return {true, "this process"};
  // pid 1 is init (systemd), never the supervisor; a service whose parent died is reparented.
  if (check.parent > 1 && peer->pid == check.parent) {
    return {true, "the parent process (pid " + std::to_string(check.parent) + ")"};
  }
  if (check.read_cgroup) {
    auto cgroup = check.read_cgroup(peer->pid);
    if (cgroup && CgroupIsUnit(*cgroup, kSupervisorUnit)) {
      return {true, "the supervisor's unit (" + std::string(kSupervisorUnit) + ")"};
    }
  }
  return {false, who + " is not the supervisor (neither this service's parent pid " +
                     std::to_string(check.parent) + " nor a process of " +
                     std::string(kSupervisorUnit) + ")"};
}

}  // namespace nodelet::ipc
