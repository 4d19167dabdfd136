#include "svc-statusd/event_store.h"

namespace nodelet::statusd {
namespace {

Status SqlError(sqlite3* db, const std::string& what) {
  return Internal("event store: " + what + ": " + sqlite3_errmsg(db));
}

// A prepared statement, finalized on scope exit.
struct Stmt {
  sqlite3_stmt* s = nullptr;
  ~Stmt() { sqlite3_finalize(s); }
};

std::string Text(sqlite3_stmt* s, int col) {
  const unsigned char* t = sqlite3_column_text(s, col);
  return t ? reinterpret_cast<const char*>(t) : "";
}

}  // namespace

Result<std::unique_ptr<EventStore>> EventStore::Open(const std::string& path,
                                                     std::chrono::seconds retention,
                                                     size_t max_events) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK) {
    Status s = Internal("event store: open " + path + ": " + (db ? sqlite3_errmsg(db) : "?"));
    sqlite3_close(db);
    return s;
  }
  sqlite3_busy_timeout(db, 2000);
  const char* schema =
      "CREATE TABLE IF NOT EXISTS events ("
      " pod_uid TEXT NOT NULL, namespace TEXT, pod_name TEXT, type TEXT, reason TEXT NOT NULL,"
      " message TEXT NOT NULL, source TEXT, count INTEGER NOT NULL, first_seen INTEGER NOT NULL,"
      " last_seen INTEGER NOT NULL, PRIMARY KEY (pod_uid, reason, message));"
      "CREATE INDEX IF NOT EXISTS events_last_seen ON events(last_seen);";
  char* err = nullptr;
  if (sqlite3_exec(db, schema, nullptr, nullptr, &err) != SQLITE_OK) {
    Status s = Internal(std::string("event store: schema: ") + (err ? err : "?"));
    sqlite3_free(err);
    sqlite3_close(db);
    return s;
  }
  return std::unique_ptr<EventStore>(new EventStore(db, retention, max_events));
}

EventStore::~EventStore() { sqlite3_close(db_); }

Result<uint32_t> EventStore::Record(const std::vector<status::PodEvent>& events, int64_t now) {
  if (sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) != SQLITE_OK) {
    return SqlError(db_, "begin");
  }
  Stmt up;
  const char* sql =
      "INSERT INTO events (pod_uid, namespace, pod_name, type, reason, message, source, count,"
      " first_seen, last_seen) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9)"
      " ON CONFLICT(pod_uid, reason, message) DO UPDATE SET count = count + excluded.count,"
      " last_seen = excluded.last_seen, type = excluded.type";
  if (sqlite3_prepare_v2(db_, sql, -1, &up.s, nullptr) != SQLITE_OK) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return SqlError(db_, "prepare");
  }
  uint32_t stored = 0;
  for (const auto& e : events) {
    if (e.pod_uid.empty() || e.reason.empty()) continue;
    sqlite3_reset(up.s);
    sqlite3_bind_text(up.s, 1, e.pod_uid.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(up.s, 2, e.namespace_.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(up.s, 3, e.pod_name.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(up.s, 4, e.type.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(up.s, 5, e.reason.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(up.s, 6, e.message.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(up.s, 7, e.source.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(up.s, 8, std::max<uint32_t>(1, e.count));
    sqlite3_bind_int64(up.s, 9, e.last_unix_s != 0 ? e.last_unix_s : now);
    if (sqlite3_step(up.s) != SQLITE_DONE) {
      Status s = SqlError(db_, "insert");
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      return s;
    }
    ++stored;
  }
  // Retention: an hour, and at most max_events rows (the oldest go).
  std::string prune = "DELETE FROM events WHERE last_seen < " +
                      std::to_string(now - retention_.count()) +
                      "; DELETE FROM events WHERE rowid IN (SELECT rowid FROM events ORDER BY"
                      " last_seen DESC LIMIT -1 OFFSET " +
                      std::to_string(max_events_) + ")";
  if (sqlite3_exec(db_, prune.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK ||
      sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) {
    Status s = SqlError(db_, "commit");
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return s;
  }
  return stored;
}

Result<std::vector<status::PodEvent>> EventStore::List(const std::string& uid) {
  Stmt q;
  std::string sql =
      "SELECT pod_uid, namespace, pod_name, type, reason, message, source, count, first_seen,"
      " last_seen FROM events";
  if (!uid.empty()) sql += " WHERE pod_uid = ?1";
  sql += " ORDER BY last_seen, first_seen";
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &q.s, nullptr) != SQLITE_OK) {
    return SqlError(db_, "prepare");
  }
  if (!uid.empty()) sqlite3_bind_text(q.s, 1, uid.c_str(), -1, SQLITE_TRANSIENT);
  std::vector<status::PodEvent> out;
  int rc;
  while ((rc = sqlite3_step(q.s)) == SQLITE_ROW) {
    status::PodEvent e;
    e.pod_uid = Text(q.s, 0);
    e.namespace_ = Text(q.s, 1);
    e.pod_name = Text(q.s, 2);
    e.type = Text(q.s, 3);
    e.reason = Text(q.s, 4);
    e.message = Text(q.s, 5);
    e.source = Text(q.s, 6);
    e.count = static_cast<uint32_t>(sqlite3_column_int64(q.s, 7));
    e.first_unix_s = sqlite3_column_int64(q.s, 8);
    e.last_unix_s = sqlite3_column_int64(q.s, 9);
    out.push_back(std::move(e));
  }
  if (rc != SQLITE_DONE) return SqlError(db_, "query");
  return out;
}

}  // namespace nodelet::statusd
