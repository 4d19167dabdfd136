#include "supervisor/http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <string_view>

#include "lib/common/logging.h"
#include "lib/common/utf8.h"

namespace nodelet::supervisor {
namespace {

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
  }
  return "Status";
}

bool SendAll(const Clock& clock, int fd, std::string_view data, MonoTime deadline) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock.Now());
      if (left.count() <= 0) return false;
      pollfd p{fd, POLLOUT, 0};
      if (poll(&p, 1, static_cast<int>(left.count()) + 1) < 0 && errno != EINTR) return false;
      continue;
    }
    return false;
  }
  return true;
}

// The peer's address (no port) that the per-peer cap counts; an IPv4-mapped IPv6 address is
// its IPv4 address.
std::string PeerKey(const sockaddr_storage& addr) {
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&addr)->sin_addr, text, sizeof text);
  } else if (addr.ss_family == AF_INET6) {
    const auto* a6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    if (IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr)) {
      inet_ntop(AF_INET, &a6->sin6_addr.s6_addr[12], text, sizeof text);
    } else {
      inet_ntop(AF_INET6, &a6->sin6_addr, text, sizeof text);
    }
  } else {
    return "local";
  }
  return text;
}

std::string Head(const HttpReply& reply, const std::string& framing) {
  return "HTTP/1.1 " + std::to_string(reply.status) + " " + Reason(reply.status) +
         "\r\nContent-Type: " + reply.content_type + "\r\n" + framing + "Connection: close\r\n\r\n";
}

class ChunkedStream : public HttpStream {
 public:
  ChunkedStream(const Clock& clock, int fd, bool chunked, std::chrono::milliseconds deadline,
                const std::atomic<bool>& stopping)
      : clock_(clock), fd_(fd), chunked_(chunked), deadline_(deadline), stopping_(stopping) {}
  bool Write(std::string_view data) override {
    if (failed_) return false;
    if (data.empty()) return true;
    std::string out;
    if (chunked_) {
      char size[32];
      snprintf(size, sizeof size, "%zx\r\n", data.size());
      out = size;
      out.append(data);
      out += "\r\n";
      data = out;
    }
    if (!SendAll(clock_, fd_, data, clock_.Now() + deadline_)) failed_ = true;
    return !failed_;
  }
  void End() {
    if (chunked_ && !failed_) SendAll(clock_, fd_, "0\r\n\r\n", clock_.Now() + deadline_);
  }
  int client_fd() const override { return fd_; }
  bool stopping() const override { return stopping_.load(); }

 private:
  const Clock& clock_;
  int fd_;
  bool chunked_;
  std::chrono::milliseconds deadline_;
  const std::atomic<bool>& stopping_;
  bool failed_ = false;
};

}  // namespace

HttpServer::HttpServer(EventLoop& loop, HttpServerOptions options)
    : loop_(loop), clock_(loop.clock()), options_(options) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Get(const std::string& path, Handler handler) {
  handlers_[path] = std::move(handler);
}

void HttpServer::GetUrgent(const std::string& path, Handler handler) {
  handlers_[path] = std::move(handler);
  urgent_paths_.insert(path);
}

void HttpServer::GetPrefix(const std::string& prefix, RequestHandler handler) {
  prefix_handlers_[prefix] = std::move(handler);
}

size_t HttpServer::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_.size() + urgent_jobs_.size();
}

size_t HttpServer::active_streams() const {
  std::lock_guard<std::mutex> lock(streams_mu_);
  size_t n = 0;
  for (const auto& s : streams_) n += s.done->load() ? 0 : 1;
  return n;
}

