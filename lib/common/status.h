// Status and Result<T>: the project's return types for expected failures (bad input, a peer
// that is down, a full disk). Library code returns them and never logs; the caller that decides
// what to do logs once. Broken invariants are not Statuses: they abort.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace nodelet {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad input from a peer, a file or the operator
  kNotFound,         // the named thing does not exist
  kAlreadyExists,
  kDeadlineExceeded,    // a wait reached its deadline
  kUnavailable,         // a peer or resource is down; retrying may help
  kResourceExhausted,   // full disk, too large, too many
  kFailedPrecondition,  // refused by a guard (e.g. an illegal status transition)
  kInternal,            // a system call failed unexpectedly
  kCancelled,
  kPermissionDenied,  // the peer's credentials (or the file's mode) do not let the caller in
  kOutOfRange,        // past what the peer keeps: a compacted etcd revision (etcd::IsCompacted)
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message", or "OK".
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status DeadlineExceeded(std::string m) {
  return {StatusCode::kDeadlineExceeded, std::move(m)};
}
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status ResourceExhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status FailedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status PermissionDenied(std::string m) {
  return {StatusCode::kPermissionDenied, std::move(m)};
}
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
// Internal error from errno: "what: strerror(errno)".
Status ErrnoStatus(const std::string& what, int err);

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    assert(!std::get<Status>(v_).ok() && "Result from an OK status has no value");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace nodelet
