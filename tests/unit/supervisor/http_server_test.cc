// HttpServer: no client can take the endpoint from the others. Idle connections cost an fd and
// are closed at the request deadline, connections over the cap are closed at once, and a slow
// handler holds one worker, not the server. The server's loop runs on a thread of the test
// (TestServer), or is turned by the test on a fake clock.
#include "supervisor/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "lib/service/event_loop.h"
#include "tests/fakes/fake_clock.h"
#include "tests/testing/turn_loop.h"

namespace nodelet::supervisor {
namespace {

using namespace std::chrono_literals;
using Steady = std::chrono::steady_clock;

// A server on a loop of its own, which runs on a thread of the test from Listen on. Its
// destructor stops the loop first, so the server stops where no thread runs the loop.
struct TestServer {
  explicit TestServer(const Clock& clock, HttpServerOptions options = {})
      : loop(clock), server(loop, options) {}
  ~TestServer() { StopLoop(); }
  Result<int> Listen() {
    auto port = server.Listen("127.0.0.1", 0);
    if (port.ok()) thread = std::thread([this] { (void)loop.Run(); });
    return port;
  }
  // Stops the server on the loop's thread; returns when it has stopped.
  void StopServer() {
    std::promise<void> stopped;
    loop.Post([&] {
      server.Stop();
      stopped.set_value();
    });
    stopped.get_future().wait();
  }
  void StopLoop() {
    if (!thread.joinable()) return;
    loop.Post([this] { loop.Stop(); });
    thread.join();
  }
  EventLoop loop;
  HttpServer server;
  std::thread thread;
};

// A connection to 127.0.0.1:`port` from `source` (another loopback address is another peer).
int Connect(int port, const char* source = nullptr) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (source != nullptr) {
    sockaddr_in from{};
    from.sin_family = AF_INET;
    inet_pton(AF_INET, source, &from.sin_addr);
    if (bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0) {
      close(fd);
      return -1;
    }
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Sends `request` and reads the whole answer (the server closes every connection), up to
// `timeout`; "" when nothing came.
std::string Ask(int port, const std::string& request, std::chrono::milliseconds timeout = 5s,
                const char* source = nullptr) {
  int fd = Connect(port, source);
  if (fd < 0) return "";
  send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[4096];
  const auto end = Steady::now() + timeout;
  while (Steady::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

// True when the peer closed `fd` within `timeout` (recv returns 0 or an error).
bool ClosedByPeer(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
  char c;
  return recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

TEST(HttpServerTest, HealthzAnswersBesideAHundredIdleConnections) {
  TestServer test_server(RealClock::Get());
  HttpServer& server = test_server.server;
  server.Get("/healthz", [] { return HttpReply{200, "text/plain", "ok\n"}; });
  auto port = test_server.Listen();
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  std::vector<int> idle;
  for (int i = 0; i < 100; ++i) {
    int fd = Connect(*port);
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  send(idle[0], "GET /hea", 8, MSG_NOSIGNAL);  // one of them half a request
  const auto start = Steady::now();
  const std::string reply = Ask(*port, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  const auto took = Steady::now() - start;
  EXPECT_EQ(reply.rfind("HTTP/1.1 200 ", 0), 0u) << reply;
  EXPECT_NE(reply.find("\r\n\r\nok\n"), std::string::npos) << reply;
  std::cout << "healthz beside 100 idle connections: "
            << std::chrono::duration_cast<std::chrono::microseconds>(took).count() << " us\n";
  for (int fd : idle) close(fd);
}

TEST(HttpServerTest, IdleConnectionsAreClosedAtTheRequestDeadline) {
  HttpServerOptions opts;
  opts.request_deadline = 300ms;
  TestServer test_server(RealClock::Get(), opts);
  HttpServer& server = test_server.server;
  server.Get("/healthz", [] { return HttpReply{}; });
  auto port = test_server.Listen();
  ASSERT_TRUE(port.ok());
  int silent = Connect(*port);
  int trickle = Connect(*port);
  ASSERT_GE(silent, 0);
  ASSERT_GE(trickle, 0);
  const auto start = Steady::now();
  // A byte every 50 ms never completes the head in time.
  bool closed = false;
  for (int i = 0; i < 40 && !closed; ++i) {
    send(trickle, "G", 1, MSG_NOSIGNAL);
    closed = ClosedByPeer(trickle, 50ms);
  }
  EXPECT_TRUE(closed) << "a trickling request must be cut at its deadline";
  EXPECT_TRUE(ClosedByPeer(silent, 2s));
  EXPECT_LT(Steady::now() - start, 2s);
  EXPECT_GE(server.timed_out(), 2u);
  close(silent);
  close(trickle);
}

TEST(HttpServerTest, ConnectionsOverTheCapAreClosedAtOnce) {
  HttpServerOptions opts;
  opts.max_connections = 4;
  TestServer test_server(RealClock::Get(), opts);
  HttpServer& server = test_server.server;
  server.Get("/healthz", [] { return HttpReply{}; });
  auto port = test_server.Listen();
  ASSERT_TRUE(port.ok());
  std::vector<int> held;
  for (int i = 0; i < 4; ++i) held.push_back(Connect(*port));
  int extra = Connect(*port);
  ASSERT_GE(extra, 0);
  EXPECT_TRUE(ClosedByPeer(extra, 2s));
  EXPECT_GE(server.refused(), 1u);
  close(extra);
  // Freed slots serve again.
  for (int fd : held) close(fd);
  std::string reply;
  for (int i = 0; i < 50 && reply.empty(); ++i) {
    reply = Ask(*port, "GET /healthz HTTP/1.1\r\n\r\n", 500ms);
  }
  EXPECT_EQ(reply.rfind("HTTP/1.1 200 ", 0), 0u) << reply;
}

// One peer address holds at most max_connections_per_peer connections: its next one is closed
// at once, while another peer (127.0.0.2) is still served.
TEST(HttpServerTest, APeerOverItsCapIsClosedAndOtherPeersAreServed) {
  HttpServerOptions opts;
  opts.max_connections_per_peer = 3;
  TestServer test_server(RealClock::Get(), opts);
  HttpServer& server = test_server.server;
  server.Get("/healthz", [] { return HttpReply{200, "text/plain", "ok\n"}; });
  auto port = test_server.Listen();
  ASSERT_TRUE(port.ok());
  std::vector<int> held;
  for (int i = 0; i < 3; ++i) held.push_back(Connect(*port));
  int extra = Connect(*port);
  ASSERT_GE(extra, 0);
  EXPECT_TRUE(ClosedByPeer(extra, 2s)) << "the 4th connection of 127.0.0.1";
  EXPECT_EQ(server.refused(), 1u);
  close(extra);
  const std::string other = Ask(*port, "GET /healthz HTTP/1.1\r\n\r\n", 2s, "127.0.0.2");
  EXPECT_NE(other.find("ok\n"), std::string::npos) << other;
  for (int fd : held) EXPECT_FALSE(ClosedByPeer(fd, 0ms)) << "the held ones stay open";
  // A slot freed is the peer's again.
  close(held.back());
  held.pop_back();
  std::string again;
  for (int i = 0; i < 50 && again.empty(); ++i) {
    again = Ask(*port, "GET /healthz HTTP/1.1\r\n\r\n", 500ms);
  }
  EXPECT_NE(again.find("ok\n"), std::string::npos) << again;
  for (int fd : held) close(fd);
}

// A request that waited in the queue past queue_deadline is answered 503 without running its
// handler; /healthz (GetUrgent) is answered on its own lane while the one worker is held.
TEST(HttpServerTest, AStaleQueuedRequestIs503AndTheUrgentLaneIsNotQueued) {
  testing::FakeClock clock;
  HttpServerOptions opts;
  opts.workers = 1;
  opts.queue_deadline = 1s;
  TestServer test_server(clock, opts);
  HttpServer& server = test_server.server;
  std::atomic<bool> release{false}, holding{false};
  std::atomic<int> ran{0};
  server.Get("/slow", [&] {
    holding = true;
    const auto end = Steady::now() + 5s;
    while (!release && Steady::now() < end) std::this_thread::sleep_for(10ms);
    return HttpReply{200, "text/plain", "slow\n"};
  });
  server.Get("/pods", [&] {
    ++ran;
    return HttpReply{200, "text/plain", "pods\n"};
  });
  server.GetUrgent("/healthz", [] { return HttpReply{200, "text/plain", "ok\n"}; });
  auto port = test_server.Listen();
  ASSERT_TRUE(port.ok());
  std::thread slow([&] { Ask(*port, "GET /slow HTTP/1.1\r\n\r\n", 10s); });
  // /pods is sent only once the one worker holds /slow, so it cannot be served first.
  const auto held = Steady::now() + 5s;
  while (!holding && Steady::now() < held) std::this_thread::sleep_for(10ms);
  if (!holding) {
    release = true;
    slow.join();
    FAIL() << "the worker never started /slow";
  }
  std::string stale;
  std::thread queued([&] { stale = Ask(*port, "GET /pods HTTP/1.1\r\n\r\n", 10s); });
  // The worker holds /slow and /pods waits behind it.
  const auto end = Steady::now() + 5s;
  while (server.queued() == 0 && Steady::now() < end) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(server.queued(), 1u);
  const std::string fast = Ask(*port, "GET /healthz HTTP/1.1\r\n\r\n", 2s);
  EXPECT_NE(fast.find("ok\n"), std::string::npos) << "not behind the held worker: " << fast;
  clock.Advance(1s + 1ms);
  release = true;
  slow.join();
  queued.join();
  EXPECT_EQ(stale.rfind("HTTP/1.1 503 ", 0), 0u) << stale;
  EXPECT_EQ(ran.load(), 0) << "its handler was not run";
  EXPECT_EQ(server.expired(), 1u);
  // A request that did not wait long is served.
  EXPECT_NE(Ask(*port, "GET /pods HTTP/1.1\r\n\r\n").find("pods\n"), std::string::npos);
}

TEST(HttpServerTest, SlowHandlerHoldsOneWorkerAndOthersAnswer) {
  HttpServerOptions opts;
  opts.workers = 2;
  TestServer test_server(RealClock::Get(), opts);
  HttpServer& server = test_server.server;
  std::atomic<bool> release{false};
  server.Get("/slow", [&] {
    const auto end = Steady::now() + 5s;
    while (!release && Steady::now() < end) std::this_thread::sleep_for(10ms);
    return HttpReply{200, "text/plain", "slow\n"};
  });
  server.Get("/healthz", [] { return HttpReply{200, "text/plain", "ok\n"}; });
  auto port = test_server.Listen();
  ASSERT_TRUE(port.ok());
  std::thread slow([&] { Ask(*port, "GET /slow HTTP/1.1\r\n\r\n", 10s); });
  const std::string fast = Ask(*port, "GET /healthz HTTP/1.1\r\n\r\n", 2s);
  EXPECT_NE(fast.find("ok\n"), std::string::npos) << fast;
  release = true;
  slow.join();
  // Methods and paths it does not serve.
  EXPECT_EQ(Ask(*port, "POST /healthz HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405 ", 0), 0u);
  EXPECT_EQ(Ask(*port, "GET /nosuch HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404 ", 0), 0u);
  const std::string head = Ask(*port, "HEAD /healthz HTTP/1.1\r\n\r\n");
  EXPECT_EQ(head.rfind("HTTP/1.1 200 ", 0), 0u) << head;
  EXPECT_EQ(head.find("ok\n"), std::string::npos) << "HEAD has no body";
}

TEST(HttpServerTest, PrefixRoutesGetThePathAndTheDecodedQuery) {
  TestServer test_server(RealClock::Get());
  HttpServer& server = test_server.server;
  server.Get("/p/exact", [] { return HttpReply{200, "text/plain", "exact\n", nullptr}; });
  server.GetPrefix("/p/", [](const HttpRequest& r) {
    std::string body = r.path;
    for (const auto& [k, v] : r.query) body += " " + k + "=" + v;
    return HttpReply{200, "text/plain", body + (r.http10 ? " 1.0" : "") + "\n", nullptr};
  });
  auto port = test_server.Listen();
  ASSERT_TRUE(port.ok());
  std::string a = Ask(*port, "GET /p/x/y?follow=true&tailLines=5&n=a%20b+c&flag HTTP/1.1\r\n\r\n");
  EXPECT_NE(a.find("\r\n\r\n/p/x/y flag= follow=true n=a b c tailLines=5\n"), std::string::npos)
      << a;
  a = Ask(*port, "GET /p/exact HTTP/1.0\r\n\r\n");
  EXPECT_NE(a.find("exact\n"), std::string::npos) << a;
  a = Ask(*port, "GET /p/z HTTP/1.0\r\n\r\n");
  EXPECT_NE(a.find("/p/z 1.0\n"), std::string::npos) << a;
  EXPECT_EQ(Ask(*port, "GET /q HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404 ", 0), 0u);
}

// A handler that throws (nlohmann's dump on a pod's bytes did) answers its own request with a
// 500 and is counted; the worker, the server and the process go on. So does a stream that throws.
TEST(HttpServerTest, AHandlerThatThrowsAnswers500AndTheServerGoesOn) {
  HttpServerOptions opts;
  opts.workers = 1;  // the one worker must survive the throw
  TestServer test_server(RealClock::Get(), opts);
  HttpServer& server = test_server.server;
  server.Get("/pods", []() -> HttpReply { throw std::runtime_error("type_error.316"); });
  server.GetPrefix("/logs/", [](const HttpRequest&) {
    HttpReply r{200, "text/plain", "", nullptr};
    r.stream = [](HttpStream& out) {
      out.Write("line\n");
      throw std::runtime_error("the stream failed");
    };
    return r;
  });
  server.Get("/healthz", [] { return HttpReply{200, "text/plain", "ok\n", nullptr}; });
  auto port = test_server.Listen();
  ASSERT_TRUE(port.ok());
  for (int i = 0; i < 3; ++i) {
    const std::string a = Ask(*port, "GET /pods HTTP/1.1\r\n\r\n");
    EXPECT_EQ(a.rfind("HTTP/1.1 500 ", 0), 0u) << a;
  }
  const std::string s = Ask(*port, "GET /logs/x HTTP/1.1\r\n\r\n");
  EXPECT_NE(s.find("line\n"), std::string::npos) << s;
  const std::string h = Ask(*port, "GET /healthz HTTP/1.1\r\n\r\n");
  EXPECT_EQ(h.rfind("HTTP/1.1 200 ", 0), 0u) << h;
  EXPECT_EQ(server.handler_errors(), 4u);
}

TEST(HttpServerTest, AStreamIsChunkedAndHoldsNoWorker) {
  HttpServerOptions opts;
  opts.workers = 1;
  opts.max_streams = 1;
  TestServer test_server(RealClock::Get(), opts);
  HttpServer& server = test_server.server;
  std::atomic<bool> release{false};
  server.Get("/healthz", [] { return HttpReply{200, "text/plain", "ok\n", nullptr}; });
  server.GetPrefix("/stream", [&](const HttpRequest&) {
    HttpReply r{200, "text/plain", "", nullptr};
    r.stream = [&](HttpStream& out) {
      out.Write("first\n");
      const auto end = Steady::now() + 5s;
      while (!release && !out.stopping() && Steady::now() < end) std::this_thread::sleep_for(10ms);
      out.Write("second\n");
    };
    return r;
  });
  auto port = test_server.Listen();
  ASSERT_TRUE(port.ok());
  std::string streamed;
  std::thread reader([&] { streamed = Ask(*port, "GET /stream HTTP/1.1\r\n\r\n", 10s); });
  // While it streams, the one worker answers, and a second stream is refused.
  const auto end = Steady::now() + 5s;
  while (server.active_streams() == 0 && Steady::now() < end) std::this_thread::sleep_for(10ms);
  EXPECT_NE(Ask(*port, "GET /healthz HTTP/1.1\r\n\r\n", 2s).find("ok\n"), std::string::npos);
  EXPECT_EQ(Ask(*port, "GET /stream HTTP/1.1\r\n\r\n", 2s).rfind("HTTP/1.1 503 ", 0), 0u);
  release = true;
  reader.join();
  EXPECT_EQ(streamed.rfind("HTTP/1.1 200 ", 0), 0u) << streamed;
  EXPECT_NE(streamed.find("Transfer-Encoding: chunked\r\n"), std::string::npos) << streamed;
  EXPECT_NE(streamed.find("\r\n\r\n6\r\nfirst\n\r\n7\r\nsecond\n\r\n0\r\n\r\n"), std::string::npos)
      << streamed;
  // HTTP/1.0: the body as it is, until the connection closes; Stop ends a stream at once.
  release = false;
  std::thread old([&] { streamed = Ask(*port, "GET /stream HTTP/1.0\r\n\r\n", 10s); });
  const auto end2 = Steady::now() + 5s;
  while (server.active_streams() == 0 && Steady::now() < end2) std::this_thread::sleep_for(10ms);
  test_server.StopServer();
  old.join();
  EXPECT_NE(streamed.find("\r\n\r\nfirst\nsecond\n"), std::string::npos) << streamed;
  EXPECT_EQ(streamed.find("Transfer-Encoding"), std::string::npos) << streamed;
}

// On the loop's fake clock: a connection that sends no head is closed when the clock passes
// request_deadline, and not a moment before.
TEST(HttpServerTest, ASilentConnectionIsClosedWhenTheFakeClockPassesTheRequestDeadline) {
  testing::FakeClock clock;
  EventLoop loop(clock);
  HttpServerOptions opts;
  opts.request_deadline = 5s;
  HttpServer server(loop, opts);
  server.Get("/healthz", [] { return HttpReply{200, "text/plain", "ok\n", nullptr}; });
  auto port = server.Listen("127.0.0.1", 0);
  ASSERT_TRUE(port.ok());
  int silent = Connect(*port);
  ASSERT_GE(silent, 0);
  const auto accepted = [&] { return server.open_connections() == 1; };
  ASSERT_TRUE(testing::TurnLoopUntil(loop, accepted, [] { return false; }));
  clock.Advance(5s - 1ms);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(loop.RunOnce(10ms).ok());
  EXPECT_FALSE(ClosedByPeer(silent, 0ms)) << "still open 1 ms before its deadline";
  EXPECT_EQ(server.timed_out(), 0u);
  EXPECT_EQ(server.open_connections(), 1u);
  clock.Advance(1ms);
  ASSERT_TRUE(loop.RunOnce(0ms).ok());
  EXPECT_EQ(server.timed_out(), 1u);
  EXPECT_EQ(server.open_connections(), 0u);
  EXPECT_TRUE(ClosedByPeer(silent, 2s));
  close(silent);
  // A connection accepted now has a deadline of its own, counted from its accept.
  int late = Connect(*port);
  ASSERT_GE(late, 0);
  ASSERT_TRUE(testing::TurnLoopUntil(loop, accepted, [] { return false; }));
  clock.Advance(4s);
  ASSERT_TRUE(loop.RunOnce(0ms).ok());
  EXPECT_FALSE(ClosedByPeer(late, 0ms));
  clock.Advance(1s);
  ASSERT_TRUE(loop.RunOnce(0ms).ok());
  EXPECT_TRUE(ClosedByPeer(late, 2s));
  EXPECT_EQ(server.timed_out(), 2u);
  close(late);
}

}  // namespace
}  // namespace nodelet::supervisor
