// StatusStore: where nodelet-statusd keeps pod statuses durably. The real one is the pod_status
// table of statusd's SQLite database (sqlite_db.h: WAL, synchronous=FULL, ROOT/statusd/status.db):
// one row per pod (uid, namespace, name, version, the record as a verified FlatBuffers blob).
// Commit() writes one batch of changes in one transaction and returns only once it is durable
// (group commit: the service gathers every request that arrived meanwhile into one batch).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "lib/common/status.h"
#include "svc-statusd/sqlite_db.h"
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
  using OpenReport = SqliteDb::OpenReport;

  // The store on statusd's open database (creates its table when missing).
  static Result<std::unique_ptr<SqliteStatusStore>> Open(std::shared_ptr<SqliteDb> db);
  // Opens the database at `path` (SqliteDb::Open: created with its directory when missing, an
  // unreadable one moved aside, named by `clock`'s wall time), then the store on it.
  static Result<std::unique_ptr<SqliteStatusStore>> Open(const std::string& path,
                                                         const Clock& clock,
                                                         OpenReport* report = nullptr);

  Result<Contents> LoadAll() override;
  Status Commit(const std::vector<StatusChange>& changes) override;

  // What Open() does for an unreadable database, on the open store: SqliteDb::Recreate (the
  // file is moved aside to PATH.corrupt-TIME, a fresh one is opened), then the table is created
  // again. The caller writes back what it holds in memory; the other stores on the database
  // create their tables again too.
  Status Recreate(OpenReport* report);

  const std::string& path() const { return db_->path(); }

 private:
  explicit SqliteStatusStore(std::shared_ptr<SqliteDb> db) : db_(std::move(db)) {}
  Status CreateTable();

  std::shared_ptr<SqliteDb> db_;
};

}  // namespace nodelet::statusd
