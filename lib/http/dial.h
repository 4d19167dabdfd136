// The socket under lib/http: DialTcp connects to a host and port under a deadline, WaitFd waits
// on a socket within the same limits, and Error is what every lib/http call reports when it
// fails. http::Exchange (http_client.h) dials with DialTcp; the tcpSocket probe
// (svc-podworkerd/probe_manager.h) uses it alone, since connecting is all that probe does.
#pragma once

#include <chrono>
#include <string>

#include "lib/common/clock.h"
#include "lib/common/unique_fd.h"

namespace nodelet::http {

// What went wrong, for callers that sort failures (metric labels, probe verdicts); the message
// says it for people.
enum class ErrorKind {
  kNone,
  kConnect,   // the name did not resolve, or the connection was refused or unreachable
  kTls,       // the handshake failed, the certificate was refused, the CA file was unreadable
  kTimeout,   // one wait ran past Limits::io_timeout
  kDeadline,  // Limits::deadline passed
  kIo,        // a read or write failed, or the peer closed before the answer was complete
  kProtocol,  // not an HTTP/1.x answer, or bad chunked framing
  kTooLarge,  // status line and headers (or trailers) over Limits::max_header_bytes
  kAborted,   // the body sink asked to stop
};

struct Error {
  ErrorKind kind = ErrorKind::kNone;
  std::string message;  // "dial tcp 10.0.0.1:80: Connection refused", "timeout awaiting ..."
  // Set only when the dial failed (DialTcp, or the connect of Exchange::Start): the reason alone,
  // without the "dial tcp HOST:PORT: " that `message` puts before it: the last address's error
  // ("Connection refused"), "i/o timeout", or the resolver's answer when `unresolved`. For
  // callers that word the failure their own way.
  std::string dial_reason;
  bool unresolved = false;  // the name did not resolve
};

// "host:port", with brackets around an IPv6 address.
std::string HostPort(const std::string& host, int port);

// How a wait for a socket ended.
enum class WaitResult { kReady, kTimeout, kDeadline, kFailed };

// Waits for `events` (poll's POLLIN, POLLOUT) on `fd` until `deadline`, and no longer than
// `io_timeout` when that is above 0; both measured by `clock`. kFailed: poll failed (errno says
// why).
WaitResult WaitFd(const Clock& clock, int fd, short events, MonoTime deadline,
                  std::chrono::milliseconds io_timeout);

// Connects to `port` of `host` (a name, resolved once, or an address; IPv6 without brackets):
// each address the name resolves to in turn until one accepts (a name may resolve to an IPv6
// address nothing listens on first); a wait that runs out ends the attempt. The socket is
// non-blocking and close-on-exec. On failure returns no socket, with `error` set: kConnect
// ("dial tcp: lookup HOST: ..." when the name did not resolve, else "dial tcp HOST:PORT: " and the
// last address's error), kTimeout or kDeadline ("dial tcp HOST:PORT: i/o timeout"), kIo (poll
// failed).
UniqueFd DialTcp(const Clock& clock, const std::string& host, int port, MonoTime deadline,
                 std::chrono::milliseconds io_timeout, Error& error);

}  // namespace nodelet::http
