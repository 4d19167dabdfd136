#include "lib/ipc/peer_access.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <limits>
#include <vector>

#include "lib/common/fs.h"
#include "lib/common/logging.h"
#include "lib/common/unique_fd.h"
#include "lib/ipc/server_check.h"

namespace nodelet::ipc {
namespace {

// ZAP (RFC 27) is served here; libzmq connects to it from every socket with a ZAP domain.
constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";
// One refusal warning per this period; the others are counted into the next line.
constexpr std::chrono::seconds kWarningPeriod(10);
// /proc/PID/status is a few KiB.
constexpr size_t kMaxProcStatusBytes = 64 * 1024;

template <typename T>
bool ParseUnsigned(std::string_view text, T* out) {
  if (text.empty()) return false;
  unsigned long long v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size()) return false;
  if (v > static_cast<unsigned long long>(std::numeric_limits<T>::max())) return false;
  *out = static_cast<T>(v);
  return true;
}

// The value of the line "KEY:\t..." of /proc/PID/status, without the key; nullopt when absent.
std::optional<std::string_view> StatusLine(std::string_view text, std::string_view key) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    if (line.size() > key.size() && line.substr(0, key.size()) == key && line[key.size()] == ':') {
      return line.substr(key.size() + 1);
    }
    pos = end + 1;
  }
  return std::nullopt;
}

// Whitespace-separated numbers; false on anything else.
template <typename T>
bool ParseNumbers(std::string_view text, std::vector<T>* out) {
  size_t pos = 0;
  while (pos < text.size()) {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t')) ++pos;
    if (pos >= text.size()) break;
    size_t end = pos;
    while (end < text.size() && text[end] != ' ' && text[end] != '\t') ++end;
    T v{};
    if (!ParseUnsigned(text.substr(pos, end - pos), &v)) return false;
    out->push_back(v);
    pos = end;
  }
  return true;
}

std::string UserName(uid_t uid) {
  std::vector<char> buf(4096);
  passwd pw{};
  passwd* found = nullptr;
  while (getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == ERANGE && buf.size() < (1 << 20)) {
    buf.resize(buf.size() * 2);
  }
  return found != nullptr ? std::string(found->pw_name) : std::to_string(uid);
}

}  // namespace

std::optional<PeerCredentials> ParsePeerAddress(std::string_view address) {
  // "HOST:UID:GID:PID": the last three fields are SO_PEERCRED's.
  std::string_view fields[3];
  std::string_view rest = address;
  for (int i = 2; i >= 0; --i) {
    size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    fields[i] = rest.substr(colon + 1);
    rest = rest.substr(0, colon);
  }
  PeerCredentials c;
  uint32_t uid = 0, gid = 0, pid = 0;
  if (!ParseUnsigned(fields[0], &uid) || !ParseUnsigned(fields[1], &gid) ||
      !ParseUnsigned(fields[2], &pid) || pid > static_cast<uint32_t>(INT32_MAX)) {
    return std::nullopt;
  }
  c.uid = uid;
  c.gid = gid;
  c.pid = static_cast<pid_t>(pid);
  return c;
}

std::optional<ProcCredentials> ParseProcStatus(std::string_view text) {
  auto uid_line = StatusLine(text, "Uid");
  auto groups_line = StatusLine(text, "Groups");
  if (!uid_line || !groups_line) return std::nullopt;
  std::vector<uid_t> uids;
  // Real, effective, saved, filesystem.
  if (!ParseNumbers(*uid_line, &uids) || uids.size() != 4) return std::nullopt;
  ProcCredentials out;
  out.euid = uids[1];
  if (!ParseNumbers(*groups_line, &out.groups)) return std::nullopt;
  return out;
}

std::optional<ProcCredentials> ReadProcCredentials(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  auto text = ReadFileBounded("/proc/" + std::to_string(pid) + "/status", kMaxProcStatusBytes);
  if (!text.ok()) return std::nullopt;
  return ParseProcStatus(*text);
}

Result<gid_t> ResolveAdminGroup(const std::string& name_or_gid) {
  if (name_or_gid.empty()) return InvalidArgument("--admin-group: empty group name");
  gid_t gid = 0;
  if (ParseUnsigned(std::string_view(name_or_gid), &gid)) {
    if (gid == static_cast<gid_t>(-1)) {
      return InvalidArgument("--admin-group: " + name_or_gid + " is not a valid gid");
    }
    return gid;
  }
  std::vector<char> buf(4096);
  group gr{};
  group* found = nullptr;
  int rc = 0;
  while ((rc = getgrnam_r(name_or_gid.c_str(), &gr, buf.data(), buf.size(), &found)) == ERANGE &&
         buf.size() < (1 << 20)) {
    buf.resize(buf.size() * 2);
  }
  if (found == nullptr) {
    return NotFound("--admin-group: no group named '" + name_or_gid + "'" +
                    (rc != 0 ? std::string(" (") + std::strerror(rc) + ")" : ""));
  }
  return found->gr_gid;
}

