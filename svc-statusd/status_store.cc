#include "svc-statusd/status_store.h"

#include <unordered_map>

#include "lib/status/status_codec.h"

namespace nodelet::statusd {
namespace {

constexpr int kSchemaVersion = 1;

constexpr std::string_view kCreateTable =
    "CREATE TABLE IF NOT EXISTS pod_status ("
    " uid TEXT PRIMARY KEY NOT NULL,"
    " namespace TEXT NOT NULL,"
    " name TEXT NOT NULL,"
    " version INTEGER NOT NULL,"
    " updated_at_unix_s INTEGER NOT NULL,"
    " record BLOB NOT NULL)";

constexpr std::string_view kUpsert =
    "INSERT INTO pod_status (uid, namespace, name, version, updated_at_unix_s, record)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
    " ON CONFLICT(uid) DO UPDATE SET namespace = ?2, name = ?3, version = ?4,"
    " updated_at_unix_s = ?5, record = ?6";

constexpr std::string_view kDelete = "DELETE FROM pod_status WHERE uid = ?1";

constexpr std::string_view kSelectAll = "SELECT uid, version, record FROM pod_status";

}  // namespace

Result<std::unique_ptr<SqliteStatusStore>> SqliteStatusStore::Open(std::shared_ptr<SqliteDb> db) {
  std::unique_ptr<SqliteStatusStore> store(new SqliteStatusStore(std::move(db)));
  if (Status s = store->CreateTable(); !s.ok()) return s;
  return store;
}

Result<std::unique_ptr<SqliteStatusStore>> SqliteStatusStore::Open(const std::string& path,
                                                                   const Clock& clock,
                                                                   OpenReport* report) {
  auto db = SqliteDb::Open(path, clock, report);
  if (!db.ok()) return db.status();
  return Open(std::move(db).value());
}

Status SqliteStatusStore::CreateTable() {
  if (Status s = db_->Exec(kCreateTable, "Failed to create the pod_status table"); !s.ok()) {
    return s;
  }
  // The schema's version, for a later migration; a failure to read or set it changes nothing
  // today, so it is not an error.
  std::string user_version;
  (void)db_->Exec("PRAGMA user_version", "Failed to read the schema version", &user_version);
  if (user_version == "0") {
    (void)db_->Exec("PRAGMA user_version=" + std::to_string(kSchemaVersion),
                    "Failed to set the schema version");
  }
  return Status::Ok();
}

Status SqliteStatusStore::Recreate(OpenReport* report) {
  if (Status s = db_->Recreate(report); !s.ok()) return s;
  return CreateTable();
}

Result<StatusStore::Contents> SqliteStatusStore::LoadAll() {
  auto stmt = db_->Prepare(kSelectAll, "Failed to read statuses");
  if (!stmt.ok()) return stmt.status();
  Contents out;
  for (;;) {
    auto row = stmt->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    std::string uid = stmt->Text(0);
    auto version = static_cast<uint64_t>(stmt->Int64(1));
    std::string_view blob = stmt->Blob(2);
    auto record = status::DecodeRecordBlob(blob.data(), blob.size());
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

  auto tx = db_->Begin(what);
  if (!tx.ok()) return tx.status();
  for (size_t i = 0; i < changes.size(); ++i) {
    const StatusChange& c = changes[i];
    if (last[c.record.pod.uid] != i) continue;
    const PodStatusRecord& r = c.record;
    if (c.kind == StatusChange::Kind::kUpdated) {
      const std::string blob = status::EncodeRecordBlob(r);
      auto upsert = db_->Prepare(kUpsert, what);
      if (!upsert.ok()) return upsert.status();
      upsert->BindText(1, r.pod.uid)
          .BindText(2, r.pod.namespace_)
          .BindText(3, r.pod.name)
          .BindInt64(4, static_cast<int64_t>(r.version))
          .BindInt64(5, r.updated_at_unix_s)
          .BindBlob(6, blob);
      if (Status s = upsert->Run(); !s.ok()) return s;
    } else {
      auto remove = db_->Prepare(kDelete, what);
      if (!remove.ok()) return remove.status();
      if (Status s = remove->BindText(1, r.pod.uid).Run(); !s.ok()) return s;
    }
  }
  return tx->Commit();
}

}  // namespace nodelet::statusd
