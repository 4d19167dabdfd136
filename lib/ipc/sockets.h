// RAII wrappers over cppzmq for the patterns of docs/design.md: control and work (ROUTER servers,
// DEALER clients with deadlines), events (PUB/SUB). Each socket belongs to one thread. Every
// socket has linger 0 and a ZeroMQ-level size limit; every receive has a deadline and returns a
// Status instead of throwing. Queues are bounded in bytes through lib/ipc/channel_limits.h.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>
#include <zmq.hpp>

#include "lib/common/clock.h"
#include "lib/common/status.h"
#include "lib/ipc/channel_limits.h"
#include "lib/ipc/codec.h"
#include "lib/ipc/peer_access.h"

namespace nodelet::ipc {

// One per process. ZeroMQ contexts are thread-safe; sockets are not.
class Context {
 public:
  Context() : ctx_(1) {}
  zmq::context_t& raw() { return ctx_; }

  // From now on every ipc:// socket this context binds checks the credentials of each peer that
  // connects against `policy` (lib/ipc/peer_access.h), and its file is 0660 and owned by the
  // admin group when the policy has one. Call once, before binding. Every nodelet process does;
  // a context without it (tests, nodeletctl) binds as before.
  Status RequirePeerPolicy(PeerPolicy policy, const Clock& clock = RealClock::Get());
  // The check in force, or null.
  const PeerGate* gate() const { return gate_.get(); }

 private:
  zmq::context_t ctx_;
  // Declared after ctx_: its thread and sockets end before the context is terminated.
  std::unique_ptr<PeerGate> gate_;
};

// A message body (one frame).
using Frame = zmq::message_t;

// A frame from a ROUTER socket with the routing id of the peer that sent it.
struct Incoming {
  std::string peer;  // opaque routing id; pass back to Send()
  Frame payload;
};

// Common base: owns the zmq socket, applies the shared options.
class SocketBase {
 public:
  SocketBase(Context& ctx, zmq::socket_type type, size_t max_bytes);
  SocketBase(const SocketBase&) = delete;
  SocketBase& operator=(const SocketBase&) = delete;
  virtual ~SocketBase();

  // For zmq::poll: the socket as a poll item.
  zmq::pollitem_t PollItem(short events = ZMQ_POLLIN);
  // True when a message can be received now without blocking.
  bool Readable();
  zmq::socket_t& raw() { return socket_; }
  // The largest frame accepted from a peer (ZeroMQ's maxmsgsize).
  size_t max_bytes() const { return max_bytes_; }
  // The largest frame Send()/Publish() accept.
  size_t max_send_bytes() const { return max_send_bytes_; }
  // Bounds the inbound queue (per peer) to `budget_bytes`: rcvhwm = HwmForBudget(budget,
  // max_bytes()). Call before Bind/Connect.
  void BoundReceiveQueue(size_t budget_bytes);
  // Bounds the outbound queue (per peer) to `budget_bytes` of frames of at most
  // `max_send_bytes`: sndhwm = HwmForBudget(budget, max_send_bytes), and a larger frame is
  // refused (ResourceExhausted, nothing sent). Call before Bind/Connect.
  void BoundSendQueue(size_t budget_bytes, size_t max_send_bytes);
  // The high-water marks in force (messages per peer).
  int ReceiveHwm();
  int SendHwm();

 protected:
  // Binds to `uri`. For ipc:// endpoints it first takes an flock on PATH.lock (held until this
  // socket is destroyed, or the process ends), then removes a stale socket file and sets `mode`
  // on the new one. A lock held by another live process is an error naming its pid: only the
  // holder ever unlinks the socket, so a second instance cannot steal a running one's socket.
  // With a PeerPolicy on the context (Context::RequirePeerPolicy), the socket gets a ZAP domain
  // (its file name), so every peer is checked at the handshake, and with an admin group its file
  // is 0660 and owned by that group whatever `mode` says.
  Status BindIpc(const std::string& uri, unsigned mode);
  Status ConnectTo(const std::string& uri);
  // Sets the options every socket has (linger, size limit, handshake deadline, the marks); again
  // on a socket made anew.
  void ApplyOptions();
  // ResourceExhausted for a frame over max_send_bytes().
  Status CheckSendSize(size_t size) const;

