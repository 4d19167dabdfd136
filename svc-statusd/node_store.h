// NodeStore: the node's status (a v1 Node object as JSON) as statusd keeps it, in a one-row
// table of statusd's SQLite database (sqlite_db.h), the file of the pod statuses. The
// supervisor sends it every 10 s; statusd stores the latest, raises its version when the content
// changed, and hands it to its sinks (status_sink.h) the way it hands them pod statuses.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "lib/common/status.h"
#include "lib/status/pod_status.h"
#include "svc-statusd/sqlite_db.h"

namespace nodelet::statusd {

// Node status JSON larger than this is refused (a node with thousands of images stays far
// below it).
inline constexpr size_t kMaxNodeStatusBytes = 512 * 1024;

// InvalidArgument unless `json` is a JSON object with a non-empty metadata.name, within
// kMaxNodeStatusBytes.
Status ValidateNodeStatusJson(const std::string& json);

class NodeStore {
 public:
  // The store on statusd's open database (creates its table when missing, loads the row).
  static Result<std::unique_ptr<NodeStore>> Open(std::shared_ptr<SqliteDb> db);
  // The same on the database at `path` (SqliteDb::Open).
  static Result<std::unique_ptr<NodeStore>> Open(const std::string& path, const Clock& clock);
  NodeStore(const NodeStore&) = delete;
  NodeStore& operator=(const NodeStore&) = delete;

  // Validates and stores `json` at `now` (Unix s). The version grows by one when the content
  // differs from the stored one; `*changed` says whether it did.
  Result<status::NodeStatusRecord> Set(const std::string& json, int64_t now, bool* changed);
  // The stored node status, if any (loaded at Open, kept in memory).
  const std::optional<status::NodeStatusRecord>& Get() const { return current_; }

 private:
  explicit NodeStore(std::shared_ptr<SqliteDb> db) : db_(std::move(db)) {}
  Status Load();

  std::shared_ptr<SqliteDb> db_;
  std::optional<status::NodeStatusRecord> current_;
};

}  // namespace nodelet::statusd
