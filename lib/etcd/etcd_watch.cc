// etcd::Watch and the calls that make one: each watch is its own gRPC stream with a reader
// thread that queues etcd's responses (Watch::Stream), created on the members in turn within the
// call's deadline; Next turns the responses into batches of events and reports how the watch
// ended (compacted, refused, broken, cancelled).
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "lib/etcd/etcd.grpc.pb.h"
#include "lib/etcd/etcd_client.h"
#include "lib/etcd/etcd_client_private.h"
#include "lib/etcd/etcd_rules.h"

namespace nodelet::etcd {

namespace {

// Responses a watch holds for a slow reader before it stops reading the stream (gRPC's flow
// control then holds etcd back).
constexpr size_t kWatchQueueLimit = 64;

}  // namespace

struct Watch::Stream {
  Stream(std::shared_ptr<Client::Shared> s, size_t index, std::string p)
      : shared(std::move(s)), conn_index(index), prefix(std::move(p)) {}
  ~Stream() {
    Cancel();
    if (reader.joinable()) reader.join();
  }

  // The reader thread: sends the create request, then queues every response until the
  // stream ends or is cancelled.
  void ReadLoop(pb::WatchRequest create) {
    bool open = rw->Write(create);
    pb::WatchResponse response;
    while (open && rw->Read(&response)) {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return queue.size() < kWatchQueueLimit || cancelled; });
      if (cancelled) break;
      queue.push_back(std::move(response));
      response.Clear();
      cv.notify_all();
    }
    // After a cancel (TryCancel) Finish returns at once with CANCELLED.
    grpc::Status status = rw->Finish();
    std::lock_guard<std::mutex> lock(mu);
    ended = true;
    end_status = std::move(status);
    cv.notify_all();
  }

  void Cancel() {
    {
      std::lock_guard<std::mutex> lock(mu);
      cancelled = true;
    }
    cv.notify_all();
    context.TryCancel();
  }

  const std::shared_ptr<Client::Shared> shared;
  const size_t conn_index;
  const std::string prefix;
  std::string token;  // the token the stream was opened with
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<pb::WatchRequest, pb::WatchResponse>> rw;

  std::mutex mu;
  std::condition_variable cv;  // a response, the end, a cancel, or room in the queue
  std::deque<pb::WatchResponse> queue;
  bool ended = false;
  grpc::Status end_status;
  bool cancelled = false;

  std::thread reader;  // last: joined before the members above go
};

Watch::Watch(std::shared_ptr<Stream> stream) : stream_(std::move(stream)) {}
Watch::~Watch() = default;

const std::string& Watch::endpoint() const {
  return stream_->shared->conns[stream_->conn_index].endpoint.url;
}

void Watch::Cancel() { stream_->Cancel(); }

Result<Watch::Batch> Watch::Next(std::chrono::milliseconds timeout) {
  Stream& s = *stream_;
  const std::string where =
      "etcd watch of " + Quote(s.prefix) + " on " + s.shared->conns[s.conn_index].endpoint.url;
  if (over_.has_value()) return *over_;
  std::unique_lock<std::mutex> lock(s.mu);
  s.cv.wait_for(lock, timeout, [&] { return !s.queue.empty() || s.ended || s.cancelled; });
  if (s.cancelled) return Status(StatusCode::kCancelled, where + ": cancelled");
  if (!s.queue.empty()) {
    pb::WatchResponse response = std::move(s.queue.front());
    s.queue.pop_front();
    s.cv.notify_all();
    lock.unlock();
    Batch batch;
    if (response.canceled()) {
      if (response.compact_revision() > 0) {
        over_ = FailedPrecondition(where + ": ended: its start revision was compacted");
        batch.compacted = true;
        batch.compact_revision = response.compact_revision();
        return batch;
      }
      // etcd ended the watch for another reason (permission, no leader): the next watch goes
      // elsewhere.
      s.shared->MovedOff(s.conn_index);
      if (response.cancel_reason().find("permission denied") != std::string::npos) {
        over_ = PermissionDenied(where + ": cancelled by etcd: " + response.cancel_reason());
      } else {
        over_ = Unavailable(where + ": cancelled by etcd: " + response.cancel_reason());
      }
      return *over_;
    }
    for (const auto& e : response.events()) {
      Event event;
      event.type = e.type() == pb::Event::DELETE ? Event::Type::kDelete : Event::Type::kPut;
      event.kv = FromPb(e.kv());
      batch.events.push_back(std::move(event));
    }
    // Events of one revision come in one response, so the last event's revision is complete;
    // a response without events is a progress report at the header's revision.
    batch.revision =
        batch.events.empty() ? response.header().revision() : batch.events.back().kv.mod_revision;
    return batch;
  }
  if (s.ended) {
    const ErrorClass error = ClassifyError(s.end_status.error_code(), s.end_status.error_message());
    const std::string why = where +
                            ": the stream ended: " + GrpcCodeName(s.end_status.error_code()) +
                            ": " + s.end_status.error_message();
    lock.unlock();
    if (error.stale_token) s.shared->DropToken(s.token);
    s.shared->MovedOff(s.conn_index);
    if (error.code == StatusCode::kPermissionDenied && !error.stale_token) {
      over_ = PermissionDenied(why);
    } else {
      over_ = Unavailable(why);
    }
    return *over_;
  }
  return DeadlineExceeded(where + ": no change within " + std::to_string(timeout.count()) + " ms");
}

