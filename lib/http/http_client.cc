// lib/http's GET exchange (http_client.h): the request, the bounded head, the body (by length,
// chunked or to EOF) and TLS on the dialled socket.
#include "lib/http/http_client.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "lib/common/unique_fd.h"

namespace nodelet::http {
namespace {

// A chunk-size line (size and extensions) longer than this is not a server we want to talk to.
constexpr size_t kMaxChunkLineBytes = 4096;
// Framing (size lines, extensions, line breaks) allowed beyond what the chunks' data excuses:
// each chunk excuses 16 bytes and twice its size, so only a server that sends mostly framing
// (tiny chunks with long extensions, to cost us reads without counting as body) is refused.
constexpr size_t kMaxChunkOverheadBytes = 16 * 1024;
// One read's buffer.
constexpr size_t kReadBytes = 16 * 1024;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string Trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return std::string(s.substr(b, e - b + 1));
}

bool IsAddress(const std::string& host) {
  in6_addr a;
  return inet_pton(AF_INET, host.c_str(), &a) == 1 || inet_pton(AF_INET6, host.c_str(), &a) == 1;
}

// Where the head (status line and headers) ends in `s`: just past the blank line, searching
// from `from`; npos when it has not arrived yet. Lines may end in CRLF or a bare LF.
size_t HeadEnd(std::string_view s, size_t from) {
  for (size_t i = s.find('\n', from); i != std::string_view::npos; i = s.find('\n', i + 1)) {
    if (i + 1 < s.size() && s[i + 1] == '\n') return i + 2;
    if (i + 2 < s.size() && s[i + 1] == '\r' && s[i + 2] == '\n') return i + 3;
  }
  return std::string_view::npos;
}

// The context of every exchange that does not verify (the kubelet's prober, InsecureSkipVerify):
// made on the first such https exchange and kept, since probes repeat. A peer that closes without
// close_notify ends the body (EOF), as Go's client reads it.
SSL_CTX* UnverifiedContext() {
  static SSL_CTX* ctx = [] {
    SSL_CTX* c = SSL_CTX_new(TLS_client_method());
    if (c != nullptr) {
      SSL_CTX_set_verify(c, SSL_VERIFY_NONE, nullptr);
      SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION);
      SSL_CTX_set_options(c, SSL_OP_IGNORE_UNEXPECTED_EOF);
    }
    return c;
  }();
  return ctx;
}

// What a TLS call that did not complete waits for (POLLIN/POLLOUT), 0 when it failed.
short TlsWants(SSL* ssl, int rc) {
  switch (SSL_get_error(ssl, rc)) {
    case SSL_ERROR_WANT_READ:
      return POLLIN;
    case SSL_ERROR_WANT_WRITE:
      return POLLOUT;
    default:
      return 0;
  }
}

// Why a TLS call failed, from OpenSSL's error queue or the socket.
std::string TlsFailure(const char* fallback) {
  const int saved_errno = errno;
  if (unsigned long e = ERR_get_error(); e != 0) {
    if (ERR_SYSTEM_ERROR(e)) return std::strerror(ERR_GET_REASON(e));
    if (const char* reason = ERR_reason_error_string(e)) return reason;
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    return buf;
  }
  if (saved_errno != 0 && saved_errno != EAGAIN) return std::strerror(saved_errno);
  return fallback;
}

}  // namespace

// The connection: the socket, and the TLS session on it for https.
class Exchange::Conn {
 public:
  explicit Conn(UniqueFd fd) : fd_(std::move(fd)) {}
  ~Conn() {
    if (ssl != nullptr) SSL_free(ssl);
    if (own_ctx != nullptr) SSL_CTX_free(own_ctx);
  }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;
  int fd() const { return fd_.get(); }

  SSL* ssl = nullptr;
  SSL_CTX* own_ctx = nullptr;  // a verifying context, made for this exchange only

 private:
  UniqueFd fd_;
};

std::string ResponseHead::Header(std::string_view name) const {
  const std::string want = Lower(name);
  for (const auto& [n, v] : headers) {
    if (Lower(n) == want) return v;
  }
  return "";
}

Exchange::Exchange(const Clock& clock, Limits limits) : clock_(clock), limits_(limits) {}

Exchange::~Exchange() = default;

bool Exchange::Fail(ErrorKind kind, std::string message) {
  error_ = Error();
  error_.kind = kind;
  error_.message = std::move(message);
  return false;
}

