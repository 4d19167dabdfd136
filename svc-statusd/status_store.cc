#include "svc-statusd/status_store.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "lib/common/clock.h"
#include "lib/common/fs.h"
#include "lib/status/status_codec.h"

namespace nodelet::statusd {
namespace {

constexpr int kSchemaVersion = 1;

// The statements run once per open.
constexpr const char* kCreateTable =
    "CREATE TABLE IF NOT EXISTS pod_status ("
    " uid TEXT PRIMARY KEY NOT NULL,"
    " namespace TEXT NOT NULL,"
    " name TEXT NOT NULL,"
    " version INTEGER NOT NULL,"
    " updated_at_unix_s INTEGER NOT NULL,"
    " record BLOB NOT NULL)";

constexpr const char* kUpsert =
    "INSERT INTO pod_status (uid, namespace, name, version, updated_at_unix_s, record)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
    " ON CONFLICT(uid) DO UPDATE SET namespace = ?2, name = ?3, version = ?4,"
    " updated_at_unix_s = ?5, record = ?6";

constexpr const char* kDelete = "DELETE FROM pod_status WHERE uid = ?1";

bool IsCorruption(int rc) {
  int primary = rc & 0xff;
  return primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB;
}

std::string Dirname(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Runs `sql`; when it returns rows, the first column of the first row goes to `first`.
int Exec(sqlite3* db, const char* sql, std::string* first = nullptr) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr);
  if (rc != SQLITE_OK) return rc;
  bool have_first = false;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    if (first != nullptr && !have_first) {
      const unsigned char* text = sqlite3_column_text(stmt, 0);
      *first = text != nullptr ? reinterpret_cast<const char*>(text) : "";
      have_first = true;
    }
  }
  sqlite3_finalize(stmt);
  return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

std::string ErrorText(sqlite3* db, int rc) {
  std::string text = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  int sys = db != nullptr ? sqlite3_system_errno(db) : 0;
  if (sys != 0 && (rc & 0xff) == SQLITE_IOERR) text += std::string(" (") + strerror(sys) + ")";
  return text;
}

struct Opened {
  sqlite3* db = nullptr;
  int rc = SQLITE_OK;
  std::string error;
};

// Opens and configures the database; on failure closes it and says why.
Opened OpenAndConfigure(const std::string& path) {
  Opened o;
  o.rc = sqlite3_open_v2(path.c_str(), &o.db,
                         SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  auto fail = [&](const std::string& what) {
    o.error = what + ": " + ErrorText(o.db, o.rc);
    sqlite3_close_v2(o.db);
    o.db = nullptr;
    return o;
  };
  if (o.rc != SQLITE_OK) return fail("Failed to open '" + path + "'");
  sqlite3_extended_result_codes(o.db, 1);
  sqlite3_busy_timeout(o.db, 2000);
  std::string mode;
  if ((o.rc = Exec(o.db, "PRAGMA journal_mode=WAL", &mode)) != SQLITE_OK) {
    return fail("Failed to set WAL mode on '" + path + "'");
  }
  if (mode != "wal") {
    o.rc = SQLITE_ERROR;
    o.error = "Failed to set WAL mode on '" + path + "': journal mode is '" + mode + "'";
    sqlite3_close_v2(o.db);
    o.db = nullptr;
    return o;
  }
  // FULL: a commit is durable (fsync of the WAL) before it returns, and so before the ack.
  if ((o.rc = Exec(o.db, "PRAGMA synchronous=FULL")) != SQLITE_OK) {
    return fail("Failed to set synchronous=FULL on '" + path + "'");
  }
  // Keep the WAL file small after checkpoints.
  Exec(o.db, "PRAGMA journal_size_limit=4194304");
  std::string check;
  if ((o.rc = Exec(o.db, "PRAGMA quick_check", &check)) != SQLITE_OK) {
    return fail("Failed to check '" + path + "'");
  }
  if (check != "ok") {
    o.rc = SQLITE_CORRUPT;
    o.error = "'" + path + "' failed its integrity check: " + check;
    sqlite3_close_v2(o.db);
    o.db = nullptr;
    return o;
  }
  if ((o.rc = Exec(o.db, kCreateTable)) != SQLITE_OK) {
    return fail("Failed to create the pod_status table in '" + path + "'");
  }
  std::string user_version;
  Exec(o.db, "PRAGMA user_version", &user_version);
  if (user_version == "0") {
    std::string set = "PRAGMA user_version=" + std::to_string(kSchemaVersion);
    Exec(o.db, set.c_str());
  }
  return o;
}

// Moves the database and its -wal/-shm to PATH.corrupt-TIME; returns that path.
Result<std::string> MoveAside(const std::string& path) {
  std::string aside = path + ".corrupt-" + std::to_string(RealClock::Get().WallSeconds());
  if (rename(path.c_str(), aside.c_str()) != 0) {
    return ErrnoStatus("Failed to move the corrupt database '" + path + "' aside", errno);
  }
  for (const char* suffix : {"-wal", "-shm"}) {
    std::string from = path + suffix;
    std::string to = aside + suffix;
    if (rename(from.c_str(), to.c_str()) != 0 && errno != ENOENT) {
      return ErrnoStatus("Failed to move '" + from + "' aside", errno);
    }
  }
  return aside;
}

}  // namespace

Status SqliteStatusStore::QuickCheck() {
  std::string check;
  int rc = Exec(db_, "PRAGMA quick_check", &check);
  if (rc != SQLITE_OK) {
    const std::string what = "'" + path_ + "' could not be checked: " + ErrorText(db_, rc);
    return IsCorruption(rc) ? FailedPrecondition(what) : Internal(what);
  }
  if (check != "ok") {
    return FailedPrecondition("'" + path_ + "' failed its integrity check: " + check);
  }
  return Status::Ok();
}

Status SqliteStatusStore::Recreate(OpenReport* report) {
  sqlite3_finalize(upsert_);
  sqlite3_finalize(remove_);
  upsert_ = remove_ = nullptr;
  sqlite3_close_v2(db_);
  db_ = nullptr;
  auto aside = MoveAside(path_);
  if (!aside.ok()) return aside.status();
  if (report != nullptr) report->moved_aside_to = *aside;
  Opened o = OpenAndConfigure(path_);
  if (o.db == nullptr) return Internal(o.error);
  db_ = o.db;
  return Prepare();
}

Result<std::unique_ptr<SqliteStatusStore>> SqliteStatusStore::Open(const std::string& path,
                                                                   OpenReport* report) {
  if (Status s = EnsureDirectory(Dirname(path), 0700); !s.ok()) return s;
  Opened o = OpenAndConfigure(path);
  if (o.db == nullptr && IsCorruption(o.rc)) {
    // An unreadable database must not keep statusd down for good: keep it for a post-mortem
    // and start afresh; podworkerd re-sends every pod's status at its next sync.
    auto aside = MoveAside(path);
    if (!aside.ok()) return aside.status();
    if (report != nullptr) {
      report->moved_aside_to = *aside;
      report->corruption = o.error;
    }
    o = OpenAndConfigure(path);
  }
  if (o.db == nullptr) {
    StatusCode code =
        (o.rc & 0xff) == SQLITE_FULL ? StatusCode::kResourceExhausted : StatusCode::kInternal;
    return Status(code, o.error);
  }
  std::unique_ptr<SqliteStatusStore> store(new SqliteStatusStore(path, o.db));
  if (Status s = store->Prepare(); !s.ok()) return s;
  return store;
}

SqliteStatusStore::~SqliteStatusStore() {
  sqlite3_finalize(upsert_);
  sqlite3_finalize(remove_);
  sqlite3_close_v2(db_);
}

Status SqliteStatusStore::Prepare() {
  if (int rc = sqlite3_prepare_v3(db_, kUpsert, -1, SQLITE_PREPARE_PERSISTENT, &upsert_, nullptr);
      rc != SQLITE_OK) {
    return Error("Failed to prepare the upsert statement", rc);
  }
  if (int rc = sqlite3_prepare_v3(db_, kDelete, -1, SQLITE_PREPARE_PERSISTENT, &remove_, nullptr);
      rc != SQLITE_OK) {
    return Error("Failed to prepare the delete statement", rc);
  }
  return Status::Ok();
}

Status SqliteStatusStore::Error(const std::string& what, int rc) const {
  std::string message = what + " in '" + path_ + "': " + ErrorText(db_, rc);
  int primary = rc & 0xff;
  int sys = sqlite3_system_errno(db_);
  if (primary == SQLITE_FULL || (primary == SQLITE_IOERR && (sys == ENOSPC || sys == EDQUOT))) {
    return ResourceExhausted(message);
  }
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) return Unavailable(message);
  return Internal(message);
}

