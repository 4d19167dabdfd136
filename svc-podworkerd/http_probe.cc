#include "svc-podworkerd/http_probe.h"

#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <optional>

namespace nodelet::podworkerd {
namespace {

// The attempt's deadline, on the prober's clock.
struct Deadline {
  const Clock& clock;
  MonoTime at;
};

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// One connection: the socket, and the TLS session on it for HTTPS.
class Conn {
 public:
  explicit Conn(int fd) : fd_(fd) {}
  ~Conn() {
    if (ssl_ != nullptr) SSL_free(ssl_);
  }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;
  int fd() const { return fd_.get(); }
  SSL* ssl() const { return ssl_; }
  void set_ssl(SSL* ssl) { ssl_ = ssl; }

 private:
  Fd fd_;
  SSL* ssl_ = nullptr;
};

// The client context of every HTTPS probe: no certificate check, as the kubelet's prober
// (InsecureSkipVerify), TLS 1.2 and up.
SSL_CTX* TlsContext() {
  static SSL_CTX* ctx = [] {
    SSL_CTX* c = SSL_CTX_new(TLS_client_method());
    if (c != nullptr) {
      SSL_CTX_set_verify(c, SSL_VERIFY_NONE, nullptr);
      SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION);
    }
    return c;
  }();
  return ctx;
}

// Milliseconds left before `deadline` (0 when it has passed), for poll.
int LeftMs(const Deadline& deadline) {
  auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline.at - deadline.clock.Now());
  if (left.count() <= 0) return 0;
  return static_cast<int>(std::min<int64_t>(left.count() + 1, 1 << 30));
}

// Waits for `events` on fd until the deadline: true when ready.
bool WaitFor(int fd, short events, const Deadline& deadline) {
  for (;;) {
    int ms = LeftMs(deadline);
    if (ms == 0) return false;
    pollfd p{fd, events, 0};
    int rc = poll(&p, 1, ms);
    if (rc > 0) return true;
    if (rc == 0) continue;  // re-check the clock (poll may wake early)
    if (errno != EINTR) return false;
  }
}

std::string Lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

// Connects to host:port before the deadline; an fd or why not.
int Connect(const std::string& host, int port, const Deadline& deadline, std::string& error) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0 || !res) {
    error = "dial tcp: lookup " + host + ": " + gai_strerror(rc);
    return -1;
  }
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = std::string("socket: ") + std::strerror(errno);
    freeaddrinfo(res);
    return -1;
  }
  int rc = connect(fd, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  if (rc != 0 && errno != EINPROGRESS) {
    error = std::string("dial tcp ") + host + ":" + service + ": " + std::strerror(errno);
    close(fd);
    return -1;
  }
  if (rc != 0) {
    if (!WaitFor(fd, POLLOUT, deadline)) {
      error = "dial tcp " + host + ":" + service + ": i/o timeout";
      close(fd);
      return -1;
    }
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      error = std::string("dial tcp ") + host + ":" + service + ": " + std::strerror(err);
      close(fd);
      return -1;
    }
  }
  return fd;
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

// The TLS handshake on a connected socket, within the deadline; false with `error` set.
bool StartTls(Conn& conn, const std::string& host, const Deadline& deadline, std::string& error) {
  SSL_CTX* ctx = TlsContext();
  SSL* ssl = ctx != nullptr ? SSL_new(ctx) : nullptr;
  if (ssl == nullptr) {
    error = "tls: cannot create a session";
    return false;
  }
  conn.set_ssl(ssl);
  SSL_set_fd(ssl, conn.fd());
  // SNI for a name (not for an address), as Go's TLS client sends it.
  if (!host.empty() && host.find(':') == std::string::npos &&
      host.find_first_not_of("0123456789.") != std::string::npos) {
    SSL_set_tlsext_host_name(ssl, host.c_str());
  }
  for (;;) {
    ERR_clear_error();
    int rc = SSL_connect(ssl);
    if (rc == 1) return true;
    short wants = TlsWants(ssl, rc);
    if (wants == 0) {
      char buf[256] = "handshake failed";
      if (unsigned long e = ERR_get_error(); e != 0) ERR_error_string_n(e, buf, sizeof buf);
      error = std::string("tls: ") + buf;
      return false;
    }
    if (!WaitFor(conn.fd(), wants, deadline)) {
      error = "tls: handshake timeout";
      return false;
    }
  }
}

