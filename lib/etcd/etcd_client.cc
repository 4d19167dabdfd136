// etcd::Client's connection to the cluster: the options checked, the TLS files read, one gRPC
// channel per member with its stubs, the wait for a member's connection, the auth token, and what
// every call's messages say. The calls themselves are in etcd_kv.cc, etcd_watch.cc and
// etcd_admin.cc; the failover loop they share is Client::Shared::Run (etcd_client_private.h).
#include "lib/etcd/etcd_client.h"

#include <grpc/support/time.h>
#include <grpcpp/grpcpp.h>

#include <fstream>
#include <iterator>
#include <mutex>
#include <utility>

#include "lib/etcd/etcd.grpc.pb.h"
#include "lib/etcd/etcd_client_private.h"

namespace nodelet::etcd {

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
constexpr size_t kMaxPemBytes = 1024 * 1024;

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

}  // namespace

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

grpc_connectivity_state Client::Shared::Connect(Conn& conn, Duration budget) {
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

grpc::Status Client::Shared::NotConnected(Duration budget) {
  return grpc::Status(
      grpc::StatusCode::UNAVAILABLE,
      "failed to connect within " + std::to_string(CeilMillis(budget).count()) + " ms");
}

void Client::Shared::Prepare(grpc::ClientContext* context, const CallSpec& spec,
                             const std::string& token) {
  if (spec.need_leader) context->AddMetadata("hasleader", "true");
  if (!token.empty()) context->AddMetadata("token", token);
}

std::string Client::Shared::Describe(const CallSpec& spec, const Conn& conn,
                                     const grpc::Status& s) const {
  std::string out = std::string("etcd ") + spec.what;
  if (!spec.key.empty()) out += " " + Quote(spec.key);
  return out + " on " + conn.endpoint.url + ": " + GrpcCodeName(s.error_code()) + ": " +
         s.error_message();
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

}  // namespace nodelet::etcd
