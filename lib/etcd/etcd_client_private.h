// What the etcd client's sources (etcd_client.cc, etcd_kv.cc, etcd_watch.cc, etcd_admin.cc)
// share and its users never see: one member's channel and stubs, the description of a call, the
// state the client and its watches share (Client::Shared), and the failover loop every call runs
// through it. It includes the generated gRPC code, so only lib/etcd's own sources include it.
#pragma once

#include <grpc/support/time.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "lib/common/clock.h"
#include "lib/common/status.h"
#include "lib/etcd/etcd.grpc.pb.h"
#include "lib/etcd/etcd_client.h"
#include "lib/etcd/etcd_rules.h"

namespace nodelet::etcd {

namespace pb = ::etcdserverpb;

// Between two rounds over every member: the pause a cluster needs to elect a leader, not a
// busy loop.
inline constexpr std::chrono::milliseconds kRoundPauseMin{25};
inline constexpr std::chrono::milliseconds kRoundPauseMax{500};

// The deadline of a gRPC call as a relative time: gRPC adds it to its own monotonic clock (see
// lib/cri/grpc_deadline.h for why not a system_clock time point).
inline gpr_timespec RelativeDeadline(std::chrono::milliseconds timeout) {
  return gpr_time_from_millis(timeout.count(), GPR_TIMESPAN);
}

inline std::chrono::milliseconds CeilMillis(Duration d) {
  return std::chrono::ceil<std::chrono::milliseconds>(d);
}

// gRPC's name of a status code ("UNAVAILABLE"), for messages.
const char* GrpcCodeName(grpc::StatusCode code);
// "'key'" for messages; keys are paths, but a binary one stays readable.
std::string Quote(const std::string& key);
// etcd's KeyValue as the client's.
KeyValue FromPb(const pb::KeyValue& kv);

// One member: its endpoint, channel and stubs.
struct Conn {
  Endpoint endpoint;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::KV::Stub> kv;
  std::unique_ptr<pb::Watch::Stub> watch;
  std::unique_ptr<pb::Lease::Stub> lease;
  std::unique_ptr<pb::Maintenance::Stub> maintenance;
  std::unique_ptr<pb::Auth::Stub> auth;
};

// What a call is, for its failover and its messages.
struct CallSpec {
  const char* what;  // "Put"
  std::string key;   // quoted into messages when not empty
  // A call whose repetition after an attempt that may have been applied lands in the same
  // state (reads, Put, Delete, ...); a compare-and-swap is not.
  bool repeatable = true;
  bool with_token = true;   // false for Authenticate itself
  bool need_leader = true;  // "hasleader": a member without a leader refuses at once
};

struct Client::Shared {
  Shared(ClientOptions o, const Clock& c) : options(std::move(o)), clock(c) {}

  // Runs `fn(conn, context)` on the members in turn from the current one, as the header says,
  // until it succeeds, fails for good, or `deadline` passes.
  template <typename Fn>
  Status Run(const CallSpec& spec, MonoTime deadline, Fn&& fn);
  template <typename Fn>
  Status Run(const CallSpec& spec, Fn&& fn) {
    return Run(spec, clock.Now() + options.timeout, std::forward<Fn>(fn));
  }

  // The auth token to send ("" without password auth), authenticating when there is none.
  Result<std::string> Token(MonoTime deadline);
  // Forgets `token` when it is still the current one (a member refused it).
  void DropToken(const std::string& token) {
    std::lock_guard<std::mutex> lock(token_mu);
    if (token_ == token) token_.clear();
  }
  // The member at `index` failed: the next call starts at the one after it (unless another
  // thread moved on already).
  void MovedOff(size_t index) {
    size_t expected = index;
    current.compare_exchange_strong(expected, (index + 1) % conns.size());
  }
  // Waits up to `budget` for the member's channel to be READY (connecting it when idle) and
  // returns its state. gRPC completes a connection only while some thread polls for it, and a
  // fail-fast call on a channel in TRANSIENT_FAILURE returns at once without polling: calls that
  // only failed fast would never see a member again after its first failure. So every attempt
  // first waits here, bounded. A connection attempt that fails now (refused) ends the wait at
  // once; a channel that was already failing (gRPC keeps reporting TRANSIENT_FAILURE while it
  // tries again) gets the whole budget to come back.
  grpc_connectivity_state Connect(Conn& conn, Duration budget);
  // The status of an attempt that did not get a connection in time (nothing was sent).
  static grpc::Status NotConnected(Duration budget);