bool Exchange::FailWait(WaitResult wait, const std::string& what) {
  switch (wait) {
    case WaitResult::kTimeout:
      return Fail(ErrorKind::kTimeout, what);
    case WaitResult::kDeadline:
      return Fail(ErrorKind::kDeadline, what);
    default:
      return Fail(ErrorKind::kIo, std::string("poll: ") + std::strerror(errno));
  }
}

WaitResult Exchange::WaitFor(int fd, short events) const {
  return WaitFd(clock_, fd, events, limits_.deadline, limits_.io_timeout);
}

bool Exchange::Connect(const Request& request) {
  UniqueFd fd =
      DialTcp(clock_, request.host, request.port, limits_.deadline, limits_.io_timeout, error_);
  if (!fd) return false;
  conn_ = std::make_unique<Conn>(std::move(fd));
  return true;
}

bool Exchange::Handshake(const Request& request) {
  const Tls& tls = request.tls;
  SSL_CTX* ctx = nullptr;
  if (tls.verify) {
    // Made per exchange and freed with it: the CA store is not held between fetches.
    ctx = conn_->own_ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == nullptr) return Fail(ErrorKind::kTls, "tls: " + TlsFailure("no context"));
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    ERR_clear_error();
    if (tls.ca_file.empty()
            ? SSL_CTX_set_default_verify_paths(ctx) != 1
            : SSL_CTX_load_verify_locations(ctx, tls.ca_file.c_str(), nullptr) != 1) {
      return Fail(ErrorKind::kTls, "tls: cannot load the CA certificates" +
                                       (tls.ca_file.empty() ? "" : " of " + tls.ca_file) + ": " +
                                       TlsFailure("unreadable"));
    }
  } else {
    ctx = UnverifiedContext();
  }
  SSL* ssl = ctx != nullptr ? SSL_new(ctx) : nullptr;
  if (ssl == nullptr) return Fail(ErrorKind::kTls, "tls: cannot create a session");
  conn_->ssl = ssl;
  SSL_set_fd(ssl, conn_->fd());
  const bool address = IsAddress(request.host);
  // SNI for a name (not for an address), as Go's TLS client sends it.
  if (!address) SSL_set_tlsext_host_name(ssl, request.host.c_str());
  if (tls.verify) {
    // The certificate must name what was dialled: the name (wildcards only as a whole label),
    // or the address in an IP SAN.
    SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    const int set = address
                        ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), request.host.c_str())
                        : SSL_set1_host(ssl, request.host.c_str());
    if (set != 1) return Fail(ErrorKind::kTls, "tls: cannot check the name " + request.host);
  }
  for (;;) {
    ERR_clear_error();
    errno = 0;
    int rc = SSL_connect(ssl);
    if (rc == 1) return true;
    short wants = TlsWants(ssl, rc);
    if (wants == 0) {
      if (long v = SSL_get_verify_result(ssl); tls.verify && v != X509_V_OK) {
        return Fail(ErrorKind::kTls, std::string("tls: certificate verify failed: ") +
                                         X509_verify_cert_error_string(v));
      }
      return Fail(ErrorKind::kTls, "tls: " + TlsFailure("handshake failed"));
    }
    if (WaitResult w = WaitFor(conn_->fd(), wants); w != WaitResult::kReady) {
      return FailWait(w, "tls: handshake timeout");
    }
  }
}

bool Exchange::Send(const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    short wants = POLLOUT;
    if (SSL* ssl = conn_->ssl) {
      ERR_clear_error();
      errno = 0;
      int n = SSL_write(ssl, data.data() + off, static_cast<int>(data.size() - off));
      if (n > 0) {
        off += static_cast<size_t>(n);
        continue;
      }
      wants = TlsWants(ssl, n);
      if (wants == 0) return Fail(ErrorKind::kIo, "write: tls: " + TlsFailure("failed"));
    } else {
      ssize_t n = send(conn_->fd(), data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n > 0) {
        off += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        return Fail(ErrorKind::kIo, std::string("write: ") + std::strerror(errno));
      }
    }
    if (WaitResult w = WaitFor(conn_->fd(), wants); w != WaitResult::kReady) {
      return FailWait(w, "write: i/o timeout");
    }
  }
  return true;
}

