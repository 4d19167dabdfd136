#include "lib/etcd/etcd_client.h"

#include <grpc/support/time.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <thread>
#include <utility>

#include "lib/etcd/etcd.grpc.pb.h"

namespace nodelet::etcd {

namespace pb = ::etcdserverpb;
using std::chrono::milliseconds;

namespace {

// A page of GetPrefix or a watch batch can be large (pods are a few KiB each).
constexpr int kMaxReceiveBytes = 64 * 1024 * 1024;
// gRPC tries a member that was down again after 100 ms, then at most every second. (Not
// GRPC_ARG_MIN_RECONNECT_BACKOFF_MS: despite its name it bounds how long one connection attempt
// may take, and at 100 ms an attempt that nobody polls in time never completes.)
constexpr int kReconnectBackoffInitialMs = 100;
constexpr int kReconnectBackoffMaxMs = 1000;
// Pings on an idle connection find a member that vanished without closing it (a partition):
// etcd's default --grpc-keepalive-min-time is 5 s, so not more often than that.
constexpr int kKeepaliveTimeMs = 10000;
constexpr int kKeepaliveTimeoutMs = 5000;
// Between two rounds over every member: the pause a cluster needs to elect a leader, not a
// busy loop.
constexpr milliseconds kRoundPauseMin{25};
constexpr milliseconds kRoundPauseMax{500};
// Responses a watch holds for a slow reader before it stops reading the stream (gRPC's flow
// control then holds etcd back).
constexpr size_t kWatchQueueLimit = 64;
constexpr size_t kMaxPemBytes = 1024 * 1024;

// The deadline of a gRPC call as a relative time: gRPC adds it to its own monotonic clock (see
// lib/cri/grpc_deadline.h for why not a system_clock time point).
gpr_timespec RelativeDeadline(milliseconds timeout) {
  return gpr_time_from_millis(timeout.count(), GPR_TIMESPAN);
}

milliseconds CeilMillis(Duration d) { return std::chrono::ceil<milliseconds>(d); }

const char* GrpcCodeName(grpc::StatusCode code) {
  static constexpr const char* kNames[] = {"OK",
                                           "CANCELLED",
                                           "UNKNOWN",
                                           "INVALID_ARGUMENT",
                                           "DEADLINE_EXCEEDED",
                                           "NOT_FOUND",
                                           "ALREADY_EXISTS",
                                           "PERMISSION_DENIED",
                                           "RESOURCE_EXHAUSTED",
                                           "FAILED_PRECONDITION",
                                           "ABORTED",
                                           "OUT_OF_RANGE",
                                           "UNIMPLEMENTED",
                                           "INTERNAL",
                                           "UNAVAILABLE",
                                           "DATA_LOSS",
                                           "UNAUTHENTICATED"};
  const int i = static_cast<int>(code);
  return i >= 0 && i < static_cast<int>(std::size(kNames)) ? kNames[i] : "UNKNOWN";
}

Result<std::string> ReadPemFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return InvalidArgument("etcd client: cannot read the " + std::string(what) + " '" + path + "'");
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (data.size() > kMaxPemBytes) {
    return InvalidArgument("etcd client: the " + std::string(what) + " '" + path +
                           "' is larger than 1 MiB");
  }
  if (data.find("-----BEGIN") == std::string::npos) {
    return InvalidArgument("etcd client: the " + std::string(what) + " '" + path + "' is not PEM");
  }
  return data;
}

KeyValue FromPb(const pb::KeyValue& kv) {
  KeyValue out;
  out.key = kv.key();
  out.value = kv.value();
  out.create_revision = kv.create_revision();
  out.mod_revision = kv.mod_revision();
  out.version = kv.version();
  out.lease = kv.lease();
  return out;
}

// "'key'" for messages; keys are paths, but a binary one stays readable.
std::string Quote(const std::string& key) {
  std::string out = "'";
  for (unsigned char c : key) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    }
  }
  return out + "'";
}

}  // namespace

// One member: its endpoint, channel and stubs.
struct Conn {
  Endpoint endpoint;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::KV::Stub> kv;
  std::unique_ptr<pb::Watch::Stub> watch;
  std::unique_ptr<pb::Lease::Stub> lease;
  std::unique_ptr<pb::Maintenance::Stub> maintenance;
  std::unique_ptr<pb::Auth::Stub> auth;
};

