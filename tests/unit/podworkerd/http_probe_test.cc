// DoHttpProbe against hostile servers on loopback: a trickling server is cut at the probe's
// deadline, an endless body is read no further than 10 KiB, redirects follow the kubelet's rules,
// and the status code decides.
#include "svc-podworkerd/http_probe.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
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

namespace nodelet::podworkerd {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A loopback server that runs `handler(fd, request)` for each connection, one thread each.
// `request` is what arrived up to the end of the headers.
class ScriptedServer {
 public:
  using Handler = std::function<void(int fd, const std::string& request)>;
  explicit ScriptedServer(Handler handler) : handler_(std::move(handler)) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    socklen_t len = sizeof addr;
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    listen(listen_fd_, 16);
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~ScriptedServer() {
    stop_ = true;
    shutdown(listen_fd_, SHUT_RDWR);
    acceptor_.join();
    for (auto& t : workers_) t.join();
    close(listen_fd_);
  }
  int port() const { return port_; }
  bool stopping() const { return stop_; }
  std::vector<std::string> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  void Accept() {
    for (;;) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) {
        if (stop_) return;
        continue;
      }
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;
      workers_.emplace_back([this, fd] {
        std::string req;
        char buf[4096];
        while (req.find("\r\n\r\n") == std::string::npos) {
          pollfd p{fd, POLLIN, 0};
          if (poll(&p, 1, 2000) <= 0) break;
          ssize_t n = recv(fd, buf, sizeof buf, 0);
          if (n <= 0) break;
          req.append(buf, static_cast<size_t>(n));
        }
        {
          std::lock_guard<std::mutex> lock(mu_);
          requests_.push_back(req);
        }
        handler_(fd, req);
        close(fd);
      });
    }
  }

  Handler handler_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::vector<std::string> requests_;
};

bool SendAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

HttpProbeRequest Request(int port, const std::string& path = "/", std::chrono::milliseconds timeout = 2s) {
  HttpProbeRequest r;
  r.host = "127.0.0.1";
  r.port = port;
  r.path = path;
  r.timeout = timeout;
  return r;
}

TEST(HttpProbeTest, StatusCodeDecides) {
  ScriptedServer server([](int fd, const std::string& req) {
    const bool bad = req.rfind("GET /bad ", 0) == 0;
    SendAll(fd, bad ? "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 3\r\n\r\nbad"
                    : "HTTP/1.1 204 No Content\r\n\r\n");
  });
  auto ok = DoHttpProbe(Request(server.port(), "/healthz"));
  EXPECT_TRUE(ok.success) << ok.message;
  EXPECT_EQ(ok.status, 204);
  auto bad = DoHttpProbe(Request(server.port(), "/bad"));
  EXPECT_FALSE(bad.success);
  EXPECT_EQ(bad.status, 500);
  EXPECT_EQ(bad.message, "HTTP probe failed with statuscode: 500");
}

TEST(HttpProbeTest, RequestCarriesTheProbesHeadersAndHost) {
  ScriptedServer server([](int fd, const std::string&) { SendAll(fd, "HTTP/1.1 200 OK\r\n\r\n"); });
  auto req = Request(server.port(), "/p?q=1");
  req.headers = {{"Host", "app.example"}, {"X-Probe", "yes"}};
  EXPECT_TRUE(DoHttpProbe(req).success);
  auto got = server.requests();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].rfind("GET /p?q=1 HTTP/1.1\r\n", 0), 0u) << got[0];
  EXPECT_NE(got[0].find("\r\nHost: app.example\r\n"), std::string::npos) << got[0];
  EXPECT_NE(got[0].find("\r\nX-Probe: yes\r\n"), std::string::npos) << got[0];
  EXPECT_NE(got[0].find("\r\nUser-Agent: kube-probe/"), std::string::npos) << got[0];
  EXPECT_NE(got[0].find("\r\nConnection: close\r\n"), std::string::npos) << got[0];
  // A header that would split the request is left out; nothing is injected.
  req.headers = {{"X-Evil", "a\r\nInjected: 1"}, {"Bad\nName", "x"}};
  EXPECT_TRUE(DoHttpProbe(req).success);
  got = server.requests();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].find("Injected"), std::string::npos) << got[1];
  EXPECT_EQ(got[1].find("X-Evil"), std::string::npos) << got[1];
  EXPECT_EQ(got[1].find("Bad"), std::string::npos) << got[1];
}

