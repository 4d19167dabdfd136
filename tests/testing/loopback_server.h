// LoopbackServer: a TCP server on 127.0.0.1 (a free port) for tests that need a hostile or
// scripted HTTP peer. Each connection gets a thread that reads the request head (up to the
// blank line, 64 KiB at most) and calls `handler(fd, request)`, which writes what it likes and
// returns; the connection is then closed. Handlers that stream or hang should watch
// stopping() (or use Pause) so that the destructor, which joins every thread, ends promptly.
// Header-only.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace nodelet::testing {

// Writes all of `s` (MSG_NOSIGNAL); false when the peer went away.
inline bool SendAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// The path of an HTTP request head ("GET /x HTTP/1.1..." -> "/x"), or "".
inline std::string RequestPath(const std::string& request) {
  auto sp1 = request.find(' ');
  auto sp2 = sp1 == std::string::npos ? sp1 : request.find(' ', sp1 + 1);
  return sp2 == std::string::npos ? "" : request.substr(sp1 + 1, sp2 - sp1 - 1);
}

class LoopbackServer {
 public:
  using Handler = std::function<void(int fd, const std::string& request)>;
  explicit LoopbackServer(Handler handler) : handler_(std::move(handler)) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    listen(fd_, 64);
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~LoopbackServer() { Stop(); }
  LoopbackServer(const LoopbackServer&) = delete;
  LoopbackServer& operator=(const LoopbackServer&) = delete;

  void Stop() {
    if (stop_.exchange(true)) return;
    acceptor_.join();
    std::vector<std::thread> workers;
    {
      std::lock_guard<std::mutex> lock(mu_);
      workers.swap(workers_);
    }
    for (auto& t : workers) t.join();
    close(fd_);
  }
  int port() const { return port_; }
  bool stopping() const { return stop_; }
  // Every request head received so far, in order of arrival.
  std::vector<std::string> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  // Waits up to `d`, or until the server stops.
  void Pause(std::chrono::milliseconds d) const {
    const auto end = std::chrono::steady_clock::now() + d;
    while (!stop_ && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

 private:
  void Accept() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      std::lock_guard<std::mutex> lock(mu_);
      workers_.emplace_back([this, c] {
        std::string req;
        char buf[4096];
        while (!stop_ && req.find("\r\n\r\n") == std::string::npos && req.size() < 65536) {
          pollfd p{c, POLLIN, 0};
          if (poll(&p, 1, 100) <= 0) continue;
          ssize_t n = recv(c, buf, sizeof buf, 0);
          if (n <= 0) break;
          req.append(buf, static_cast<size_t>(n));
        }
        {
          std::lock_guard<std::mutex> lock(mu_);
          requests_.push_back(req);
        }
        if (!req.empty()) handler_(c, req);
        close(c);
      });
    }
  }

  Handler handler_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> workers_;
  std::vector<std::string> requests_;
};

}  // namespace nodelet::testing
