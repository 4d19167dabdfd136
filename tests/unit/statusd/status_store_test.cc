#include "svc-statusd/status_store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <fstream>

#include "lib/status/status_codec.h"
#include "tests/fakes/fake_clock.h"
#include "tests/testing/harness.h"
#include "tests/unit/statusd/status_samples.h"

namespace nodelet::statusd {
namespace {

using namespace nodelet::statusd::testing;  // NOLINT
using nodelet::testing::FakeClock;
using nodelet::testing::TempDir;

PodStatusRecord FullRecord(const std::string& uid, uint64_t version) {
  PodStatusRecord r;
  r.pod = SamplePod(uid, RestartPolicy::kOnFailure);
  r.pod.init_container_count = 1;
  r.status = RunningStatus("hello " + uid);
  r.status.reason = "Because";
  r.status.host_ips = {"127.0.0.1", "::1"};
  r.status.start_time_unix_s = 1'700'000'005;
  r.status.qos_class = "BestEffort";
  r.status.conditions[0].last_probe_time_unix_s = 1'700'000'006;
  r.status.conditions[0].reason = "R";
  r.status.conditions[0].message = "M";
  r.status.init_container_statuses = {TerminatedContainer("init", 0)};
  r.status.init_container_statuses[0].last_state.waiting = ContainerStateWaiting{"Pulling", "x"};
  r.status.init_container_statuses[0].state.terminated->signal = 9;
  r.status.container_statuses.push_back(WaitingContainer("side", "CrashLoopBackOff"));
  r.status.container_statuses[1].restart_count = 4;
  r.version = version;
  r.updated_at_unix_s = 1'700'000'007;
  return r;
}

TEST(StatusStoreTest, RecordBlobRoundTripsEveryField) {
  PodStatusRecord r = FullRecord("u1", 3);
  std::string blob = status::EncodeRecordBlob(r);
  auto back = status::DecodeRecordBlob(blob.data(), blob.size());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, r);
  blob[blob.size() / 2] ^= 0x5a;
  blob.resize(blob.size() - 3);
  EXPECT_FALSE(status::DecodeRecordBlob(blob.data(), blob.size()).ok());
}

TEST(StatusStoreTest, CommittedRecordsSurviveReopen) {
  TempDir dir;
  const std::string path = dir.Sub("statusd/status.db");
  {
    auto store = SqliteStatusStore::Open(path, RealClock::Get());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    std::vector<StatusChange> batch = {{StatusChange::Kind::kUpdated, FullRecord("a", 1)},
                                       {StatusChange::Kind::kUpdated, FullRecord("b", 1)},
                                       {StatusChange::Kind::kUpdated, FullRecord("a", 2)}};
    ASSERT_TRUE((*store)->Commit(batch).ok());
    ASSERT_TRUE((*store)->Commit({{StatusChange::Kind::kUpdated, FullRecord("c", 7)}}).ok());
    ASSERT_TRUE((*store)->Commit({{StatusChange::Kind::kRemoved, FullRecord("b", 1)}}).ok());
  }
  auto store = SqliteStatusStore::Open(path, RealClock::Get());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto contents = (*store)->LoadAll();
  ASSERT_TRUE(contents.ok());
  EXPECT_TRUE(contents->unreadable.empty());
  std::map<std::string, PodStatusRecord> by_uid;
  for (auto& r : contents->records) by_uid[r.pod.uid] = r;
  ASSERT_EQ(by_uid.size(), 2u);
  EXPECT_EQ(by_uid["a"], FullRecord("a", 2));
  EXPECT_EQ(by_uid["c"], FullRecord("c", 7));

  // The database really is in WAL mode.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &stmt, nullptr);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)), "wal");
  sqlite3_finalize(stmt);
  sqlite3_close(db);
}

TEST(StatusStoreTest, ReloadedManagerContinuesVersions) {
  TempDir dir;
  const std::string path = dir.Sub("status.db");
  FakeClock clock;
  {
    auto store = SqliteStatusStore::Open(path, RealClock::Get());
    ASSERT_TRUE(store.ok());
    StatusManager m(clock);
    std::vector<StatusChange> changes;
    for (int i = 0; i < 4; ++i)
      ASSERT_TRUE(m.SetPodStatus(SamplePod("u"), RunningStatus(std::to_string(i)), &changes).ok());
    ASSERT_TRUE((*store)->Commit(changes).ok());
  }
  auto store = SqliteStatusStore::Open(path, RealClock::Get());
  ASSERT_TRUE(store.ok());
  auto contents = (*store)->LoadAll();
  ASSERT_TRUE(contents.ok());
  StatusManager m(clock);
  m.Load(contents->records);
  ASSERT_NE(m.Get("u"), nullptr);
  EXPECT_EQ(m.Get("u")->version, 4u);
  EXPECT_EQ(m.Get("u")->status.message, "3");
  EXPECT_EQ(m.SetPodStatus(SamplePod("u"), RunningStatus("next"), nullptr)->version, 5u);
}

TEST(StatusStoreTest, UnreadableRowIsReportedWithItsVersion) {
  TempDir dir;
  const std::string path = dir.Sub("status.db");
  {
    auto store = SqliteStatusStore::Open(path, RealClock::Get());
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)
                    ->Commit({{StatusChange::Kind::kUpdated, FullRecord("good", 2)},
                              {StatusChange::Kind::kUpdated, FullRecord("bad", 5)}})
                    .ok());
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE pod_status SET record = x'00010203' WHERE uid = 'bad'",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto store = SqliteStatusStore::Open(path, RealClock::Get());
  ASSERT_TRUE(store.ok());
  auto contents = (*store)->LoadAll();
  ASSERT_TRUE(contents.ok());
  ASSERT_EQ(contents->records.size(), 1u);
  EXPECT_EQ(contents->records[0].pod.uid, "good");
  ASSERT_EQ(contents->unreadable.size(), 1u);
  EXPECT_EQ(contents->unreadable[0].uid, "bad");
  EXPECT_EQ(contents->unreadable[0].version, 5u);
  EXPECT_NE(contents->unreadable[0].error.find("record blob"), std::string::npos)
      << contents->unreadable[0].error;
}

TEST(StatusStoreTest, GarbageDatabaseIsMovedAside) {
  TempDir dir;
  const std::string path = dir.Sub("status.db");
  {
    std::ofstream f(path);
    f << std::string(8192, 'x');
  }
  SqliteStatusStore::OpenReport report;
  auto store = SqliteStatusStore::Open(path, RealClock::Get(), &report);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_FALSE(report.moved_aside_to.empty());
  EXPECT_FALSE(report.corruption.empty());
  EXPECT_TRUE(std::filesystem::exists(report.moved_aside_to));
  auto contents = (*store)->LoadAll();
  ASSERT_TRUE(contents.ok());
  EXPECT_TRUE(contents->records.empty());
  EXPECT_TRUE((*store)->Commit({{StatusChange::Kind::kUpdated, FullRecord("a", 1)}}).ok());
}

TEST(StatusStoreTest, UnusableDirectoryIsAClearError) {
  TempDir dir;
  {
    std::ofstream f(dir.Sub("file"));
    f << "not a directory";
  }
  auto store = SqliteStatusStore::Open(dir.Sub("file/statusd/status.db"), RealClock::Get());
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("file"), std::string::npos) << store.status().message();
}

}  // namespace
}  // namespace nodelet::statusd