Result<std::unique_ptr<Watch>> Client::WatchPrefix(const std::string& prefix,
                                                   int64_t start_revision) {
  return WatchRange(prefix.empty() ? std::string(1, '\0') : prefix, PrefixRangeEnd(prefix),
                    start_revision);
}

Result<std::unique_ptr<Watch>> Client::WatchKey(const std::string& key, int64_t start_revision) {
  if (key.empty()) return InvalidArgument("etcd Watch: an empty key");
  return WatchRange(key, "", start_revision);
}

Result<std::unique_ptr<Watch>> Client::WatchRange(const std::string& key,
                                                  const std::string& range_end,
                                                  int64_t start_revision) {
  const std::string& prefix = key;  // names the watch in messages
  pb::WatchRequest create;
  auto* c = create.mutable_create_request();
  c->set_key(key);
  if (!range_end.empty()) c->set_range_end(range_end);
  c->set_start_revision(start_revision);

  Shared& sh = *shared_;
  const CallSpec spec{"Watch", prefix};
  const MonoTime deadline = sh.clock.Now() + sh.options.timeout;
  Rotation rotation(sh, deadline);
  bool reauthenticated = false;
  int attempts = 0;
  Status last;
  for (;;) {
    const Duration left = TimeUntil(sh.clock, deadline);
    if (left <= Duration::zero()) break;
    auto token = sh.Token(deadline);
    if (!token.ok()) return token.status();
    Conn& conn = rotation.conn();
    ++attempts;
    const Duration connect_budget = std::min<Duration>(left, sh.options.connect_timeout);
    const grpc_connectivity_state state = sh.Connect(conn, connect_budget);
    if (state != GRPC_CHANNEL_READY && state != GRPC_CHANNEL_TRANSIENT_FAILURE) {
      last = Status(StatusCode::kUnavailable,
                    sh.Describe(spec, conn, Shared::NotConnected(connect_budget)));
      rotation.Failed();
      continue;
    }
    // The stream itself has no deadline: it lives as long as the Watch. Its creation has one:
    // the created response must come within the attempt's time, else the stream is cancelled.
    auto stream = std::make_shared<Watch::Stream>(shared_, rotation.index(), prefix);
    stream->token = *token;
    sh.Prepare(&stream->context, spec, stream->token);
    stream->rw = conn.watch->Watch(&stream->context);
    stream->reader = std::thread([s = stream.get(), create] { s->ReadLoop(create); });
    const Duration attempt =
        std::min<Duration>(TimeUntil(sh.clock, deadline), sh.options.attempt_timeout);
    std::unique_lock<std::mutex> lock(stream->mu);
    stream->cv.wait_for(lock, attempt, [&] { return !stream->queue.empty() || stream->ended; });
    if (!stream->queue.empty()) {
      const pb::WatchResponse& first = stream->queue.front();
      if (first.created() && first.canceled() && first.compact_revision() == 0) {
        // Refused at creation: permission denied, a bad range.
        const bool denied = first.cancel_reason().find("permission denied") != std::string::npos;
        const grpc::Status refused(grpc::StatusCode::PERMISSION_DENIED, first.cancel_reason());
        last = Status(denied ? StatusCode::kPermissionDenied : StatusCode::kFailedPrecondition,
                      sh.Describe(spec, conn, refused));
        lock.unlock();
        // etcd checks a watch's token when it creates the watch and says "permission denied"
        // for an expired one too: authenticate again, once.
        if (denied && !stream->token.empty() && !reauthenticated) {
          sh.DropToken(stream->token);
          reauthenticated = true;
          continue;
        }
        return last;
      }
      // A compacted start revision may come as the created response or right after it;
      // either way Next reports it.
      if (first.created() && !first.canceled()) stream->queue.pop_front();
      lock.unlock();
      sh.current.store(rotation.index());
      return std::unique_ptr<Watch>(new Watch(std::move(stream)));
    }
    grpc::Status failed = stream->ended ? stream->end_status
                                        : grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                                       "the watch was not created in time");
    lock.unlock();
    stream.reset();  // cancels and joins the reader
    const ErrorClass error = ClassifyError(failed.error_code(), failed.error_message());
    last = Status(error.code, sh.Describe(spec, conn, failed));
    if (error.stale_token && !token->empty() && !reauthenticated) {
      sh.DropToken(*token);
      reauthenticated = true;
      continue;
    }
    if (error.retry == Retry::kNo) return last;
    rotation.Failed();
  }
  std::string message = "etcd Watch " + Quote(prefix) + ": no member created it within " +
                        std::to_string(sh.options.timeout.count()) + " ms (" +
                        std::to_string(attempts) + " attempts)";
  if (!last.ok()) message += "; last: " + last.message();
  return Unavailable(message);
}

}  // namespace nodelet::etcd