// A server that sends one byte every 100 ms: per-read timeouts never fire, the whole-probe
// deadline does, in the headers and in the body alike.
TEST(HttpProbeTest, TricklingServerIsCutAtTheDeadline) {
  ScriptedServer server([&](int fd, const std::string& req) {
    const bool in_body = req.rfind("GET /body ", 0) == 0;
    if (in_body && !SendAll(fd, "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")) return;
    while (!server.stopping() && SendAll(fd, "x")) std::this_thread::sleep_for(100ms);
  });
  for (const char* path : {"/headers", "/body"}) {
    const auto start = Clock::now();
    auto r = DoHttpProbe(Request(server.port(), path, 700ms));
    const auto took = Clock::now() - start;
    EXPECT_FALSE(r.success) << path;
    EXPECT_NE(r.message.find("timeout"), std::string::npos) << path << ": " << r.message;
    EXPECT_GE(took, 650ms) << path;
    EXPECT_LT(took, 1500ms) << path << " must end at its 700 ms deadline";
  }
}

// A server that streams without end: the probe reads at most 10 KiB of body, and decides by the
// status code without waiting for the rest.
TEST(HttpProbeTest, EndlessBodyIsReadNoFurtherThanTenKiB) {
  std::atomic<size_t> sent{0};
  ScriptedServer server([&](int fd, const std::string&) {
    if (!SendAll(fd, "HTTP/1.1 200 OK\r\nContent-Length: 268435456\r\n\r\n")) return;
    const std::string chunk(64 * 1024, 'y');
    while (!server.stopping() && sent < (256u << 20) && SendAll(fd, chunk)) sent += chunk.size();
  });
  const auto start = Clock::now();
  auto r = DoHttpProbe(Request(server.port(), "/", 5s));
  EXPECT_TRUE(r.success) << r.message;
  EXPECT_LE(r.body_bytes, kMaxProbeBodyBytes);
  EXPECT_LT(Clock::now() - start, 2s);
  // Chunked, endless too.
  ScriptedServer chunked([&](int fd, const std::string&) {
    if (!SendAll(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")) return;
    const std::string chunk = "1000\r\n" + std::string(0x1000, 'z') + "\r\n";
    for (int i = 0; i < 4096 && !chunked.stopping() && SendAll(fd, chunk); ++i) {
    }
  });
  r = DoHttpProbe(Request(chunked.port(), "/", 5s));
  EXPECT_TRUE(r.success) << r.message;
  EXPECT_LE(r.body_bytes, kMaxProbeBodyBytes);
}

TEST(HttpProbeTest, RedirectsFollowTheKubeletsRules) {
  ScriptedServer server([&](int fd, const std::string& req) {
    if (req.rfind("GET /start ", 0) == 0) {
      SendAll(fd, "HTTP/1.1 302 Found\r\nLocation: /next\r\nContent-Length: 0\r\n\r\n");
    } else if (req.rfind("GET /next ", 0) == 0) {
      SendAll(fd, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    } else if (req.rfind("GET /away ", 0) == 0) {
      SendAll(fd, "HTTP/1.1 301 Moved\r\nLocation: http://other.invalid:8080/x\r\n\r\n");
    } else if (req.rfind("GET /loop ", 0) == 0) {
      SendAll(fd, "HTTP/1.1 302 Found\r\nLocation: /loop\r\n\r\n");
    }
  });
  auto same = DoHttpProbe(Request(server.port(), "/start"));
  EXPECT_TRUE(same.success) << same.message;
  EXPECT_EQ(same.redirects, 1);
  EXPECT_EQ(same.status, 200);
  // Another host: not followed; a success with a warning, as the kubelet does.
  auto away = DoHttpProbe(Request(server.port(), "/away"));
  EXPECT_TRUE(away.success);
  EXPECT_TRUE(away.warning);
  EXPECT_EQ(away.message.rfind("Probe terminated redirects", 0), 0u) << away.message;
  // A loop ends as Go's client ends it (the kubelet's): the 10th redirect is not followed.
  auto loop = DoHttpProbe(Request(server.port(), "/loop"));
  EXPECT_FALSE(loop.success);
  EXPECT_EQ(loop.redirects, kMaxProbeRedirects - 1);
  EXPECT_EQ(loop.message, "stopped after 10 redirects");
}

TEST(HttpProbeTest, NothingListeningFailsAtOnce) {
  int port = 0;
  {
    ScriptedServer gone([](int, const std::string&) {});
    port = gone.port();
  }
  const auto start = Clock::now();
  auto r = DoHttpProbe(Request(port));
  EXPECT_FALSE(r.success);
  EXPECT_NE(r.message.find("Connection refused"), std::string::npos) << r.message;
  EXPECT_LT(Clock::now() - start, 1s);
}

}  // namespace
}  // namespace nodelet::podworkerd
