#include "lib/ipc/sockets.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "lib/common/check.h"
#include "lib/common/fs.h"
#include "lib/ipc/router_receive.h"
#include "lib/ipc/server_check.h"

namespace nodelet::ipc {
namespace {

Status ZmqError(const std::string& what, const zmq::error_t& e) {
  if (e.num() == EAGAIN) return Unavailable(what + ": " + e.what());
  return Internal(what + ": " + e.what());
}

constexpr std::string_view kIpcScheme = "ipc://";

// A peer that connects and does not finish the ZMTP handshake within this time is dropped, so a
// client that connects and never speaks holds nothing for long (ZeroMQ's default is 30 s).
constexpr int kHandshakeDeadlineMs = 5000;

// ZeroMQ may hand out a frame that points into its receive buffer at any offset, and
// FlatBuffers reads scalars in place: a misaligned frame is copied once into memory of its own.
void AlignFrame(zmq::message_t& frame) {
  if (reinterpret_cast<uintptr_t>(frame.data()) % alignof(uint64_t) == 0) return;
  zmq::message_t copy(frame.data(), frame.size());
  frame.move(copy);
}

// A frame queued under RouterServer::BoundQueuedBytesPerPeer: ZeroMQ calls FreeQueuedFrame (on
// its I/O thread, or ours when the send fails) once the frame is written or dropped.
struct QueuedFrame {
  std::shared_ptr<std::atomic<size_t>> queued;
  size_t size;
};

void FreeQueuedFrame(void* data, void* hint) {
  auto* frame = static_cast<QueuedFrame*>(hint);
  // acq_rel: pairs with the fetch_add made after the copy, so the copy happens before the free.
  frame->queued->fetch_sub(frame->size, std::memory_order_acq_rel);
  delete frame;
  std::free(data);
}

// How many sends between sweeps of peers with nothing queued.
constexpr size_t kSweepEvery = 256;

}  // namespace

Status Context::RequirePeerPolicy(PeerPolicy policy, const Clock& clock) {
  if (gate_) return FailedPrecondition("the peer credential check is already in force");
  auto gate = PeerGate::Start(ctx_, policy, clock);
  if (!gate.ok()) return gate.status();
  gate_ = std::move(gate).value();
  return Status::Ok();
}

SocketBase::SocketBase(Context& ctx, zmq::socket_type type, size_t max_bytes)
    : context_(ctx), socket_(ctx.raw(), type), max_bytes_(max_bytes) {
  ApplyOptions();
}

void SocketBase::ApplyOptions() {
  socket_.set(zmq::sockopt::linger, 0);
  // ZeroMQ drops (and disconnects) a peer that sends a frame over the limit before we see it: it
  // reads the length in the frame header and disconnects without allocating.
  socket_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(max_bytes_));
  socket_.set(zmq::sockopt::handshake_ivl, kHandshakeDeadlineMs);
  if (rcvhwm_ > 0) socket_.set(zmq::sockopt::rcvhwm, rcvhwm_);
  if (sndhwm_ > 0) socket_.set(zmq::sockopt::sndhwm, sndhwm_);
}

SocketBase::~SocketBase() {
  socket_.close();
  if (!bound_path_.empty()) unlink(bound_path_.c_str());
  if (lock_fd_ >= 0) close(lock_fd_);
}

void SocketBase::BoundReceiveQueue(size_t budget_bytes) {
  rcvhwm_ = HwmForBudget(budget_bytes, max_bytes_);
  socket_.set(zmq::sockopt::rcvhwm, rcvhwm_);
}

void SocketBase::BoundSendQueue(size_t budget_bytes, size_t max_send_bytes) {
  max_send_bytes_ = max_send_bytes;
  sndhwm_ = HwmForBudget(budget_bytes, max_send_bytes);
  socket_.set(zmq::sockopt::sndhwm, sndhwm_);
}

Status SocketBase::CheckSendSize(size_t size) const {
  if (size <= max_send_bytes_) return Status::Ok();
  return ResourceExhausted("message of " + std::to_string(size) + " bytes exceeds the limit of " +
                           std::to_string(max_send_bytes_));
}

