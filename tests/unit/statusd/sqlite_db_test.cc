// SqliteDb on real files: one connection per file per process, statements prepared once and
// reused, errors that name the operation, the file and SQLite's message, and corrupt files
// moved aside (at open, and by Recreate after a failed check).
#include "svc-statusd/sqlite_db.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/testing/harness.h"

namespace nodelet::statusd {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr std::string_view kCreate =
    "CREATE TABLE IF NOT EXISTS kv (k TEXT PRIMARY KEY NOT NULL, v INTEGER NOT NULL)";
constexpr std::string_view kInsert = "INSERT INTO kv (k, v) VALUES (?1, ?2)";
constexpr std::string_view kGet = "SELECT v FROM kv WHERE k = ?1";

std::shared_ptr<SqliteDb> OpenOrDie(const std::string& path,
                                    SqliteDb::OpenReport* report = nullptr) {
  auto db = SqliteDb::Open(path, RealClock::Get(), report);
  EXPECT_TRUE(db.ok()) << db.status().ToString();
  if (!db.ok()) return nullptr;
  EXPECT_TRUE((*db)->Exec(kCreate, "Failed to create kv").ok());
  return *db;
}

Status Insert(SqliteDb& db, const std::string& k, int64_t v) {
  auto st = db.Prepare(kInsert, "Failed to insert '" + k + "'");
  if (!st.ok()) return st.status();
  return st->BindText(1, k).BindInt64(2, v).Run();
}

Result<int64_t> Get(SqliteDb& db, const std::string& k) {
  auto st = db.Prepare(kGet, "Failed to read '" + k + "'");
  if (!st.ok()) return st.status();
  st->BindText(1, k);
  auto row = st->Step();
  if (!row.ok()) return row.status();
  if (!*row) return NotFound(k);
  return st->Int64(0);
}

TEST(SqliteDbTest, OpensInWalModeAndSharesOneConnectionPerFile) {
  nodelet::testing::TempDir dir;
  const std::string path = dir.Sub("sub/dir/test.db");  // the directories are created
  auto db = OpenOrDie(path);
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(db->path(), path);
  std::string mode;
  ASSERT_TRUE(db->Exec("PRAGMA journal_mode", "Failed to read the journal mode", &mode).ok());
  EXPECT_EQ(mode, "wal");
  std::string sync;
  ASSERT_TRUE(db->Exec("PRAGMA synchronous", "Failed to read synchronous", &sync).ok());
  EXPECT_EQ(sync, "2") << "FULL";

  // The same file, also through another spelling of its path: the same connection.
  auto again = SqliteDb::Open(dir.Sub("sub/./dir/test.db"), RealClock::Get());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), db.get());
  auto other = SqliteDb::Open(dir.Sub("sub/other.db"), RealClock::Get());
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->get(), db.get());

  // Once every holder is gone the file is closed; the next Open makes a new connection that
  // sees what was committed.
  ASSERT_TRUE(Insert(*db, "a", 1).ok());
  std::weak_ptr<SqliteDb> weak = db;
  db.reset();
  again->reset();
  EXPECT_TRUE(weak.expired());
  auto reopened = OpenOrDie(path);
  ASSERT_NE(reopened, nullptr);
  auto a = Get(*reopened, "a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(*a, 1);
}

TEST(SqliteDbTest, StatementsArePreparedOnceAndReused) {
  nodelet::testing::TempDir dir;
  auto db = OpenOrDie(dir.Sub("test.db"));
  ASSERT_NE(db, nullptr);
  const uint64_t before = db->statements_prepared();
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(Insert(*db, "k" + std::to_string(i), i).ok());
  for (int i = 0; i < 50; ++i) {
    auto v = Get(*db, "k" + std::to_string(i));
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ(*v, i);
  }
  EXPECT_EQ(db->statements_prepared(), before + 2)
      << "one insert and one select, each compiled once";
  // A handle that goes out of scope mid-result leaves the statement ready for its next use.
  {
    auto st = db->Prepare("SELECT k FROM kv ORDER BY k", "Failed to list");
    ASSERT_TRUE(st.ok());
    ASSERT_TRUE(*st->Step());
    EXPECT_EQ(st->Text(0), "k0");
  }
  auto st = db->Prepare("SELECT k FROM kv ORDER BY k", "Failed to list");
  ASSERT_TRUE(st.ok());
  ASSERT_TRUE(*st->Step());
  EXPECT_EQ(st->Text(0), "k0") << "starts from the first row again";
}

TEST(SqliteDbTest, TransactionsCommitOrRollBack) {
  nodelet::testing::TempDir dir;
  auto db = OpenOrDie(dir.Sub("test.db"));
  ASSERT_NE(db, nullptr);
  {
    auto tx = db->Begin("Failed to write");
    ASSERT_TRUE(tx.ok());
    ASSERT_TRUE(Insert(*db, "kept", 1).ok());
    ASSERT_TRUE(tx->Commit().ok());
  }
  {
    auto tx = db->Begin("Failed to write");
    ASSERT_TRUE(tx.ok());
    ASSERT_TRUE(Insert(*db, "dropped", 2).ok());
    // Out of scope without Commit(): rolled back.
  }
  EXPECT_TRUE(Get(*db, "kept").ok());
  EXPECT_EQ(Get(*db, "dropped").status().code(), StatusCode::kNotFound);
}