bool SendAll(Conn& conn, const std::string& data, const Deadline& deadline) {
  if (SSL* ssl = conn.ssl()) {
    size_t off = 0;
    while (off < data.size()) {
      ERR_clear_error();
      int n = SSL_write(ssl, data.data() + off, static_cast<int>(data.size() - off));
      if (n > 0) {
        off += static_cast<size_t>(n);
        continue;
      }
      short wants = TlsWants(ssl, n);
      if (wants == 0 || !WaitFor(conn.fd(), wants, deadline)) return false;
    }
    return true;
  }
  const int fd = conn.fd();
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!WaitFor(fd, POLLOUT, deadline)) return false;
      continue;
    }
    return false;
  }
  return true;
}

// Reads what is there (up to `max` bytes) into `out`: >0 bytes read, 0 EOF, -1 error,
// -2 deadline.
ssize_t ReadSome(Conn& conn, std::string& out, size_t max, const Deadline& deadline) {
  char buf[4096];
  if (SSL* ssl = conn.ssl()) {
    for (;;) {
      ERR_clear_error();
      int n = SSL_read(ssl, buf, static_cast<int>(std::min(sizeof buf, max)));
      if (n > 0) {
        out.append(buf, static_cast<size_t>(n));
        return n;
      }
      int err = SSL_get_error(ssl, n);
      if (err == SSL_ERROR_ZERO_RETURN) return 0;
      // A peer that closes without close_notify: EOF, as Go's client reads it.
      if (err == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) return 0;
      short wants = TlsWants(ssl, n);
      if (wants == 0) return -1;
      if (!WaitFor(conn.fd(), wants, deadline)) return -2;
    }
  }
  const int fd = conn.fd();
  for (;;) {
    ssize_t n = recv(fd, buf, std::min(sizeof buf, max), 0);
    if (n >= 0) {
      out.append(buf, static_cast<size_t>(n));
      return n;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    if (!WaitFor(fd, POLLIN, deadline)) return -2;
  }
}

struct Target {
  std::string host;
  int port = 80;
  std::string path = "/";
  bool tls = false;  // https
};

struct Response {
  int status = 0;
  std::string location;
  size_t body_bytes = 0;
};

// Host names compare as the kubelet's URL.Hostname() does: without port and brackets, ignoring
// case.
std::string HostName(std::string host) {
  if (!host.empty() && host.front() == '[') {
    auto close = host.find(']');
    return Lower(host.substr(1, close == std::string::npos ? std::string::npos : close - 1));
  }
  return Lower(host);
}

std::string HostHeader(const Target& t) {
  const bool v6 = t.host.find(':') != std::string::npos;
  return (v6 ? "[" + t.host + "]" : t.host) + ":" + std::to_string(t.port);
}

// Where a Location header points, relative to `base`. nullopt with `error` set when it cannot
// be followed (bad URL, a scheme other than http and https).
std::optional<Target> Resolve(const Target& base, const std::string& location, std::string& error) {
  Target t = base;
  std::string rest;
  bool absolute = false;
  const std::string lower = Lower(location);
  if (lower.rfind("http://", 0) == 0) {
    rest = location.substr(7);
    t.tls = false;
    absolute = true;
  } else if (lower.rfind("https://", 0) == 0) {
    rest = location.substr(8);
    t.tls = true;
    absolute = true;
  } else if (location.rfind("//", 0) == 0) {
    rest = location.substr(2);
  } else if (!location.empty() && location.front() == '/') {
    t.path = location;
    return t;
  } else if (location.find(':') != std::string::npos && location.find(':') < location.find('/')) {
    error = "redirect to an unsupported URL: " + location;
    return std::nullopt;
  } else {
    // Relative to the current path's directory.
    std::string dir = base.path.substr(0, base.path.rfind('/') + 1);
    t.path = (dir.empty() ? "/" : dir) + location;
    return t;
  }
  auto slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  t.path = slash == std::string::npos ? "/" : rest.substr(slash);
  if (auto at = authority.rfind('@'); at != std::string::npos) authority = authority.substr(at + 1);
  std::string port;
  if (!authority.empty() && authority.front() == '[') {
    auto close = authority.find(']');
    if (close == std::string::npos) {
      error = "redirect to a bad URL: " + location;
      return std::nullopt;
    }
    t.host = authority.substr(1, close - 1);
    if (close + 1 < authority.size() && authority[close + 1] == ':')
      port = authority.substr(close + 2);
  } else {
    auto colon = authority.rfind(':');
    t.host = authority.substr(0, colon);
    if (colon != std::string::npos) port = authority.substr(colon + 1);
  }
  if (!port.empty()) {
    if (port.size() > 5 || !std::all_of(port.begin(), port.end(), ::isdigit) ||
        std::stoi(port) == 0 || std::stoi(port) > 65535) {
      error = "redirect to a bad port: " + location;
      return std::nullopt;
    }
    t.port = std::stoi(port);
  } else if (absolute || location.rfind("//", 0) == 0) {
    t.port = t.tls ? 443 : 80;
  }
  if (t.host.empty()) {
    error = "redirect to a URL without a host: " + location;
    return std::nullopt;
  }
  return t;
}

// One request/response on a fresh connection. Returns false with `error` set when no complete
// answer arrived in time.
bool Exchange(const Target& target, const HttpProbeRequest& req, const Deadline& deadline,
              Response& out, std::string& error) {
  Conn conn(Connect(target.host, target.port, deadline, error));
  if (conn.fd() < 0) return false;
  if (target.tls && !StartTls(conn, target.host, deadline, error)) return false;
  std::string host_header = HostHeader(target);
  bool user_agent = false, accept = false;
  std::string extra;
  for (const auto& [name, value] : req.headers) {
    // Header names and values come from the manifest: no line breaks may pass into the request.
    if (name.find_first_of("\r\n:") != std::string::npos ||
        value.find_first_of("\r\n") != std::string::npos || name.empty()) {
      continue;
    }
    const std::string lname = Lower(name);
    if (lname == "host") {
      host_header = value;
      continue;
    }
    if (lname == "connection" || lname == "content-length" || lname == "transfer-encoding")
      continue;
    user_agent = user_agent || lname == "user-agent";
    accept = accept || lname == "accept";
    extra += name + ": " + value + "\r\n";
  }
  std::string request = "GET " + target.path + " HTTP/1.1\r\nHost: " + host_header + "\r\n";
  if (!user_agent) request += "User-Agent: kube-probe/nodelet\r\n";
  if (!accept) request += "Accept: */*\r\n";
  request += extra + "Connection: close\r\n\r\n";
  if (!SendAll(conn, request, deadline)) {
    error = "write: " + std::string(LeftMs(deadline) == 0 ? "i/o timeout" : std::strerror(errno));
    return false;
  }

  // Status line and headers, bounded.
  std::string head;
  size_t end = std::string::npos;
  while ((end = head.find("\r\n\r\n")) == std::string::npos) {
    if (head.size() >= kMaxProbeHeaderBytes) {
      error = "response headers exceed " + std::to_string(kMaxProbeHeaderBytes) + " bytes";
      return false;
    }
    ssize_t n = ReadSome(conn, head, kMaxProbeHeaderBytes - head.size(), deadline);
    if (n == -2) {
      error = "timeout awaiting response headers";
      return false;
    }
    if (n <= 0) {
      error =
          n == 0 ? "EOF before the response headers" : std::string("read: ") + std::strerror(errno);
      return false;
    }
  }
  std::string body = head.substr(end + 4);
  head.resize(end);
  auto line_end = head.find("\r\n");
  std::string status_line = head.substr(0, line_end);
  if (status_line.rfind("HTTP/1.", 0) != 0 || status_line.size() < 12 ||
      !std::isdigit(static_cast<unsigned char>(status_line[9])) ||
      !std::isdigit(static_cast<unsigned char>(status_line[10])) ||
      !std::isdigit(static_cast<unsigned char>(status_line[11]))) {
    error = "malformed HTTP response";
    return false;
  }
  out.status = std::stoi(status_line.substr(9, 3));
  std::optional<size_t> content_length;
  bool chunked = false;
  size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
  while (pos < head.size()) {
    size_t next = head.find("\r\n", pos);
    if (next == std::string::npos) next = head.size();
    std::string line = head.substr(pos, next - pos);
    pos = next + 2;
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string name = Lower(Trim(line.substr(0, colon)));
    const std::string value = Trim(line.substr(colon + 1));
    if (name == "location") {
      out.location = value;
    } else if (name == "content-length" && !value.empty() && value.size() < 19 &&
               std::all_of(value.begin(), value.end(), ::isdigit)) {
      content_length = std::stoull(value);
    } else if (name == "transfer-encoding" && Lower(value).find("chunked") != std::string::npos) {
      chunked = true;
    }
  }

  // The body: at most kMaxProbeBodyBytes, and only until its end (length, last chunk, EOF).
  const bool no_body =
      out.status == 204 || out.status == 304 || (out.status >= 100 && out.status < 200);
  size_t want = kMaxProbeBodyBytes;
  if (no_body) want = 0;
  if (content_length && !chunked) want = std::min(want, *content_length);
  auto done = [&] {
    if (body.size() >= want) return true;
    if (chunked && body.size() >= 5 && body.compare(body.size() - 5, 5, "0\r\n\r\n") == 0)
      return true;
    return false;
  };
  while (!done()) {
    ssize_t n = ReadSome(conn, body, want - body.size(), deadline);
    if (n == 0 && !content_length) break;  // EOF ends a body without a length
    if (n == -2) {
      error = "timeout reading the response body";
      return false;
    }
    if (n <= 0) {
      error = n == 0 ? "unexpected EOF in the response body"
                     : std::string("read: ") + std::strerror(errno);
      return false;
    }
  }
  out.body_bytes = std::min(body.size(), want);
  return true;
}

bool IsRedirect(int status) {
  return status == 301 || status == 302 || status == 303 || status == 307 || status == 308;
}

}  // namespace