int SocketBase::ReceiveHwm() { return socket_.get(zmq::sockopt::rcvhwm); }
int SocketBase::SendHwm() { return socket_.get(zmq::sockopt::sndhwm); }

zmq::pollitem_t SocketBase::PollItem(short events) {
  return zmq::pollitem_t{socket_.handle(), 0, events, 0};
}

bool SocketBase::Readable() { return (socket_.get(zmq::sockopt::events) & ZMQ_POLLIN) != 0; }

Status SocketBase::BindIpc(const std::string& uri, unsigned mode) {
  std::string path;
  const PeerGate* gate = context_.gate();
  if (uri.rfind(kIpcScheme, 0) == 0) {
    path = uri.substr(kIpcScheme.size());
    if (gate != nullptr) {
      // Every handshake on this socket goes to the context's PeerGate (ZAP); the domain names
      // the socket in its log lines.
      socket_.set(zmq::sockopt::zap_domain, path.substr(path.rfind('/') + 1));
      // ZMQ_ZAP_ENFORCE_DOMAIN (a draft option in 4.3, compiled into Debian's libzmq): a handshake
      // with no ZAP handler to ask fails instead of passing. The gate is bound before any socket,
      // so this only matters if that ever changes; a libzmq without the option refuses it
      // (EINVAL), which is ignored.
      constexpr int kZapEnforceDomain = 93;
      int one = 1;
      (void)zmq_setsockopt(socket_.handle(), kZapEnforceDomain, &one, sizeof one);
      if (gate->policy().admin_group) mode = 0660;
    }
    if (lock_fd_ < 0) {
      Result<int> fd = LockSocketPath(path);
      if (!fd.ok()) return fd.status();
      lock_fd_ = *fd;
    }
    // A socket file left by a crashed predecessor would make bind fail. We hold its lock, so no
    // live process serves it.
    unlink(path.c_str());
  }
  try {
    socket_.bind(uri);
  } catch (const zmq::error_t& e) {
    return ZmqError("Failed to bind '" + uri + "'", e);
  }
  if (!path.empty()) {
    bound_path_ = path;
    if (gate != nullptr && gate->policy().admin_group) {
      // In a run directory of PrepareRunDirectory (setgid, the group's) the file is the group's
      // already; elsewhere it is given to it.
      const gid_t group = *gate->policy().admin_group;
      // Never through a link: lstat, and the change on the name itself (AT_SYMLINK_NOFOLLOW).
      struct stat st {};
      if (lstat(path.c_str(), &st) != 0) {
        return ErrnoStatus("Failed to stat '" + path + "'", errno);
      }
      if (!S_ISSOCK(st.st_mode)) return InvalidArgument("'" + path + "' is not a socket");
      if (st.st_gid != group && fchownat(AT_FDCWD, path.c_str(), static_cast<uid_t>(-1), group,
                                         AT_SYMLINK_NOFOLLOW) != 0) {
        return ErrnoStatus("Failed to give '" + path + "' to group " + std::to_string(group),
                           errno);
      }
    }
    if (chmod(path.c_str(), mode) != 0) return ErrnoStatus("Failed to chmod '" + path + "'", errno);
  }
  return Status::Ok();
}

Status SocketBase::ConnectTo(const std::string& uri) {
  // Who serves it, before anything can be sent (lib/ipc/server_check.h).
  if (Status s = CheckIpcServer(uri); !s.ok()) return s;
  try {
    socket_.connect(uri);
  } catch (const zmq::error_t& e) {
    return ZmqError("Failed to connect to '" + uri + "'", e);
  }
  return Status::Ok();
}

RouterServer::RouterServer(Context& ctx, size_t max_bytes)
    : SocketBase(ctx, zmq::socket_type::router, max_bytes) {
  // Replies to a vanished peer fail instead of being silently dropped.
  socket_.set(zmq::sockopt::router_mandatory, 1);
}

RouterServer::RouterServer(Context& ctx, const ChannelLimits& limits)
    : RouterServer(ctx, limits.requests.max_message_bytes) {
  BoundReceiveQueue(limits.requests.budget_bytes);
  BoundSendQueue(limits.replies.budget_bytes, limits.replies.max_message_bytes);
}

Status RouterServer::Bind(const std::string& uri, unsigned mode) { return BindIpc(uri, mode); }

