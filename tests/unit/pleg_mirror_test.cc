// PlegMirror against a stand-in plegd (its two sockets, in this process): the replica takes a
// relist's start from RelistDone's monotonic field, so a pod worker's freshness check follows
// CLOCK_MONOTONIC and a step of plegd's wall clock changes nothing.
#include "lib/pleg/pleg_mirror.h"

#include <gtest/gtest.h>

#include <string>

#include "lib/ipc/endpoints.h"
#include "lib/ipc/sockets.h"
#include "tests/testing/harness.h"

namespace nodelet::pleg {
namespace {

using namespace std::chrono_literals;
using ipc::pleg::Body;
using ipc::pleg::PlegMessage;

// plegd's side of the Clone pattern, reduced to RelistDone messages and empty snapshots.
class FakePlegd {
 public:
  FakePlegd(ipc::Context& ctx, const std::string& run_dir)
      : pub_(ctx, ipc::kPlegEvents), snapshots_(ctx, ipc::kPlegSnapshots), run_dir_(run_dir) {}
  Status Bind() {
    if (Status s = pub_.Bind(ipc::kPlegEventsEndpoint.Uri(run_dir_)); !s.ok()) return s;
    return snapshots_.Bind(ipc::kPlegSnapshotEndpoint.Uri(run_dir_));
  }
  void PublishRelistDone(uint64_t relist, int64_t wall_ns, int64_t mono_ns) {
    flatbuffers::FlatBufferBuilder fbb(256);
    auto done = ipc::pleg::CreateRelistDoneDirect(fbb, relist, 1000, 0, 0, wall_ns, "", mono_ns);
    auto header = events_.Write(fbb);
    fbb.Finish(ipc::pleg::CreatePlegMessage(fbb, header, Body::RelistDone, done.Union()),
               ipc::pleg::PlegMessageIdentifier());
    ASSERT_TRUE(pub_.Publish(fbb.GetBufferPointer(), fbb.GetSize()).ok());
    relist_ = relist;
  }
  // Answers every waiting SnapshotRequest: no pods, current at the last published message.
  void AnswerSnapshots() {
    while (snapshots_.Readable()) {
      auto in = snapshots_.Receive(0ms);
      if (!in.ok()) return;
      auto m = ipc::DecodeMessage<PlegMessage>(in->payload.data(), in->payload.size(),
                                               ipc::pleg::PlegMessageIdentifier());
      if (!m.ok() || (*m)->body_as_SnapshotRequest() == nullptr) continue;
      flatbuffers::FlatBufferBuilder fbb(256);
      auto snap = ipc::pleg::CreateSnapshotDirect(
          fbb, (*m)->body_as_SnapshotRequest()->request_id(), events_.last_sequence(),
          events_.incarnation(), relist_, nullptr);
      auto header = replies_.Write(fbb);
      fbb.Finish(ipc::pleg::CreatePlegMessage(fbb, header, Body::Snapshot, snap.Union()),
                 ipc::pleg::PlegMessageIdentifier());
      (void)snapshots_.Send(in->peer, fbb.GetBufferPointer(), fbb.GetSize());  // retried by Tick
    }
  }

 private:
  ipc::Publisher pub_;
  ipc::RouterServer snapshots_;
  std::string run_dir_;
  ipc::EnvelopeWriter events_{ipc::ServiceId::Plegd, 0x5eed};
  ipc::EnvelopeWriter replies_{ipc::ServiceId::Plegd, 0x5eed};
  uint64_t relist_ = 0;
};

// Runs the mirror's loop (and the stand-in's answers) until `done` or 10 s.
template <typename Done>
bool PumpUntil(EventLoop& loop, FakePlegd& plegd, Done done) {
  const auto end = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < end) {
    plegd.AnswerSnapshots();
    if (!loop.RunOnce(10ms).ok()) return false;
    if (done()) return true;
  }
  return false;
}

TEST(PlegMirrorTest, RelistStartIsTheMonotonicOneAndIgnoresAWallStep) {
  testing::TempDir dir;
  ipc::Context ctx;
  FakePlegd plegd(ctx, dir.path());
  ASSERT_TRUE(plegd.Bind().ok());
  EventLoop loop(RealClock::Get());
  PlegMirror mirror(ctx, RealClock::Get(), dir.path(), ipc::ServiceId::Ctl);
  ASSERT_TRUE(mirror.Connect(loop).ok());
  ASSERT_TRUE(PumpUntil(loop, plegd, [&] { return mirror.in_sync(); }));
  EXPECT_EQ(mirror.relist_started_mono_ns(), 0);

  // Until the subscription is up a RelistDone can be lost; the next one then shows a gap and the
  // mirror resynchronises, so keep publishing the same relist until it arrives.
  const int64_t wall = 1'700'000'000'000'000'000;
  const int64_t mono = 5'000'000'000;
  uint64_t relist = 0;
  ASSERT_TRUE(PumpUntil(loop, plegd, [&] {
    plegd.PublishRelistDone(++relist, wall, mono);
    return mirror.relist_started_mono_ns() == mono;
  }));

  // plegd's wall clock is set back an hour; its monotonic clock goes on by a second.
  ASSERT_TRUE(PumpUntil(loop, plegd, [&] {
    plegd.PublishRelistDone(++relist, wall - 3'600'000'000'000, mono + 1'000'000'000);
    return mirror.relist_started_mono_ns() == mono + 1'000'000'000;
  }));
  EXPECT_TRUE(mirror.ready());
}

}  // namespace
}  // namespace nodelet::pleg