  Context& context_;
  zmq::socket_t socket_;
  size_t max_bytes_;
  size_t max_send_bytes_ = SIZE_MAX;
  int rcvhwm_ = 0;  // 0: ZeroMQ's default
  int sndhwm_ = 0;
  std::string bound_path_;
  int lock_fd_ = -1;
};

// The server side of control and work: many DEALER clients, replies routed by peer id.
class RouterServer : public SocketBase {
 public:
  explicit RouterServer(Context& ctx, size_t max_bytes = kDefaultMaxMessageBytes);
  // The server end of `limits`: requests of at most limits.requests.max_message_bytes, each
  // peer's inbound queue within its budget; replies likewise within limits.replies.
  RouterServer(Context& ctx, const ChannelLimits& limits);
  // mode: permissions of the socket file (0600 by default; 0660 to let a group in).
  Status Bind(const std::string& uri, unsigned mode = 0600);
  // Waits up to `timeout` for one message. DeadlineExceeded when none came; InvalidArgument for
  // a malformed multipart message (which is dropped).
  Result<Incoming> Receive(std::chrono::milliseconds timeout);
  // Sends without blocking; Unavailable when the peer is gone or its queue is full (by count,
  // or by bytes under BoundQueuedBytesPerPeer); ResourceExhausted for a frame over the limit.
  Status Send(const std::string& peer, const void* data, size_t size);

  // Counts, exactly, the bytes of frames queued to each peer and not yet written to its
  // connection, and refuses (Unavailable, nothing queued) a Send that would take a peer over
  // `budget_bytes`; a peer with nothing queued may always get one frame. For replies whose sizes
  // vary too much for a count (sndhwm) to bound their bytes. Each frame is then copied into
  // memory whose release ZeroMQ reports (zero-copy with a free function).
  void BoundQueuedBytesPerPeer(size_t budget_bytes);
  // Bytes queued to `peer` (with BoundQueuedBytesPerPeer; 0 otherwise).
  size_t QueuedBytes(const std::string& peer) const;

 private:
  Status SendFrames(const std::string& peer, zmq::message_t& body);
  void ForgetIdlePeers();

  size_t peer_budget_bytes_ = 0;  // 0: not counted
  std::unordered_map<std::string, std::shared_ptr<std::atomic<size_t>>> queued_;
  size_t sends_since_sweep_ = 0;
};

// A client of a RouterServer: connects (reconnects automatically), sends, receives.
class DealerClient : public SocketBase {
 public:
  explicit DealerClient(Context& ctx, size_t max_bytes = kDefaultMaxMessageBytes);
  // The client end of `limits`: replies of at most limits.replies.max_message_bytes, its
  // inbound queue within that budget; requests likewise within limits.requests.
  DealerClient(Context& ctx, const ChannelLimits& limits);
  Status Connect(const std::string& uri);
  // Sends without blocking; Unavailable when the queue to the peer is full.
  Status Send(const void* data, size_t size);
  // Waits up to `timeout` until a message can be queued (the connection is up: with
  // ZMQ_IMMEDIATE nothing is queued before); false at the deadline, or at once when the server
  // refused this process's credentials (see Refused()).
  bool WaitWritable(std::chrono::milliseconds timeout);
  // PermissionDenied once the server refused this process at the handshake (its credential
  // check, lib/ipc/peer_access.h: ZAP status 400, seen through a socket monitor), naming the
  // socket path; OK otherwise. ZeroMQ would only reconnect and be refused again.
  Status Refused();
  Result<Frame> Receive(std::chrono::milliseconds timeout);
  // Drops the socket and connects a fresh one (the "Lazy Pirate" reset after a lost reply), with
  // the same options and bounds.
  Status Reconnect();

 private:
  // Applies the client options and starts the monitor of handshake refusals on socket_.
  void SetUp();