// What a call is, for its failover and its messages.
struct CallSpec {
  const char* what;  // "Put"
  std::string key;   // quoted into messages when not empty
  // A call whose repetition after an attempt that may have been applied lands in the same
  // state (reads, Put, Delete, ...); a compare-and-swap is not.
  bool repeatable = true;
  bool with_token = true;   // false for Authenticate itself
  bool need_leader = true;  // "hasleader": a member without a leader refuses at once
};

struct Client::Shared {
  Shared(ClientOptions o, const Clock& c) : options(std::move(o)), clock(c) {}

  // Runs `fn(conn, context)` on the members in turn from the current one, as the header says,
  // until it succeeds, fails for good, or `deadline` passes.
  template <typename Fn>
  Status Run(const CallSpec& spec, MonoTime deadline, Fn&& fn);
  template <typename Fn>
  Status Run(const CallSpec& spec, Fn&& fn) {
    return Run(spec, clock.Now() + options.timeout, std::forward<Fn>(fn));
  }

  // The auth token to send ("" without password auth), authenticating when there is none.
  Result<std::string> Token(MonoTime deadline);
  // Forgets `token` when it is still the current one (a member refused it).
  void DropToken(const std::string& token) {
    std::lock_guard<std::mutex> lock(token_mu);
    if (token_ == token) token_.clear();
  }
  // The member at `index` failed: the next call starts at the one after it (unless another
  // thread moved on already).
  void MovedOff(size_t index) {
    size_t expected = index;
    current.compare_exchange_strong(expected, (index + 1) % conns.size());
  }
  // Waits up to `budget` for the member's channel to be READY (connecting it when idle) and
  // returns its state. gRPC completes a connection only while some thread polls for it, and a
  // fail-fast call on a channel in TRANSIENT_FAILURE returns at once without polling: calls that
  // only failed fast would never see a member again after its first failure. So every attempt
  // first waits here, bounded. A connection attempt that fails now (refused) ends the wait at
  // once; a channel that was already failing (gRPC keeps reporting TRANSIENT_FAILURE while it
  // tries again) gets the whole budget to come back.
  grpc_connectivity_state Connect(Conn& conn, Duration budget) {
    const MonoTime until = clock.Now() + budget;
    grpc_connectivity_state state = conn.channel->GetState(/*try_to_connect=*/true);
    const bool failing_before = state == GRPC_CHANNEL_TRANSIENT_FAILURE;
    while (state != GRPC_CHANNEL_READY && state != GRPC_CHANNEL_SHUTDOWN) {
      if (state == GRPC_CHANNEL_TRANSIENT_FAILURE && !failing_before) break;
      const Duration left = TimeUntil(clock, until);
      if (left <= Duration::zero()) break;
      if (!conn.channel->WaitForStateChange(state, RelativeDeadline(CeilMillis(left)))) break;
      state = conn.channel->GetState(/*try_to_connect=*/true);
    }
    return state;
  }
  // The status of an attempt that did not get a connection in time (nothing was sent).
  static grpc::Status NotConnected(Duration budget) {
    return grpc::Status(
        grpc::StatusCode::UNAVAILABLE,
        "failed to connect within " + std::to_string(CeilMillis(budget).count()) + " ms");
  }

  void Prepare(grpc::ClientContext* context, const CallSpec& spec, const std::string& token) {
    if (spec.need_leader) context->AddMetadata("hasleader", "true");
    if (!token.empty()) context->AddMetadata("token", token);
  }
  std::string Describe(const CallSpec& spec, const Conn& conn, const grpc::Status& s) const {
    std::string out = std::string("etcd ") + spec.what;
    if (!spec.key.empty()) out += " " + Quote(spec.key);
    return out + " on " + conn.endpoint.url + ": " + GrpcCodeName(s.error_code()) + ": " +
           s.error_message();
  }

  const ClientOptions options;
  const Clock& clock;
  std::vector<Conn> conns;
  std::atomic<size_t> current{0};

 private:
  std::mutex token_mu;
  std::string token_;
};