  void Prepare(grpc::ClientContext* context, const CallSpec& spec, const std::string& token);
  std::string Describe(const CallSpec& spec, const Conn& conn, const grpc::Status& s) const;

  const ClientOptions options;
  const Clock& clock;
  std::vector<Conn> conns;
  std::atomic<size_t> current{0};

 private:
  std::mutex token_mu;
  std::string token_;
};

// The members a call tries, in turn from the current one, and the pause after each round in
// which every member failed (an election takes a moment), never past the call's deadline.
class Rotation {
 public:
  Rotation(Client::Shared& shared, MonoTime deadline)
      : shared_(shared), deadline_(deadline), index_(shared.current.load()) {}
  size_t index() const { return index_ % shared_.conns.size(); }
  Conn& conn() { return shared_.conns[index()]; }
  // The current member failed: the next call starts after it; this one tries the next.
  void Failed() {
    shared_.MovedOff(index());
    ++index_;
    if (++tried_in_round_ == shared_.conns.size()) {
      tried_in_round_ = 0;
      std::this_thread::sleep_for(std::min<Duration>(pause_, TimeUntil(shared_.clock, deadline_)));
      pause_ = std::min(pause_ * 2, kRoundPauseMax);
    }
  }

 private:
  Client::Shared& shared_;
  const MonoTime deadline_;
  size_t index_;
  size_t tried_in_round_ = 0;
  std::chrono::milliseconds pause_ = kRoundPauseMin;
};

template <typename Fn>
Status Client::Shared::Run(const CallSpec& spec, MonoTime deadline, Fn&& fn) {
  Rotation rotation(*this, deadline);
  bool reauthenticated = false;
  int attempts = 0;
  Status last;
  for (;;) {
    const Duration left = TimeUntil(clock, deadline);
    if (left <= Duration::zero()) break;
    std::string token;
    if (spec.with_token) {
      auto t = Token(deadline);
      if (!t.ok()) return t.status();
      token = std::move(*t);
    }
    Conn& conn = rotation.conn();
    ++attempts;
    const Duration connect_budget = std::min<Duration>(left, options.connect_timeout);
    const grpc_connectivity_state state = Connect(conn, connect_budget);
    grpc::Status s;
    const Duration call_left = TimeUntil(clock, deadline);
    if (call_left > Duration::zero() &&
        (state == GRPC_CHANNEL_READY || state == GRPC_CHANNEL_TRANSIENT_FAILURE)) {
      // In TRANSIENT_FAILURE the call fails at once, with gRPC's reason (refused, TLS, ...).
      grpc::ClientContext context;
      context.set_deadline(
          RelativeDeadline(std::min(CeilMillis(call_left), options.attempt_timeout)));
      Prepare(&context, spec, token);
      s = fn(conn, &context);
    } else {
      s = NotConnected(connect_budget);
    }
    if (s.ok()) {
      current.store(rotation.index());
      return Status::Ok();
    }
    const ErrorClass error = ClassifyError(s.error_code(), s.error_message());
    last = Status(error.code, Describe(spec, conn, s));
    if (error.stale_token && !token.empty() && !reauthenticated) {
      // Once: a token refused right after authenticating is not going to work.
      DropToken(token);
      reauthenticated = true;
      continue;
    }
    if (error.retry == Retry::kNo) return last;
    if (error.retry == Retry::kElsewhereIfRepeatable && !spec.repeatable) {
      return Unavailable(last.message() +
                         " (the write may or may not have been applied: read the key again)");
    }
    rotation.Failed();
  }
  std::string message = std::string("etcd ") + spec.what;
  if (!spec.key.empty()) message += " " + Quote(spec.key);
  message += ": no member succeeded within " + std::to_string(options.timeout.count()) + " ms (" +
             std::to_string(attempts) + " attempts)";
  if (!last.ok()) message += "; last: " + last.message();
  return Unavailable(message);
}

}  // namespace nodelet::etcd
