#include "svc-statusd/sqlite_db.h"

#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

#include "lib/common/check.h"
#include "lib/common/clock.h"
#include "lib/common/fs.h"

namespace nodelet::statusd {

namespace {

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

// Runs every statement of `sql`; when one returns rows, the first column of the first row goes
// to `first`. The SQLite result code.
int ExecRaw(sqlite3* db, std::string_view sql, std::string* first = nullptr) {
  if (db == nullptr) return SQLITE_MISUSE;
  const char* next = sql.data();
  const char* end = sql.data() + sql.size();
  bool have_first = false;
  while (next < end) {
    sqlite3_stmt* stmt = nullptr;
    const char* tail = nullptr;
    int rc = sqlite3_prepare_v2(db, next, static_cast<int>(end - next), &stmt, &tail);
    if (rc != SQLITE_OK) return rc;
    next = tail;
    if (stmt == nullptr) continue;  // whitespace or a comment
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
      if (first != nullptr && !have_first) {
        const unsigned char* text = sqlite3_column_text(stmt, 0);
        *first = text != nullptr ? reinterpret_cast<const char*>(text) : "";
        have_first = true;
      }
    }
    sqlite3_finalize(stmt);
    if (rc != SQLITE_DONE) return rc;
  }
  return SQLITE_OK;
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

// Opens, configures and checks the database; on failure closes it and says why.
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
  if ((o.rc = ExecRaw(o.db, "PRAGMA journal_mode=WAL", &mode)) != SQLITE_OK) {
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
  if ((o.rc = ExecRaw(o.db, "PRAGMA synchronous=FULL")) != SQLITE_OK) {
    return fail("Failed to set synchronous=FULL on '" + path + "'");
  }
  // Keep the WAL file small after checkpoints; a failure only costs disk space.
  (void)ExecRaw(o.db, "PRAGMA journal_size_limit=4194304");
  std::string check;
  if ((o.rc = ExecRaw(o.db, "PRAGMA quick_check", &check)) != SQLITE_OK) {
    return fail("Failed to check '" + path + "'");
  }
  if (check != "ok") {
    o.rc = SQLITE_CORRUPT;
    o.error = "'" + path + "' failed its integrity check: " + check;
    sqlite3_close_v2(o.db);
    o.db = nullptr;
    return o;
  }
  return o;
}

// Moves the database and its -wal/-shm to PATH.corrupt-TIME; returns that path.
Result<std::string> MoveAside(const std::string& path, const Clock& clock) {
  std::string aside = path + ".corrupt-" + std::to_string(clock.WallSeconds());
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

// The files this process has open, by their directory's real path and name: one connection each.
std::mutex g_open_mu;
std::map<std::string, std::weak_ptr<SqliteDb>>& OpenFiles() {
  static auto* files = new std::map<std::string, std::weak_ptr<SqliteDb>>();
  return *files;
}

std::string FileKey(const std::string& path) {
  std::string dir = Dirname(path);
  char* real = realpath(dir.c_str(), nullptr);
  if (real == nullptr) return path;
  std::string key = std::string(real) + "/" + path.substr(path.rfind('/') + 1);
  free(real);
  return key;
}

}  // namespace

Result<std::shared_ptr<SqliteDb>> SqliteDb::Open(const std::string& path, const Clock& clock,
                                                 OpenReport* report) {
  if (Status s = EnsureDirectory(Dirname(path), 0700); !s.ok()) return s;
  const std::string key = FileKey(path);
  std::lock_guard<std::mutex> lock(g_open_mu);
  if (auto it = OpenFiles().find(key); it != OpenFiles().end()) {
    if (auto open = it->second.lock()) return open;
  }
  Opened o = OpenAndConfigure(path);
  if (o.db == nullptr && IsCorruption(o.rc)) {
    // An unreadable database must not keep statusd down for good: keep it for a post-mortem
    // and start afresh; podworkerd re-sends every pod's status at its next sync.
    auto aside = MoveAside(path, clock);
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
  std::shared_ptr<SqliteDb> db(new SqliteDb(path, key, o.db, clock));
  OpenFiles()[key] = db;
  return db;
}

SqliteDb::~SqliteDb() {
  DropStatements();
  sqlite3_close_v2(db_);
  std::lock_guard<std::mutex> lock(g_open_mu);
  auto it = OpenFiles().find(key_);
  // Another SqliteDb for the same file may have been opened since this one's last holder went.
  if (it != OpenFiles().end() && it->second.expired()) OpenFiles().erase(it);
}

void SqliteDb::DropStatements() {
  for (auto& [sql, cached] : statements_) {
    NODELET_CHECK(!cached->in_use) << "statement still in use: " << sql;
    sqlite3_finalize(cached->stmt);
  }
  statements_.clear();
}

Status SqliteDb::Error(const std::string& what, int rc) const {
  if (db_ == nullptr) {
    return Internal(what + " in '" + path_ + "': the database is not open (it could not be " +
                    "created again)");
  }
  std::string message = what + " in '" + path_ + "': " + ErrorText(db_, rc);
  int primary = rc & 0xff;
  int sys = sqlite3_system_errno(db_);
  if (primary == SQLITE_FULL || (primary == SQLITE_IOERR && (sys == ENOSPC || sys == EDQUOT))) {
    return ResourceExhausted(message);
  }
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) return Unavailable(message);
  return Internal(message);
}

Result<SqliteDb::Statement> SqliteDb::Prepare(std::string_view sql, std::string what) {
  if (db_ == nullptr) return Error(what, SQLITE_MISUSE);
  auto it = statements_.find(std::string(sql));
  if (it == statements_.end()) {
    auto cached = std::make_unique<Statement::Cached>();
    int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                                SQLITE_PREPARE_PERSISTENT, &cached->stmt, nullptr);
    if (rc != SQLITE_OK) {
      sqlite3_finalize(cached->stmt);
      return Error(what, rc);
    }
    ++statements_prepared_;
    it = statements_.emplace(std::string(sql), std::move(cached)).first;
  }
  NODELET_CHECK(!it->second->in_use) << "statement already in use: " << sql;
  it->second->in_use = true;
  return Statement(this, it->second.get(), std::move(what));
}

Status SqliteDb::Exec(std::string_view sql, const std::string& what, std::string* first) {
  if (int rc = ExecRaw(db_, sql, first); rc != SQLITE_OK) return Error(what, rc);
  return Status::Ok();
}

void SqliteDb::Rollback() {
  if (db_ != nullptr && sqlite3_get_autocommit(db_) == 0) {
    // Nothing to report: the transaction is over either way (SQLite may have rolled it back).
    (void)ExecRaw(db_, "ROLLBACK");
  }
}

Result<SqliteDb::Transaction> SqliteDb::Begin(std::string what) {
  if (int rc = ExecRaw(db_, "BEGIN IMMEDIATE"); rc != SQLITE_OK) {
    Status s = Error(what, rc);
    Rollback();
    return s;
  }
  return Transaction(this, std::move(what));
}

Status SqliteDb::QuickCheck() {
  std::string check;
  int rc = ExecRaw(db_, "PRAGMA quick_check", &check);
  if (rc != SQLITE_OK) {
    const std::string what = "'" + path_ + "' could not be checked: " + ErrorText(db_, rc);
    return IsCorruption(rc) ? FailedPrecondition(what) : Internal(what);
  }
  if (check != "ok") {
    return FailedPrecondition("'" + path_ + "' failed its integrity check: " + check);
  }
  return Status::Ok();
}

Status SqliteDb::Recreate(OpenReport* report) {
  DropStatements();
  sqlite3_close_v2(db_);
  db_ = nullptr;
  auto aside = MoveAside(path_, clock_);
  if (!aside.ok()) return aside.status();
  if (report != nullptr) report->moved_aside_to = *aside;
  Opened o = OpenAndConfigure(path_);
  if (o.db == nullptr) return Internal(o.error);
  db_ = o.db;
  return Status::Ok();
}

// Statement.

SqliteDb::Statement::Statement(Statement&& other) noexcept
    : db_(other.db_),
      cached_(std::exchange(other.cached_, nullptr)),
      what_(std::move(other.what_)),
      bind_rc_(other.bind_rc_) {}

SqliteDb::Statement::~Statement() {
  if (cached_ == nullptr) return;
  sqlite3_reset(cached_->stmt);
  sqlite3_clear_bindings(cached_->stmt);
  cached_->in_use = false;
}

SqliteDb::Statement& SqliteDb::Statement::BindText(int index, std::string_view text) {
  int rc = sqlite3_bind_text(cached_->stmt, index, text.data(), static_cast<int>(text.size()),
                             SQLITE_STATIC);
  if (bind_rc_ == SQLITE_OK) bind_rc_ = rc;
  return *this;
}

SqliteDb::Statement& SqliteDb::Statement::BindBlob(int index, std::string_view bytes) {
  int rc = sqlite3_bind_blob(cached_->stmt, index, bytes.data(), static_cast<int>(bytes.size()),
                             SQLITE_STATIC);
  if (bind_rc_ == SQLITE_OK) bind_rc_ = rc;
  return *this;
}

SqliteDb::Statement& SqliteDb::Statement::BindInt64(int index, int64_t value) {
  int rc = sqlite3_bind_int64(cached_->stmt, index, static_cast<sqlite3_int64>(value));
  if (bind_rc_ == SQLITE_OK) bind_rc_ = rc;
  return *this;
}

Status SqliteDb::Statement::StepError(int rc) const { return db_->Error(what_, rc); }

Result<bool> SqliteDb::Statement::Step() {
  if (bind_rc_ != SQLITE_OK) return StepError(bind_rc_);
  int rc = sqlite3_step(cached_->stmt);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return StepError(rc);
}

Status SqliteDb::Statement::Run() {
  for (;;) {
    auto row = Step();
    if (!row.ok()) {
      sqlite3_reset(cached_->stmt);
      return row.status();
    }
    if (!*row) break;
  }
  sqlite3_reset(cached_->stmt);
  return Status::Ok();
}

std::string SqliteDb::Statement::Text(int column) const {
  const unsigned char* text = sqlite3_column_text(cached_->stmt, column);
  if (text == nullptr) return "";
  return std::string(reinterpret_cast<const char*>(text),
                     static_cast<size_t>(sqlite3_column_bytes(cached_->stmt, column)));
}

std::string_view SqliteDb::Statement::Blob(int column) const {
  const void* blob = sqlite3_column_blob(cached_->stmt, column);
  if (blob == nullptr) return {};
  return std::string_view(static_cast<const char*>(blob),
                          static_cast<size_t>(sqlite3_column_bytes(cached_->stmt, column)));
}

int64_t SqliteDb::Statement::Int64(int column) const {
  return sqlite3_column_int64(cached_->stmt, column);
}

// Transaction.

SqliteDb::Transaction::Transaction(Transaction&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)), what_(std::move(other.what_)) {}

SqliteDb::Transaction::~Transaction() {
  if (db_ != nullptr) db_->Rollback();
}

Status SqliteDb::Transaction::Commit() {
  SqliteDb* db = std::exchange(db_, nullptr);
  if (int rc = ExecRaw(db->db_, "COMMIT"); rc != SQLITE_OK) {
    Status s = db->Error(what_, rc);
    db->Rollback();
    return s;
  }
  return Status::Ok();
}

}  // namespace nodelet::statusd