void SqliteStatusStore::Rollback() {
  if (sqlite3_get_autocommit(db_) == 0) Exec(db_, "ROLLBACK");
}

Result<StatusStore::Contents> SqliteStatusStore::LoadAll() {
  sqlite3_stmt* stmt = nullptr;
  int rc =
      sqlite3_prepare_v2(db_, "SELECT uid, version, record FROM pod_status", -1, &stmt, nullptr);
  if (rc != SQLITE_OK) return Error("Failed to read statuses", rc);
  Contents out;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    const unsigned char* uid_text = sqlite3_column_text(stmt, 0);
    std::string uid = uid_text != nullptr ? reinterpret_cast<const char*>(uid_text) : "";
    auto version = static_cast<uint64_t>(sqlite3_column_int64(stmt, 1));
    const void* blob = sqlite3_column_blob(stmt, 2);
    auto size = static_cast<size_t>(sqlite3_column_bytes(stmt, 2));
    auto record = status::DecodeRecordBlob(blob, size);
    if (!record.ok()) {
      out.unreadable.push_back({uid, version, record.status().message()});
      continue;
    }
    if (record->pod.uid != uid) {
      out.unreadable.push_back({uid, version, "its record names uid '" + record->pod.uid + "'"});
      continue;
    }
    record->version = version;
    out.records.push_back(std::move(record).value());
  }
  sqlite3_finalize(stmt);
  if (rc != SQLITE_DONE) return Error("Failed to read statuses", rc);
  return out;
}