void HttpServer::ReapStreams(bool all) {
  std::vector<StreamThread> ended;
  {
    std::lock_guard<std::mutex> lock(streams_mu_);
    for (auto it = streams_.begin(); it != streams_.end();) {
      if (all || it->done->load()) {
        ended.push_back(std::move(*it));
        it = streams_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& s : ended) s.thread.join();
}

bool HttpServer::StartStream(int fd, bool http10, bool head, HttpReply reply) {
  ReapStreams(false);
  std::lock_guard<std::mutex> lock(streams_mu_);
  if (streams_.size() >= options_.max_streams || stopping_) return false;
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread t([this, fd, http10, head, done, reply = std::move(reply)] {
    const bool chunked = !http10;
    std::string head_text = Head(reply, chunked ? "Transfer-Encoding: chunked\r\n" : "");
    if (SendAll(clock_, fd, head_text, clock_.Now() + options_.write_deadline) && !head) {
      ChunkedStream stream(clock_, fd, chunked, options_.write_deadline, stopping_);
      // The head is sent: a stream that throws is cut short (the client sees no last chunk).
      try {
        reply.stream(stream);
        stream.End();
      } catch (const std::exception& e) {
        ++handler_errors_;
        GetLogger("http")->error("a streamed reply failed: {}", ValidUtf8(e.what()));
      }
    }
    done->store(true);  // before the close the client sees: the slot is free by then
    shutdown(fd, SHUT_WR);
    CloseConn(fd);
  });
  streams_.push_back({std::move(t), std::move(done)});
  return true;
}

Result<int> HttpServer::Listen(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
      rc != 0 || res == nullptr) {
    return InvalidArgument("cannot resolve '" + host + "': " + gai_strerror(rc));
  }
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(res);
    return ErrnoStatus("socket", errno);
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 128) != 0) {
    int err = errno;
    freeaddrinfo(res);
    close(fd);
    return ErrnoStatus("bind " + host + ":" + service, err);
  }
  freeaddrinfo(res);
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int bound = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                         : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  listen_fd_ = fd;
  listening_ = loop_.AddFd(listen_fd_, [this] { OnAccept(); });
  for (int i = 0; i < std::max(1, options_.workers); ++i) {
    workers_.emplace_back([this] { WorkerLoop(false); });
  }
  if (!urgent_paths_.empty()) workers_.emplace_back([this] { WorkerLoop(true); });
  return bound;
}

void HttpServer::Stop() {
  if (stopping_.exchange(true)) return;
  listening_.Reset();
  while (!conns_.empty()) DropConn(conns_.begin()->first, true);
  {
    std::lock_guard<std::mutex> lock(mu_);  // no worker is between its check and its wait
  }
  cv_.notify_all();
  urgent_cv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
  ReapStreams(true);
  for (auto* queue : {&jobs_, &urgent_jobs_}) {
    for (auto& job : *queue) CloseConn(job.fd);
    queue->clear();
  }
  if (listen_fd_ >= 0) close(listen_fd_);
  listen_fd_ = -1;
}

void HttpServer::CloseConn(int fd) {
  {
    std::lock_guard<std::mutex> lock(peers_mu_);
    if (auto it = peer_of_.find(fd); it != peer_of_.end()) {
      auto count = per_peer_.find(it->second);
      if (count != per_peer_.end() && --count->second == 0) per_peer_.erase(count);
      peer_of_.erase(it);
    }
  }
  close(fd);  // after the fd left peer_of_: accept may hand the same number out again
  --open_;
}

// New connections: accept all that wait; one over a cap (all peers', or its peer's) is closed at
// once.
void HttpServer::OnAccept() {
  for (;;) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    int fd =
        accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    const std::string peer = PeerKey(addr);
    bool admitted = open_.load() < options_.max_connections;
    if (admitted) {
      std::lock_guard<std::mutex> lock(peers_mu_);
      size_t& mine = per_peer_[peer];
      admitted = mine < options_.max_connections_per_peer;
      if (admitted) {
        ++mine;
        peer_of_[fd] = peer;
        ++open_;
      } else if (mine == 0) {
        per_peer_.erase(peer);
      }
    }
    if (!admitted) {
      ++refused_;  // before the close, which whoever watches the peer sees at once
      close(fd);
      continue;
    }
    auto conn = std::make_unique<Conn>();
    conn->readable = loop_.AddFd(fd, [this, fd] { OnReadable(fd); });
    conn->deadline = loop_.AddTimer([this, fd] { OnDeadline(fd); });
    conn->deadline.ArmAfter(options_.request_deadline);
    conns_[fd] = std::move(conn);
  }
}

