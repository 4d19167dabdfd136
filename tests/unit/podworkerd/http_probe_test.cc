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

#include "tests/testing/loopback_server.h"

namespace nodelet::podworkerd {
namespace {

using namespace std::chrono_literals;
using Steady = std::chrono::steady_clock;

using testing::LoopbackServer;
using testing::SendAll;

HttpProbeRequest Request(int port, const std::string& path = "/",
                         std::chrono::milliseconds timeout = 2s) {
  HttpProbeRequest r;
  r.host = "127.0.0.1";
  r.port = port;
  r.path = path;
  r.timeout = timeout;
  return r;
}

TEST(HttpProbeTest, StatusCodeDecides) {
  LoopbackServer server([](int fd, const std::string& req) {
    const bool bad = req.rfind("GET /bad ", 0) == 0;
    SendAll(fd, bad ? "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 3\r\n\r\nbad"
                    : "HTTP/1.1 204 No Content\r\n\r\n");
  });
  auto ok = DoHttpProbe(RealClock::Get(), Request(server.port(), "/healthz"));
  EXPECT_TRUE(ok.success) << ok.message;
  EXPECT_EQ(ok.status, 204);
  auto bad = DoHttpProbe(RealClock::Get(), Request(server.port(), "/bad"));
  EXPECT_FALSE(bad.success);
  EXPECT_EQ(bad.status, 500);
  EXPECT_EQ(bad.message, "HTTP probe failed with statuscode: 500");
}

TEST(HttpProbeTest, RequestCarriesTheProbesHeadersAndHost) {
  LoopbackServer server([](int fd, const std::string&) { SendAll(fd, "HTTP/1.1 200 OK\r\n\r\n"); });
  auto req = Request(server.port(), "/p?q=1");
  req.headers = {{"Host", "app.example"}, {"X-Probe", "yes"}};
  EXPECT_TRUE(DoHttpProbe(RealClock::Get(), req).success);
  auto got = server.requests();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].rfind("GET /p?q=1 HTTP/1.1\r\n", 0), 0u) << got[0];
  EXPECT_NE(got[0].find("\r\nHost: app.example\r\n"), std::string::npos) << got[0];
  EXPECT_NE(got[0].find("\r\nX-Probe: yes\r\n"), std::string::npos) << got[0];
  EXPECT_NE(got[0].find("\r\nUser-Agent: kube-probe/"), std::string::npos) << got[0];
  EXPECT_NE(got[0].find("\r\nConnection: close\r\n"), std::string::npos) << got[0];
  // A header that would split the request is left out; nothing is injected.
  req.headers = {{"X-Evil", "a\r\nInjected: 1"}, {"Bad\nName", "x"}};
  EXPECT_TRUE(DoHttpProbe(RealClock::Get(), req).success);
  got = server.requests();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].find("Injected"), std::string::npos) << got[1];
  EXPECT_EQ(got[1].find("X-Evil"), std::string::npos) << got[1];
  EXPECT_EQ(got[1].find("Bad"), std::string::npos) << got[1];
}

// A server that sends one byte every 100 ms: per-read timeouts never fire, the whole-probe
// deadline does, in the headers and in the body alike.
TEST(HttpProbeTest, TricklingServerIsCutAtTheDeadline) {
  LoopbackServer server([&](int fd, const std::string& req) {
    const bool in_body = req.rfind("GET /body ", 0) == 0;
    if (in_body && !SendAll(fd, "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")) return;
    while (!server.stopping() && SendAll(fd, "x")) std::this_thread::sleep_for(100ms);
  });
  for (const char* path : {"/headers", "/body"}) {
    const auto start = Steady::now();
    auto r = DoHttpProbe(RealClock::Get(), Request(server.port(), path, 700ms));
    const auto took = Steady::now() - start;
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
  LoopbackServer server([&](int fd, const std::string&) {
    if (!SendAll(fd, "HTTP/1.1 200 OK\r\nContent-Length: 268435456\r\n\r\n")) return;
    const std::string chunk(64 * 1024, 'y');
    while (!server.stopping() && sent < (256u << 20) && SendAll(fd, chunk)) sent += chunk.size();
  });
  const auto start = Steady::now();
  auto r = DoHttpProbe(RealClock::Get(), Request(server.port(), "/", 5s));
  EXPECT_TRUE(r.success) << r.message;
  EXPECT_LE(r.body_bytes, kMaxProbeBodyBytes);
  EXPECT_LT(Steady::now() - start, 2s);
  // Chunked, endless too.
  LoopbackServer chunked([&](int fd, const std::string&) {
    if (!SendAll(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")) return;
    const std::string chunk = "1000\r\n" + std::string(0x1000, 'z') + "\r\n";
    for (int i = 0; i < 4096 && !chunked.stopping() && SendAll(fd, chunk); ++i) {
    }
  });
  r = DoHttpProbe(RealClock::Get(), Request(chunked.port(), "/", 5s));
  EXPECT_TRUE(r.success) << r.message;
  EXPECT_LE(r.body_bytes, kMaxProbeBodyBytes);
}

TEST(HttpProbeTest, RedirectsFollowTheKubeletsRules) {
  LoopbackServer server([&](int fd, const std::string& req) {
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
  auto same = DoHttpProbe(RealClock::Get(), Request(server.port(), "/start"));
  EXPECT_TRUE(same.success) << same.message;
  EXPECT_EQ(same.redirects, 1);
  EXPECT_EQ(same.status, 200);
  // Another host: not followed; a success with a warning, as the kubelet does.
  auto away = DoHttpProbe(RealClock::Get(), Request(server.port(), "/away"));
  EXPECT_TRUE(away.success);
  EXPECT_TRUE(away.warning);
  EXPECT_EQ(away.message.rfind("Probe terminated redirects", 0), 0u) << away.message;
  // A loop ends as Go's client ends it (the kubelet's): the 10th redirect is not followed.
  auto loop = DoHttpProbe(RealClock::Get(), Request(server.port(), "/loop"));
  EXPECT_FALSE(loop.success);
  EXPECT_EQ(loop.redirects, kMaxProbeRedirects - 1);
  EXPECT_EQ(loop.message, "stopped after 10 redirects");
}

TEST(HttpProbeTest, NothingListeningFailsAtOnce) {
  int port = 0;
  {
    LoopbackServer gone([](int, const std::string&) {});
    port = gone.port();
  }
  const auto start = Steady::now();
  auto r = DoHttpProbe(RealClock::Get(), Request(port));
  EXPECT_FALSE(r.success);
  EXPECT_NE(r.message.find("Connection refused"), std::string::npos) << r.message;
  EXPECT_LT(Steady::now() - start, 1s);
}

}  // namespace
}  // namespace nodelet::podworkerd
