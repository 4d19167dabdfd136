// The real nodelet-statusd binary's store (the fixture is in statusd_fixture.h): kill -9 in the
// middle of write bursts loses nothing acknowledged, a database damaged while statusd runs is
// recovered with every status, and a full disk fails writes clearly (health degraded) until space
// returns, without a restart. The tests read the database file straight with SQLite.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sqlite3.h>
#include <sys/inotify.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <utility>

#include "control_generated.h"
#include "lib/status/status_codec.h"
#include "tests/integration/statusd_fixture.h"
#include "tests/testing/fake_supervisor.h"

namespace nodelet::statusd {
namespace {

using namespace std::chrono_literals;
using nodelet::testing::FakeSupervisor;

// Reads a pod's stored row straight from the database file.
struct StoredRow {
  uint64_t version = 0;
  std::string message;
};

class Database {
 public:
  explicit Database(const std::string& path) {
    rc_ = sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE, nullptr);
  }
  ~Database() { sqlite3_close_v2(db_); }
  bool ok() const { return rc_ == SQLITE_OK; }
  int Exec(const char* sql) { return sqlite3_exec(db_, sql, nullptr, nullptr, nullptr); }
  std::string IntegrityCheck() {
    std::string out;
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db_, "PRAGMA integrity_check", -1, &st, nullptr) != SQLITE_OK) {
      return sqlite3_errmsg(db_);
    }
    while (sqlite3_step(st) == SQLITE_ROW)
      out += reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return out;
  }
  std::map<std::string, StoredRow> Rows() {
    std::map<std::string, StoredRow> rows;
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db_, "SELECT uid, version, record FROM pod_status", -1, &st, nullptr);
    while (sqlite3_step(st) == SQLITE_ROW) {
      std::string uid = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
      auto rec = status::DecodeRecordBlob(sqlite3_column_blob(st, 2),
                                          static_cast<size_t>(sqlite3_column_bytes(st, 2)));
      rows[uid] = {static_cast<uint64_t>(sqlite3_column_int64(st, 1)),
                   rec.ok() ? rec->status.message : "<unreadable: " + rec.status().message() + ">"};
    }
    sqlite3_finalize(st);
    return rows;
  }

 private:
  sqlite3* db_ = nullptr;
  int rc_ = SQLITE_ERROR;
};

TEST_F(StatusdTest, KillNineDuringWriteBurstsLosesNothingAcknowledged) {
  constexpr int kRounds = 50;
  constexpr int kPods = 8;
  constexpr int kWindow = 16;
  std::mt19937 rng(20240601);
  // The latest acknowledged (version, message) of each pod over all rounds.
  std::map<std::string, StoredRow> acked;
  int total_acks = 0;
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    auto statusd = Start();
    ASSERT_TRUE(statusd->ready());
    status::PipelinedStatusClient client(ctx_, run(), ipc::ServiceId::Podworkerd);
    ASSERT_TRUE(client.Connect().ok());
    // Kill after a random number of acknowledgements, with requests still in flight.
    const int kill_after = 1 + static_cast<int>(rng() % 40);
    std::map<uint64_t, std::pair<std::string, std::string>> in_flight;  // id -> (uid, message)
    int sent = 0, acks = 0;
    while (acks < kill_after) {
      while (in_flight.size() < kWindow) {
        std::string uid = "p" + std::to_string(rng() % kPods);
        std::string message = "round " + std::to_string(round) + " write " + std::to_string(sent++);
        auto id = client.SendSetPodStatus(Pod(uid), Running(message), 5000ms);
        ASSERT_TRUE(id.ok()) << id.status().ToString();
        in_flight[*id] = {uid, message};
      }
      auto reply = client.Receive(5000ms);
      ASSERT_TRUE(reply.ok()) << reply.status().ToString();
      ASSERT_TRUE(reply->status.ok()) << reply->status.ToString();
      auto it = in_flight.find(reply->request_id);
      ASSERT_NE(it, in_flight.end());
      const auto& [uid, message] = it->second;
      ASSERT_TRUE(reply->result.changed);
      // Versions keep increasing, also across kills.
      ASSERT_GT(reply->result.version, acked[uid].version) << uid;
      acked[uid] = {reply->result.version, message};
      in_flight.erase(it);
      ++acks;
      ++total_acks;
    }
    statusd->Kill9();
    ASSERT_FALSE(statusd->process().running());

    Database db(this->db());
    ASSERT_TRUE(db.ok());
    ASSERT_EQ(db.IntegrityCheck(), "ok");
    auto rows = db.Rows();
    for (const auto& [uid, want] : acked) {
      if (want.version == 0) continue;
      ASSERT_TRUE(rows.count(uid))
          << uid << " acknowledged at version " << want.version << " is missing";
      const StoredRow& got = rows[uid];
      // A later write may have been committed but not acknowledged before the kill.
      ASSERT_GE(got.version, want.version) << uid;
      if (got.version == want.version) {
        EXPECT_EQ(got.message, want.message) << uid;
      }
      acked[uid] = got;  // what the next round must go above
    }
  }
  EXPECT_GE(total_acks, kRounds);
}

