#include "svc-statusd/node_store.h"

#include <nlohmann/json.hpp>

namespace nodelet::statusd {
namespace {

constexpr std::string_view kNodeSchema =
    "CREATE TABLE IF NOT EXISTS node_status ("
    " id INTEGER PRIMARY KEY CHECK (id = 1), json TEXT NOT NULL, version INTEGER NOT NULL,"
    " updated INTEGER NOT NULL);";

constexpr std::string_view kNodeSelect =
    "SELECT json, version, updated FROM node_status WHERE id = 1";

constexpr std::string_view kNodeUpsert =
    "INSERT INTO node_status (id, json, version, updated) VALUES (1, ?1, ?2, ?3)"
    " ON CONFLICT(id) DO UPDATE SET json = excluded.json,"
    " version = excluded.version, updated = excluded.updated";

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

Result<std::unique_ptr<NodeStore>> NodeStore::Open(std::shared_ptr<SqliteDb> db) {
  if (Status s = db->Exec(kNodeSchema, "Failed to create the node_status table"); !s.ok()) return s;
  std::unique_ptr<NodeStore> store(new NodeStore(std::move(db)));
  if (Status s = store->Load(); !s.ok()) return s;
  return store;
}

Result<std::unique_ptr<NodeStore>> NodeStore::Open(const std::string& path, const Clock& clock) {
  auto db = SqliteDb::Open(path, clock);
  if (!db.ok()) return db.status();
  return Open(std::move(db).value());
}

Status NodeStore::Load() {
  auto st = db_->Prepare(kNodeSelect, "Failed to load the node status");
  if (!st.ok()) return st.status();
  auto row = st->Step();
  if (!row.ok()) return row.status();
  if (*row) {
    status::NodeStatusRecord r;
    r.node_json = st->Text(0);
    r.version = static_cast<uint64_t>(st->Int64(1));
    r.updated_at_unix_s = st->Int64(2);
    current_ = std::move(r);
  }
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
  auto st = db_->Prepare(kNodeUpsert, "Failed to store the node status");
  if (!st.ok()) return st.status();
  st->BindText(1, json).BindInt64(2, static_cast<int64_t>(next.version)).BindInt64(3, now);
  if (Status s = st->Run(); !s.ok()) return s;
  current_ = next;
  return next;
}

}  // namespace nodelet::statusd
