// StatusSender against a statusd stand-in (a real ROUTER on statusd's ipc:// endpoint in a temp
// dir, answering SetPodStatus and RecordEvents), its loop on a FakeClock: statuses reach statusd;
// while statusd is away only each pod's newest status is kept and events wait in order, and both
// arrive once it comes; a failed call is tried again only once its pause has passed on the loop's
// clock; destruction with a call in flight waits for that call alone.
#include "svc-podworkerd/status_sender.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "lib/ipc/endpoints.h"
#include "lib/service/event_loop.h"
#include "lib/status/status_client.h"
#include "lib/status/status_codec.h"
#include "tests/fakes/fake_clock.h"
#include "tests/testing/harness.h"

namespace nodelet::podworkerd {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using testing::FakeClock;
namespace fb = ::nodelet::ipc::status;

// Serves statusd's endpoint from its own thread until destroyed; records what it was sent.
class StatusdStandIn {
 public:
  StatusdStandIn(ipc::Context& ctx, const std::string& run_dir) : router_(ctx) {
    bound_ = router_.Bind(ipc::kStatusEndpoint.Uri(run_dir));
    if (bound_.ok()) thread_ = std::thread([this] { Serve(); });
  }
  ~StatusdStandIn() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  const Status& bound() const { return bound_; }

  // Whether `done(statuses by uid, event reasons)` holds now.
  template <typename Pred>
  bool Holds(Pred done) {
    std::lock_guard<std::mutex> lock(mu_);
    return done(statuses_, events_);
  }
  std::map<std::string, std::vector<std::string>> statuses() {
    std::lock_guard<std::mutex> lock(mu_);
    return statuses_;
  }
  // The uids of the statuses received, in the order they came.
  std::vector<std::string> order() {
    std::lock_guard<std::mutex> lock(mu_);
    return order_;
  }

 private:
  void Serve() {
    ipc::EnvelopeWriter envelope(ipc::ServiceId::Statusd, 7);
    uint64_t version = 0;
    while (!stop_) {
      auto in = router_.Receive(20ms);
      if (!in.ok()) continue;
      auto m = status::DecodeStatusMessage(in->payload.data(), in->payload.size(),
                                           status::kMaxRequestBytes);
      if (!m.ok()) continue;
      flatbuffers::FlatBufferBuilder fbb;
      if (const auto* set = (*m)->body_as_SetPodStatusRequest()) {
        status::PodIdentity pod = status::ReadPodIdentity(set->pod());
        status::PodStatus st = status::ReadPodStatus(set->status());
        {
          std::lock_guard<std::mutex> lock(mu_);
          statuses_[pod.uid].push_back(st.message);
          order_.push_back(pod.uid);
        }
        status::FinishStatusMessage(
            fbb, envelope, fb::Body::SetPodStatusReply,
            fb::CreateSetPodStatusReply(fbb, set->request_id(), ++version, true).Union());
      } else if (const auto* rec = (*m)->body_as_RecordEventsRequest()) {
        uint32_t n = 0;
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (rec->events()) {
            for (const auto* e : *rec->events()) {
              events_.push_back(status::ReadEvent(e).reason);
              ++n;
            }
          }
        }
        status::FinishStatusMessage(fbb, envelope, fb::Body::RecordEventsReply,
                                    fb::CreateRecordEventsReply(fbb, rec->request_id(), n).Union());
      } else {
        continue;
      }
      (void)router_.Send(in->peer, fbb.GetBufferPointer(), fbb.GetSize());  // client retries
    }
  }

  ipc::RouterServer router_;
  Status bound_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::map<std::string, std::vector<std::string>> statuses_;  // uid -> messages, in order
  std::vector<std::string> order_;                            // uids, in order
  std::vector<std::string> events_;                           // reasons, in order
  std::thread thread_;
};

status::PodIdentity Pod(const std::string& uid) {
  status::PodIdentity p;
  p.uid = uid;
  p.name = "pod-" + uid;
  p.namespace_ = "default";
  return p;
}

status::PodStatus WithMessage(const std::string& message) {
  status::PodStatus s;
  s.phase = status::PodPhase::kRunning;
  s.message = message;
  return s;
}

status::PodEvent Event(const std::string& reason) {
  status::PodEvent e;
  e.pod_uid = "a";
  e.pod_name = "pod-a";
  e.reason = reason;
  return e;
}