Result<Incoming> RouterServer::Receive(std::chrono::milliseconds timeout) {
  return ReceiveWithCredentials(*this, timeout, nullptr);
}

Result<Incoming> ReceiveWithCredentials(RouterServer& server, std::chrono::milliseconds timeout,
                                        std::optional<PeerCredentials>* credentials) {
  zmq::pollitem_t item = server.PollItem();
  zmq::socket_t& socket = server.raw();
  try {
    if (zmq::poll(&item, 1, timeout) == 0) return DeadlineExceeded("no message");
    Incoming in;
    zmq::message_t id;
    if (!socket.recv(id, zmq::recv_flags::dontwait)) return DeadlineExceeded("no message");
    in.peer.assign(static_cast<const char*>(id.data()), id.size());
    if (!id.more()) return InvalidArgument("message without a body");
    if (!socket.recv(in.payload, zmq::recv_flags::dontwait)) {
      return InvalidArgument("message without a body");
    }
    if (in.payload.more()) {
      // Clients send exactly one body frame; drain the rest and refuse the message.
      zmq::message_t rest;
      while (socket.recv(rest, zmq::recv_flags::dontwait) && rest.more()) {
      }
      return InvalidArgument("message with more than one body frame");
    }
    // The kernel's credentials of the connection it came on (ipc:// only), before AlignFrame
    // may copy the frame without its metadata.
    if (credentials != nullptr) {
      const char* address = zmq_msg_gets(in.payload.handle(), "Peer-Address");
      *credentials = address != nullptr ? ParsePeerAddress(address) : std::nullopt;
    }
    AlignFrame(in.payload);
    return in;
  } catch (const zmq::error_t& e) {
    return ZmqError("Failed to receive", e);
  }
}

Status RouterServer::Send(const std::string& peer, const void* data, size_t size) {
  if (Status s = CheckSendSize(size); !s.ok()) return s;
  if (peer_budget_bytes_ == 0) {
    zmq::message_t body(data, size);
    return SendFrames(peer, body);
  }
  auto& queued = queued_[peer];
  if (!queued) queued = std::make_shared<std::atomic<size_t>>(0);
  const size_t now = queued->load(std::memory_order_acquire);
  if (now > 0 && now + size > peer_budget_bytes_) {
    return Unavailable("peer queue full (" + std::to_string(now) + " bytes queued, budget " +
                       std::to_string(peer_budget_bytes_) + ")");
  }
  void* copy = std::malloc(size > 0 ? size : 1);
  NODELET_CHECK(copy != nullptr);
  if (size > 0) std::memcpy(copy, data, size);
  queued->fetch_add(size, std::memory_order_acq_rel);
  // From here the frame owns `copy`; ZeroMQ frees it (FreeQueuedFrame) when it is written, or the
  // frame's destructor does when the send fails.
  zmq::message_t body(copy, size, FreeQueuedFrame, new QueuedFrame{queued, size});
  Status s = SendFrames(peer, body);
  if (++sends_since_sweep_ >= kSweepEvery) ForgetIdlePeers();
  return s;
}

