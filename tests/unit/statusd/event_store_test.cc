// EventStore on a real SQLite file: the same pod, reason and message is one line whose count
// grows; retention drops old events; the row cap keeps the newest; events survive a reopen.
#include "svc-statusd/event_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/harness.h"

namespace nodelet::statusd {
namespace {

status::PodEvent Ev(const std::string& uid, const std::string& reason, const std::string& msg) {
  status::PodEvent e;
  e.pod_uid = uid;
  e.pod_name = "p-" + uid;
  e.namespace_ = "default";
  e.reason = reason;
  e.message = msg;
  e.type = reason == "BackOff" ? "Warning" : "Normal";
  e.source = "podworkerd";
  return e;
}

TEST(EventStoreTest, DeduplicatesWithCountsAndSurvivesReopen) {
  nodelet::testing::TempDir dir;
  const std::string db = dir.Sub("status.db");
  {
    auto store = EventStore::Open(db, RealClock::Get());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE((*store)->Record({Ev("u1", "Started", "Started container app")}, 1000).ok());
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(
          (*store)->Record({Ev("u1", "BackOff", "Back-off restarting app")}, 1001 + i).ok());
    }
    ASSERT_TRUE((*store)->Record({Ev("u2", "Started", "Started container app")}, 1005).ok());
  }
  auto store = EventStore::Open(db, RealClock::Get());
  ASSERT_TRUE(store.ok());
  auto u1 = (*store)->List("u1");
  ASSERT_TRUE(u1.ok());
  ASSERT_EQ(u1->size(), 2u);
  EXPECT_EQ((*u1)[1].reason, "BackOff");
  EXPECT_EQ((*u1)[1].count, 3u);
  EXPECT_EQ((*u1)[1].first_unix_s, 1001);
  EXPECT_EQ((*u1)[1].last_unix_s, 1003);
  EXPECT_EQ((*store)->List("")->size(), 3u);
}

TEST(EventStoreTest, RetentionAndCap) {
  nodelet::testing::TempDir dir;
  auto store =
      EventStore::Open(dir.Sub("status.db"), RealClock::Get(), std::chrono::seconds(3600), 5);
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->Record({Ev("old", "Started", "x")}, 1000).ok());
  // An hour and more later: the old one is gone.
  ASSERT_TRUE((*store)->Record({Ev("new", "Started", "y")}, 1000 + 3601).ok());
  auto all = (*store)->List("");
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].pod_uid, "new");
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE((*store)->Record({Ev("n" + std::to_string(i), "Created", "z")}, 5000 + i).ok());
  }
  all = (*store)->List("");
  ASSERT_EQ(all->size(), 5u) << "at most max_events rows";
  EXPECT_EQ(all->back().pod_uid, "n9") << "the newest are kept";
}

}  // namespace
}  // namespace nodelet::statusd