class StatusSenderTest : public ::testing::Test {
 protected:
  // Short pauses, so a statusd that comes late is reached soon; attempts long enough for a
  // connection and a round trip on a loaded machine under a sanitizer (each attempt connects
  // afresh, so one that is always too short never succeeds, and a reply later than the attempt
  // makes a resend, which the tests that count what statusd received would see).
  StatusSenderOptions Quick() {
    StatusSenderOptions o;
    o.attempt_timeout = 3s;
    o.deadline = 6s;
    o.retry_pause = 20ms;
    return o;
  }
  // Calls that give up within a second (statusd is away on purpose), yet whose one attempt is
  // long enough for a round trip under a sanitizer once statusd is there, and a pause that only a
  // test ends.
  StatusSenderOptions Failing() {
    StatusSenderOptions o;
    o.attempt_timeout = 1s;
    o.deadline = 1s;
    o.retry_pause = 1h;
    return o;
  }

  // Turns the loop (the calls' outcomes come back through it) until `done()` holds, at most
  // 20 s of real time. With `end_pauses`, a pause of `sender` is ended by moving the fake clock
  // past it; otherwise the fake clock does not move.
  bool RunUntil(StatusSender& sender, const std::function<bool()>& done, bool end_pauses = false) {
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      if (end_pauses && sender.pausing()) clock_.Advance(pause_);
      if (!loop_.RunOnce(10ms).ok()) return false;
    }
    return true;
  }
  // Turns the loop for `d` of real time.
  void Turn(std::chrono::milliseconds d) {
    const auto end = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < end) ASSERT_TRUE(loop_.RunOnce(10ms).ok());
  }
  std::unique_ptr<StatusSender> Make(StatusSenderOptions options) {
    pause_ = options.retry_pause;
    return std::make_unique<StatusSender>(loop_, ctx_, dir_.path(), options);
  }

  testing::TempDir dir_;
  ipc::Context ctx_;
  FakeClock clock_;
  EventLoop loop_{clock_};
  std::chrono::milliseconds pause_{0};
};

TEST_F(StatusSenderTest, AStatusAndAnEventReachStatusd) {
  StatusdStandIn statusd(ctx_, dir_.path());
  ASSERT_TRUE(statusd.bound().ok()) << statusd.bound().ToString();
  auto sender = Make(Quick());
  sender->Send(Pod("a"), WithMessage("hello"));
  sender->SendEvents({Event("Started")});
  // Counted once the reply is in, just after statusd has it.
  EXPECT_TRUE(RunUntil(*sender, [&] {
    return sender->sent() == 1 && statusd.Holds([](const auto& statuses, const auto& events) {
      return statuses.count("a") && events.size() == 1;
    });
  }));
  EXPECT_THAT(statusd.statuses()["a"], ElementsAre("hello"));
  EXPECT_EQ(sender->sent(), 1u);
  EXPECT_EQ(sender->failed(), 0u);
  EXPECT_TRUE(sender->Idle());
}

TEST_F(StatusSenderTest, WhileStatusdIsAwayOnlyEachPodsNewestStatusIsKept) {
  auto sender = Make(Quick());
  sender->Send(Pod("a"), WithMessage("a1"));
  sender->Send(Pod("a"), WithMessage("a2"));
  sender->Send(Pod("a"), WithMessage("a3"));
  sender->Send(Pod("b"), WithMessage("b1"));
  std::vector<std::string> reasons;
  for (int i = 0; i < 5; ++i) reasons.push_back("E" + std::to_string(i));
  std::vector<status::PodEvent> events;
  for (const auto& r : reasons) events.push_back(Event(r));
  sender->SendEvents(events);
  EXPECT_EQ(sender->Unsent(), (std::set<std::string>{"a", "b"}));
  StatusdStandIn statusd(ctx_, dir_.path());
  ASSERT_TRUE(statusd.bound().ok()) << statusd.bound().ToString();
  std::vector<std::string> got_events;
  ASSERT_TRUE(RunUntil(
      *sender,
      [&] {
        return statusd.Holds([&](const auto& statuses, const auto& ev) {
          got_events = ev;
          auto a = statuses.find("a");
          return a != statuses.end() && a->second.back() == "a3" && statuses.count("b") &&
                 ev.size() == reasons.size();
        });
      },
      true));
  EXPECT_EQ(got_events, reasons);
  auto statuses = statusd.statuses();
  // a1 may have been on its way when statusd came (it was taken before a2 and a3 were sent);
  // a2 was replaced while waiting and never sent.
  for (const auto& m : statuses["a"]) EXPECT_NE(m, "a2");
  EXPECT_LE(statuses["a"].size(), 2u);
  EXPECT_THAT(statuses["b"], ElementsAre("b1"));
}

