// EventStore: statusd's durable events (Kubernetes-style: reason, message, count), in a table
// of the same SQLite database as the statuses. An event for the same pod, reason and message as
// one already kept raises its count and last time instead of adding a line; events older than
// the retention (one hour) are dropped, and at most `max_events` are kept (oldest go first).
#pragma once

#include <sqlite3.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "lib/common/status.h"
#include "lib/status/pod_status.h"

namespace nodelet::statusd {

class EventStore {
 public:
  static Result<std::unique_ptr<EventStore>> Open(
      const std::string& path, std::chrono::seconds retention = std::chrono::hours(1),
      size_t max_events = 10000);
  ~EventStore();
  EventStore(const EventStore&) = delete;
  EventStore& operator=(const EventStore&) = delete;

  // Stores `events` at time `now` (Unix s); returns how many were taken.
  Result<uint32_t> Record(const std::vector<status::PodEvent>& events, int64_t now);
  // Oldest first; one pod's when `uid` is not empty.
  Result<std::vector<status::PodEvent>> List(const std::string& uid);

 private:
  EventStore(sqlite3* db, std::chrono::seconds retention, size_t max_events)
      : db_(db), retention_(retention), max_events_(max_events) {}
  sqlite3* db_;
  std::chrono::seconds retention_;
  size_t max_events_;
};

}  // namespace nodelet::statusd