ssize_t Exchange::Receive(size_t max, const char* timeout_message) {
  char buf[kReadBytes];
  const size_t want = std::min(sizeof buf, max);
  for (;;) {
    short wants = POLLIN;
    if (SSL* ssl = conn_->ssl) {
      ERR_clear_error();
      errno = 0;
      int n = SSL_read(ssl, buf, static_cast<int>(want));
      if (n > 0) {
        in_.append(buf, static_cast<size_t>(n));
        return n;
      }
      const int err = SSL_get_error(ssl, n);
      if (err == SSL_ERROR_ZERO_RETURN) return 0;
      wants = TlsWants(ssl, n);
      if (wants == 0) {
        Fail(ErrorKind::kIo, "read: tls: " + TlsFailure("failed"));
        return -1;
      }
    } else {
      ssize_t n = recv(conn_->fd(), buf, want, 0);
      if (n >= 0) {
        in_.append(buf, static_cast<size_t>(n));
        return n;
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        Fail(ErrorKind::kIo, std::string("read: ") + std::strerror(errno));
        return -1;
      }
    }
    if (WaitResult w = WaitFor(conn_->fd(), wants); w != WaitResult::kReady) {
      FailWait(w, timeout_message);
      return -1;
    }
  }
}

bool Exchange::Start(const Request& request, ResponseHead& head) {
  if (request.path.empty() || request.path.find_first_of(" \t\r\n") != std::string::npos) {
    return Fail(ErrorKind::kProtocol, "request path is empty or holds whitespace");
  }
  if (!Connect(request)) return false;
  if (request.tls.enabled && !Handshake(request)) return false;

  std::string host_header =
      request.host_header.empty() ? HostPort(request.host, request.port) : request.host_header;
  bool user_agent = false, accept = false;
  std::string extra;
  for (const auto& [name, value] : request.headers) {
    // Names and values may come from a manifest: no line breaks may pass into the request.
    if (name.empty() || name.find_first_of(std::string_view("\r\n:\0", 4)) != std::string::npos ||
        value.find_first_of(std::string_view("\r\n\0", 3)) != std::string::npos) {
      continue;
    }
    const std::string lname = Lower(name);
    if (lname == "host") {
      host_header = value;
      continue;
    }
    if (lname == "connection" || lname == "content-length" || lname == "transfer-encoding") {
      continue;
    }
    user_agent = user_agent || lname == "user-agent";
    accept = accept || lname == "accept";
    extra += name + ": " + value + "\r\n";
  }
  std::string text = "GET " + request.path + (request.http10 ? " HTTP/1.0" : " HTTP/1.1") +
                     "\r\nHost: " + host_header + "\r\n";
  if (!user_agent && !request.user_agent.empty()) {
    text += "User-Agent: " + request.user_agent + "\r\n";
  }
  if (!accept) text += "Accept: */*\r\n";
  text += extra + "Connection: close\r\n\r\n";
  if (!Send(text)) return false;

  // Status line and headers, bounded.
  size_t end = std::string::npos, scanned = 0;
  while ((end = HeadEnd(in_, scanned)) == std::string::npos) {
    if (in_.size() >= limits_.max_header_bytes) {
      return Fail(ErrorKind::kTooLarge,
                  "response headers exceed " + std::to_string(limits_.max_header_bytes) + " bytes");
    }
    // Only the tail can complete a blank line: a trickling server costs no rescans.
    scanned = in_.size() < 2 ? 0 : in_.size() - 2;
    ssize_t n = Receive(limits_.max_header_bytes - in_.size(), "timeout awaiting response headers");
    if (n < 0) return false;
    if (n == 0) return Fail(ErrorKind::kIo, "EOF before the response headers");
  }
  std::string_view text_head(in_.data(), end);
  head = ResponseHead();
  for (size_t pos = 0, line_no = 0; pos < text_head.size(); ++line_no) {
    size_t next = text_head.find('\n', pos);
    std::string_view line = text_head.substr(pos, next - pos);
    pos = next + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line_no == 0) {
      if (line.rfind("HTTP/1.", 0) != 0 || line.size() < 12 ||
          !std::isdigit(static_cast<unsigned char>(line[9])) ||
          !std::isdigit(static_cast<unsigned char>(line[10])) ||
          !std::isdigit(static_cast<unsigned char>(line[11]))) {
        return Fail(ErrorKind::kProtocol, "malformed HTTP response");
      }
      head.status = std::stoi(std::string(line.substr(9, 3)));
      continue;
    }
    auto colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string name = Trim(line.substr(0, colon));
    std::string value = Trim(line.substr(colon + 1));
    const std::string lname = Lower(name);
    if (lname == "content-length" && !value.empty() && value.size() < 19 &&
        std::all_of(value.begin(), value.end(), ::isdigit)) {
      head.content_length = std::stoull(value);
    } else if (lname == "transfer-encoding" && Lower(value).find("chunked") != std::string::npos) {
      head.chunked = true;
    }
    head.headers.emplace_back(std::move(name), std::move(value));
  }
  in_pos_ = end;  // what follows the head is the body's start
  head_ = head;
  have_head_ = true;
  return true;
}

