// PlegMirror against a stand-in plegd (its two sockets, in this process): the replica takes a
// relist's start from RelistDone's monotonic field, so a pod worker's freshness check follows
// CLOCK_MONOTONIC and a step of plegd's wall clock changes nothing.
#include "lib/pleg/pleg_mirror.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/fakes/fake_plegd.h"
#include "tests/testing/harness.h"

namespace nodelet::pleg {
namespace {

using namespace std::chrono_literals;
using testing::FakePlegd;

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
    EXPECT_TRUE(plegd.PublishRelistDone(++relist, wall, mono).ok());
    return mirror.relist_started_mono_ns() == mono;
  }));

  // plegd's wall clock is set back an hour; its monotonic clock goes on by a second.
  ASSERT_TRUE(PumpUntil(loop, plegd, [&] {
    EXPECT_TRUE(
        plegd.PublishRelistDone(++relist, wall - 3'600'000'000'000, mono + 1'000'000'000).ok());
    return mirror.relist_started_mono_ns() == mono + 1'000'000'000;
  }));
  EXPECT_TRUE(mirror.ready());
}

}  // namespace
}  // namespace nodelet::pleg
