// TcpProxy: forwards 127.0.0.1:port() to a TCP target on loopback, and can cut a client off
// (Cut: every connection closed, new ones refused at once) and let it back (Restore), to take
// one node away from a service the others still reach (fleet-e2e: a node cut off from etcd).
// A thread accepts; each connection has a thread that copies both ways with poll(2), waking
// every 100 ms to see a Cut or the destructor. Header-only.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <list>
#include <mutex>
#include <string>
#include <thread>

namespace nodelet::testing {

class TcpProxy {
 public:
  // Forwards to 127.0.0.1:`target_port`.
  explicit TcpProxy(int target_port) : target_port_(target_port) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        listen(listen_fd_, 64) != 0) {
      close(listen_fd_);
      listen_fd_ = -1;
      return;
    }
    socklen_t len = sizeof a;
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~TcpProxy() {
    stopping_ = true;
    if (acceptor_.joinable()) acceptor_.join();
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& t : conns_) t.join();
    if (listen_fd_ >= 0) close(listen_fd_);
  }
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  bool ok() const { return listen_fd_ >= 0; }
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // Closes every connection and refuses new ones until Restore.
  void Cut() { ++cut_generation_, cut_ = true; }
  void Restore() { cut_ = false; }

 private:
  void Accept() {
    while (!stopping_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      if (cut_) {
        close(client);  // refused: the client sees the connection end at once
        continue;
      }
      int upstream = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(static_cast<uint16_t>(target_port_));
      if (connect(upstream, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        close(upstream);
        close(client);
        continue;
      }
      std::lock_guard<std::mutex> lock(mu_);
      const int generation = cut_generation_;
      conns_.emplace_back(
          [this, client, upstream, generation] { Pipe(client, upstream, generation); });
    }
  }
  void Pipe(int a, int b, int generation) {
    char buf[16384];
    while (!stopping_ && cut_generation_ == generation) {
      pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
      int n = poll(p, 2, 100);
      if (n <= 0) continue;
      bool done = false;
      for (int i = 0; i < 2 && !done; ++i) {
        if ((p[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        ssize_t got = read(p[i].fd, buf, sizeof buf);
        // Nothing crosses once Cut() has returned: what was read after it is dropped.
        if (got <= 0 || cut_generation_ != generation) {
          done = true;
          break;
        }
        const int to = i == 0 ? b : a;
        ssize_t off = 0;
        while (off < got) {
          ssize_t w = send(to, buf + off, static_cast<size_t>(got - off), MSG_NOSIGNAL);
          if (w <= 0) {
            done = true;
            break;
          }
          off += w;
        }
      }
      if (done) break;
    }
    close(a);
    close(b);
  }

  const int target_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false}, cut_{false};
  std::atomic<int> cut_generation_{0};
  std::mutex mu_;
  std::list<std::thread> conns_;
  std::thread acceptor_;
};

}  // namespace nodelet::testing
