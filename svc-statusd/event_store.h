// EventStore: statusd's durable events (Kubernetes-style: reason, message, count), in the events
// table of statusd's SQLite database (sqlite_db.h), the file of the statuses. An event for the
// same pod, reason and message as one already kept raises its count and last time instead of
// adding a line; events older than the retention (one hour) are dropped, and at most
// `max_events` are kept (oldest go first).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "lib/common/status.h"
#include "lib/status/pod_status.h"
#include "svc-statusd/sqlite_db.h"

namespace nodelet::statusd {

class EventStore {
 public:
  // The store on statusd's open database (creates its table when missing).
  static Result<std::unique_ptr<EventStore>> Open(
      std::shared_ptr<SqliteDb> db, std::chrono::seconds retention = std::chrono::hours(1),
      size_t max_events = 10000);
  // The same on the database at `path` (SqliteDb::Open).
  static Result<std::unique_ptr<EventStore>> Open(
      const std::string& path, const Clock& clock,
      std::chrono::seconds retention = std::chrono::hours(1), size_t max_events = 10000);
  EventStore(const EventStore&) = delete;
  EventStore& operator=(const EventStore&) = delete;

  // Stores `events` at time `now` (Unix s); returns how many were taken.
  Result<uint32_t> Record(const std::vector<status::PodEvent>& events, int64_t now);
  // Oldest first; one pod's when `uid` is not empty.
  Result<std::vector<status::PodEvent>> List(const std::string& uid);

 private:
  EventStore(std::shared_ptr<SqliteDb> db, std::chrono::seconds retention, size_t max_events)
      : db_(std::move(db)), retention_(retention), max_events_(max_events) {}

  std::shared_ptr<SqliteDb> db_;
  std::chrono::seconds retention_;
  size_t max_events_;
};

}  // namespace nodelet::statusd
