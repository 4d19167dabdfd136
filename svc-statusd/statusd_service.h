// nodelet-statusd's service: what the process does inside the shared service runtime
// (lib/service). Create() opens the database (ROOT/statusd/status.db: one SqliteDb, shared by the
// status, event and node stores) and loads it, binds the status API (ROUTER, kStatusEndpoint) and
// the watch stream (PUB, kStatusWatchEndpoint). Each poll iteration hands every request that
// arrived to the StatusServer as one batch (group commit), then publishes the committed changes
// and sends the replies. Health turns Degraded while store writes fail (disk full...) and back to
// Ok with the next successful commit.
#pragma once

#include <spdlog/spdlog.h>

#include <chrono>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "lib/ipc/sockets.h"
#include "lib/service/service_runtime.h"
#include "svc-statusd/sqlite_db.h"
#include "svc-statusd/status_manager.h"
#include "svc-statusd/status_server.h"
#include "svc-statusd/status_store.h"

namespace nodelet::statusd {

// The most requests handled in one batch (one transaction); the rest wait for the next poll
// iteration, so heartbeats are never delayed by more than one commit.
inline constexpr size_t kMaxBatch = 2048;
// Frames above this are dropped by ZeroMQ itself (the peer is disconnected); frames between
// the request limit (1 MiB) and this get an ErrorReply.
inline constexpr size_t kTransportMaxBytes = 4 * 1024 * 1024;
// Bytes of requests one peer can have queued in statusd before statusd reads them: the inbound
// high-water mark is kRequestQueueBudgetBytes / kTransportMaxBytes = 64 frames per peer. Past it
// ZeroMQ stops reading that peer's connection (its DEALER queue fills and its sends wait:
// back-pressure, nothing is dropped).
inline constexpr size_t kRequestQueueBudgetBytes = 256 * 1024 * 1024;
// Per-peer limit (messages) of queued replies: above a pipelined client's limit of requests in
// flight (status::kPipelinedMaxInFlightRequests), so a client within its budget never loses a
// reply. A reply over it is dropped (router_mandatory + dontwait) and counted; the client resends.
inline constexpr int kReplyQueueLimit = 4096;
// Bytes of replies queued per peer, counted exactly (RouterServer::BoundQueuedBytesPerPeer): a
// count cannot bound them, a reply being 64 bytes (SetPodStatusReply) or up to 64 MiB
// (ListPodStatusesReply). A pipelined client's 1024 replies in flight (64 KiB at most each) fit.
// A reply over it is dropped and counted like one over kReplyQueueLimit; the client resends.
inline constexpr size_t kReplyQueueBudgetBytes = 256 * 1024 * 1024;
// The watch stream: a message is one record (at most a request's 1 MiB plus versions), refused
// over status::kMaxWatchMessageBytes; each subscriber's queue holds at most
// status::kWatchQueueBudgetBytes (128 messages). A slow watcher misses messages, sees the gap
// and lists again (StatusWatcher).

// The database under the root directory.
std::string DatabasePath(const std::string& root_dir);

class StatusdService : public Service {
 public:
  // Opens the store, binds statusd's sockets and registers on ctx.loop. db_check_period: how
  // often the open database is checked (PRAGMA quick_check); 0: never. Status sinks (the
  // fleet's etcd) follow the watch stream from the supervisor (supervisor/status_sink.h).
  static Result<std::unique_ptr<StatusdService>> Create(
      ServiceContext& ctx, std::chrono::milliseconds db_check_period = std::chrono::minutes(10));
  ~StatusdService() override;

  HealthReport Health() const override;
  CounterList Counters() const override;

 private:
  StatusdService(const CommonOptions& options, std::chrono::milliseconds db_check_period);
  Status Start(ServiceContext& ctx);
  void Register(EventLoop& loop);
  void HandleRequests();
  void LogRefused(const Status& s);
  void NoteCommit(const BatchResult& result);
  // The periodic check; on corruption, recovers as Open() does at start-up (the file is moved
  // aside, a fresh one is made) and writes back every status held in memory.
  void CheckDatabase();
  // Opens the event and node stores on db_ (their tables are created when missing).
  Status OpenSideStores();

  const CommonOptions& options_;
  std::chrono::milliseconds db_check_period_;
  uint64_t db_checks_ = 0;
  uint64_t db_recoveries_ = 0;
  std::shared_ptr<spdlog::logger> log_;
  const Clock* clock_ = nullptr;
  std::shared_ptr<SqliteDb> db_;  // the one connection to DatabasePath(), for every store
  std::unique_ptr<SqliteStatusStore> store_;
  std::unique_ptr<StatusManager> manager_;
  std::unique_ptr<EventStore> events_;
  std::unique_ptr<NodeStore> node_;
  std::unique_ptr<StatusServer> server_;
  std::unique_ptr<ipc::RouterServer> router_;
  std::unique_ptr<ipc::Publisher> watch_;

  // Health.
  std::string store_error_;        // the last commit error; empty when the last commit worked
  std::string corruption_notice_;  // set when the database was moved aside (at start or later)
  // Refusals already logged (each distinct message once).
  std::unordered_set<std::string> logged_;
  uint64_t send_failures_ = 0;
  uint64_t unreadable_rows_ = 0;
  EventLoop::Handle router_source_;
  EventLoop::Timer db_check_;
};

// The ServiceSpec that main.cc runs.
ServiceSpec MakeSpec();

}  // namespace nodelet::statusd
