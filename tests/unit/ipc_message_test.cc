#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "lib/ipc/message.h"
#include "tests/fakes/fake_clock.h"

namespace nodelet::ipc {
namespace {

TEST(MessageTest, PlegMessageRoundTrip) {
  EnvelopeWriter writer(ServiceId::Plegd, 0x1234);
  flatbuffers::FlatBufferBuilder fbb;
  auto req = pleg::CreateSnapshotRequest(fbb, 77);
  FinishMessage(fbb, writer, pleg::Body::SnapshotRequest, req.Union());
  auto msg = DecodeMessage<pleg::PlegMessage>(fbb.GetBufferPointer(), fbb.GetSize(),
                                              pleg::PlegMessageIdentifier());
  ASSERT_TRUE(msg.ok()) << msg.status().ToString();
  EXPECT_EQ((*msg)->header()->sender(), ServiceId::Plegd);
  EXPECT_EQ((*msg)->header()->incarnation(), 0x1234u);
  EXPECT_EQ((*msg)->header()->sequence(), 1u);
  ASSERT_EQ((*msg)->body_type(), pleg::Body::SnapshotRequest);
  EXPECT_EQ((*msg)->body_as_SnapshotRequest()->request_id(), 77u);
}

TEST(MessageTest, VolumeMessageRoundTripAndSequence) {
  EnvelopeWriter writer(ServiceId::Volumed, 9);
  for (uint64_t seq = 1; seq <= 2; ++seq) {
    flatbuffers::FlatBufferBuilder fbb;
    auto ev = volume::CreateVolumesChangedDirect(fbb, "uid-1", true);
    FinishMessage(fbb, writer, volume::Body::VolumesChanged, ev.Union());
    auto msg = DecodeMessage<volume::VolumeMessage>(fbb.GetBufferPointer(), fbb.GetSize(),
                                                    volume::VolumeMessageIdentifier());
    ASSERT_TRUE(msg.ok()) << msg.status().ToString();
    EXPECT_EQ((*msg)->header()->sequence(), seq);
    ASSERT_EQ((*msg)->body_type(), volume::Body::VolumesChanged);
    EXPECT_EQ((*msg)->body_as_VolumesChanged()->pod_uid()->str(), "uid-1");
    EXPECT_TRUE((*msg)->body_as_VolumesChanged()->ready());
  }
}

// The helper writes the same bytes as the generated creator it replaces.
TEST(MessageTest, SameBytesAsGeneratedCreator) {
  testing::FakeClock clock;
  EnvelopeWriter a(ServiceId::Statusd, 5, clock), b(ServiceId::Statusd, 5, clock);
  flatbuffers::FlatBufferBuilder by_helper, by_hand;
  FinishMessage(by_helper, a, status::Body::GetNodeStatusRequest,
                status::CreateGetNodeStatusRequest(by_helper, 3).Union());
  auto body = status::CreateGetNodeStatusRequest(by_hand, 3).Union();
  auto header = b.Write(by_hand);
  by_hand.Finish(
      status::CreateStatusMessage(by_hand, header, status::Body::GetNodeStatusRequest, body),
      status::StatusMessageIdentifier());
  ASSERT_EQ(by_helper.GetSize(), by_hand.GetSize());
  EXPECT_EQ(0,
            memcmp(by_helper.GetBufferPointer(), by_hand.GetBufferPointer(), by_helper.GetSize()));
}

TEST(MessageTest, RefusedSendIsReturned) {
  Context ctx;
  Publisher pub(ctx, /*max_bytes=*/64, /*queue_budget_bytes=*/4096);
  EnvelopeWriter writer(ServiceId::Volumed, 1);
  flatbuffers::FlatBufferBuilder fbb;
  auto ev = volume::CreateVolumesChangedDirect(fbb, std::string(200, 'x').c_str(), true);
  Status s = PublishMessage(pub, fbb, writer, volume::Body::VolumesChanged, ev.Union());
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_EQ(writer.last_sequence(), 1u);
}

TEST(BadMessageCounterTest, FirstIsReportedOnce) {
  BadMessageCounter bad;
  EXPECT_EQ(bad.count(), 0u);
  EXPECT_TRUE(bad.Count());
  EXPECT_FALSE(bad.Count());
  EXPECT_FALSE(bad.Count());
  EXPECT_EQ(bad.count(), 3u);
}

TEST(BadMessageCounterTest, SilentCountsDoNotTakeTheFirst) {
  BadMessageCounter bad;
  bad.CountSilently();
  bad.CountSilently();
  EXPECT_TRUE(bad.Count());
  EXPECT_FALSE(bad.Count());
  EXPECT_EQ(bad.count(), 4u);
}

TEST(BadMessageCounterTest, ExactlyOneFirstAcrossThreads) {
  BadMessageCounter bad;
  std::atomic<int> firsts{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        if (bad.Count()) ++firsts;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(firsts.load(), 1);
  EXPECT_EQ(bad.count(), 4000u);
}

}  // namespace
}  // namespace nodelet::ipc
