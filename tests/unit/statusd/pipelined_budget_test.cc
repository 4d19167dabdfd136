// PipelinedStatusClient's budget of requests in flight (docs/security.md section 9): against a
// statusd stand-in that has stopped answering, large SetPodStatus requests are accepted until the
// bytes awaiting a reply would pass kPipelinedMaxInFlightBytes; the next is refused with
// ResourceExhausted (nothing sent, nothing dropped), and once the replies come, sending works
// again.
#include <gtest/gtest.h>

#include <string>

#include "lib/ipc/endpoints.h"
#include "lib/ipc/sockets.h"
#include "lib/status/status_client.h"
#include "lib/status/status_codec.h"
#include "tests/testing/harness.h"

namespace nodelet::status {
namespace {

using namespace std::chrono_literals;

TEST(PipelinedBudgetTest, SendsOverTheInFlightBudgetAreRefusedUntilRepliesCome) {
  nodelet::testing::TempDir dir;
  ipc::Context ctx;
  ipc::RouterServer statusd(ctx, 4 * 1024 * 1024);
  ASSERT_TRUE(statusd.Bind(ipc::kStatusEndpoint.Uri(dir.path())).ok());
  PipelinedStatusClient client(ctx, dir.path(), ipc::ServiceId::Podworkerd);
  ASSERT_TRUE(client.Connect().ok());

  PodIdentity pod;
  pod.namespace_ = "default";
  pod.name = "big";
  pod.uid = "u-big";
  PodStatus st;
  st.phase = PodPhase::kRunning;
  st.message = std::string(900 * 1024, 'm');

  size_t sent = 0;
  Status refused;
  while (sent < 1000) {
    auto id = client.SendSetPodStatus(pod, st, 5s);
    if (!id.ok()) {
      refused = id.status();
      break;
    }
    ++sent;
    ASSERT_LE(client.in_flight_bytes(), kPipelinedMaxInFlightBytes);
  }
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused.ToString();
  EXPECT_NE(refused.message().find("receive replies first"), std::string::npos)
      << refused.message();
  EXPECT_EQ(client.in_flight_requests(), sent);
  EXPECT_GT(client.in_flight_bytes(), kPipelinedMaxInFlightBytes - 1024 * 1024);
  EXPECT_LE(client.in_flight_bytes(), kPipelinedMaxInFlightBytes);
  // About 64 MiB / 900 KiB requests.
  EXPECT_GE(sent, 60u);
  EXPECT_LE(sent, 80u);

  // Every accepted request reached statusd (none was dropped); answer them all.
  ipc::EnvelopeWriter env(ipc::ServiceId::Statusd, 7);
  for (size_t i = 0; i < sent; ++i) {
    auto in = statusd.Receive(5s);
    ASSERT_TRUE(in.ok()) << in.status().ToString() << " after " << i;
    auto m = DecodeStatusMessage(in->payload.data(), in->payload.size(), kMaxRequestBytes);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    flatbuffers::FlatBufferBuilder fbb;
    FinishStatusMessage(fbb, env, fb::Body::SetPodStatusReply,
                        fb::CreateSetPodStatusReply(fbb, RequestIdOf(**m), i + 1, true).Union());
    ASSERT_TRUE(statusd.Send(in->peer, fbb.GetBufferPointer(), fbb.GetSize()).ok());
  }
  EXPECT_EQ(statusd.Receive(100ms).status().code(), StatusCode::kDeadlineExceeded);
  for (size_t i = 0; i < sent; ++i) {
    auto r = client.Receive(5s);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->status.ok()) << r->status.ToString();
  }
  EXPECT_EQ(client.in_flight_requests(), 0u);
  EXPECT_EQ(client.in_flight_bytes(), 0u);
  auto again = client.SendSetPodStatus(pod, st, 5s);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(client.in_flight_requests(), 1u);
  client.Forget(*again);
  EXPECT_EQ(client.in_flight_bytes(), 0u);
}

}  // namespace
}  // namespace nodelet::status
