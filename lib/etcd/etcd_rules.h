// The etcd client's decisions that need no server: how an endpoint string is read, the key range
// of a prefix, and what an error from etcd means for the call (its StatusCode, whether another
// member may answer, whether a write may have been applied). Kept apart from the gRPC code so
// that unit tests reach them directly (tests/unit/etcd/etcd_rules_test.cc).
#pragma once

#include <string>
#include <string_view>

#include "lib/common/status.h"

namespace nodelet::etcd {

// One member's client URL, parsed.
struct Endpoint {
  std::string url;     // as given, for messages ("https://10.0.0.1:2379")
  std::string target;  // gRPC's "host:port" ("10.0.0.1:2379", "[::1]:2379")
  bool tls = false;
};

// "http://host:port", "https://host:port" or "host:port" (TLS when `tls_by_default`: the client
// was given TLS files). A trailing "/" is dropped; a path, an empty host or a port outside
// 1..65535 is refused with INVALID_ARGUMENT naming the endpoint.
Result<Endpoint> ParseEndpoint(const std::string& endpoint, bool tls_by_default);

// The range_end that, with key = `prefix`, covers every key that starts with `prefix`: the
// prefix with its last byte below 0xff incremented and what follows dropped ("a/b/" -> "a/b0").
// A prefix of 0xff bytes only (or an empty one) has no such end: "\0", etcd's "to the last key".
std::string PrefixRangeEnd(const std::string& prefix);

// What the client does after a failed attempt on one member.
enum class Retry {
  kNo,  // the answer holds on every member (denied, bad request, not found, compacted)
  // The request never reached etcd's store (no connection, "no leader", "not leader", too
  // many requests): any call may go to the next member.
  kElsewhere,
  // It may have been applied (a deadline, a connection that broke mid-call, etcd's "request
  // timed out"): reads and writes whose repetition lands in the same state may go on; a
  // compare-and-swap may not (its second try could fail on its own first write).
  kElsewhereIfRepeatable,
};

struct ErrorClass {
  StatusCode code = StatusCode::kInternal;
  Retry retry = Retry::kNo;
  // The auth token was refused (expired, or the auth store moved on): authenticate again and
  // repeat the call once.
  bool stale_token = false;
};

// Classifies a failed gRPC call by its code (grpc::StatusCode's value) and message. Auth denial
// ("permission denied", a wrong password, no user) maps to kPermissionDenied, a compacted
// revision to kOutOfRange, a missing lease to kNotFound, an existing user, role or lease to
// kAlreadyExists; etcd's transient errors to kUnavailable.
ErrorClass ClassifyError(int grpc_code, std::string_view message);

// True for the error a read or a watch at a compacted revision returns (kOutOfRange): the caller
// lists again from the current revision.
inline bool IsCompacted(const Status& status) { return status.code() == StatusCode::kOutOfRange; }

}  // namespace nodelet::etcd