namespace {

// The members a call tries, in turn from the current one, and the pause after each round in
// which every member failed (an election takes a moment), never past the call's deadline.
class Rotation {
 public:
  Rotation(Client::Shared& shared, MonoTime deadline)
      : shared_(shared), deadline_(deadline), index_(shared.current.load()) {}
  size_t index() const { return index_ % shared_.conns.size(); }
  Conn& conn() { return shared_.conns[index()]; }
  // The current member failed: the next call starts after it; this one tries the next.
  void Failed() {
    shared_.MovedOff(index());
    ++index_;
    if (++tried_in_round_ == shared_.conns.size()) {
      tried_in_round_ = 0;
      std::this_thread::sleep_for(std::min<Duration>(pause_, TimeUntil(shared_.clock, deadline_)));
      pause_ = std::min(pause_ * 2, kRoundPauseMax);
    }
  }

 private:
  Client::Shared& shared_;
  const MonoTime deadline_;
  size_t index_;
  size_t tried_in_round_ = 0;
  milliseconds pause_ = kRoundPauseMin;
};

}  // namespace

template <typename Fn>
Status Client::Shared::Run(const CallSpec& spec, MonoTime deadline, Fn&& fn) {
  Rotation rotation(*this, deadline);
  bool reauthenticated = false;
  int attempts = 0;
  Status last;
  for (;;) {
    const Duration left = TimeUntil(clock, deadline);
    if (left <= Duration::zero()) break;
    std::string token;
    if (spec.with_token) {
      auto t = Token(deadline);
      if (!t.ok()) return t.status();
      token = std::move(*t);
    }
    Conn& conn = rotation.conn();
    ++attempts;
    const Duration connect_budget = std::min<Duration>(left, options.connect_timeout);
    const grpc_connectivity_state state = Connect(conn, connect_budget);
    grpc::Status s;
    const Duration call_left = TimeUntil(clock, deadline);
    if (call_left > Duration::zero() &&
        (state == GRPC_CHANNEL_READY || state == GRPC_CHANNEL_TRANSIENT_FAILURE)) {
      // In TRANSIENT_FAILURE the call fails at once, with gRPC's reason (refused, TLS, ...).
      grpc::ClientContext context;
      context.set_deadline(
          RelativeDeadline(std::min(CeilMillis(call_left), options.attempt_timeout)));
      Prepare(&context, spec, token);
      s = fn(conn, &context);
    } else {
      s = NotConnected(connect_budget);
    }
    if (s.ok()) {
      current.store(rotation.index());
      return Status::Ok();
    }
    const ErrorClass error = ClassifyError(s.error_code(), s.error_message());
    last = Status(error.code, Describe(spec, conn, s));
    if (error.stale_token && !token.empty() && !reauthenticated) {
      // Once: a token refused right after authenticating is not going to work.
      DropToken(token);
      reauthenticated = true;
      continue;
    }
    if (error.retry == Retry::kNo) return last;
    if (error.retry == Retry::kElsewhereIfRepeatable && !spec.repeatable) {
      return Unavailable(last.message() +
                         " (the write may or may not have been applied: read the key again)");
    }
    rotation.Failed();
  }
  std::string message = std::string("etcd ") + spec.what;
  if (!spec.key.empty()) message += " " + Quote(spec.key);
  message += ": no member succeeded within " + std::to_string(options.timeout.count()) + " ms (" +
             std::to_string(attempts) + " attempts)";
  if (!last.ok()) message += "; last: " + last.message();
  return Unavailable(message);
}

Result<std::string> Client::Shared::Token(MonoTime deadline) {
  if (options.username.empty()) return std::string();
  {
    std::lock_guard<std::mutex> lock(token_mu);
    if (!token_.empty()) return token_;
  }
  // Two threads may both authenticate; either token is good.
  pb::AuthenticateRequest request;
  request.set_name(options.username);
  request.set_password(options.password);
  pb::AuthenticateResponse response;
  CallSpec spec{"Authenticate", "", true, false, true};
  Status s = Run(spec, deadline, [&](Conn& c, grpc::ClientContext* ctx) {
    return c.auth->Authenticate(ctx, request, &response);
  });
  if (!s.ok()) {
    return Status(s.code(), "etcd user '" + options.username + "': " + s.message());
  }
  std::lock_guard<std::mutex> lock(token_mu);
  token_ = response.token();
  return token_;
}

