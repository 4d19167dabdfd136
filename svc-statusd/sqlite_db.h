// SqliteDb: statusd's one connection to its SQLite file (ROOT/statusd/status.db), which the
// three stores (pod statuses, events, the node status) share. Open() configures it as statusd
// needs (WAL, synchronous=FULL, extended result codes, a 2 s busy timeout), checks it
// (PRAGMA quick_check), and moves a file that fails as a database aside for a fresh one. One
// connection per file per process: opening a file this process already has open returns the same
// SqliteDb. Statements are prepared once and cached; every failure takes one path, a Status that
// names the operation, the file and SQLite's message. Not thread-safe: one thread uses it.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "lib/common/clock.h"
#include "lib/common/status.h"

namespace nodelet::statusd {

class SqliteDb {
 public:
  // What Open() or Recreate() had to do besides opening.
  struct OpenReport {
    // Non-empty when the database was unreadable (corrupt, not a database) and was moved aside
    // to this path (with its -wal and -shm) so that a fresh one could be created.
    std::string moved_aside_to;
    // What was wrong with it (Open() only).
    std::string corruption;
  };

  // A cached prepared statement in use (one use at a time). Bind*() do not copy: the bytes must
  // stay valid while the handle lives. When the handle goes, the statement is reset and its
  // bindings cleared, ready for the next use.
  class Statement {
   public:
    Statement(Statement&& other) noexcept;
    Statement& operator=(Statement&&) = delete;
    Statement(const Statement&) = delete;
    Statement& operator=(const Statement&) = delete;
    ~Statement();

    // Parameters are numbered from 1 (?1, ?2...). A failed bind is reported by the next step.
    Statement& BindText(int index, std::string_view text);
    Statement& BindBlob(int index, std::string_view bytes);
    Statement& BindInt64(int index, int64_t value);
    // One step: true with a row to read, false when done, or the error for this statement's
    // operation.
    Result<bool> Step();
    // Steps to the end (rows are skipped), then resets for the next use (bindings are kept).
    Status Run();
    // Columns of the current row, numbered from 0. Blob() is valid until the next step.
    std::string Text(int column) const;
    std::string_view Blob(int column) const;
    int64_t Int64(int column) const;

   private:
    friend class SqliteDb;
    // A statement of the cache and whether a handle uses it.
    struct Cached {
      sqlite3_stmt* stmt = nullptr;
      bool in_use = false;
    };
    Statement(SqliteDb* db, Cached* cached, std::string what)
        : db_(db), cached_(cached), what_(std::move(what)) {}
    Status StepError(int rc) const;

    SqliteDb* db_;
    Cached* cached_;
    std::string what_;  // the operation, for errors
    int bind_rc_ = SQLITE_OK;
  };

  // BEGIN IMMEDIATE; rolled back when it goes out of scope without a successful Commit().
  class Transaction {
   public:
    Transaction(Transaction&& other) noexcept;
    Transaction& operator=(Transaction&&) = delete;
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;
    ~Transaction();
    // COMMIT: durable when it returns OK (synchronous=FULL); rolled back on error.
    Status Commit();

   private:
    friend class SqliteDb;
    Transaction(SqliteDb* db, std::string what) : db_(db), what_(std::move(what)) {}
    SqliteDb* db_;
    std::string what_;
  };

  // Opens (creating it and its directory when missing) the database at `path`, or returns the
  // connection this process already has to it. ResourceExhausted when the disk is full. `clock`
  // (its wall time) names the file an unreadable database is moved aside to, here and in
  // Recreate(); the connection keeps the clock it was first opened with.
  static Result<std::shared_ptr<SqliteDb>> Open(const std::string& path, const Clock& clock,
                                                OpenReport* report = nullptr);
  ~SqliteDb();
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;

  // The cached statement for `sql` (prepared at its first use); errors name `what`, the
  // operation it serves ("Failed to commit 3 status changes").
  Result<Statement> Prepare(std::string_view sql, std::string what);
  // Runs `sql` (one or more statements, not cached: schema, pragmas); when it returns rows, the
  // first column of the first row goes to `first`.
  Status Exec(std::string_view sql, const std::string& what, std::string* first = nullptr);
  Result<Transaction> Begin(std::string what);

  // PRAGMA quick_check: OK, or FailedPrecondition with what it found (a corrupt page, "file is
  // not a database"). Other failures (busy, I/O) are Internal.
  Status QuickCheck();
  // What Open() does for an unreadable database, on the open connection: drops the cached
  // statements, closes it, moves the file (and its -wal/-shm) aside to PATH.corrupt-TIME and
  // opens a fresh one in its place. Every holder keeps using this SqliteDb; their tables must be
  // created again. After a failure the connection stays closed and every operation fails.
  Status Recreate(OpenReport* report);

  const std::string& path() const { return path_; }
  // How many statements were compiled since the connection was opened (the cache's misses).
  uint64_t statements_prepared() const { return statements_prepared_; }

 private:
  SqliteDb(std::string path, std::string key, sqlite3* db, const Clock& clock)
      : path_(std::move(path)), key_(std::move(key)), db_(db), clock_(clock) {}
  // The Status for the connection's last error (`rc`), for `what`: "WHAT in 'PATH': MESSAGE".
  Status Error(const std::string& what, int rc) const;
  void Rollback();
  void DropStatements();

  std::string path_;
  std::string key_;  // in the process's table of open files
  sqlite3* db_ = nullptr;
  const Clock& clock_;
  std::unordered_map<std::string, std::unique_ptr<Statement::Cached>> statements_;
  uint64_t statements_prepared_ = 0;
};

}  // namespace nodelet::statusd
