// Which peer of a service's socket is the supervisor: the one channel capability nodelet has
// beyond "root or the admin group" (lib/ipc/peer_access.h). Only the supervisor may give
// podworkerd its desired set (docs/security.md): any other peer the credential check lets in (a
// service, an --admin-group member, a root process that is not nodelet) is refused.
//
// The supervisor is recognized by the kernel's pid of the connection (SO_PEERCRED, at connect();
// libzmq hands it with each message, Incoming::credentials), never by anything the peer writes:
//  - this very process (an in-process supervisor, as unit tests run one);
//  - the parent of this process: in the supervisor's process mode it forks each service (and the
//    service dies with it, PR_SET_PDEATHSIG), so the parent is the supervisor while we run;
//  - in systemd mode, a process of the supervisor's unit: its /proc/PID/cgroup path ends in
//    "/nodelet-supervisor.service" (only root can move a process into that cgroup).
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "lib/ipc/peer_access.h"

namespace nodelet::ipc {

// The systemd unit of the supervisor in systemd mode (deploy/nodelet-supervisor.service).
inline constexpr std::string_view kSupervisorUnit = "nodelet-supervisor.service";

// The text of /proc/PID/cgroup; nullopt when the process is gone.
using CgroupReader = std::function<std::optional<std::string>(pid_t)>;
std::optional<std::string> ReadProcCgroup(pid_t pid);

// True when some line of /proc/PID/cgroup's text ("ID:CONTROLLERS:PATH") has a path whose last
// component is `unit`.
bool CgroupIsUnit(std::string_view cgroup_text, std::string_view unit);

struct SupervisorPeerCheck {
  pid_t self = 0;    // getpid()
  pid_t parent = 0;  // getppid(), read at each check (it changes when the parent dies)
  CgroupReader read_cgroup = ReadProcCgroup;
  // This process's pid and parent now.
  static SupervisorPeerCheck ForThisProcess();
};

// allowed with the reason ("this process", "the parent process (pid N)", "the supervisor's unit")
// or refused naming the peer's uid, gid and pid and why.
PeerDecision CheckSupervisorPeer(const SupervisorPeerCheck& check,
                                 const std::optional<PeerCredentials>& peer);

}  // namespace nodelet::ipc