std::string GroupName(gid_t gid) {
  std::vector<char> buf(4096);
  group gr{};
  group* found = nullptr;
  while (getgrgid_r(gid, &gr, buf.data(), buf.size(), &found) == ERANGE && buf.size() < (1 << 20)) {
    buf.resize(buf.size() * 2);
  }
  return found != nullptr ? std::string(found->gr_name) : std::to_string(gid);
}

PeerPolicy PeerPolicy::ForThisProcess(std::optional<gid_t> admin_group) {
  return PeerPolicy{geteuid(), admin_group};
}

std::string PeerPolicy::Describe() const {
  std::string out = "root";
  if (self_euid != 0) out += ", uid " + std::to_string(self_euid);
  if (admin_group) out += " or members of group " + std::to_string(*admin_group);
  return out;
}

PeerDecision CheckPeer(const PeerPolicy& policy, const PeerCredentials& peer,
                       const ProcCredentialsReader& read_proc) {
  if (peer.uid == 0) return {true, "root"};
  if (peer.uid == policy.self_euid) return {true, "nodelet's own uid"};
  if (policy.admin_group) {
    const gid_t admin = *policy.admin_group;
    if (peer.gid == admin) return {true, "primary group " + std::to_string(admin)};
    if (peer.pid > 0 && read_proc) {
      // The pid is SO_PEERCRED's, from connect(); a process that has since exited and whose pid
      // was reused is caught by the euid check unless the new one has the same uid.
      auto proc = read_proc(peer.pid);
      if (proc && proc->euid == peer.uid &&
          std::find(proc->groups.begin(), proc->groups.end(), admin) != proc->groups.end()) {
        return {true, "supplementary group " + std::to_string(admin)};
      }
    }
  }
  std::string why = "uid " + std::to_string(peer.uid) + " gid " + std::to_string(peer.gid) +
                    " is not root, not uid " + std::to_string(policy.self_euid);
  why += policy.admin_group ? " and not in group " + std::to_string(*policy.admin_group)
                            : " (no --admin-group is set)";
  return {false, why};
}

Status PrepareRunDirectory(const std::string& path, const PeerPolicy& policy) {
  if (!policy.admin_group) return EnsureDirectory(path, 0700);
  const gid_t group = *policy.admin_group;
  struct stat st {};
  // Made when missing; an existing one is not chmodded on the way (that would clear a setgid bit
  // this process may not be able to set again).
  if (stat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) return ErrnoStatus("Failed to stat '" + path + "'", errno);
    if (Status s = EnsureDirectory(path, 0750); !s.ok()) return s;
    if (stat(path.c_str(), &st) != 0) return ErrnoStatus("Failed to stat '" + path + "'", errno);
  }
  if (!S_ISDIR(st.st_mode)) return InvalidArgument("'" + path + "' exists and is not a directory");
  // The group first, then the setgid bit (a chown clears it), so that what is made inside
  // (sockets) is the group's without a chown each: the services of the systemd units have no
  // CAP_CHOWN, and root may give a file only to its own groups without it. The change goes to
  // the directory opened O_NOFOLLOW, never through a link put in its place.
  UniqueFd dir(open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir.valid()) return ErrnoStatus("Failed to open '" + path + "'", errno);
  if (fstat(dir.get(), &st) != 0) return ErrnoStatus("Failed to stat '" + path + "'", errno);
  if (st.st_gid != group && fchown(dir.get(), static_cast<uid_t>(-1), group) != 0) {
    const int err = errno;
    return ErrnoStatus("Failed to give '" + path + "' to group " + GroupName(group) +
                           " (--admin-group; without CAP_CHOWN, make it 2750 root:" +
                           GroupName(group) + " beforehand, as the tmpfiles.d line can)",
                       err);
  }
  return EnsureDirectory(path, 02750);
}

PeerGate::PeerGate(zmq::context_t& ctx, PeerPolicy policy, const Clock& clock,
                   ProcCredentialsReader read_proc)
    : ctx_(ctx),
      policy_(policy),
      clock_(clock),
      read_proc_(read_proc ? std::move(read_proc) : ProcCredentialsReader(ReadProcCredentials)),
      zap_(ctx, zmq::socket_type::rep),
      stop_rx_(ctx, zmq::socket_type::pair),
      stop_tx_(ctx, zmq::socket_type::pair) {
  static std::atomic<uint64_t> next{0};
  stop_endpoint_ = "inproc://nodelet-peer-gate-stop-" + std::to_string(next++);
  zap_.set(zmq::sockopt::linger, 0);
  stop_rx_.set(zmq::sockopt::linger, 0);
  stop_tx_.set(zmq::sockopt::linger, 0);
}

Result<std::unique_ptr<PeerGate>> PeerGate::Start(zmq::context_t& ctx, PeerPolicy policy,
                                                  const Clock& clock,
                                                  ProcCredentialsReader read_proc) {
  std::unique_ptr<PeerGate> gate(new PeerGate(ctx, policy, clock, std::move(read_proc)));
  try {
    gate->zap_.bind(kZapEndpoint);
    gate->stop_rx_.bind(gate->stop_endpoint_);
    gate->stop_tx_.connect(gate->stop_endpoint_);
  } catch (const zmq::error_t& e) {
    return Internal(std::string("Failed to bind the peer credential check (ZAP handler): ") +
                    e.what());
  }
  // The sockets move to the thread; starting it is the memory barrier ZeroMQ asks for.
  gate->thread_ = std::thread([g = gate.get()] { g->Run(); });
  return gate;
}

