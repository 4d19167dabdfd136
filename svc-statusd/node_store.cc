#include "svc-statusd/node_store.h"

#include <nlohmann/json.hpp>

namespace nodelet::statusd {
namespace {

Status SqlError(sqlite3* db, const std::string& what) {
  return Internal("node status store: " + what + ": " + sqlite3_errmsg(db));
}

}  // namespace

Status ValidateNodeStatusJson(const std::string& json) {
  if (json.size() > kMaxNodeStatusBytes) {
    return InvalidArgument("node status of " + std::to_string(json.size()) +
                           " bytes is over the limit of " + std::to_string(kMaxNodeStatusBytes));
  }
  auto doc = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgument("node status is not valid JSON");
  if (!doc.is_object()) return InvalidArgument("node status is not a JSON object");
  auto meta = doc.find("metadata");
  if (meta == doc.end() || !meta->is_object() || !meta->contains("name") ||
      !(*meta)["name"].is_string() || (*meta)["name"].get<std::string>().empty()) {
    return InvalidArgument("node status has no metadata.name");
  }
  return Status::Ok();
}

Result<std::unique_ptr<NodeStore>> NodeStore::Open(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK) {
    Status s = Internal("node status store: open " + path + ": " + (db ? sqlite3_errmsg(db) : "?"));
    sqlite3_close(db);
    return s;
  }
  sqlite3_busy_timeout(db, 2000);
  const char* schema =
      "CREATE TABLE IF NOT EXISTS node_status ("
      " id INTEGER PRIMARY KEY CHECK (id = 1), json TEXT NOT NULL, version INTEGER NOT NULL,"
      " updated INTEGER NOT NULL);";
  char* err = nullptr;
  if (sqlite3_exec(db, schema, nullptr, nullptr, &err) != SQLITE_OK) {
    Status s = Internal(std::string("node status store: schema: ") + (err ? err : "?"));
    sqlite3_free(err);
    sqlite3_close(db);
    return s;
  }
  std::unique_ptr<NodeStore> store(new NodeStore(db));
  if (Status s = store->Load(); !s.ok()) return s;
  return store;
}

NodeStore::~NodeStore() { sqlite3_close(db_); }

Status NodeStore::Load() {
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db_, "SELECT json, version, updated FROM node_status WHERE id = 1", -1,
                         &st, nullptr) != SQLITE_OK) {
    return SqlError(db_, "prepare load");
  }
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    status::NodeStatusRecord r;
    const unsigned char* t = sqlite3_column_text(st, 0);
    r.node_json = t ? reinterpret_cast<const char*>(t) : "";
    r.version = static_cast<uint64_t>(sqlite3_column_int64(st, 1));
    r.updated_at_unix_s = sqlite3_column_int64(st, 2);
    current_ = std::move(r);
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return SqlError(db_, "load");
  return Status::Ok();
}

Result<status::NodeStatusRecord> NodeStore::Set(const std::string& json, int64_t now,
                                                bool* changed) {
  if (Status s = ValidateNodeStatusJson(json); !s.ok()) return s;
  *changed = !current_ || current_->node_json != json;
  if (!*changed) return *current_;
  status::NodeStatusRecord next;
  next.node_json = json;
  next.version = current_ ? current_->version + 1 : 1;
  next.updated_at_unix_s = now;
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(
          db_,
          "INSERT INTO node_status (id, json, version, updated) VALUES (1, ?1, ?2, ?3)"
          " ON CONFLICT(id) DO UPDATE SET json = excluded.json,"
          " version = excluded.version, updated = excluded.updated",
          -1, &st, nullptr) != SQLITE_OK) {
    return SqlError(db_, "prepare store");
  }
  sqlite3_bind_text(st, 1, json.data(), static_cast<int>(json.size()), SQLITE_TRANSIENT);
  sqlite3_bind_int64(st, 2, static_cast<int64_t>(next.version));
  sqlite3_bind_int64(st, 3, now);
  int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) return SqlError(db_, "store");
  current_ = next;
  return next;
}

}  // namespace nodelet::statusd