HttpProbeResult DoHttpProbe(const Clock& clock, const HttpProbeRequest& request) {
  const Deadline deadline{clock, clock.Now() + request.timeout};
  HttpProbeResult result;
  Target target{request.host, request.port, request.path.empty() ? "/" : request.path, request.tls};
  if (target.path.front() != '/') target.path = "/" + target.path;
  if (target.path.find_first_of("\r\n ") != std::string::npos) {
    result.message = "probe path contains whitespace or a line break";
    return result;
  }
  const std::string first_host = HostName(target.host);
  for (int attempt = 0;; ++attempt) {
    Response response;
    std::string error;
    if (!Exchange(target, request, deadline, response, error)) {
      result.message = std::string("Get \"") + (target.tls ? "https://" : "http://") +
                       HostHeader(target) + target.path + "\": " + error;
      return result;
    }
    result.status = response.status;
    result.body_bytes = response.body_bytes;
    if (IsRedirect(response.status) && !response.location.empty()) {
      auto next = Resolve(target, response.location, error);
      if (!next) {
        result.message = error;
        return result;
      }
      if (HostName(next->host) != first_host) {
        // Another host: the kubelet does not follow it and reports the redirect itself.
        result.success = true;
        result.warning = true;
        result.message =
            "Probe terminated redirects, Response status: " + std::to_string(response.status);
        return result;
      }
      if (attempt + 1 >= kMaxProbeRedirects) {
        result.message = "stopped after " + std::to_string(kMaxProbeRedirects) + " redirects";
        return result;
      }
      if (next->path.find_first_of("\r\n ") != std::string::npos) {
        result.message = "redirect to a path with whitespace";
        return result;
      }
      ++result.redirects;
      target = *next;
      continue;
    }
    if (response.status >= 200 && response.status < 400) {
      result.success = true;
      if (response.status >= 300) {
        result.warning = true;
        result.message =
            "Probe terminated redirects, Response status: " + std::to_string(response.status);
      }
      return result;
    }
    result.message = "HTTP probe failed with statuscode: " + std::to_string(response.status);
    return result;
  }
}

}  // namespace nodelet::podworkerd
