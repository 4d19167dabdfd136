// Clients of nodelet-statusd for other processes (podworkerd, the supervisor, nodeletctl, the
// benchmark):
//   StatusClient: one call at a time, request/reply with a deadline and retries (lib/ipc's
//     RequestClient); every request is idempotent, so a retry after a lost reply is safe;
//   PipelinedStatusClient: many SetPodStatus/TerminatePod in flight on one socket, replies
//     collected as they come (bursts, benchmarks);
//   StatusWatcher: the watch stream (PUB/SUB) with gap and restart detection.
// Every object belongs to one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "lib/common/status.h"
#include "lib/ipc/sockets.h"
#include "lib/status/pod_status.h"
#include "status_generated.h"

namespace nodelet::status {

// Requests larger than this are refused by statusd (ResourceExhausted).
inline constexpr size_t kMaxRequestBytes = 1 * 1024 * 1024;
// Replies (a ListPodStatuses of many pods) and watch messages may be larger.
inline constexpr size_t kMaxReplyBytes = 64 * 1024 * 1024;

// PipelinedStatusClient's budget (docs/security.md section 9): what it has sent and not yet had
// a reply to. A send over either limit is refused with ResourceExhausted (nothing is sent, nothing
// is dropped): the caller receives replies first. The replies to its requests (SetPodStatusReply,
// ErrorReply) are small, so its inbound queue is bounded by kPipelinedReplyMaxBytes each.
inline constexpr size_t kPipelinedMaxInFlightRequests = 1024;
inline constexpr size_t kPipelinedMaxInFlightBytes = 64 * 1024 * 1024;
inline constexpr size_t kPipelinedReplyMaxBytes = 64 * 1024;
// The watch stream: one message carries one record (within a request's kMaxRequestBytes plus
// versions); statusd refuses to publish a larger one. Each side's queue per peer holds at most
// kWatchQueueBudgetBytes (= 128 messages); a slow watcher misses messages and sees the gap.
inline constexpr size_t kMaxWatchMessageBytes = 2 * 1024 * 1024;
inline constexpr size_t kWatchQueueBudgetBytes = 256 * 1024 * 1024;

struct StatusClientOptions {
  // Written into every envelope.
  ipc::ServiceId sender = ipc::ServiceId::Unknown;
  // Each try waits this long for the reply before reconnecting and resending.
  std::chrono::milliseconds attempt_timeout{1000};
  // The whole call gives up after this.
  std::chrono::milliseconds deadline{5000};
};

// The outcome of SetPodStatus and TerminatePod.
struct SetResult {
  // The pod's version after the request.
  uint64_t version = 0;
  // False when nothing changed (identical status).
  bool changed = false;
};

struct PodStatusList {
  std::vector<PodStatusRecord> records;
  // The watch stream position the list is current at (Clone pattern).
  uint64_t watch_sequence = 0;
  uint64_t watch_incarnation = 0;
};

class StatusClient {
 public:
  // Talks to statusd at kStatusEndpoint inside `run_dir`.
  StatusClient(ipc::Context& ctx, const std::string& run_dir, StatusClientOptions options = {});
  Status Connect();

  Result<SetResult> SetPodStatus(const PodIdentity& pod, const PodStatus& status);
  // NotFound for an unknown uid.
  Result<PodStatusRecord> GetPodStatus(const std::string& uid);
  // Every pod, or those of `namespace_filter` when not empty; sorted by namespace and name.
  Result<PodStatusList> ListPodStatuses(const std::string& namespace_filter = "");
  // NotFound for an unknown uid.
  Result<SetResult> TerminatePod(const std::string& uid);
  // Stores events (deduplicated by statusd); returns how many were stored.
  Result<uint32_t> RecordEvents(const std::vector<PodEvent>& events);
  // The events kept, oldest first; one pod's when `uid` is set.
  Result<std::vector<PodEvent>> ListEvents(const std::string& uid = "");
  // Stores the node's status (v1 Node JSON); `version` is the node status's version.
  Result<SetResult> SetNodeStatus(const std::string& node_json);
  // NotFound before the first SetNodeStatus.
  Result<NodeStatusRecord> GetNodeStatus();
  // Returns the uids removed.
  Result<std::vector<std::string>> RemoveOrphanedStatuses(
      const std::vector<std::string>& keep_uids);

