// Who may talk to nodelet: the credential check every socket nodelet binds in the run directory
// applies to each peer that connects (docs/security.md, "Sockets and the HTTP endpoint").
//
// A peer is allowed when its uid is 0, or equals this process's euid, or the admin group
// (`--admin-group`) is its primary gid or one of its supplementary groups. The uid, gid and pid
// are the kernel's (SO_PEERCRED, taken at connect()), which libzmq appends to an ipc://
// connection's peer address ("localhost:UID:GID:PID") and hands to the ZAP handler; nothing the
// peer writes is trusted. Supplementary groups are read from /proc/PID/status ("Groups:") of that
// pid, and only when its effective uid there still matches SO_PEERCRED's.
//
// The check runs at the ZMTP handshake (ZAP, RFC 27): PeerGate serves the ZAP requests of one
// ipc::Context on a thread of its own; a refused peer's connection is closed before a message
// passes either way, and the peer's socket reports ZMQ_EVENT_HANDSHAKE_FAILED_AUTH with status
// 400 (DealerClient turns that into a PermissionDenied status).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "lib/common/clock.h"
#include "lib/common/status.h"

namespace nodelet::ipc {

// The kernel's credentials of a unix-socket peer (SO_PEERCRED: effective uid and gid at
// connect(), the pid in our pid namespace, 0 when it is not visible there).
struct PeerCredentials {
  uid_t uid = 0;
  gid_t gid = 0;
  pid_t pid = 0;
  bool operator==(const PeerCredentials&) const = default;
};

// Parses libzmq's peer address of an ipc:// connection: anything, then ":UID:GID:PID" (libzmq
// appends SO_PEERCRED's fields on Linux). nullopt for anything else (a tcp:// peer, garbage).
std::optional<PeerCredentials> ParsePeerAddress(std::string_view address);

// What /proc/PID/status says of a process's credentials.
struct ProcCredentials {
  uid_t euid = 0;             // "Uid:" second field
  std::vector<gid_t> groups;  // "Groups:" (supplementary)
};
// Parses the text of /proc/PID/status; nullopt when "Uid:" or "Groups:" is missing or malformed.
std::optional<ProcCredentials> ParseProcStatus(std::string_view text);
// Reads /proc/PID/status; nullopt when the process is gone or the file does not parse.
std::optional<ProcCredentials> ReadProcCredentials(pid_t pid);

// Resolves `--admin-group NAME|GID`: a number is a gid (it need not have a name), anything else
// is looked up as a group name. NotFound names the flag and the group.
Result<gid_t> ResolveAdminGroup(const std::string& name_or_gid);
// The group's name for messages, or its number when it has none.
std::string GroupName(gid_t gid);

// The policy of one process.
struct PeerPolicy {
  uid_t self_euid = 0;
  std::optional<gid_t> admin_group;
  // This process's euid and the given admin group.
  static PeerPolicy ForThisProcess(std::optional<gid_t> admin_group);
  // "root, uid 0 or members of group nodelet-admin" for messages.
  std::string Describe() const;
};

struct PeerDecision {
  bool allowed = false;
  // Why, for logs: "root", "nodelet's own uid", "primary group 1001", "supplementary group
  // 1001", or "uid 65534 gid 65534 is not root, not uid 0 and not in group 1001".
  std::string reason;
};

using ProcCredentialsReader = std::function<std::optional<ProcCredentials>(pid_t)>;

// Applies the policy. `read_proc` is asked for the supplementary groups only when uid and primary
// gid do not decide (and only for a pid > 0); its answer counts only when its euid is the peer's.
PeerDecision CheckPeer(const PeerPolicy& policy, const PeerCredentials& peer,
                       const ProcCredentialsReader& read_proc = ReadProcCredentials);

// Creates the run directory, or fixes an existing one: 0700 without an admin group (as before),
// 2750 and owned by the admin group with one, so the group can reach the sockets in it and the
// sockets made in it are the group's (setgid directory).
Status PrepareRunDirectory(const std::string& path, const PeerPolicy& policy);

// For a client's messages: who the directory `dir` lets reach the sockets in it, from its owner,
// group and mode: "needs root", "needs root or group nodelet-admin".
std::string DescribeWhoMayConnect(const std::string& dir);

// Connects to the unix socket at `path` and closes it again (no ZMTP), to tell the reasons a
// ZeroMQ connect would only retry on apart. PermissionDenied "permission denied: PATH (needs root
// or group X)" when the filesystem refuses (EACCES, EPERM); Unavailable "PATH: strerror" when
// nothing serves it.
Status ProbeIpcSocket(const std::string& path);

// Serves ZAP (inproc://zeromq.zap.01) for one ZeroMQ context on a thread of its own: every
// handshake on a socket that has a ZAP domain (SocketBase::BindIpc sets it to the socket's file
// name) is decided by CheckPeer. Refusals are logged as warnings, at most one line per 10 s
// (then with the count of the ones not logged), naming the socket, uid, gid and pid.
class PeerGate {
 public:
  // Binds the ZAP endpoint on `ctx` and starts the thread; the error when the endpoint is taken.
  static Result<std::unique_ptr<PeerGate>> Start(zmq::context_t& ctx, PeerPolicy policy,
                                                 const Clock& clock,
                                                 ProcCredentialsReader read_proc = {});
  // Stops and joins the thread, closing its sockets (before the context is terminated).
  ~PeerGate();
  PeerGate(const PeerGate&) = delete;
  PeerGate& operator=(const PeerGate&) = delete;

  const PeerPolicy& policy() const { return policy_; }
  uint64_t allowed() const { return allowed_.load(); }
  uint64_t refused() const { return refused_.load(); }

 private:
  PeerGate(zmq::context_t& ctx, PeerPolicy policy, const Clock& clock,
           ProcCredentialsReader read_proc);
  void Run();
  void Answer(std::vector<zmq::message_t>& request);

  zmq::context_t& ctx_;
  PeerPolicy policy_;
  const Clock& clock_;
  ProcCredentialsReader read_proc_;
  std::string stop_endpoint_;
  zmq::socket_t zap_;
  zmq::socket_t stop_rx_;
  zmq::socket_t stop_tx_;
  std::atomic<uint64_t> allowed_{0};
  std::atomic<uint64_t> refused_{0};
  // Rate limit of the refusal warnings (handler thread only).
  MonoTime last_warning_{};
  bool warned_ = false;
  uint64_t not_logged_ = 0;
  std::thread thread_;
};

}  // namespace nodelet::ipc
