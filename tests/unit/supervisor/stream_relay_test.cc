// StreamRelay: the supervisor's requests for streaming sessions to podworkerd (a ROUTER here
// plays podworkerd), answered by request id, with a deadline, never from within Open.
#include "supervisor/stream_relay.h"

#include <gtest/gtest.h>

#include <optional>

#include "lib/ipc/codec.h"
#include "lib/ipc/endpoints.h"
#include "tests/testing/harness.h"

namespace nodelet::supervisor {
namespace {

using namespace std::chrono_literals;
using ipc::podwork::StreamReplyT;

class StreamRelayTest : public ::testing::Test {
 protected:
  std::string Endpoint() { return ipc::kPodWorkerEndpoint.Uri(dir_.path()); }
  // Runs the loop until `done` holds a reply or 5 s passed.
  void RunUntilAnswered() {
    const auto end = std::chrono::steady_clock::now() + 5s;
    while (!answer_ && std::chrono::steady_clock::now() < end) {
      ASSERT_TRUE(loop_.RunOnce(50ms).ok());
    }
  }
  StreamOpener::Done Done() {
    return [this](const StreamReplyT& r) { answer_ = r; };
  }
  // The request podworkerd got, and who sent it.
  ipc::podwork::StreamRequestT ReceiveRequest(ipc::RouterServer& server, std::string* peer) {
    ipc::podwork::StreamRequestT out;
    const auto end = std::chrono::steady_clock::now() + 5s;
    while (std::chrono::steady_clock::now() < end) {
      (void)loop_.RunOnce(10ms);
      auto in = server.Receive(10ms);
      if (!in.ok()) continue;
      *peer = in->peer;
      auto m = ipc::DecodeMessage<ipc::podwork::PodWorkMessage>(
          in->payload.data(), in->payload.size(), ipc::podwork::PodWorkMessageIdentifier());
      if (m.ok() && (*m)->body_as_StreamRequest()) (*m)->body_as_StreamRequest()->UnPackTo(&out);
      break;
    }
    return out;
  }
  void Answer(ipc::RouterServer& server, const std::string& peer, uint64_t id,
              const std::string& url) {
    flatbuffers::FlatBufferBuilder fbb(256);
    auto body = ipc::podwork::CreateStreamReplyDirect(fbb, url.c_str(), "c", "", 0, id);
    ASSERT_TRUE(ipc::SendMessage(server, peer, fbb, envelope_, ipc::podwork::Body::StreamReply,
                                 body.Union())
                    .ok());
  }

  testing::TempDir dir_;
  ipc::Context ctx_;
  EventLoop loop_{RealClock::Get()};
  ipc::EnvelopeWriter envelope_{ipc::ServiceId::Podworkerd, 1};
  std::optional<StreamReplyT> answer_;
};

TEST_F(StreamRelayTest, TheReplyWithTheRequestsIdIsRelayedAndOthersAreDropped) {
  ipc::RouterServer server(ctx_, ipc::kPodWorkChannel);
  ASSERT_TRUE(server.Bind(Endpoint()).ok());
  StreamRelay relay(ctx_, loop_, {Endpoint(), 5s});
  ASSERT_TRUE(relay.Start().ok());
  ipc::podwork::StreamRequestT ask;
  ask.namespace_name = "default";
  ask.pod_name = "box";
  ask.cmd = {"true"};
  // The connection is up before the request goes (ZMQ_IMMEDIATE would refuse it otherwise).
  const auto end = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < end) {
    relay.Open(ask, Done());
    if (relay.pending() == 1) break;
    ASSERT_TRUE(loop_.RunOnce(50ms).ok());  // the Unavailable answer, then try again
    answer_.reset();
  }
  ASSERT_EQ(relay.pending(), 1u);
  std::string peer;
  auto got = ReceiveRequest(server, &peer);
  EXPECT_EQ(got.pod_name, "box");
  ASSERT_NE(got.request_id, 0u);
  Answer(server, peer, got.request_id + 1000, "http://wrong");
  Answer(server, peer, got.request_id, "http://right");
  RunUntilAnswered();
  ASSERT_TRUE(answer_.has_value());
  EXPECT_EQ(answer_->url, "http://right");
  EXPECT_EQ(answer_->error, "");
  EXPECT_EQ(relay.pending(), 0u);
  EXPECT_EQ(relay.stray_replies(), 1u);
}

TEST_F(StreamRelayTest, NoAnswerWithinTheDeadlineIsDeadlineExceeded) {
  ipc::RouterServer server(ctx_, ipc::kPodWorkChannel);
  ASSERT_TRUE(server.Bind(Endpoint()).ok());
  StreamRelay relay(ctx_, loop_, {Endpoint(), 300ms});
  ASSERT_TRUE(relay.Start().ok());
  const auto end = std::chrono::steady_clock::now() + 5s;
  // Until the connection is up (Unavailable before), then the request nobody answers.
  do {
    answer_.reset();
    relay.Open({}, Done());
    RunUntilAnswered();
  } while (answer_ && answer_->code == static_cast<uint8_t>(StatusCode::kUnavailable) &&
           std::chrono::steady_clock::now() < end);
  ASSERT_TRUE(answer_.has_value());
  EXPECT_EQ(answer_->code, static_cast<uint8_t>(StatusCode::kDeadlineExceeded));
  EXPECT_EQ(answer_->error, "podworkerd did not answer within 300 ms");
  EXPECT_EQ(relay.timed_out(), 1u);
  EXPECT_EQ(relay.pending(), 0u);
}

TEST_F(StreamRelayTest, NoPodworkerdIsUnavailableAtOnceButNotWithinOpen) {
  StreamRelay relay(ctx_, loop_, {Endpoint(), 5s});
  ASSERT_TRUE(relay.Start().ok());
  relay.Open({}, Done());
  EXPECT_FALSE(answer_.has_value()) << "answered from within Open";
  ASSERT_TRUE(loop_.RunOnce(0ms).ok());
  ASSERT_TRUE(answer_.has_value());
  EXPECT_EQ(answer_->code, static_cast<uint8_t>(StatusCode::kUnavailable));
  EXPECT_NE(answer_->error.find("podworkerd cannot be reached"), std::string::npos)
      << answer_->error;
}

}  // namespace
}  // namespace nodelet::supervisor