  const std::string& uri() const { return uri_; }

 private:
  uint64_t NextId() { return ++next_id_; }
  // A reply Call verified once (in its match) and checked; it owns the frame and reads the
  // message from it without verifying again.
  class VerifiedReply {
   public:
    explicit VerifiedReply(ipc::Frame frame) : frame_(std::move(frame)) {}
    const ipc::status::StatusMessage& message() const {
      return *flatbuffers::GetRoot<ipc::status::StatusMessage>(frame_.data());
    }

   private:
    ipc::Frame frame_;
  };
  // Sends the finished message and waits for the reply with this id: verified, an ErrorReply
  // as its Status, a body other than `expected` as a bad reply. Every request goes through it.
  Result<VerifiedReply> Call(flatbuffers::FlatBufferBuilder& fbb, uint64_t id,
                             ipc::status::Body expected);

  std::string uri_;
  StatusClientOptions options_;
  ipc::EnvelopeWriter envelope_;
  ipc::RequestClient client_;
  uint64_t next_id_;
};

// Many requests in flight on one DEALER; the caller matches replies by request id.
class PipelinedStatusClient {
 public:
  struct Reply {
    uint64_t request_id = 0;
    // The ErrorReply's Status, or OK with `result`.
    Status status;
    SetResult result;
  };

  PipelinedStatusClient(ipc::Context& ctx, const std::string& run_dir,
                        ipc::ServiceId sender = ipc::ServiceId::Unknown);
  Status Connect();
  // Queues one request; waits up to `timeout` for the connection to be writable. Returns the
  // request id. ResourceExhausted when the request would take the requests or bytes awaiting a
  // reply over kPipelinedMaxInFlightRequests / kPipelinedMaxInFlightBytes: receive first.
  Result<uint64_t> SendSetPodStatus(const PodIdentity& pod, const PodStatus& status,
                                    std::chrono::milliseconds timeout);
  Result<uint64_t> SendTerminatePod(const std::string& uid, std::chrono::milliseconds timeout);
  // The next reply; DeadlineExceeded when none came within `timeout`. Its request no longer
  // counts as in flight.
  Result<Reply> Receive(std::chrono::milliseconds timeout);
  // Stops counting a request whose reply the caller no longer expects (statusd restarted, the
  // caller gave up and will resend).
  void Forget(uint64_t request_id);
  size_t in_flight_requests() const { return in_flight_.size(); }
  size_t in_flight_bytes() const { return in_flight_bytes_; }

 private:
  Result<uint64_t> SendFinished(flatbuffers::FlatBufferBuilder& fbb, uint64_t id,
                                std::chrono::milliseconds timeout);

  std::string uri_;
  ipc::EnvelopeWriter envelope_;
  ipc::DealerClient dealer_;
  uint64_t next_id_;
  // Request id -> its size, for requests awaiting a reply.
  std::unordered_map<uint64_t, size_t> in_flight_;
  size_t in_flight_bytes_ = 0;
};

// One message of the watch stream.
struct WatchEvent {
  enum class Kind { kChanged, kRemoved };
  Kind kind = Kind::kChanged;
  uint64_t sequence = 0;
  uint64_t incarnation = 0;
  // True when messages were missed before this one (a sequence gap, or statusd restarted):
  // the watcher should resynchronise with ListPodStatuses.
  bool gap = false;
  // kChanged: the new record. kRemoved: identity and last version only.
  PodStatusRecord record;
};

class StatusWatcher {
 public:
  StatusWatcher(ipc::Context& ctx, const std::string& run_dir);
  Status Connect();
  // The next change; DeadlineExceeded when none came within `timeout`; InvalidArgument for a
  // message that failed verification (it is dropped).
  Result<WatchEvent> Next(std::chrono::milliseconds timeout);
  // The socket, for a poll loop (lib/service/event_loop.h).
  zmq::socket_t& raw() { return subscriber_.raw(); }

 private:
  std::string uri_;
  ipc::Subscriber subscriber_;
  uint64_t last_sequence_ = 0;
  uint64_t incarnation_ = 0;
};

}  // namespace nodelet::status
