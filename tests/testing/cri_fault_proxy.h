// CriFaultProxy: a CRI-level shim for fault-injection tests. A gRPC server on its own unix socket
// forwards every unary call, as raw bytes with its metadata, to the real runtime socket (gRPC's
// generic API: it knows nothing about CRI messages, so containerd's own services pass too).
// Hooks keyed by the full method name ("/runtime.v1.RuntimeService/RunPodSandbox") run on the
// call's own thread at two points: before the call is forwarded, and after the runtime answered
// but before the answer goes back. A hook may block, which holds the call in flight there, and
// decides what happens next: go on, or fail the call (e.g. UNAVAILABLE, as a dead connection
// would). CallHold is the ready-made hook for "hold the next call of METHOD at POINT until the
// test releases it"; every hold has a deadline. A cancelled inbound call (its client died or gave
// up) cancels the outbound one and ends any hold of it. Every call is relayed as a unary one (one
// request, one answer): CRI's RuntimeService and ImageService as nodelet uses them are unary, and
// containerd 1.6 has no streaming CRI method (GetContainerEvents came in 1.7).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "lib/common/status.h"

namespace nodelet::testing {

// Where a hook runs in a forwarded call.
enum class ProxyPoint {
  kBeforeForward,  // the request arrived; the runtime has not seen it
  kAfterAnswer,    // the runtime answered; the caller has not heard it
};

// What a hook decided.
struct ProxyVerdict {
  // nullopt: go on (forward the request, or return the runtime's answer). Otherwise the caller
  // gets this code and message, and at kBeforeForward the runtime never sees the call.
  std::optional<std::pair<int, std::string>> fail;  // grpc::StatusCode, message
  static ProxyVerdict Proceed() { return {}; }
  static ProxyVerdict Unavailable(std::string message = "connection to the runtime lost") {
    return {std::make_pair(14, std::move(message))};  // grpc::StatusCode::UNAVAILABLE
  }
};

// What a hook sees of a call in flight.
struct ProxyCall {
  std::string method;
  ProxyPoint point = ProxyPoint::kBeforeForward;
  uint64_t serial = 0;  // the proxy's count of calls, from 1
  // The runtime's answer (kAfterAnswer only): its gRPC code (0 = OK) and message.
  int answer_code = 0;
  std::string answer_message;
  // True once the inbound call is cancelled (its client is gone); a blocking hook should
  // return when this turns true. Safe to call from any thread.
  std::function<bool()> cancelled;
};

// Runs on the call's own thread; may block (bounded: see CallHold).
using ProxyHook = std::function<ProxyVerdict(const ProxyCall&)>;

// Holds the first call of one method at one point, until Release(), the inbound call's
// cancellation, or the hold's deadline (then the call fails with UNAVAILABLE "hold expired").
// Thread-safe. Install it with CriFaultProxy::Hold.
class CallHold {
 public:
  enum class Outcome { kPending, kHeld, kReleased, kCancelled, kExpired };

  explicit CallHold(std::chrono::milliseconds deadline) : deadline_(deadline) {}

  // Waits until a call is held here; false at the timeout.
  bool WaitHeld(std::chrono::milliseconds timeout);
  // Lets the held call (or the next one, if none is held yet) go on with `verdict`.
  void Release(ProxyVerdict verdict = ProxyVerdict::Proceed());
  // Waits until the held call has left the hold (released, cancelled or expired); false at the
  // timeout.
  bool WaitDone(std::chrono::milliseconds timeout);
  Outcome outcome() const;
  // The call as it was held (its runtime answer at kAfterAnswer).
  ProxyCall held_call() const;

  // The hook itself (used by CriFaultProxy::Hold).
  ProxyVerdict Run(const ProxyCall& call);
  // Makes a held call look at its cancellation again (the proxy calls it when a call is
  // cancelled).
  void Wake();

 private:
  std::chrono::milliseconds deadline_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool taken_ = false;  // one call only
  Outcome outcome_ = Outcome::kPending;
  std::optional<ProxyVerdict> release_;
  ProxyCall call_;
};

struct CriFaultProxyOptions {
  // The socket the proxy listens on (created; an old file there is removed). Keep it short: a
  // unix socket path must fit in 107 bytes.
  std::string listen_path;
  // The real runtime, "unix:///abs/path".
  std::string upstream_endpoint;
  // Deadline of a forwarded call when the inbound call has none.
  std::chrono::milliseconds default_deadline{std::chrono::minutes(2)};
};

class CriFaultProxy {
 public:
  // Binds the socket and starts serving. The upstream is connected lazily, and again after the
  // runtime restarts (gRPC reconnects by itself).
  static Result<std::unique_ptr<CriFaultProxy>> Start(const CriFaultProxyOptions& options);
  // Shutdown(): cancels the calls in flight, ends their holds, waits for their threads.
  ~CriFaultProxy();
  CriFaultProxy(const CriFaultProxy&) = delete;
  CriFaultProxy& operator=(const CriFaultProxy&) = delete;

  std::string endpoint() const { return "unix://" + listen_path_; }

  // Installs (or, with an empty hook, removes) the hook of `method` at `point`.
  void SetHook(const std::string& method, ProxyPoint point, ProxyHook hook);
  // A CallHold on the first call of `method` at `point` from now on (replaces that hook).
  std::shared_ptr<CallHold> Hold(const std::string& method, ProxyPoint point,
                                 std::chrono::milliseconds deadline = std::chrono::seconds(60));

  // Calls that reached the proxy, by full method name (counted on arrival).
  int Calls(const std::string& method) const;
  // Calls currently in flight through the proxy.
  int InFlight() const;

  void Shutdown();

  struct Impl;

 private:
  explicit CriFaultProxy(std::string listen_path);
  std::string listen_path_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nodelet::testing
