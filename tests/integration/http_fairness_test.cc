// The supervisor's HTTP endpoint is fair, with the real `nodelet` and its four services: one
// peer that opens 256 connections, asks /pods on each and never reads, takes neither /healthz
// nor the endpoint from anyone else, and its 257th connection is closed at once. No containerd:
// plegd points at a socket that does not exist (the failing grace given here tolerates it).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "tests/testing/harness.h"

namespace nodelet::testing {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

// A TCP connection to 127.0.0.1:`port` from the loopback address `source` (each loopback
// address is a peer of its own), with a receive buffer of `rcvbuf` bytes when > 0; -1 on
// failure.
int ConnectFrom(const char* source, int port, int rcvbuf = 0) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  inet_pton(AF_INET, source, &from.sin_addr);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Reads until the server closes `fd` or `deadline`; what came.
std::string ReadAll(int fd, SteadyClock::time_point deadline) {
  std::string out;
  char buf[4096];
  for (;;) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// True when the server closed `fd` (EOF or reset) within `timeout`.
bool ClosedByServer(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
  char c;
  return recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

// GET /healthz from `source`: the answer and how long it took.
std::pair<std::string, SteadyClock::duration> Healthz(const char* source, int port) {
  const auto start = SteadyClock::now();
  int fd = ConnectFrom(source, port);
  if (fd < 0) return {"", SteadyClock::now() - start};
  const std::string request = "GET /healthz HTTP/1.1\r\nHost: nodelet\r\n\r\n";
  send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string answer = ReadAll(fd, start + 2s);
  auto took = SteadyClock::now() - start;
  close(fd);
  return {answer, took};
}

class HttpFairnessTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (int fd : hogs_) close(fd);
    if (HasFailure()) {
      std::ifstream in(dir_.Sub("nodelet.log"));
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      std::cerr << "---- nodelet.log\n"
                << (text.size() > 5000 ? text.substr(text.size() - 5000) : text);
    }
  }

  TempDir dir_;
  std::unique_ptr<NotifyListener> notify_;
  std::unique_ptr<Subprocess> nodelet_;
  std::vector<int> hogs_;
};

TEST_F(HttpFairnessTest, HealthzAnswersBeside256ClientsThatNeverRead) {
  const int port = FreeLoopbackPort();
  notify_ = std::make_unique<NotifyListener>(dir_.Sub("notify.sock"));
  nodelet_ = std::make_unique<Subprocess>(
      std::vector<std::string>{BinDir() + "/nodelet", "--root-dir", dir_.Sub("root"), "--run-dir",
                               dir_.Sub("run"), "--log-dir", dir_.Sub("log"), "--runtime-endpoint",
                               "unix://" + dir_.Sub("no-runtime.sock"), "--failing-grace", "1h",
                               "--cgroup-root", TestCgroupRoot(dir_.path()), "--http-address",
                               "127.0.0.1:" + std::to_string(port)},
      std::map<std::string, std::string>{{"NOTIFY_SOCKET", notify_->path()}},
      dir_.Sub("nodelet.log"));
  ASSERT_TRUE(notify_->WaitFor("READY=1", 20s));
  // Every service RUNNING: /healthz is 200 from here on.
  std::string first;
  for (const auto end = SteadyClock::now() + 20s; SteadyClock::now() < end;) {
    first = Healthz("127.0.0.2", port).first;
    if (first.rfind("HTTP/1.1 200 ", 0) == 0) break;
    notify_->Receive(200ms);
  }
  ASSERT_EQ(first.rfind("HTTP/1.1 200 ", 0), 0u) << first;

  // One peer (127.0.0.1) opens 256 connections with a tiny receive buffer; its 257th is closed.
  for (int i = 0; i < 256; ++i) {
    int fd = ConnectFrom("127.0.0.1", port, 1024);
    ASSERT_GE(fd, 0) << "connection " << i;
    hogs_.push_back(fd);
  }
  int over = ConnectFrom("127.0.0.1", port, 1024);
  ASSERT_GE(over, 0);
  EXPECT_TRUE(ClosedByServer(over, 3s)) << "the 257th connection of one peer";
  close(over);
  // While they are open, another peer is served.
  const std::string beside_idle = Healthz("127.0.0.2", port).first;
  EXPECT_EQ(beside_idle.rfind("HTTP/1.1 200 ", 0), 0u) << beside_idle;

  // Each asks for /pods and never reads.
  const std::string pods = "GET /pods HTTP/1.1\r\nHost: nodelet\r\n\r\n";
  for (int fd : hogs_) send(fd, pods.data(), pods.size(), MSG_NOSIGNAL);
  for (int i = 0; i < 20; ++i) {
    auto [answer, took] = Healthz("127.0.0.2", port);
    EXPECT_EQ(answer.rfind("HTTP/1.1 200 ", 0), 0u) << "ask " << i << ": " << answer;
    EXPECT_LT(took, 100ms) << "ask " << i << " took "
                           << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                           << " ms";
  }

  // The supervisor is alive and serves everyone, the hogs' peer too once they are gone.
  for (int fd : hogs_) close(fd);
  hogs_.clear();
  ASSERT_TRUE(nodelet_->running());
  httplib::Client http("127.0.0.1", port);
  http.set_connection_timeout(5s);
  http.set_read_timeout(5s);
  int status = 0;
  std::string body;
  for (const auto end = SteadyClock::now() + 10s; SteadyClock::now() < end;) {
    auto got = http.Get("/pods");
    status = got ? got->status : 0;
    body = got ? got->body : httplib::to_string(got.error());
    if (status == 200) break;
    notify_->Receive(100ms);
  }
  EXPECT_EQ(status, 200) << body;
  auto health = http.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200) << health->body;
}

}  // namespace
}  // namespace nodelet::testing
