// StreamRelay: the supervisor's way to podworkerd for streaming sessions (exec, attach,
// port-forward). nodeletctl asks the supervisor on the ctl socket (CtlServer); the relay sends
// the StreamRequest to podworkerd on a DEALER of its own (not the pod manager's, whose replies
// are the work channel's), and hands each StreamReply back by its request_id. It never blocks
// the loop: a request podworkerd does not answer within the deadline (stopped, hung, busy) is
// answered with DeadlineExceeded; one that cannot be queued (podworkerd not running) at once with
// Unavailable. A late reply, whose request was answered already, is dropped.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "lib/common/status.h"
#include "lib/ipc/message.h"
#include "lib/ipc/sockets.h"
#include "lib/service/event_loop.h"
#include "supervisor/service_control.h"

namespace nodelet::supervisor {

struct StreamRelayOptions {
  // podworkerd's socket: ipc::kPodWorkerEndpoint in the run directory.
  std::string endpoint;
  // How long podworkerd has to answer (it asks the runtime for the session on a worker).
  Duration deadline = std::chrono::seconds(5);
};

class StreamRelay : public StreamOpener {
 public:
  StreamRelay(ipc::Context& ctx, EventLoop& loop, StreamRelayOptions options);
  ~StreamRelay() override;
  // Connects the DEALER and watches it on the loop.
  Status Start();
  void Open(const ipc::podwork::StreamRequestT& request, Done done) override;

  size_t pending() const { return pending_.size(); }
  // Requests answered with DeadlineExceeded; replies nobody waited for any more, or not
  // StreamReplies.
  uint64_t timed_out() const { return timed_out_; }
  uint64_t stray_replies() const { return stray_.count(); }

 private:
  struct Pending {
    MonoTime deadline;
    Done done;
  };
  void OnReadable();
  void OnTimer();
  void ArmTimer();
  // Calls `done` on the loop's next iteration (never from within Open).
  void Answer(Done done, ipc::podwork::StreamReplyT reply);

  EventLoop& loop_;
  StreamRelayOptions options_;
  ipc::DealerClient dealer_;
  ipc::EnvelopeWriter envelope_;
  EventLoop::Handle watch_;
  EventLoop::Timer timer_;
  std::map<uint64_t, Pending> pending_;
  uint64_t next_id_ = 1;
  uint64_t timed_out_ = 0;
  ipc::BadMessageCounter stray_;
  // Cleared when the relay goes: answers posted to the loop before then do not run after it.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace nodelet::supervisor
