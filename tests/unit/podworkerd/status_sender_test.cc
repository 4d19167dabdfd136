// StatusSender against a statusd stand-in (a real ROUTER on statusd's ipc:// endpoint in a temp
// dir, answering SetPodStatus and RecordEvents): statuses reach statusd; while statusd is away
// only each pod's newest status is kept and events wait in order, and both arrive once it comes.
#include "svc-podworkerd/status_sender.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lib/ipc/endpoints.h"
#include "lib/status/status_client.h"
#include "lib/status/status_codec.h"
#include "tests/testing/harness.h"

namespace nodelet::podworkerd {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
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

  // Waits (20 s at most) until `done(statuses by uid, event reasons)` holds.
  template <typename Pred>
  bool WaitFor(Pred done) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, 20s, [&] { return done(statuses_, events_); });
  }
  std::map<std::string, std::vector<std::string>> statuses() {
    std::lock_guard<std::mutex> lock(mu_);
    return statuses_;
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
      cv_.notify_all();
      (void)router_.Send(in->peer, fbb.GetBufferPointer(), fbb.GetSize());  // client retries
    }
  }

  ipc::RouterServer router_;
  Status bound_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<std::string>> statuses_;  // uid -> messages, in order
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
  // afresh, so one that is always too short never succeeds).
  StatusSenderOptions Quick() {
    StatusSenderOptions o;
    o.attempt_timeout = 500ms;
    o.deadline = 1500ms;
    o.retry_pause = 20ms;
    return o;
  }
  testing::TempDir dir_;
  ipc::Context ctx_;
};

TEST_F(StatusSenderTest, AStatusAndAnEventReachStatusd) {
  StatusdStandIn statusd(ctx_, dir_.path());
  ASSERT_TRUE(statusd.bound().ok()) << statusd.bound().ToString();
  StatusSender sender(ctx_, dir_.path(), Quick());
  sender.Send(Pod("a"), WithMessage("hello"));
  sender.SendEvents({Event("Started")});
  EXPECT_TRUE(statusd.WaitFor([](const auto& statuses, const auto& events) {
    return statuses.count("a") && events.size() == 1;
  }));
  EXPECT_THAT(statusd.statuses()["a"], ElementsAre("hello"));
  // Counted once the reply is in, just after statusd has it.
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (sender.sent() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(sender.sent(), 1u);
  EXPECT_EQ(sender.failed(), 0u);
}

TEST_F(StatusSenderTest, WhileStatusdIsAwayOnlyEachPodsNewestStatusIsKept) {
  StatusSender sender(ctx_, dir_.path(), Quick());
  sender.Send(Pod("a"), WithMessage("a1"));
  sender.Send(Pod("a"), WithMessage("a2"));
  sender.Send(Pod("a"), WithMessage("a3"));
  sender.Send(Pod("b"), WithMessage("b1"));
  std::vector<std::string> reasons;
  for (int i = 0; i < 5; ++i) reasons.push_back("E" + std::to_string(i));
  std::vector<status::PodEvent> events;
  for (const auto& r : reasons) events.push_back(Event(r));
  sender.SendEvents(events);
  StatusdStandIn statusd(ctx_, dir_.path());
  ASSERT_TRUE(statusd.bound().ok()) << statusd.bound().ToString();
  std::vector<std::string> got_events;
  ASSERT_TRUE(statusd.WaitFor([&](const auto& statuses, const auto& ev) {
    got_events = ev;
    auto a = statuses.find("a");
    return a != statuses.end() && a->second.back() == "a3" && statuses.count("b") &&
           ev.size() == reasons.size();
  }));
  EXPECT_EQ(got_events, reasons);
  auto statuses = statusd.statuses();
  // a1 may have been on its way when statusd came (it was taken before a2 and a3 were sent);
  // a2 was replaced while waiting and never sent.
  for (const auto& m : statuses["a"]) EXPECT_NE(m, "a2");
  EXPECT_LE(statuses["a"].size(), 2u);
  EXPECT_THAT(statuses["b"], ElementsAre("b1"));
}

TEST_F(StatusSenderTest, EventsBeyondTheCapAreDroppedWhileStatusdIsAway) {
  StatusSender sender(ctx_, dir_.path(), Quick());
  std::vector<status::PodEvent> events;
  for (size_t i = 0; i < StatusSender::kMaxQueuedEvents + 50; ++i) {
    events.push_back(Event("E" + std::to_string(i)));
  }
  sender.SendEvents(events);
  StatusdStandIn statusd(ctx_, dir_.path());
  ASSERT_TRUE(statusd.bound().ok());
  std::vector<std::string> got;
  ASSERT_TRUE(statusd.WaitFor([&](const auto&, const auto& ev) {
    got = ev;
    return ev.size() >= StatusSender::kMaxQueuedEvents;
  }));
  EXPECT_EQ(got.size(), StatusSender::kMaxQueuedEvents);
  EXPECT_EQ(got.front(), "E0");
}

}  // namespace
}  // namespace nodelet::podworkerd