// ---------------------------------------------------------------------------------------------
// Watch

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

Result<Watch::Batch> Watch::Next(milliseconds timeout) {
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

// ---------------------------------------------------------------------------------------------
// Client

Client::Client(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}
Client::~Client() = default;

const ClientOptions& Client::options() const { return shared_->options; }

Result<std::unique_ptr<Client>> Client::Connect(ClientOptions options, const Clock& clock) {
  if (options.endpoints.empty()) return InvalidArgument("etcd client: no endpoint");
  if (options.timeout.count() <= 0 || options.attempt_timeout.count() <= 0 ||
      options.connect_timeout.count() <= 0) {
    return InvalidArgument("etcd client: the timeouts must be positive");
  }
  if (options.page_size <= 0) return InvalidArgument("etcd client: page_size must be positive");
  if (options.cert_file.empty() != options.key_file.empty()) {
    return InvalidArgument("etcd client: a client certificate needs its key and the other way");
  }
  if (options.username.empty() && !options.password.empty()) {
    return InvalidArgument("etcd client: a password without a user name");
  }
  const bool tls_files = !options.ca_file.empty() || !options.cert_file.empty();
  grpc::SslCredentialsOptions ssl;
  if (!options.ca_file.empty()) {
    auto ca = ReadPemFile(options.ca_file, "CA file");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = std::move(*ca);
  }
  if (!options.cert_file.empty()) {
    auto cert = ReadPemFile(options.cert_file, "certificate file");
    if (!cert.ok()) return cert.status();
    auto key = ReadPemFile(options.key_file, "key file");
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = std::move(*cert);
    ssl.pem_private_key = std::move(*key);
  }
  auto shared = std::make_shared<Shared>(options, clock);
  for (const auto& url : options.endpoints) {
    auto endpoint = ParseEndpoint(url, tls_files);
    if (!endpoint.ok()) return endpoint.status();
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(kMaxReceiveBytes);
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, kReconnectBackoffInitialMs);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kReconnectBackoffMaxMs);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
    auto credentials =
        endpoint->tls ? grpc::SslCredentials(ssl) : grpc::InsecureChannelCredentials();
    Conn conn;
    conn.endpoint = *endpoint;
    conn.channel = grpc::CreateCustomChannel(endpoint->target, credentials, args);
    if (conn.channel == nullptr) {
      return Internal("etcd endpoint '" + url + "': cannot create a gRPC channel");
    }
    conn.kv = pb::KV::NewStub(conn.channel);
    conn.watch = pb::Watch::NewStub(conn.channel);
    conn.lease = pb::Lease::NewStub(conn.channel);
    conn.maintenance = pb::Maintenance::NewStub(conn.channel);
    conn.auth = pb::Auth::NewStub(conn.channel);
    shared->conns.push_back(std::move(conn));
  }
  return std::unique_ptr<Client>(new Client(std::move(shared)));
}

Result<RangeResult> Client::Get(const std::string& key) {
  pb::RangeRequest request;
  request.set_key(key);
  pb::RangeResponse response;
  Status s = shared_->Run({"Get", key}, [&](Conn& c, grpc::ClientContext* ctx) {
    response.Clear();
    return c.kv->Range(ctx, request, &response);
  });
  if (!s.ok()) return s;
  RangeResult out;
  for (const auto& kv : response.kvs()) out.kvs.push_back(FromPb(kv));
  out.revision = response.header().revision();
  return out;
}

Result<RangeResult> Client::GetPrefix(const std::string& prefix, int64_t revision) {
  pb::RangeRequest request;
  // An empty prefix is every key: from "\0" to the end.
  request.set_key(prefix.empty() ? std::string(1, '\0') : prefix);
  request.set_range_end(PrefixRangeEnd(prefix));
  request.set_limit(shared_->options.page_size);
  request.set_revision(revision);
  RangeResult out;
  for (;;) {
    pb::RangeResponse response;
    Status s = shared_->Run({"GetPrefix", prefix}, [&](Conn& c, grpc::ClientContext* ctx) {
      response.Clear();
      return c.kv->Range(ctx, request, &response);
    });
    if (!s.ok()) return s;
    // Every later page reads at the first page's revision: one consistent listing.
    if (request.revision() == 0) request.set_revision(response.header().revision());
    for (const auto& kv : response.kvs()) out.kvs.push_back(FromPb(kv));
    if (!response.more() || response.kvs().empty()) break;
    // The next page starts right after the last key ("key\0" is the next possible key).
    request.set_key(response.kvs().rbegin()->key() + std::string(1, '\0'));
  }
  out.revision = request.revision();
  return out;
}