Status RouterServer::SendFrames(const std::string& peer, zmq::message_t& body) {
  try {
    if (!socket_.send(zmq::buffer(peer), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      return Unavailable("peer queue full");
    }
    if (!socket_.send(body, zmq::send_flags::dontwait)) return Unavailable("peer queue full");
  } catch (const zmq::error_t& e) {
    if (e.num() == EHOSTUNREACH) return Unavailable("peer is gone");
    return ZmqError("Failed to send", e);
  }
  return Status::Ok();
}

void RouterServer::BoundQueuedBytesPerPeer(size_t budget_bytes) {
  peer_budget_bytes_ = budget_bytes;
}

size_t RouterServer::QueuedBytes(const std::string& peer) const {
  auto it = queued_.find(peer);
  return it == queued_.end() ? 0 : it->second->load(std::memory_order_acquire);
}

void RouterServer::ForgetIdlePeers() {
  sends_since_sweep_ = 0;
  // A peer with nothing queued costs nothing to count again from zero; frames still queued keep
  // their counter alive through their own reference.
  std::erase_if(queued_, [](const auto& entry) {
    return entry.second->load(std::memory_order_acquire) == 0;
  });
}

DealerClient::DealerClient(Context& ctx, size_t max_bytes)
    : SocketBase(ctx, zmq::socket_type::dealer, max_bytes), ctx_(ctx) {
  SetUp();
}

void DealerClient::SetUp() {
  // Messages are only queued for peers that are connected, so a reply is never sent into the
  // void of a half-made connection.
  socket_.set(zmq::sockopt::immediate, 1);
  socket_.set(zmq::sockopt::reconnect_ivl, 20);
  socket_.set(zmq::sockopt::reconnect_ivl_max, 500);
  // A server's credential check refuses at the handshake; only a monitor sees it.
  static std::atomic<uint64_t> next{0};
  const std::string endpoint = "inproc://nodelet-dealer-monitor-" + std::to_string(next++);
  monitor_.reset();
  refused_status_ = 0;
  if (zmq_socket_monitor(socket_.handle(), endpoint.c_str(), ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) !=
      0) {
    return;  // no monitor: a refusal then shows as the caller's deadline, as before
  }
  auto monitor = std::make_unique<zmq::socket_t>(ctx_.raw(), zmq::socket_type::pair);
  monitor->set(zmq::sockopt::linger, 0);
  try {
    monitor->connect(endpoint);
  } catch (const zmq::error_t&) {
    return;
  }
  monitor_ = std::move(monitor);
}

Status DealerClient::Refused() {
  while (monitor_ && refused_status_ == 0) {
    zmq::message_t event;
    try {
      if (!monitor_->recv(event, zmq::recv_flags::dontwait)) break;
      // Two frames: event id (16 bits) and value (32 bits), then the endpoint.
      zmq::message_t address;
      if (event.more()) (void)monitor_->recv(address, zmq::recv_flags::dontwait);
    } catch (const zmq::error_t&) {
      break;
    }
    if (event.size() < 6) continue;
    uint16_t id = 0;
    uint32_t value = 0;
    std::memcpy(&id, event.data(), sizeof id);
    std::memcpy(&value, static_cast<const char*>(event.data()) + 2, sizeof value);
    if (id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
      refused_status_ = value == 0 ? 400 : static_cast<int>(value);
  }
  if (refused_status_ == 0) return Status::Ok();
  std::string path = uri_.rfind(kIpcScheme, 0) == 0 ? uri_.substr(kIpcScheme.size()) : uri_;
  return PermissionDenied("permission denied: " + path + " refused this process's credentials" +
                          " (uid " + std::to_string(geteuid()) + ", gid " +
                          std::to_string(getegid()) + "; ZAP status " +
                          std::to_string(refused_status_) + ")");
}

DealerClient::DealerClient(Context& ctx, const ChannelLimits& limits)
    : DealerClient(ctx, limits.replies.max_message_bytes) {
  BoundReceiveQueue(limits.replies.budget_bytes);
  BoundSendQueue(limits.requests.budget_bytes, limits.requests.max_message_bytes);
}

Status DealerClient::Connect(const std::string& uri) {
  uri_ = uri;
  return ConnectTo(uri);
}

Status DealerClient::Send(const void* data, size_t size) {
  if (Status s = CheckSendSize(size); !s.ok()) return s;
  try {
    if (!socket_.send(zmq::const_buffer(data, size), zmq::send_flags::dontwait)) {
      return Unavailable("not connected to '" + uri_ + "' (or its queue is full)");
    }
  } catch (const zmq::error_t& e) {
    return ZmqError("Failed to send to '" + uri_ + "'", e);
  }
  return Status::Ok();
}

bool DealerClient::WaitWritable(std::chrono::milliseconds timeout) {
  if (!Refused().ok()) return false;
  zmq::pollitem_t items[2] = {PollItem(ZMQ_POLLOUT), {nullptr, 0, ZMQ_POLLIN, 0}};
  const int n = monitor_ ? 2 : 1;
  if (monitor_) items[1].socket = monitor_->handle();
  try {
    if (zmq::poll(items, n, timeout) <= 0) return false;
    if (items[0].revents & ZMQ_POLLOUT) return true;
    // Only a refusal wakes the monitor; a later call sees it through Refused().
    return false;
  } catch (const zmq::error_t&) {
    return false;
  }
}

Result<Frame> DealerClient::Receive(std::chrono::milliseconds timeout) {
  zmq::pollitem_t item = PollItem();
  try {
    if (zmq::poll(&item, 1, timeout) == 0) return DeadlineExceeded("no message");
    Frame f;
    if (!socket_.recv(f, zmq::recv_flags::dontwait)) return DeadlineExceeded("no message");
    if (f.more()) {
      // Servers send one frame; drain the rest and refuse it.
      Frame rest;
      while (socket_.recv(rest, zmq::recv_flags::dontwait) && rest.more()) {
      }
      return InvalidArgument("message with more than one frame");
    }
    AlignFrame(f);
    return f;
  } catch (const zmq::error_t& e) {
    return ZmqError("Failed to receive from '" + uri_ + "'", e);
  }
}

Status DealerClient::Reconnect() {
  monitor_.reset();
  socket_.close();
  socket_ = zmq::socket_t(ctx_.raw(), zmq::socket_type::dealer);
  ApplyOptions();
  SetUp();
  return ConnectTo(uri_);
}

RequestClient::RequestClient(Context& ctx, std::string uri, size_t max_bytes, const Clock& clock)
    : uri_(std::move(uri)), dealer_(ctx, max_bytes), clock_(clock) {
  // Replies of at most max_bytes, and requests no larger than the largest reply.
  dealer_.BoundReceiveQueue(kRequestClientQueueDepth * max_bytes);
  dealer_.BoundSendQueue(kRequestClientQueueDepth * max_bytes, max_bytes);
}

RequestClient::RequestClient(Context& ctx, std::string uri, const ChannelLimits& limits,
                             const Clock& clock)
    : uri_(std::move(uri)), dealer_(ctx, limits), clock_(clock) {
  const QueueLimits& replies = limits.replies;
  const QueueLimits& requests = limits.requests;
  if (replies.hwm() > kRequestClientQueueDepth) {
    dealer_.BoundReceiveQueue(kRequestClientQueueDepth * replies.max_message_bytes);
  }
  if (requests.hwm() > kRequestClientQueueDepth) {
    dealer_.BoundSendQueue(kRequestClientQueueDepth * requests.max_message_bytes,
                           requests.max_message_bytes);
  }
}

Status RequestClient::Connect() { return dealer_.Connect(uri_); }

Publisher::Publisher(Context& ctx, size_t max_bytes, size_t queue_budget_bytes)
    : SocketBase(ctx, zmq::socket_type::pub, max_bytes) {
  BoundSendQueue(queue_budget_bytes, max_bytes);
}

Status Publisher::Bind(const std::string& uri, unsigned mode) { return BindIpc(uri, mode); }

Status Publisher::Publish(const void* data, size_t size) {
  if (size > max_send_bytes_) {
    return ResourceExhausted("message of " + std::to_string(size) +
                             " bytes exceeds the publisher's limit of " +
                             std::to_string(max_send_bytes_));
  }
  try {
    socket_.send(zmq::const_buffer(data, size), zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    return ZmqError("Failed to publish", e);
  }
  return Status::Ok();
}

Subscriber::Subscriber(Context& ctx, size_t max_bytes, size_t queue_budget_bytes)
    : SocketBase(ctx, zmq::socket_type::sub, max_bytes) {
  socket_.set(zmq::sockopt::subscribe, "");
  BoundReceiveQueue(queue_budget_bytes);
  socket_.set(zmq::sockopt::reconnect_ivl, 20);
  socket_.set(zmq::sockopt::reconnect_ivl_max, 500);
}

Status Subscriber::Connect(const std::string& uri) { return ConnectTo(uri); }

Result<Frame> Subscriber::Receive(std::chrono::milliseconds timeout) {
  zmq::pollitem_t item = PollItem();
  try {
    if (zmq::poll(&item, 1, timeout) == 0) return DeadlineExceeded("no message");
    Frame f;
    if (!socket_.recv(f, zmq::recv_flags::dontwait)) return DeadlineExceeded("no message");
    AlignFrame(f);
    return f;
  } catch (const zmq::error_t& e) {
    return ZmqError("Failed to receive", e);
  }
}

}  // namespace nodelet::ipc