PeerGate::~PeerGate() {
  if (thread_.joinable()) {
    try {
      stop_tx_.send(zmq::str_buffer("stop"), zmq::send_flags::none);
    } catch (const zmq::error_t&) {
    }
    thread_.join();
  }
  zap_.close();
  stop_rx_.close();
  stop_tx_.close();
}

void PeerGate::Run() {
  zmq::pollitem_t items[] = {{zap_.handle(), 0, ZMQ_POLLIN, 0},
                             {stop_rx_.handle(), 0, ZMQ_POLLIN, 0}};
  for (;;) {
    try {
      zmq::poll(items, 2, std::chrono::milliseconds(-1));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      return;  // the context is terminating
    }
    if (items[1].revents & ZMQ_POLLIN) return;
    if (!(items[0].revents & ZMQ_POLLIN)) continue;
    std::vector<zmq::message_t> request;
    try {
      for (;;) {
        zmq::message_t part;
        if (!zap_.recv(part, zmq::recv_flags::dontwait)) break;
        const bool more = part.more();
        request.push_back(std::move(part));
        if (!more) break;
      }
      if (!request.empty()) Answer(request);
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return;
    }
  }
}

void PeerGate::Answer(std::vector<zmq::message_t>& request) {
  // Version, request id, domain, address, routing id, mechanism, credentials...
  std::string status = "400";
  std::string text;
  std::string user_id;
  std::string domain = request.size() > 2 ? request[2].to_string() : "";
  std::string address = request.size() > 3 ? request[3].to_string() : "";
  std::optional<PeerCredentials> peer;
  if (request.size() < 6 || request[0].to_string() != "1.0") {
    status = "500";
    text = "malformed ZAP request";
  } else if (request[5].to_string() != "NULL") {
    text = "only the NULL mechanism is served";
  } else if (!(peer = ParsePeerAddress(address))) {
    text = "no peer credentials in the peer address '" + address + "'";
  } else {
    PeerDecision d = CheckPeer(policy_, *peer, read_proc_);
    if (d.allowed) {
      status = "200";
      user_id = std::to_string(peer->uid);
    }
    text = d.reason;
  }
  auto log = GetLogger("ipc");
  if (status == "200") {
    ++allowed_;
    log->debug("Allowed uid {} gid {} pid {} on {}: {}", peer->uid, peer->gid, peer->pid, domain,
               text);
  } else {
    ++refused_;
    const MonoTime now = clock_.Now();
    if (!warned_ || now - last_warning_ >= kWarningPeriod) {
      std::string who = peer ? "uid " + std::to_string(peer->uid) + " gid " +
                                   std::to_string(peer->gid) + " pid " + std::to_string(peer->pid)
                             : "a peer at '" + address + "'";
      std::string more = not_logged_ == 0 ? ""
                                          : " (" + std::to_string(not_logged_) +
                                                " more refused since the last warning, not logged)";
      log->warn("Refused a connection to {} from {}: {}{}", domain, who, text, more);
      warned_ = true;
      last_warning_ = now;
      not_logged_ = 0;
    } else {
      ++not_logged_;
    }
  }
  const std::string version = "1.0";
  zmq::message_t request_id(request.size() > 1 ? request[1].data() : nullptr,
                            request.size() > 1 ? request[1].size() : 0);
  zap_.send(zmq::buffer(version), zmq::send_flags::sndmore);
  zap_.send(request_id, zmq::send_flags::sndmore);
  zap_.send(zmq::buffer(status), zmq::send_flags::sndmore);
  zap_.send(zmq::buffer(text), zmq::send_flags::sndmore);
  zap_.send(zmq::buffer(user_id), zmq::send_flags::sndmore);
  zap_.send(zmq::str_buffer(""), zmq::send_flags::none);
}

std::string DescribeWhoMayConnect(const std::string& dir) {
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) return "needs root";
  std::string out = "needs root";
  if (st.st_uid != 0) out += " or user " + UserName(st.st_uid);
  if (st.st_gid != 0 && (st.st_mode & 0050) == 0050) out += " or group " + GroupName(st.st_gid);
  return out;
}

Status ProbeIpcSocket(const std::string& path) {
  // Not even a bare connect to a socket another user could have put there.
  if (Status s = CheckIpcServer("ipc://" + path); !s.ok()) return s;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return InvalidArgument("socket path too long: " + path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus("socket", errno);
  int rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  int err = errno;
  close(fd);
  if (rc == 0) return Status::Ok();
  if (err == EACCES || err == EPERM) {
    const std::string dir = path.substr(0, path.rfind('/'));
    return PermissionDenied("permission denied: " + path + " (" +
                            DescribeWhoMayConnect(dir.empty() ? "/" : dir) + ")");
  }
  return Unavailable(path + ": " + std::strerror(err));
}

}  // namespace nodelet::ipc