// The database is damaged while statusd runs (every page after the first overwritten, as a
// failing disk or a stray writer would): the periodic PRAGMA quick_check finds it, statusd moves
// the file aside as it does at start-up, writes every status it holds into a fresh file with the
// same versions, and keeps serving; a restart then loads them from the fresh file.
TEST_F(StatusdTest, CorruptionFoundWhileRunningIsRecoveredWithEveryStatus) {
  auto statusd = Start("", {"--db-check-period", "200ms"});
  auto client = Client();
  std::map<std::string, uint64_t> versions;
  for (int i = 0; i < 20; ++i) {
    const std::string uid = "uid-" + std::to_string(i);
    auto r = client->SetPodStatus(Pod(uid), Running("message " + std::to_string(i)));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    versions[uid] = r->version;
  }
  {
    // Everything into the main file, then every page but the first overwritten; a write of
    // page 1 through the WAL makes statusd's connection drop its page cache.
    Database db(this->db());
    ASSERT_TRUE(db.ok());
    ASSERT_EQ(db.Exec("PRAGMA wal_checkpoint(TRUNCATE)"), SQLITE_OK);
    const auto size = std::filesystem::file_size(this->db());
    ASSERT_GT(size, 4096u);
    int fd = open(this->db().c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    const std::string junk(size - 4096, '\xa5');
    ASSERT_EQ(pwrite(fd, junk.data(), junk.size(), 4096), static_cast<ssize_t>(junk.size()));
    close(fd);
    ASSERT_EQ(db.Exec("PRAGMA user_version=7"), SQLITE_OK);
  }
  auto moved_aside = [&] {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(root() + "/statusd", ec)) {
      if (e.path().filename().string().rfind("status.db.corrupt-", 0) == 0) return true;
    }
    return false;
  };
  // Woken by the rename into the directory (inotify), within a deadline.
  int watch = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  ASSERT_GE(watch, 0);
  inotify_add_watch(watch, (root() + "/statusd").c_str(), IN_MOVED_TO | IN_CREATE);
  const auto end = std::chrono::steady_clock::now() + 10s;
  while (!moved_aside() && std::chrono::steady_clock::now() < end) {
    pollfd p{watch, POLLIN, 0};
    if (poll(&p, 1, 200) > 0) {
      char buf[4096];
      while (read(watch, buf, sizeof buf) > 0) {
      }
    }
  }
  close(watch);
  ASSERT_TRUE(moved_aside()) << Log();
  EXPECT_NE(Log().find("failed its periodic check"), std::string::npos) << Log();

  // Served from memory, and in the fresh file with the same versions.
  for (const auto& [uid, version] : versions) {
    auto got = client->GetPodStatus(uid);
    ASSERT_TRUE(got.ok()) << uid << ": " << got.status().ToString();
    EXPECT_EQ(got->version, version) << uid;
  }
  // New writes work and go above.
  auto more = client->SetPodStatus(Pod("uid-0"), Running("after"));
  ASSERT_TRUE(more.ok()) << more.status().ToString();
  EXPECT_GT(more->version, versions["uid-0"]);
  statusd->Kill9();
  {
    Database db(this->db());
    ASSERT_TRUE(db.ok());
    EXPECT_EQ(db.IntegrityCheck(), "ok");
    auto rows = db.Rows();
    EXPECT_EQ(rows.size(), versions.size());
    for (const auto& [uid, version] : versions) {
      EXPECT_EQ(rows[uid].version, uid == "uid-0" ? more->version : version) << uid;
    }
  }
  auto again = Start();
  auto client2 = Client();
  auto back = client2->GetPodStatus("uid-19");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->version, versions["uid-19"]);
}