TEST(SqliteDbTest, ErrorsNameTheOperationTheFileAndTheCause) {
  nodelet::testing::TempDir dir;
  const std::string path = dir.Sub("test.db");
  auto db = OpenOrDie(path);
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(Insert(*db, "a", 1).ok());
  Status dup = Insert(*db, "a", 2);
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.code(), StatusCode::kInternal);
  EXPECT_EQ(dup.message(),
            "Failed to insert 'a' in '" + path + "': UNIQUE constraint failed: kv.k");

  auto bad = db->Prepare("SELECT v FROM nowhere", "Failed to read the widgets");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "Failed to read the widgets in '" + path + "': no such table: nowhere");
  Status exec = db->Exec("CREATE TABLE kv (x)", "Failed to create kv again");
  EXPECT_EQ(exec.message(), "Failed to create kv again in '" + path + "': table kv already exists");

  // A directory that cannot be made: the error names the path.
  {
    std::ofstream f(dir.Sub("file"));
    f << "not a directory";
  }
  auto nodir = SqliteDb::Open(dir.Sub("file/test.db"), RealClock::Get());
  ASSERT_FALSE(nodir.ok());
  EXPECT_THAT(nodir.status().message(), HasSubstr(dir.Sub("file")));
}

TEST(SqliteDbTest, GarbageFileIsMovedAsideAtOpen) {
  nodelet::testing::TempDir dir;
  const std::string path = dir.Sub("test.db");
  {
    std::ofstream f(path);
    f << std::string(8192, 'x');
  }
  SqliteDb::OpenReport report;
  auto db = OpenOrDie(path, &report);
  ASSERT_NE(db, nullptr);
  EXPECT_THAT(report.moved_aside_to, StartsWith(path + ".corrupt-"));
  EXPECT_THAT(report.corruption, HasSubstr(path));
  EXPECT_THAT(report.corruption, HasSubstr("not a database"));
  EXPECT_TRUE(std::filesystem::exists(report.moved_aside_to));
  EXPECT_TRUE(Insert(*db, "a", 1).ok());
}

// Every page but the first overwritten, as a failing disk or a stray writer would: at open the
// file is moved aside; on an open connection quick_check finds it, and Recreate moves it aside
// while the same SqliteDb (every holder's) goes on with a fresh file.
void FillAndCheckpoint(SqliteDb& db) {
  auto tx = db.Begin("Failed to fill");
  ASSERT_TRUE(tx.ok());
  for (int i = 0; i < 500; ++i) {
    ASSERT_TRUE(Insert(db, "key-" + std::to_string(i) + std::string(100, 'v'), i).ok());
  }
  ASSERT_TRUE(tx->Commit().ok());
  ASSERT_TRUE(db.Exec("PRAGMA wal_checkpoint(TRUNCATE)", "Failed to checkpoint").ok());
}

void OverwriteAllButTheFirstPage(const std::string& path) {
  const auto size = std::filesystem::file_size(path);
  ASSERT_GT(size, 8 * 4096u);
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(4096);
  const std::string junk(size - 4096, '\xa5');
  f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  ASSERT_TRUE(f.good());
}

TEST(SqliteDbTest, CorruptFileIsMovedAsideAtOpen) {
  nodelet::testing::TempDir dir;
  const std::string path = dir.Sub("test.db");
  {
    auto db = OpenOrDie(path);
    ASSERT_NE(db, nullptr);
    FillAndCheckpoint(*db);
  }
  OverwriteAllButTheFirstPage(path);
  SqliteDb::OpenReport report;
  auto db = OpenOrDie(path, &report);
  ASSERT_NE(db, nullptr);
  EXPECT_THAT(report.moved_aside_to, StartsWith(path + ".corrupt-"));
  EXPECT_THAT(report.corruption, HasSubstr(path));
  EXPECT_EQ(Get(*db, "key-1" + std::string(100, 'v')).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Insert(*db, "a", 1).ok());
}

TEST(SqliteDbTest, CorruptionFoundByTheCheckIsRecreatedInPlace) {
  nodelet::testing::TempDir dir;
  const std::string path = dir.Sub("test.db");
  auto db = OpenOrDie(path);
  ASSERT_NE(db, nullptr);
  FillAndCheckpoint(*db);
  EXPECT_TRUE(db->QuickCheck().ok());
  OverwriteAllButTheFirstPage(path);
  {
    // A write through the WAL from another connection makes ours drop its page cache.
    sqlite3* other = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &other), SQLITE_OK);
    EXPECT_EQ(sqlite3_exec(other, "PRAGMA user_version=7", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(other);
  }
  Status check = db->QuickCheck();
  ASSERT_FALSE(check.ok());
  EXPECT_EQ(check.code(), StatusCode::kFailedPrecondition) << check.ToString();
  EXPECT_THAT(check.message(), HasSubstr(path));

  const SqliteDb* before = db.get();
  SqliteDb::OpenReport report;
  ASSERT_TRUE(db->Recreate(&report).ok());
  EXPECT_THAT(report.moved_aside_to, StartsWith(path + ".corrupt-"));
  EXPECT_TRUE(std::filesystem::exists(report.moved_aside_to));
  EXPECT_TRUE(db->QuickCheck().ok());
  ASSERT_TRUE(db->Exec(kCreate, "Failed to create kv").ok());
  EXPECT_EQ(Get(*db, "key-1" + std::string(100, 'v')).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Insert(*db, "a", 1).ok());
  auto again = SqliteDb::Open(path, RealClock::Get());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), before) << "still the one connection to the file";
}

}  // namespace
}  // namespace nodelet::statusd
