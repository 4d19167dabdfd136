// http::Exchange: one HTTP/1.1 (or 1.0) GET on its own connection (`Connection: close`), the
// project's one HTTP client. Its peers may be hostile input: a container's probe endpoint
// (svc-podworkerd/http_probe.h), the `--manifest-url` server
// (supervisor/sources/manifest_url_source.h); `nodeletctl top` (ctl/top_command.h) reads the
// supervisor's /stats/summary with it too. Such a peer may hang, trickle a byte at a time, stream
// without end or send gigabytes of headers, so
//   - nothing waits past Limits::deadline (connect, TLS handshake, request, headers, body), and
//     no single wait longer than Limits::io_timeout when one is set;
//   - at most Limits::max_header_bytes of status line and headers (and of chunked trailers) are
//     read, and the body only as far as the caller asks (ReadBody's `max_bytes`, or a sink that
//     says stop);
//   - chunked transfer-encoding is decoded: the caller sees the body, never the framing.
// The socket is DialTcp's (dial.h): non-blocking and close-on-exec. With Tls::enabled the same
// socket carries TLS (1.2 or later, OpenSSL) under the same deadline; Tls::verify checks the chain
// against the system's CAs or Tls::ca_file and the server's name (or address) against the
// certificate. OpenSSL is only touched by an https exchange: it initializes itself on first use, so
// a process that never fetches https pays nothing for it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lib/common/clock.h"
#include "lib/http/dial.h"

namespace nodelet::http {

inline constexpr size_t kDefaultMaxHeaderBytes = 64 * 1024;

struct Limits {
  MonoTime deadline;                        // the whole exchange ends by then
  std::chrono::milliseconds io_timeout{0};  // each wait (connect, read, write); 0: none
  size_t max_header_bytes = kDefaultMaxHeaderBytes;
};

struct Tls {
  bool enabled = false;  // https
  bool verify = false;   // check the chain and the host name (or address)
  std::string ca_file;   // with `verify`: the PEM bundle to trust; empty: the system's CAs
};

struct Request {
  std::string host;  // a name (resolved once) or an address; IPv6 without brackets
  int port = 80;
  Tls tls;
  std::string path = "/";   // sent as is: the caller makes sure it holds no whitespace
  std::string host_header;  // empty: HostPort(host, port)
  // Sent after Host, in order. A "Host" entry overrides Host; entries whose name or value would
  // split the request (line breaks, a colon in the name) are left out, and so are Connection,
  // Content-Length and Transfer-Encoding, which the exchange decides.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string user_agent = "nodelet";  // sent unless `headers` has a User-Agent
  bool http10 = false;                 // "HTTP/1.0" on the request line, else "HTTP/1.1"
};

struct ResponseHead {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // as received, values trimmed
  std::optional<uint64_t> content_length;                    // absent: none, or not a number
  bool chunked = false;
  // The first value of header `name` (any case), "" when absent.
  std::string Header(std::string_view name) const;
};

// Gets each piece of body as it arrives; false stops the transfer (ErrorKind::kAborted).
using BodySink = std::function<bool(const char* data, size_t len)>;

// One GET: Start, then ReadBody when the body is wanted. Not reused for a second request.
class Exchange {
 public:
  // `clock` measures `limits.deadline` and `limits.io_timeout`.
  Exchange(const Clock& clock, Limits limits);
  ~Exchange();
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  // Connects (with TLS when asked), sends the GET and reads the status line and headers. False
  // with error() set when no complete head arrived.
  bool Start(const Request& request, ResponseHead& head);
  // Reads the body of the response Start read, handing it to `sink` piece by piece until it
  // ends (its length, the last chunk, EOF when it has neither) or `max_bytes` have been handed
  // over; what lies beyond `max_bytes` stays unread, which is no error. 1xx, 204 and 304 answers
  // have no body. False with error() set.
  bool ReadBody(size_t max_bytes, const BodySink& sink);
  // Body bytes handed to the sink so far.
  size_t body_bytes() const { return body_bytes_; }
  const Error& error() const { return error_; }

 private:
  class Conn;

  // Waits for `events` on `fd` within the deadline and the io_timeout.
  WaitResult WaitFor(int fd, short events) const;
  bool Connect(const Request& request);
  bool Handshake(const Request& request);
  bool Send(const std::string& data);
  // Appends what arrives (up to `max` bytes, > 0) to in_: the bytes read, 0 at EOF, -1 with
  // error_ set (`timeout_message` when a wait ran out).
  ssize_t Receive(size_t max, const char* timeout_message);
  // Drops the consumed part of in_ and reads more of the body (up to `max` bytes). False at EOF
  // (an error unless `eof_ends`) or with error_ set.
  bool More(size_t max, bool eof_ends);
  // One line of the chunked framing, without its line break; at most `cap` bytes.
  bool ReadLine(std::string& line, size_t cap);
  bool ReadChunked(size_t max_bytes, const BodySink& sink);
  bool Deliver(const char* data, size_t len, const BodySink& sink);
  bool Fail(ErrorKind kind, std::string message);
  bool FailWait(WaitResult wait, const std::string& what);

  const Clock& clock_;
  Limits limits_;
  std::unique_ptr<Conn> conn_;
  std::string in_;  // received, not yet consumed (from in_pos_ on)
  size_t in_pos_ = 0;
  ResponseHead head_;
  bool have_head_ = false;
  size_t body_bytes_ = 0;
  Error error_;
};

}  // namespace nodelet::http