// A tmpfs mounted for the life of the object; unmounted (lazily, so it never fails because of a
// straggler) on destruction, also when the test fails.
class TmpfsMount {
 public:
  TmpfsMount(const std::string& path, const std::string& size) : path_(path) {
    std::filesystem::create_directories(path);
    std::string opts = "size=" + size + ",mode=0700";
    if (mount("tmpfs", path.c_str(), "tmpfs", 0, opts.c_str()) == 0) {
      mounted_ = true;
    } else {
      error_ = strerror(errno);
    }
  }
  ~TmpfsMount() {
    if (mounted_) umount2(path_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }

 private:
  std::string path_;
  bool mounted_ = false;
  std::string error_;
};

TEST_F(StatusdTest, FullDiskFailsWritesClearlyAndRecoversWithoutRestart) {
  if (geteuid() != 0) GTEST_SKIP() << "mounting a tmpfs needs root";
  const std::string small_root = dir_.Sub("small-root");
  TmpfsMount tmpfs(small_root, "2m");
  if (!tmpfs.mounted()) GTEST_SKIP() << "cannot mount a tmpfs: " << tmpfs.error();
  FakeSupervisor supervisor(ctx_, run());
  auto statusd = Start(small_root);
  ASSERT_TRUE(statusd->ready());
  const pid_t pid = statusd->process().pid();
  auto client = Client();
  ASSERT_TRUE(client->SetPodStatus(Pod("before"), Running("small")).ok());
  ASSERT_TRUE(supervisor.WaitForHealth(ipc::control::Health::Ok, 5000ms).has_value());

  // Fill the disk.
  const std::string filler = small_root + "/filler";
  {
    FILE* f = fopen(filler.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::string chunk(4096, 'f');
    while (fwrite(chunk.data(), 1, chunk.size(), f) == chunk.size() && fflush(f) == 0) {
    }
    fclose(f);
  }
  // A write that needs new space fails with a clear error.
  Status failure;
  for (int i = 0; i < 20 && failure.ok(); ++i) {
    auto r = client->SetPodStatus(Pod("big" + std::to_string(i)),
                                  Running(std::string(200 << 10, 'a' + i % 26)));
    if (!r.ok()) failure = r.status();
  }
  ASSERT_FALSE(failure.ok()) << "writes kept succeeding on a full disk";
  EXPECT_EQ(failure.code(), StatusCode::kResourceExhausted) << failure.ToString();
  EXPECT_NE(failure.message().find("disk is full"), std::string::npos) << failure.ToString();
  EXPECT_NE(failure.message().find("status.db"), std::string::npos) << failure.ToString();
  auto degraded = supervisor.WaitForHealth(ipc::control::Health::Degraded, 5000ms);
  ASSERT_TRUE(degraded.has_value())
      << "health did not degrade; last reason: " << supervisor.last_reason();
  EXPECT_NE(degraded->find("store writes failing"), std::string::npos) << *degraded;
  // Reads keep working meanwhile.
  auto before = client->GetPodStatus("before");
  ASSERT_TRUE(before.ok());
  EXPECT_EQ(before->status.message, "small");

  // Space returns: the next write works, health recovers, same process.
  ASSERT_EQ(unlink(filler.c_str()), 0);
  auto r = client->SetPodStatus(Pod("after"), Running(std::string(200 << 10, 'z')));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->version, 1u);
  EXPECT_TRUE(supervisor.WaitForHealth(ipc::control::Health::Ok, 5000ms).has_value());
  EXPECT_TRUE(statusd->process().running());
  EXPECT_EQ(statusd->process().pid(), pid);
  auto after = client->GetPodStatus("after");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->status.message.size(), size_t{200 << 10});
  statusd.reset();
}

}  // namespace
}  // namespace nodelet::statusd