void HttpServer::OnReadable(int fd) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  Conn& c = *it->second;
  char buf[4096];
  ssize_t n = recv(fd, buf, sizeof buf, 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (n <= 0) {  // EOF or error before a complete request
    DropConn(fd, true);
    return;
  }
  c.head.append(buf, static_cast<size_t>(n));
  switch (c.parser.Feed(c.head)) {
    case HeadStatus::kIncomplete:
      return;
    case HeadStatus::kTooLarge:
      DropConn(fd, true);
      return;
    case HeadStatus::kBad:  // an empty method: the worker answers 400
      DropConn(fd, false);
      Enqueue(fd, RequestLine{});
      return;
    case HeadStatus::kComplete: {
      const RequestLine line = c.parser.line();
      DropConn(fd, false);  // `c` is gone
      Enqueue(fd, line);
      return;
    }
  }
}

// A request that did not arrive whole in time.
void HttpServer::OnDeadline(int fd) {
  ++timed_out_;
  DropConn(fd, true);
}

void HttpServer::DropConn(int fd, bool close) {
  conns_.erase(fd);  // its reader and timer leave the loop
  if (close) CloseConn(fd);
}

void HttpServer::Enqueue(int fd, const RequestLine& line) {
  Job job;
  job.fd = fd;
  job.method = line.method;
  job.path = line.path;
  job.query = line.query;
  job.http10 = line.http10;
  job.queued = clock_.Now();
  const bool urgent = urgent_paths_.count(job.path) != 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    (urgent ? urgent_jobs_ : jobs_).push_back(std::move(job));
  }
  (urgent ? urgent_cv_ : cv_).notify_one();
}

void HttpServer::WorkerLoop(bool urgent) {
  std::deque<Job>& queue = urgent ? urgent_jobs_ : jobs_;
  std::condition_variable& cv = urgent ? urgent_cv_ : cv_;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv.wait(lock, [&] { return stopping_ || !queue.empty(); });
    if (stopping_) return;
    Job job = std::move(queue.front());
    queue.pop_front();
    lock.unlock();
    if (clock_.Now() - job.queued > options_.queue_deadline) {
      // Its client has waited long enough: a short answer now, the handler not run.
      ++expired_;
      Reply(job, {503, "text/plain", "busy: the request waited too long in the queue\n", nullptr});
    } else {
      Serve(job);
    }
    lock.lock();
  }
}

HttpReply HttpServer::Dispatch(const Job& job) {
  if (auto h = handlers_.find(job.path); h != handlers_.end()) return h->second();
  // The longest prefix that matches.
  const RequestHandler* handler = nullptr;
  size_t longest = 0;
  for (const auto& [prefix, fn] : prefix_handlers_) {
    if (job.path.rfind(prefix, 0) == 0 && prefix.size() >= longest) {
      handler = &fn;
      longest = prefix.size();
    }
  }
  if (handler == nullptr) return {404, "text/plain", "not found\n", nullptr};
  HttpRequest request{job.method, job.path, ParseQuery(job.query), job.http10};
  return (*handler)(request);
}

void HttpServer::Serve(const Job& job) {
  HttpReply reply;
  const bool head = job.method == "HEAD";
  if (job.method.empty() || job.path.empty() || job.path[0] != '/') {
    reply = {400, "text/plain", "bad request\n", nullptr};
  } else if (job.method != "GET" && !head) {
    reply = {405, "text/plain", "method not allowed\n", nullptr};
  } else {
    // A handler that throws (on a pod's bytes, say) answers its own request with a 500; the
    // server and the process go on.
    try {
      reply = Dispatch(job);
    } catch (const std::exception& e) {
      ++handler_errors_;
      GetLogger("http")->error("GET {}: the handler failed: {}", ValidUtf8(job.path),
                               ValidUtf8(e.what()));
      reply = {500, "text/plain", "internal error: the handler failed (see nodelet's log)\n",
               nullptr};
    }
  }
  if (reply.stream) {
    if (StartStream(job.fd, job.http10, head, std::move(reply))) return;
    reply = {503, "text/plain", "too many streams\n", nullptr};
  }
  Reply(job, reply);
}

void HttpServer::Reply(const Job& job, const HttpReply& reply) {
  std::string out = Head(reply, "Content-Length: " + std::to_string(reply.body.size()) + "\r\n");
  if (job.method != "HEAD") out += reply.body;
  SendAll(clock_, job.fd, out, clock_.Now() + options_.write_deadline);
  shutdown(job.fd, SHUT_WR);
  CloseConn(job.fd);
}

}  // namespace nodelet::supervisor