Status SqliteStatusStore::Commit(const std::vector<StatusChange>& changes) {
  if (changes.empty()) return Status::Ok();
  // Only the last change of each pod needs to reach the table.
  std::unordered_map<std::string, size_t> last;
  last.reserve(changes.size());
  for (size_t i = 0; i < changes.size(); ++i) last[changes[i].record.pod.uid] = i;
  const std::string what = "Failed to commit " + std::to_string(changes.size()) + " status change" +
                           (changes.size() == 1 ? "" : "s");

  if (int rc = Exec(db_, "BEGIN IMMEDIATE"); rc != SQLITE_OK) {
    Status s = Error(what, rc);
    Rollback();
    return s;
  }
  for (size_t i = 0; i < changes.size(); ++i) {
    const StatusChange& c = changes[i];
    if (last[c.record.pod.uid] != i) continue;
    sqlite3_stmt* stmt = nullptr;
    const std::string& uid = c.record.pod.uid;
    std::string blob;
    if (c.kind == StatusChange::Kind::kUpdated) {
      stmt = upsert_;
      blob = status::EncodeRecordBlob(c.record);
      sqlite3_bind_text(stmt, 1, uid.data(), static_cast<int>(uid.size()), SQLITE_STATIC);
      sqlite3_bind_text(stmt, 2, c.record.pod.namespace_.data(),
                        static_cast<int>(c.record.pod.namespace_.size()), SQLITE_STATIC);
      sqlite3_bind_text(stmt, 3, c.record.pod.name.data(),
                        static_cast<int>(c.record.pod.name.size()), SQLITE_STATIC);
      sqlite3_bind_int64(stmt, 4, static_cast<sqlite3_int64>(c.record.version));
      sqlite3_bind_int64(stmt, 5, c.record.updated_at_unix_s);
      sqlite3_bind_blob(stmt, 6, blob.data(), static_cast<int>(blob.size()), SQLITE_STATIC);
    } else {
      stmt = remove_;
      sqlite3_bind_text(stmt, 1, uid.data(), static_cast<int>(uid.size()), SQLITE_STATIC);
    }
    int rc = sqlite3_step(stmt);
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
    if (rc != SQLITE_DONE) {
      Status s = Error(what, rc);
      Rollback();
      return s;
    }
  }
  if (int rc = Exec(db_, "COMMIT"); rc != SQLITE_OK) {
    Status s = Error(what, rc);
    Rollback();
    return s;
  }
  return Status::Ok();
}

}  // namespace nodelet::statusd