bool Exchange::Deliver(const char* data, size_t len, const BodySink& sink) {
  body_bytes_ += len;
  if (len > 0 && !sink(data, len)) return Fail(ErrorKind::kAborted, "transfer stopped");
  return true;
}

bool Exchange::More(size_t max, bool eof_ends) {
  in_.erase(0, in_pos_);
  in_pos_ = 0;
  ssize_t n = Receive(max, "timeout reading the response body");
  if (n < 0) return false;
  if (n == 0) {
    return eof_ends ? false : Fail(ErrorKind::kIo, "unexpected EOF in the response body");
  }
  return true;
}

bool Exchange::ReadBody(size_t max_bytes, const BodySink& sink) {
  if (!have_head_) return Fail(ErrorKind::kProtocol, "no response head");
  const int status = head_.status;
  if (status == 204 || status == 304 || (status >= 100 && status < 200)) return true;
  if (head_.chunked) return ReadChunked(max_bytes, sink);
  // A length, or everything until EOF.
  uint64_t left = head_.content_length.value_or(UINT64_MAX);
  while (left > 0 && body_bytes_ < max_bytes) {
    if (in_pos_ == in_.size()) {
      const size_t room = max_bytes - body_bytes_;
      if (!More(static_cast<size_t>(std::min<uint64_t>(left, room)), !head_.content_length)) {
        return error_.kind == ErrorKind::kNone;  // EOF ends a body without a length
      }
    }
    const size_t take = static_cast<size_t>(
        std::min<uint64_t>({in_.size() - in_pos_, left, max_bytes - body_bytes_}));
    if (!Deliver(in_.data() + in_pos_, take, sink)) return false;
    in_pos_ += take;
    left -= take;
  }
  return true;
}

bool Exchange::ReadLine(std::string& line, size_t cap) {
  for (;;) {
    if (size_t nl = in_.find('\n', in_pos_); nl != std::string::npos) {
      line.assign(in_, in_pos_, nl - in_pos_);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.size() > cap) break;
      in_pos_ = nl + 1;
      return true;
    }
    if (in_.size() - in_pos_ > cap + 1) break;   // + 1: the line's CR
    if (!More(kReadBytes, false)) return false;  // keeps the partial line, reads after it
  }
  return Fail(ErrorKind::kProtocol,
              "malformed chunked encoding: a line over " + std::to_string(cap) + " bytes");
}

bool Exchange::ReadChunked(size_t max_bytes, const BodySink& sink) {
  size_t overhead = 0;
  std::string line;
  while (body_bytes_ < max_bytes) {
    if (!ReadLine(line, kMaxChunkLineBytes)) return false;
    std::string size_text = Trim(std::string_view(line).substr(0, line.find(';')));
    if (size_text.empty() || size_text.size() > 15 ||
        !std::all_of(size_text.begin(), size_text.end(), ::isxdigit)) {
      return Fail(ErrorKind::kProtocol, "malformed chunked encoding: bad chunk size");
    }
    uint64_t size = std::stoull(size_text, nullptr, 16);
    overhead += line.size() + 4;  // the size line's and the data's line breaks
    overhead -= std::min<uint64_t>(overhead, 16 + 2 * size);
    if (overhead > kMaxChunkOverheadBytes) {
      return Fail(ErrorKind::kProtocol, "malformed chunked encoding: too much framing");
    }
    if (size == 0) {
      // Trailers, as bounded as the headers, up to the blank line.
      size_t trailer_bytes = 0;
      do {
        const size_t cap =
            limits_.max_header_bytes - std::min(trailer_bytes, limits_.max_header_bytes);
        if (!ReadLine(line, cap)) return false;
        trailer_bytes += line.size() + 2;
      } while (!line.empty());
      return true;
    }
    while (size > 0) {
      if (body_bytes_ >= max_bytes) return true;
      if (in_pos_ == in_.size() &&
          !More(static_cast<size_t>(std::min<uint64_t>(size, max_bytes - body_bytes_)), false)) {
        return false;
      }
      const size_t take = static_cast<size_t>(
          std::min<uint64_t>({in_.size() - in_pos_, size, max_bytes - body_bytes_}));
      if (!Deliver(in_.data() + in_pos_, take, sink)) return false;
      in_pos_ += take;
      size -= take;
    }
    if (body_bytes_ >= max_bytes) return true;
    if (!ReadLine(line, kMaxChunkLineBytes)) return false;
    if (!line.empty()) {
      return Fail(ErrorKind::kProtocol, "malformed chunked encoding: data longer than its size");
    }
  }
  return true;
}

}  // namespace nodelet::http