Result<int64_t> Client::Put(const std::string& key, const std::string& value, int64_t lease) {
  pb::PutRequest request;
  request.set_key(key);
  request.set_value(value);
  request.set_lease(lease);
  pb::PutResponse response;
  Status s = shared_->Run({"Put", key}, [&](Conn& c, grpc::ClientContext* ctx) {
    return c.kv->Put(ctx, request, &response);
  });
  if (!s.ok()) return s;
  return response.header().revision();
}

Result<int64_t> Client::Delete(const std::string& key) {
  pb::DeleteRangeRequest request;
  request.set_key(key);
  pb::DeleteRangeResponse response;
  Status s = shared_->Run({"Delete", key}, [&](Conn& c, grpc::ClientContext* ctx) {
    return c.kv->DeleteRange(ctx, request, &response);
  });
  if (!s.ok()) return s;
  return response.header().revision();
}

Result<int64_t> Client::DeletePrefix(const std::string& prefix) {
  if (prefix.empty()) return InvalidArgument("etcd DeletePrefix: refusing to delete every key");
  pb::DeleteRangeRequest request;
  request.set_key(prefix);
  request.set_range_end(PrefixRangeEnd(prefix));
  pb::DeleteRangeResponse response;
  Status s = shared_->Run({"DeletePrefix", prefix}, [&](Conn& c, grpc::ClientContext* ctx) {
    return c.kv->DeleteRange(ctx, request, &response);
  });
  if (!s.ok()) return s;
  return response.header().revision();
}

namespace {

// A transaction that runs its success branch when `key`'s mod_revision is `expected`.
pb::TxnRequest IfModRevision(const std::string& key, int64_t expected) {
  pb::TxnRequest request;
  auto* compare = request.add_compare();
  compare->set_result(pb::Compare::EQUAL);
  compare->set_target(pb::Compare::MOD);
  compare->set_key(key);
  compare->set_mod_revision(expected);
  return request;
}

// Runs a compare-and-swap transaction; never repeated after an attempt that may have been
// applied (its second try could fail on its own first write).
Result<pb::TxnResponse> RunTxn(Client::Shared& shared, const char* name, const std::string& key,
                               const pb::TxnRequest& request) {
  pb::TxnResponse response;
  CallSpec spec{name, key, /*repeatable=*/false};
  Status s = shared.Run(spec, [&](Conn& c, grpc::ClientContext* ctx) {
    response.Clear();
    return c.kv->Txn(ctx, request, &response);
  });
  if (!s.ok()) return s;
  return response;
}

}  // namespace

Result<bool> Client::PutIf(const std::string& key, const std::string& value,
                           int64_t expected_mod_revision, int64_t lease,
                           std::optional<KeyValue>* current) {
  if (expected_mod_revision < 0) {
    return InvalidArgument("etcd PutIf " + Quote(key) + ": negative expected mod_revision");
  }
  pb::TxnRequest request = IfModRevision(key, expected_mod_revision);
  auto* put = request.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(value);
  put->set_lease(lease);
  // When the compare fails, the same transaction reads the key as it is.
  request.add_failure()->mutable_request_range()->set_key(key);
  auto txn = RunTxn(*shared_, "PutIf", key, request);
  if (!txn.ok()) return txn.status();
  const pb::TxnResponse& response = *txn;
  if (!response.succeeded() && current != nullptr) {
    current->reset();
    if (response.responses_size() > 0 && response.responses(0).has_response_range() &&
        response.responses(0).response_range().kvs_size() > 0) {
      *current = FromPb(response.responses(0).response_range().kvs(0));
    }
  }
  return response.succeeded();
}