TEST_F(StatusSenderTest, EventsBeyondTheCapAreDroppedWhileStatusdIsAway) {
  auto sender = Make(Quick());
  std::vector<status::PodEvent> events;
  for (size_t i = 0; i < StatusSender::kMaxQueuedEvents + 50; ++i) {
    events.push_back(Event("E" + std::to_string(i)));
  }
  sender->SendEvents(events);
  StatusdStandIn statusd(ctx_, dir_.path());
  ASSERT_TRUE(statusd.bound().ok());
  std::vector<std::string> got;
  ASSERT_TRUE(RunUntil(
      *sender,
      [&] {
        return statusd.Holds([&](const auto&, const auto& ev) {
          got = ev;
          return ev.size() >= StatusSender::kMaxQueuedEvents;
        });
      },
      true));
  EXPECT_EQ(got.size(), StatusSender::kMaxQueuedEvents);
  EXPECT_EQ(got.front(), "E0");
}

TEST_F(StatusSenderTest, AFailedSendIsTriedAgainOnlyAfterThePause) {
  auto sender = Make(Failing());
  sender->Send(Pod("a"), WithMessage("a1"));
  ASSERT_TRUE(RunUntil(*sender, [&] { return sender->failed() == 1 && !sender->calling(); }));
  EXPECT_TRUE(sender->pausing());
  // Newer statuses while the pause runs replace the one that failed; nothing is sent.
  sender->Send(Pod("b"), WithMessage("b1"));
  sender->Send(Pod("a"), WithMessage("a2"));
  sender->Send(Pod("a"), WithMessage("a3"));
  EXPECT_FALSE(sender->calling());
  EXPECT_EQ(sender->Unsent(), (std::set<std::string>{"a", "b"}));
  StatusdStandIn statusd(ctx_, dir_.path());
  ASSERT_TRUE(statusd.bound().ok());
  Turn(300ms);
  clock_.Advance(pause_ - 1ms);
  Turn(300ms);
  EXPECT_FALSE(sender->calling());
  EXPECT_TRUE(statusd.order().empty());
  EXPECT_EQ(sender->failed(), 1u);
  // The pause over: each pod's newest status, in the order of their uids.
  clock_.Advance(1ms);
  ASSERT_TRUE(RunUntil(*sender, [&] { return sender->sent() == 2; }));
  EXPECT_THAT(statusd.order(), ElementsAre("a", "b"));
  EXPECT_THAT(statusd.statuses()["a"], ElementsAre("a3"));
  EXPECT_THAT(statusd.statuses()["b"], ElementsAre("b1"));
  EXPECT_TRUE(sender->Idle());
  EXPECT_FALSE(sender->pausing());
}

TEST_F(StatusSenderTest, DestructionWaitsForTheCallInFlightAlone) {
  StatusSenderOptions options = Failing();
  options.attempt_timeout = 1s;
  options.deadline = 1s;
  auto sender = Make(options);
  sender->Send(Pod("a"), WithMessage("a1"));
  sender->Send(Pod("b"), WithMessage("b1"));
  ASSERT_TRUE(sender->calling());
  const auto began = std::chrono::steady_clock::now();
  sender.reset();
  // The call in flight gives up within its deadline; no pause and no further call follows.
  EXPECT_LT(std::chrono::steady_clock::now() - began, options.deadline + 2s);
  // Nothing comes back through the loop afterwards.
  Turn(50ms);
}

TEST_F(StatusSenderTest, DestructionDuringAPauseIsPrompt) {
  auto sender = Make(Failing());
  sender->Send(Pod("a"), WithMessage("a1"));
  ASSERT_TRUE(RunUntil(*sender, [&] { return sender->failed() == 1 && !sender->calling(); }));
  ASSERT_TRUE(sender->pausing());
  const auto began = std::chrono::steady_clock::now();
  sender.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - began, 1s);
}

}  // namespace
}  // namespace nodelet::podworkerd