  std::string uri_;
  Context& ctx_;
  // A PAIR connected to socket_'s monitor (ZMQ_EVENT_HANDSHAKE_FAILED_AUTH only).
  std::unique_ptr<zmq::socket_t> monitor_;
  int refused_status_ = 0;  // the ZAP status code of a refusal, 0 when none
};

// Request/reply with a deadline and retries over a DEALER: sends, waits for a reply whose
// request id matches (`match` decides), and on timeout reconnects and resends until the overall
// deadline. Never blocks past the deadline. One request is out at a time, so each way at most
// kRequestClientQueueDepth messages are queued (replies of at most max_bytes each). Its deadlines
// are measured on `clock`, the process's RealClock unless the creator gives another that moves in
// real time (the waits are polls).
class RequestClient {
 public:
  RequestClient(Context& ctx, std::string uri, size_t max_bytes = kDefaultMaxMessageBytes,
                const Clock& clock = RealClock::Get());
  // The client end of `limits` (its marks no higher than kRequestClientQueueDepth).
  RequestClient(Context& ctx, std::string uri, const ChannelLimits& limits,
                const Clock& clock = RealClock::Get());
  Status Connect();
  // `match` returns true for the reply that answers this request (stale replies from an earlier
  // attempt are skipped). `attempt_timeout` bounds each try; `deadline` bounds the whole call.
  template <typename Match>
  Result<Frame> Call(const void* data, size_t size, std::chrono::milliseconds attempt_timeout,
                     std::chrono::milliseconds deadline, Match match);

 private:
  std::string uri_;
  DealerClient dealer_;
  const Clock& clock_;
};

// PUB side of the events pattern. Slow subscribers drop messages (high-water mark); sequence
// numbers in the envelope let them notice and resynchronise. The queue to each subscriber holds
// at most `queue_budget_bytes`: sndhwm = HwmForBudget(queue_budget_bytes, max_bytes), and a
// message over max_bytes is refused. At the high-water mark ZeroMQ drops the message for that
// subscriber only (PUB never blocks); the publisher cannot tell which subscriber missed it.
class Publisher : public SocketBase {
 public:
  Publisher(Context& ctx, size_t max_bytes, size_t queue_budget_bytes);
  Publisher(Context& ctx, const QueueLimits& limits)
      : Publisher(ctx, limits.max_message_bytes, limits.budget_bytes) {}
  Status Bind(const std::string& uri, unsigned mode = 0600);
  // ResourceExhausted for a message over max_bytes() (nothing is sent).
  Status Publish(const void* data, size_t size);
};

// SUB side: subscribes to everything. Its inbound queue holds at most `queue_budget_bytes`
// (rcvhwm from the budget and max_bytes); past it ZeroMQ drops messages (sequence gaps).
class Subscriber : public SocketBase {
 public:
  Subscriber(Context& ctx, size_t max_bytes, size_t queue_budget_bytes);
  Subscriber(Context& ctx, const QueueLimits& limits)
      : Subscriber(ctx, limits.max_message_bytes, limits.budget_bytes) {}
  Status Connect(const std::string& uri);
  Result<Frame> Receive(std::chrono::milliseconds timeout);
};

template <typename Match>
Result<Frame> RequestClient::Call(const void* data, size_t size,
                                  std::chrono::milliseconds attempt_timeout,
                                  std::chrono::milliseconds deadline, Match match) {
  const auto end = clock_.Now() + deadline;
  Status last = DeadlineExceeded("no reply from " + uri_);
  while (clock_.Now() < end) {
    const auto attempt_end = std::min(end, clock_.Now() + attempt_timeout);
    // A fresh (or re-made) connection takes a moment: wait for it within this attempt instead
    // of failing the send and waiting for a reply that cannot come.
    auto until_attempt_end =
        std::chrono::duration_cast<std::chrono::milliseconds>(attempt_end - clock_.Now());
    (void)dealer_.WaitWritable(std::max(until_attempt_end, std::chrono::milliseconds(0)));
    // Refused at the handshake: every retry would be too.
    if (Status s = dealer_.Refused(); !s.ok()) return s;
    if (Status s = dealer_.Send(data, size); !s.ok()) last = s;
    for (;;) {
      auto now = clock_.Now();
      if (now >= attempt_end) break;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(attempt_end - now);
      auto frame = dealer_.Receive(std::max(left, std::chrono::milliseconds(1)));
      if (!frame.ok()) {
        if (frame.status().code() == StatusCode::kDeadlineExceeded) break;
        last = frame.status();
        continue;
      }
      if (match(*frame)) return std::move(frame).value();
    }
    if (clock_.Now() >= end) break;
    // Lazy Pirate: the reply may be lost for good; start over on a fresh socket.
    if (Status s = dealer_.Reconnect(); !s.ok()) return s;
  }
  if (last.code() == StatusCode::kDeadlineExceeded) {
    return DeadlineExceeded("no reply from " + uri_ + " within " +
                            std::to_string(deadline.count()) + " ms");
  }
  return last;
}

}  // namespace nodelet::ipc
