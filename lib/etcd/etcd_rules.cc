#include "lib/etcd/etcd_rules.h"

#include <grpcpp/support/status_code_enum.h>

#include <algorithm>
#include <cctype>

namespace nodelet::etcd {
namespace {

bool Contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

// Case-insensitive: gRPC's transport messages differ in case between versions ("Failed to
// connect to remote host", "failed to connect to all addresses").
bool ContainsNoCase(std::string_view haystack, std::string_view needle) {
  auto it = std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end(),
                        [](char a, char b) {
                          return std::tolower(static_cast<unsigned char>(a)) ==
                                 std::tolower(static_cast<unsigned char>(b));
                        });
  return it != haystack.end();
}

}  // namespace

Result<Endpoint> ParseEndpoint(const std::string& endpoint, bool tls_by_default) {
  Endpoint out;
  out.url = endpoint;
  std::string rest = endpoint;
  out.tls = tls_by_default;
  if (rest.rfind("http://", 0) == 0) {
    rest = rest.substr(7);
    out.tls = false;
  } else if (rest.rfind("https://", 0) == 0) {
    rest = rest.substr(8);
    out.tls = true;
  } else if (rest.find("://") != std::string::npos) {
    return InvalidArgument("etcd endpoint '" + endpoint +
                           "': only http://, https:// or host:port are supported");
  }
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.find('/') != std::string::npos) {
    return InvalidArgument("etcd endpoint '" + endpoint + "': a path is not supported");
  }
  // The port follows the last ':' (after the ']' of an IPv6 address in brackets).
  const size_t colon = rest.rfind(':');
  const size_t bracket = rest.rfind(']');
  if (colon == std::string::npos || (bracket != std::string::npos && colon < bracket)) {
    return InvalidArgument("etcd endpoint '" + endpoint + "': no port (want host:port)");
  }
  const std::string host = rest.substr(0, colon);
  const std::string port = rest.substr(colon + 1);
  if (host.empty() || host == "[]") {
    return InvalidArgument("etcd endpoint '" + endpoint + "': no host");
  }
  if (host.front() == '[' && host.back() != ']') {
    return InvalidArgument("etcd endpoint '" + endpoint + "': unbalanced '[' in the host");
  }
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(),
                   [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }) ||
      std::stoi(port) < 1 || std::stoi(port) > 65535) {
    return InvalidArgument("etcd endpoint '" + endpoint + "': port '" + port +
                           "' is not in 1..65535");
  }
  out.target = rest;
  return out;
}

std::string PrefixRangeEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    unsigned char last = static_cast<unsigned char>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

ErrorClass ClassifyError(int grpc_code, std::string_view message) {
  const auto code = static_cast<grpc::StatusCode>(grpc_code);
  switch (code) {
    case grpc::StatusCode::OK:
      return {StatusCode::kOk, Retry::kNo, false};
    case grpc::StatusCode::UNAVAILABLE:
      // etcd rejects these before the request reaches raft: "no leader" comes from the
      // "hasleader" metadata check, "not capable" while the member starts.
      if (Contains(message, "etcdserver: no leader") ||
          Contains(message, "etcdserver: not capable") ||
          Contains(message, "etcdserver: leader changed") ||
          Contains(message, "not supported for learner")) {
        return {StatusCode::kUnavailable, Retry::kElsewhere, false};
      }
      // etcd's own timeouts ("request timed out ...", "server stopped") come after the
      // proposal: it may have been applied.
      if (Contains(message, "etcdserver:")) {
        return {StatusCode::kUnavailable, Retry::kElsewhereIfRepeatable, false};
      }
      // gRPC could not connect: nothing was sent.
      if (ContainsNoCase(message, "failed to connect") ||
          ContainsNoCase(message, "connection refused") ||
          ContainsNoCase(message, "DNS resolution failed") ||
          ContainsNoCase(message, "empty address list")) {
        return {StatusCode::kUnavailable, Retry::kElsewhere, false};
      }
      // A connection that broke mid-call ("Socket closed", a reset, GOAWAY).
      return {StatusCode::kUnavailable, Retry::kElsewhereIfRepeatable, false};
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return {StatusCode::kDeadlineExceeded, Retry::kElsewhereIfRepeatable, false};
    case grpc::StatusCode::FAILED_PRECONDITION:
      if (Contains(message, "etcdserver: not leader")) {
        return {StatusCode::kUnavailable, Retry::kElsewhere, false};
      }
      if (Contains(message, "already exist")) {  // user, role, lease, member
        return {StatusCode::kAlreadyExists, Retry::kNo, false};
      }
      return {StatusCode::kFailedPrecondition, Retry::kNo, false};
    case grpc::StatusCode::UNAUTHENTICATED:
      return {StatusCode::kPermissionDenied, Retry::kNo, Contains(message, "invalid auth token")};
    case grpc::StatusCode::PERMISSION_DENIED:
      return {StatusCode::kPermissionDenied, Retry::kNo, false};
    case grpc::StatusCode::INVALID_ARGUMENT:
      // etcd reports a refused login and a call without credentials (auth on, no token, no
      // client certificate) as bad arguments; for the caller both are a denial.
      if (Contains(message, "authentication failed") || Contains(message, "user name is empty")) {
        return {StatusCode::kPermissionDenied, Retry::kNo, false};
      }
      // The token predates a change of users or roles: a new one carries the new revision.
      if (Contains(message, "revision of auth store is old")) {
        return {StatusCode::kPermissionDenied, Retry::kNo, true};
      }
      return {StatusCode::kInvalidArgument, Retry::kNo, false};
    case grpc::StatusCode::OUT_OF_RANGE:
      if (Contains(message, "compacted")) return {StatusCode::kOutOfRange, Retry::kNo, false};
      return {StatusCode::kInvalidArgument, Retry::kNo, false};  // a future revision, a TTL
    case grpc::StatusCode::NOT_FOUND:
      return {StatusCode::kNotFound, Retry::kNo, false};
    case grpc::StatusCode::ALREADY_EXISTS:
      return {StatusCode::kAlreadyExists, Retry::kNo, false};
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      // Too many proposals queued on that member: rejected before raft.
      if (Contains(message, "too many requests")) {
        return {StatusCode::kUnavailable, Retry::kElsewhere, false};
      }
      return {StatusCode::kResourceExhausted, Retry::kNo, false};  // NOSPACE, message size
    case grpc::StatusCode::CANCELLED:
      return {StatusCode::kCancelled, Retry::kNo, false};
    default:
      return {StatusCode::kInternal, Retry::kNo, false};
  }
}

}  // namespace nodelet::etcd