Result<bool> Client::DeleteIf(const std::string& key, int64_t expected_mod_revision) {
  if (expected_mod_revision <= 0) {
    return InvalidArgument("etcd DeleteIf " + Quote(key) + ": expected mod_revision must be > 0");
  }
  pb::TxnRequest request = IfModRevision(key, expected_mod_revision);
  request.add_success()->mutable_request_delete_range()->set_key(key);
  auto txn = RunTxn(*shared_, "DeleteIf", key, request);
  if (!txn.ok()) return txn.status();
  return txn->succeeded();
}

Result<int64_t> Client::Compact(int64_t revision) {
  pb::CompactionRequest request;
  request.set_revision(revision);
  pb::CompactionResponse response;
  // Not repeated after an attempt that may have been applied: the repetition would report
  // the revision as compacted already.
  CallSpec spec{"Compact", "revision " + std::to_string(revision), /*repeatable=*/false};
  Status s = shared_->Run(spec, [&](Conn& c, grpc::ClientContext* ctx) {
    return c.kv->Compact(ctx, request, &response);
  });
  if (!s.ok()) return s;
  return response.header().revision();
}

Result<int64_t> Client::GrantLease(int64_t ttl_seconds, int64_t id) {
  if (ttl_seconds <= 0) return InvalidArgument("etcd GrantLease: the TTL must be positive");
  pb::LeaseGrantRequest request;
  request.set_ttl(ttl_seconds);
  request.set_id(id);
  pb::LeaseGrantResponse response;
  // Repeated after an attempt that may have been applied, an id-less grant can leave one
  // unused lease behind; it expires after its TTL.
  Status s = shared_->Run({"GrantLease", ""}, [&](Conn& c, grpc::ClientContext* ctx) {
    return c.lease->LeaseGrant(ctx, request, &response);
  });
  if (!s.ok()) return s;
  if (!response.error().empty()) {
    return Internal("etcd GrantLease: " + response.error());
  }
  return response.id();
}

Result<int64_t> Client::KeepAliveOnce(int64_t lease) {
  pb::LeaseKeepAliveRequest request;
  request.set_id(lease);
  pb::LeaseKeepAliveResponse response;
  const std::string what = "lease " + std::to_string(lease);
  Status s = shared_->Run({"KeepAliveOnce", what}, [&](Conn& c, grpc::ClientContext* ctx) {
    response.Clear();
    auto stream = c.lease->LeaseKeepAlive(ctx);
    if (stream->Write(request) && stream->Read(&response)) stream->WritesDone();
    // With the request half closed, etcd ends the stream with OK; on a broken stream Finish
    // carries the reason.
    return stream->Finish();
  });
  if (!s.ok()) return s;
  if (response.ttl() <= 0) return NotFound("etcd KeepAliveOnce: " + what + " has expired");
  return response.ttl();
}

Result<int64_t> Client::LeaseTimeToLive(int64_t lease) {
  auto info = GetLeaseInfo(lease);
  if (!info.ok()) return info.status();
  return info->ttl;
}

Result<LeaseInfo> Client::GetLeaseInfo(int64_t lease) {
  pb::LeaseTimeToLiveRequest request;
  request.set_id(lease);
  pb::LeaseTimeToLiveResponse response;
  Status s = shared_->Run({"LeaseTimeToLive", "lease " + std::to_string(lease)},
                          [&](Conn& c, grpc::ClientContext* ctx) {
                            return c.lease->LeaseTimeToLive(ctx, request, &response);
                          });
  if (!s.ok()) return s;
  LeaseInfo info;
  info.ttl = response.ttl() < 0 ? -1 : response.ttl();
  info.granted_ttl = response.grantedttl();
  return info;
}

Status Client::RevokeLease(int64_t lease) {
  pb::LeaseRevokeRequest request;
  request.set_id(lease);
  pb::LeaseRevokeResponse response;
  return shared_->Run({"RevokeLease", "lease " + std::to_string(lease)},
                      [&](Conn& c, grpc::ClientContext* ctx) {
                        return c.lease->LeaseRevoke(ctx, request, &response);
                      });
}

