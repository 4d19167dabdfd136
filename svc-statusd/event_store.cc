#include "svc-statusd/event_store.h"

#include <algorithm>

namespace nodelet::statusd {
namespace {

constexpr std::string_view kEventsSchema =
    "CREATE TABLE IF NOT EXISTS events ("
    " pod_uid TEXT NOT NULL, namespace TEXT, pod_name TEXT, type TEXT, reason TEXT NOT NULL,"
    " message TEXT NOT NULL, source TEXT, count INTEGER NOT NULL, first_seen INTEGER NOT NULL,"
    " last_seen INTEGER NOT NULL, PRIMARY KEY (pod_uid, reason, message));"
    "CREATE INDEX IF NOT EXISTS events_last_seen ON events(last_seen);";

constexpr std::string_view kEventsUpsert =
    "INSERT INTO events (pod_uid, namespace, pod_name, type, reason, message, source, count,"
    " first_seen, last_seen) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9)"
    " ON CONFLICT(pod_uid, reason, message) DO UPDATE SET count = count + excluded.count,"
    " last_seen = excluded.last_seen, type = excluded.type";

// Retention: events last seen before ?1 go, then all but the ?1 newest.
constexpr std::string_view kPruneOld = "DELETE FROM events WHERE last_seen < ?1";
constexpr std::string_view kPruneOver =
    "DELETE FROM events WHERE rowid IN (SELECT rowid FROM events ORDER BY last_seen DESC"
    " LIMIT -1 OFFSET ?1)";

constexpr std::string_view kListAll =
    "SELECT pod_uid, namespace, pod_name, type, reason, message, source, count, first_seen,"
    " last_seen FROM events ORDER BY last_seen, first_seen";
constexpr std::string_view kListPod =
    "SELECT pod_uid, namespace, pod_name, type, reason, message, source, count, first_seen,"
    " last_seen FROM events WHERE pod_uid = ?1 ORDER BY last_seen, first_seen";

}  // namespace

Result<std::unique_ptr<EventStore>> EventStore::Open(std::shared_ptr<SqliteDb> db,
                                                     std::chrono::seconds retention,
                                                     size_t max_events) {
  if (Status s = db->Exec(kEventsSchema, "Failed to create the events table"); !s.ok()) return s;
  return std::unique_ptr<EventStore>(new EventStore(std::move(db), retention, max_events));
}

Result<std::unique_ptr<EventStore>> EventStore::Open(const std::string& path, const Clock& clock,
                                                     std::chrono::seconds retention,
                                                     size_t max_events) {
  auto db = SqliteDb::Open(path, clock);
  if (!db.ok()) return db.status();
  return Open(std::move(db).value(), retention, max_events);
}

Result<uint32_t> EventStore::Record(const std::vector<status::PodEvent>& events, int64_t now) {
  const std::string what = "Failed to store " + std::to_string(events.size()) + " event" +
                           (events.size() == 1 ? "" : "s");
  auto tx = db_->Begin(what);
  if (!tx.ok()) return tx.status();
  uint32_t stored = 0;
  for (const auto& e : events) {
    if (e.pod_uid.empty() || e.reason.empty()) continue;
    auto up = db_->Prepare(kEventsUpsert, what);
    if (!up.ok()) return up.status();
    up->BindText(1, e.pod_uid)
        .BindText(2, e.namespace_)
        .BindText(3, e.pod_name)
        .BindText(4, e.type)
        .BindText(5, e.reason)
        .BindText(6, e.message)
        .BindText(7, e.source)
        .BindInt64(8, std::max<uint32_t>(1, e.count))
        .BindInt64(9, e.last_unix_s != 0 ? e.last_unix_s : now);
    if (Status s = up->Run(); !s.ok()) return s;
    ++stored;
  }
  // Retention: an hour, and at most max_events rows (the oldest go).
  {
    auto old = db_->Prepare(kPruneOld, what);
    if (!old.ok()) return old.status();
    if (Status s = old->BindInt64(1, now - retention_.count()).Run(); !s.ok()) return s;
  }
  {
    auto over = db_->Prepare(kPruneOver, what);
    if (!over.ok()) return over.status();
    if (Status s = over->BindInt64(1, static_cast<int64_t>(max_events_)).Run(); !s.ok()) return s;
  }
  if (Status s = tx->Commit(); !s.ok()) return s;
  return stored;
}

Result<std::vector<status::PodEvent>> EventStore::List(const std::string& uid) {
  auto q = db_->Prepare(uid.empty() ? kListAll : kListPod, "Failed to list events");
  if (!q.ok()) return q.status();
  if (!uid.empty()) q->BindText(1, uid);
  std::vector<status::PodEvent> out;
  for (;;) {
    auto row = q->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    status::PodEvent e;
    e.pod_uid = q->Text(0);
    e.namespace_ = q->Text(1);
    e.pod_name = q->Text(2);
    e.type = q->Text(3);
    e.reason = q->Text(4);
    e.message = q->Text(5);
    e.source = q->Text(6);
    e.count = static_cast<uint32_t>(q->Int64(7));
    e.first_unix_s = q->Int64(8);
    e.last_unix_s = q->Int64(9);
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace nodelet::statusd
