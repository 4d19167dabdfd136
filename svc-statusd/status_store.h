// StatusStore: where nodelet-statusd keeps pod statuses durably. The real one is SQLite in WAL
// mode with synchronous=FULL at ROOT/statusd/status.db: one row per pod (uid, namespace, name,
// version, the record as a verified FlatBuffers blob). Commit() writes one batch of changes in
// one transaction and returns only once it is durable (group commit: the service gathers every
// request that arrived meanwhile into one batch).
#pragma once

#include <sqlite3.h>

#include <memory>
#include <string>
#include <vector>

#include "lib/common/status.h"
#include "svc-statusd/status_manager.h"

namespace nodelet::statusd {

class StatusStore {
 public:
  // A row that could not be read back (a broken blob): its uid, version and why.
  struct UnreadableRow {
    std::string uid;
    uint64_t version = 0;
    std::string error;
  };
  struct Contents {
    std::vector<PodStatusRecord> records;
    std::vector<UnreadableRow> unreadable;
  };

  virtual ~StatusStore() = default;
  virtual Result<Contents> LoadAll() = 0;
  // Writes the batch (the last record of each updated pod, every removal) atomically and
  // durably. ResourceExhausted when the disk is full; nothing of the batch is kept on error.
  virtual Status Commit(const std::vector<StatusChange>& changes) = 0;
};

class SqliteStatusStore : public StatusStore {
 public:
  // What Open() had to do besides opening.
  struct OpenReport {
    // Non-empty when the database was unreadable (corrupt, not a database) and was moved aside
    // to this path so that a fresh one could be created.
    std::string moved_aside_to;
    std::string corruption;
  };

  // Opens (creating it and its directory when missing) the database at `path`.
  static Result<std::unique_ptr<SqliteStatusStore>> Open(const std::string& path,
                                                         OpenReport* report = nullptr);
  ~SqliteStatusStore() override;

  Result<Contents> LoadAll() override;
  Status Commit(const std::vector<StatusChange>& changes) override;

  // PRAGMA quick_check on the open database: OK, or FailedPrecondition with what it found (a
  // corrupt page, "file is not a database"). Other failures (busy, I/O) are returned as they are.
  Status QuickCheck();
  // What Open() does for an unreadable database, on the open store: closes it, moves the file
  // (and its -wal/-shm) aside to PATH.corrupt-TIME and opens a fresh one in its place. The
  // caller writes back what it holds in memory.
  Status Recreate(OpenReport* report);

  const std::string& path() const { return path_; }

 private:
  SqliteStatusStore(std::string path, sqlite3* db) : path_(std::move(path)), db_(db) {}
  Status Prepare();
  // The Status for the database's last error, for `what`.
  Status Error(const std::string& what, int rc) const;
  void Rollback();

  std::string path_;
  sqlite3* db_ = nullptr;
  sqlite3_stmt* upsert_ = nullptr;
  sqlite3_stmt* remove_ = nullptr;
};

}  // namespace nodelet::statusd
