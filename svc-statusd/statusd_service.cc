#include "svc-statusd/statusd_service.h"

#include "lib/common/logging.h"
#include "lib/ipc/endpoints.h"
#include "lib/service/options.h"
#include "lib/status/status_client.h"

namespace nodelet::statusd {
namespace {

// Bounds the memory spent remembering which refusals were logged.
constexpr size_t kMaxLoggedRefusals = 10000;

}  // namespace

std::string DatabasePath(const std::string& root_dir) { return root_dir + "/statusd/status.db"; }

StatusdService::StatusdService(const CommonOptions& options,
                               std::chrono::milliseconds db_check_period)
    : options_(options), db_check_period_(db_check_period), log_(GetLogger("statusd")) {}

StatusdService::~StatusdService() = default;

Result<std::unique_ptr<StatusdService>> StatusdService::Create(
    ServiceContext& ctx, std::chrono::milliseconds db_check_period) {
  std::unique_ptr<StatusdService> service(new StatusdService(ctx.options, db_check_period));
  if (Status s = service->Start(ctx); !s.ok()) return s;
  service->Register(ctx.loop);
  return service;
}

void StatusdService::Register(EventLoop& loop) {
  router_source_ = loop.AddSocket(router_->raw(), [this] { HandleRequests(); });
  db_check_ = loop.AddTimer([this] { CheckDatabase(); });
  if (db_check_period_.count() > 0) db_check_.ArmRepeating(db_check_period_);
}

Status StatusdService::Start(ServiceContext& ctx) {
  clock_ = &ctx.clock;
  const std::string path = DatabasePath(options_.root_dir);
  // One connection to the file, shared by the status, event and node stores.
  SqliteDb::OpenReport report;
  auto db = SqliteDb::Open(path, ctx.clock, &report);
  if (!db.ok()) return db.status();
  db_ = std::move(db).value();
  auto store = SqliteStatusStore::Open(db_);
  if (!store.ok()) return store.status();
  store_ = std::move(store).value();
  if (!report.moved_aside_to.empty()) {
    corruption_notice_ = "the status database was unreadable (" + report.corruption +
                         ") and was moved to '" + report.moved_aside_to + "'; statuses start empty";
    log_->error("Failed to open the status database: {}", corruption_notice_);
  }
  auto contents = store_->LoadAll();
  if (!contents.ok()) return contents.status();
  manager_ = std::make_unique<StatusManager>(ctx.clock);
  for (const auto& bad : contents->unreadable) {
    ++unreadable_rows_;
    log_->error(
        "Failed to read the stored status of pod uid '{}' (version {}): {}; its next "
        "version continues above it",
        bad.uid, bad.version, bad.error);
    manager_->SetVersionFloor(bad.uid, bad.version);
  }
  size_t loaded = contents->records.size();
  manager_->Load(std::move(contents->records));
  log_->info("loaded {} pod statuses from '{}'", loaded, path);

  server_ =
      std::make_unique<StatusServer>(*manager_, *store_, ctx.incarnation, status::kMaxRequestBytes);
  if (Status s = OpenSideStores(); !s.ok()) return s;
  router_ = std::make_unique<ipc::RouterServer>(ctx.ipc, kTransportMaxBytes);
  // A client may pipeline many requests; the replies to all it may have in flight must fit in
  // its queue, or replies would be dropped (router_mandatory + dontwait) and have to be resent.
  router_->raw().set(zmq::sockopt::sndhwm, kReplyQueueLimit);
  router_->BoundQueuedBytesPerPeer(kReplyQueueBudgetBytes);
  router_->BoundReceiveQueue(kRequestQueueBudgetBytes);
  if (Status s = router_->Bind(ipc::kStatusEndpoint.Uri(options_.run_dir)); !s.ok()) return s;
  watch_ = std::make_unique<ipc::Publisher>(ctx.ipc, status::kMaxWatchMessageBytes,
                                            status::kWatchQueueBudgetBytes);
  if (Status s = watch_->Bind(ipc::kStatusWatchEndpoint.Uri(options_.run_dir)); !s.ok()) return s;

  return Status::Ok();
}

void StatusdService::HandleRequests() {
  std::vector<ipc::Incoming> batch;
  while (batch.size() < kMaxBatch && router_->Readable()) {
    auto in = router_->Receive(std::chrono::milliseconds(0));
    if (!in.ok()) {
      if (in.status().code() == StatusCode::kDeadlineExceeded) break;
      // A multipart message we cannot answer (no body or extra frames); it was dropped.
      LogRefused(Status(in.status().code(), "bad request frame: " + in.status().message()));
      continue;
    }
    batch.push_back(std::move(in).value());
  }
  if (batch.empty()) return;
  BatchResult result = server_->HandleBatch(batch);
  for (const auto& s : result.refused) LogRefused(s);
  NoteCommit(result);
  for (const auto& msg : result.watch_messages) {
    if (Status s = watch_->Publish(msg.data(), msg.size()); !s.ok()) ++send_failures_;
  }
  for (const auto& [peer, bytes] : result.replies) {
    // A peer that left (or whose queue is full) loses its reply; it resends.
    if (Status s = router_->Send(peer, bytes.data(), bytes.size()); !s.ok()) ++send_failures_;
  }
}

void StatusdService::LogRefused(const Status& s) {
  if (logged_.size() >= kMaxLoggedRefusals) logged_.clear();
  if (logged_.insert(s.ToString()).second) log_->warn("Refused a request: {}", s.ToString());
}

void StatusdService::NoteCommit(const BatchResult& result) {
  if (!result.commit_attempted) return;
  if (!result.commit_status.ok()) {
    if (store_error_ != result.commit_status.message()) {
      log_->error("{}", result.commit_status.message());
    }
    store_error_ = result.commit_status.message();
    return;
  }
  if (!store_error_.empty()) {
    log_->info("status store writes work again (after: {})", store_error_);
    store_error_.clear();
  }
}

Status StatusdService::OpenSideStores() {
  // Events and the node status live in the same file as the pod statuses, on its connection.
  auto events = EventStore::Open(db_);
  if (!events.ok()) return events.status();
  events_ = std::move(events).value();
  server_->set_event_store(events_.get());
  auto node = NodeStore::Open(db_);
  if (!node.ok()) return node.status();
  node_ = std::move(node).value();
  server_->set_node_store(node_.get());
  return Status::Ok();
}

void StatusdService::CheckDatabase() {
  ++db_checks_;
  Status check = db_->QuickCheck();
  if (check.ok()) return;
  if (check.code() != StatusCode::kFailedPrecondition) {
    log_->warn("Failed to check the status database: {}", check.message());
    return;
  }
  ++db_recoveries_;
  log_->error("The status database failed its periodic check: {}; moving it aside",
              check.message());
  server_->set_event_store(nullptr);
  server_->set_node_store(nullptr);
  events_.reset();
  node_.reset();
  SqliteStatusStore::OpenReport report;
  if (Status s = store_->Recreate(&report); !s.ok()) {
    store_error_ = "recreating the corrupt status database: " + s.message();
    log_->error("Failed to recreate the status database: {}", s.message());
    return;
  }
  // Every status held in memory goes into the fresh file, with its version: nothing a client
  // was told is lost, and no version goes backwards. Events start anew; the node status comes
  // back with the supervisor's next report.
  std::vector<StatusChange> all;
  for (const PodStatusRecord* r : manager_->List())
    all.push_back({StatusChange::Kind::kUpdated, *r});
  if (Status s = store_->Commit(all); !s.ok()) {
    store_error_ = s.message();
    log_->error("Failed to write the statuses back: {}", s.message());
  }
  if (Status s = OpenSideStores(); !s.ok()) {
    store_error_ = s.message();
    log_->error("Failed to reopen the event and node stores: {}", s.message());
  }
  corruption_notice_ = "the status database failed its periodic check (" + check.message() +
                       ") and was moved to '" + report.moved_aside_to + "'; the " +
                       std::to_string(all.size()) +
                       " statuses held in memory were written to a fresh one";
  log_->error("{}", corruption_notice_);
}

HealthReport StatusdService::Health() const {
  HealthReport h;
  if (!store_error_.empty()) {
    h.health = ipc::control::Health::Degraded;
    h.reason = "store writes failing: " + store_error_;
  } else if (!corruption_notice_.empty()) {
    h.health = ipc::control::Health::Degraded;
    h.reason = corruption_notice_;
  }
  return h;
}

CounterList StatusdService::Counters() const {
  CounterList out;
  if (server_) {
    const auto& c = server_->counters();
    out = {{"status_requests", c.requests},
           {"status_bad_messages", c.bad_messages},
           {"status_invalid_requests", c.invalid_requests},
           {"status_illegal_transitions", c.illegal_transitions},
           {"status_not_found", c.not_found},
           {"status_changes_committed", c.changes_committed},
           {"status_unchanged", c.unchanged},
           {"status_commits", c.commits},
           {"status_commit_failures", c.commit_failures},
           {"status_batches", c.batches},
           {"status_largest_batch", c.largest_batch},
           {"status_handler_errors", c.handler_errors},
           {"status_watch_sequence", server_->watch_sequence()}};
  }
  if (manager_) out.emplace_back("status_pods", manager_->size());
  out.emplace_back("status_send_failures", send_failures_);
  out.emplace_back("status_unreadable_rows", unreadable_rows_);
  out.emplace_back("status_db_checks", db_checks_);
  out.emplace_back("status_db_recoveries", db_recoveries_);
  return out;
}

ServiceSpec MakeSpec() {
  ServiceSpec spec;
  spec.name = "statusd";
  spec.id = ipc::ServiceId::Statusd;
  spec.description = "nodelet-statusd: versioned, durable pod statuses (ROOT/statusd/status.db)";
  auto check_period = std::make_shared<std::string>("10m");
  spec.add_flags = [check_period](CLI::App& app) {
    app.add_option("--db-check-period", *check_period,
                   "How often the status database is checked (PRAGMA quick_check); 0: never")
        ->check(DurationValidator())
        ->capture_default_str();
  };
  spec.create = [check_period](ServiceContext& ctx) -> Result<std::unique_ptr<Service>> {
    auto service = StatusdService::Create(ctx, *ParseDuration(*check_period));
    if (!service.ok()) return service.status();
    return std::unique_ptr<Service>(std::move(service).value());
  };
  return spec;
}

}  // namespace nodelet::statusd
