// RAII wrappers over cppzmq for the patterns of docs/design.md: control and work (ROUTER servers,
// DEALER clients with deadlines), events (PUB/SUB). Each socket belongs to one thread. Every
// socket has linger 0 and a ZeroMQ-level size limit; every receive has a deadline and returns a
// Status instead of throwing.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "lib/common/clock.h"
#include "lib/common/status.h"
#include "lib/ipc/codec.h"

namespace nodelet::ipc {

// One per process. ZeroMQ contexts are thread-safe; sockets are not.
class Context {
 public:
  Context() : ctx_(1) {}
  zmq::context_t& raw() { return ctx_; }

 private:
  zmq::context_t ctx_;
};

// Byte bounds on the queues (docs/security.md section 9). ZeroMQ's high-water marks count
// messages, not bytes, so a byte budget becomes a message count through the largest message the
// queue can hold: hwm = budget / max message bytes (at least 1), and hwm x max <= budget.
//   - Inbound queues are exact: ZeroMQ refuses (and disconnects) a peer whose frame is over the
//     socket's maxmsgsize, so every queued inbound frame is at most max_bytes.
//   - Outbound queues of PUB sockets are exact too: Publish() refuses a frame over max_bytes.
//   - Request/reply clients that pipeline account their bytes in flight themselves (see
//     status::PipelinedStatusClient) and refuse a send over their budget.
// A budget of kCountBoundOnly keeps the old count-only bound (kCountOnlyHwm messages of up to
// max_bytes each): the channels that have not chosen a budget yet (plegd's events, volumed's
// events) pass nothing and keep it; see docs/security.md section 9 for which channels are bounded.
inline constexpr size_t kCountBoundOnly = 0;
inline constexpr int kCountOnlyHwm = 100000;

// The message high-water mark that keeps `max_message_bytes`-sized messages within
// `budget_bytes`; at least 1 (one message of the largest size is always allowed).
constexpr int HwmForBudget(size_t budget_bytes, size_t max_message_bytes) {
  if (budget_bytes == kCountBoundOnly) return kCountOnlyHwm;
  if (max_message_bytes == 0) return 1;
  size_t n = budget_bytes / max_message_bytes;
  if (n < 1) n = 1;
  if (n > 1000000) n = 1000000;
  return static_cast<int>(n);
}

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
  size_t max_bytes() const { return max_bytes_; }
  // Bounds the inbound queue (per peer) to `budget_bytes`: rcvhwm = HwmForBudget(budget,
  // max_bytes()), kCountBoundOnly for the count-only default. Call before Bind/Connect.
  void BoundReceiveQueue(size_t budget_bytes);
  // The receive high-water mark in force (messages per peer).
  int ReceiveHwm();
  int SendHwm();

 protected:
  // Binds to `uri`. For ipc:// endpoints it first takes an flock on PATH.lock (held until this
  // socket is destroyed, or the process ends), then removes a stale socket file and sets `mode`
  // on the new one. A lock held by another live process is an error naming its pid: only the
  // holder ever unlinks the socket, so a second instance cannot steal a running one's socket.
  Status BindIpc(const std::string& uri, unsigned mode);
  Status ConnectTo(const std::string& uri);

  zmq::socket_t socket_;
  size_t max_bytes_;
  std::string bound_path_;
  int lock_fd_ = -1;
};

// The server side of control and work: many DEALER clients, replies routed by peer id.
class RouterServer : public SocketBase {
 public:
  explicit RouterServer(Context& ctx, size_t max_bytes = kDefaultMaxMessageBytes);
  // mode: permissions of the socket file (0600 by default; 0660 to let a group in).
  Status Bind(const std::string& uri, unsigned mode = 0600);
  // Waits up to `timeout` for one message. DeadlineExceeded when none came; InvalidArgument for
  // a malformed multipart message (which is dropped).
  Result<Incoming> Receive(std::chrono::milliseconds timeout);
  // Sends without blocking; Unavailable when the peer is gone or its queue is full.
  Status Send(const std::string& peer, const void* data, size_t size);
};

// A client of a RouterServer: connects (reconnects automatically), sends, receives.
class DealerClient : public SocketBase {
 public:
  explicit DealerClient(Context& ctx, size_t max_bytes = kDefaultMaxMessageBytes);
  Status Connect(const std::string& uri);
  // Sends without blocking; Unavailable when the queue to the peer is full.
  Status Send(const void* data, size_t size);
  // Waits up to `timeout` until a message can be queued (the connection is up: with
  // ZMQ_IMMEDIATE nothing is queued before); false at the deadline.
  bool WaitWritable(std::chrono::milliseconds timeout);
  Result<Frame> Receive(std::chrono::milliseconds timeout);
  // Drops the socket and connects a fresh one (the "Lazy Pirate" reset after a lost reply).
  Status Reconnect();

 private:
  std::string uri_;
  Context& ctx_;
};

// Request/reply with a deadline and retries over a DEALER: sends, waits for a reply whose
// request id matches (`match` decides), and on timeout reconnects and resends until the overall
// deadline. Never blocks past the deadline. Its deadlines are measured on `clock`, the process's
// RealClock unless the creator gives another that moves in real time (the waits are polls).
class RequestClient {
 public:
  RequestClient(Context& ctx, std::string uri, size_t max_bytes = kDefaultMaxMessageBytes,
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
  explicit Publisher(Context& ctx, size_t max_bytes = kDefaultMaxMessageBytes,
                     size_t queue_budget_bytes = kCountBoundOnly);
  Status Bind(const std::string& uri, unsigned mode = 0600);
  // ResourceExhausted for a message over max_bytes() (nothing is sent).
  Status Publish(const void* data, size_t size);
};

// SUB side: subscribes to everything. Its inbound queue holds at most `queue_budget_bytes`
// (rcvhwm from the budget and max_bytes); past it ZeroMQ drops messages (sequence gaps).
class Subscriber : public SocketBase {
 public:
  explicit Subscriber(Context& ctx, size_t max_bytes = kDefaultMaxMessageBytes,
                      size_t queue_budget_bytes = kCountBoundOnly);
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