Result<MemberStatus> Client::GetMemberStatus(const std::string& endpoint) {
  Conn* conn = nullptr;
  for (auto& c : shared_->conns) {
    if (c.endpoint.url == endpoint || c.endpoint.target == endpoint) conn = &c;
  }
  if (conn == nullptr) {
    return InvalidArgument("etcd Status: '" + endpoint + "' is not one of the client's endpoints");
  }
  // One member, no failover, and no "hasleader": a member without a leader answers too.
  CallSpec spec{"Status", "", true, true, /*need_leader=*/false};
  auto token = shared_->Token(shared_->clock.Now() + shared_->options.timeout);
  if (!token.ok()) return token.status();
  const MonoTime deadline = shared_->clock.Now() + shared_->options.timeout;
  const grpc_connectivity_state state =
      shared_->Connect(*conn, TimeUntil(shared_->clock, deadline));
  pb::StatusRequest request;
  pb::StatusResponse response;
  grpc::Status s = Shared::NotConnected(shared_->options.timeout);
  if (state == GRPC_CHANNEL_READY || state == GRPC_CHANNEL_TRANSIENT_FAILURE) {
    grpc::ClientContext context;
    context.set_deadline(RelativeDeadline(CeilMillis(TimeUntil(shared_->clock, deadline))));
    shared_->Prepare(&context, spec, *token);
    s = conn->maintenance->Status(&context, request, &response);
  }
  if (!s.ok()) {
    const ErrorClass error = ClassifyError(s.error_code(), s.error_message());
    if (error.stale_token) shared_->DropToken(*token);
    return Status(error.code, shared_->Describe(spec, *conn, s));
  }
  MemberStatus out;
  out.endpoint = conn->endpoint.url;
  out.member_id = response.header().member_id();
  out.leader_id = response.leader();
  out.revision = response.header().revision();
  out.raft_term = response.raftterm();
  out.version = response.version();
  return out;
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

// ---------------------------------------------------------------------------------------------
// Administration

Status Client::EnableAuth() {
  pb::AuthEnableRequest request;
  pb::AuthEnableResponse response;
  return shared_->Run({"AuthEnable", ""}, [&](Conn& c, grpc::ClientContext* ctx) {
    return c.auth->AuthEnable(ctx, request, &response);
  });
}

Status Client::AddUser(const std::string& name, const std::string& password) {
  pb::AuthUserAddRequest request;
  request.set_name(name);
  request.set_password(password);
  request.mutable_options()->set_no_password(password.empty());
  pb::AuthUserAddResponse response;
  return shared_->Run({"UserAdd", name}, [&](Conn& c, grpc::ClientContext* ctx) {
    return c.auth->UserAdd(ctx, request, &response);
  });
}

Status Client::AddRole(const std::string& role) {
  pb::AuthRoleAddRequest request;
  request.set_name(role);
  pb::AuthRoleAddResponse response;
  return shared_->Run({"RoleAdd", role}, [&](Conn& c, grpc::ClientContext* ctx) {
    return c.auth->RoleAdd(ctx, request, &response);
  });
}

Status Client::GrantPermission(const std::string& role, const std::string& key,
                               const std::string& range_end, Permission permission) {
  pb::AuthRoleGrantPermissionRequest request;
  request.set_name(role);
  auto* perm = request.mutable_perm();
  perm->set_key(key);
  perm->set_range_end(range_end);
  switch (permission) {
    case Permission::kRead:
      perm->set_permtype(pb::Permission::READ);
      break;
    case Permission::kWrite:
      perm->set_permtype(pb::Permission::WRITE);
      break;
    case Permission::kReadWrite:
      perm->set_permtype(pb::Permission::READWRITE);
      break;
  }
  pb::AuthRoleGrantPermissionResponse response;
  return shared_->Run({"RoleGrantPermission", role + " on " + key},
                      [&](Conn& c, grpc::ClientContext* ctx) {
                        return c.auth->RoleGrantPermission(ctx, request, &response);
                      });
}

Status Client::GrantRole(const std::string& user, const std::string& role) {
  pb::AuthUserGrantRoleRequest request;
  request.set_user(user);
  request.set_role(role);
  pb::AuthUserGrantRoleResponse response;
  return shared_->Run({"UserGrantRole", user + " -> " + role},
                      [&](Conn& c, grpc::ClientContext* ctx) {
                        return c.auth->UserGrantRole(ctx, request, &response);
                      });
}

}  // namespace nodelet::etcd
