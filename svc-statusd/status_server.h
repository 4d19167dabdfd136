// StatusServer: statusd's request handling without sockets. The service hands it every request
// that arrived since the last poll; it decodes and verifies each, applies the mutations to the
// StatusManager in arrival order, commits them all to the StatusStore in one transaction (group
// commit), and only then builds the replies and the watch messages. When the commit fails, the
// batch's changes are rolled back in memory and every request they came from is answered with
// the store's error; reads in the batch are answered from the state after the commit.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lib/common/status.h"
#include "lib/ipc/codec.h"
#include "lib/ipc/sockets.h"
#include "svc-statusd/event_store.h"
#include "svc-statusd/node_store.h"
#include "svc-statusd/status_manager.h"
#include "svc-statusd/status_store.h"

namespace nodelet::statusd {

struct BatchResult {
  // (peer, reply bytes), one per request, in arrival order.
  std::vector<std::pair<std::string, std::string>> replies;
  // Watch stream messages for the committed changes, in commit order, already sequenced.
  std::vector<std::string> watch_messages;
  // The committed changes (empty when the commit failed).
  std::vector<StatusChange> committed;
  // Whether a commit was attempted, and its outcome.
  bool commit_attempted = false;
  Status commit_status;
  // Requests refused for their content (garbage, invalid, illegal transition, unknown pod),
  // for the caller to log.
  std::vector<Status> refused;
};

struct StatusServerCounters {
  uint64_t requests = 0;
  uint64_t bad_messages = 0;
  uint64_t invalid_requests = 0;
  uint64_t illegal_transitions = 0;
  uint64_t not_found = 0;
  uint64_t changes_committed = 0;
  uint64_t unchanged = 0;
  uint64_t commits = 0;
  uint64_t commit_failures = 0;
  uint64_t batches = 0;
  uint64_t largest_batch = 0;
  // Requests whose handling threw: each was answered with an ErrorReply.
  uint64_t handler_errors = 0;
};

class StatusServer {
 public:
  // `incarnation` goes into every envelope (replies and watch stream).
  StatusServer(StatusManager& manager, StatusStore& store, uint64_t incarnation,
               size_t max_request_bytes);
  // Events (RecordEventsRequest, ListEventsRequest) go here; refused while not set.
  void set_event_store(EventStore* events) { events_ = events; }
  // The node status (SetNodeStatusRequest, GetNodeStatusRequest) goes here; refused while not
  // set.
  void set_node_store(NodeStore* node) { node_ = node; }

  BatchResult HandleBatch(std::vector<ipc::Incoming>& requests);

  const StatusServerCounters& counters() const { return counters_; }
  // The last sequence number used on the watch stream.
  uint64_t watch_sequence() const { return watch_envelope_.last_sequence(); }

 private:
  struct Pending;
  void Decode(ipc::Incoming& in, Pending& p, std::vector<StatusChange>& changes, BatchResult& out);
  std::string BuildReply(const Pending& p);

  StatusManager& manager_;
  StatusStore& store_;
  EventStore* events_ = nullptr;
  NodeStore* node_ = nullptr;
  size_t max_request_bytes_;
  ipc::EnvelopeWriter reply_envelope_;
  ipc::EnvelopeWriter watch_envelope_;
  StatusServerCounters counters_;
};

}  // namespace nodelet::statusd
