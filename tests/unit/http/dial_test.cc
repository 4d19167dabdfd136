// lib/http's DialTcp on loopback: a listener accepts, a closed port is refused (with the reason
// alone for callers that word it themselves), and a listener whose queue is full (the SYN is
// dropped, so connect hangs) runs into the deadline or the idle timeout, each at its own time.
#include "lib/http/dial.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <string>
#include <vector>

#include "lib/common/clock.h"
#include "lib/common/unique_fd.h"
#include "tests/testing/harness.h"

namespace nodelet::http {
namespace {

using namespace std::chrono_literals;

// A listener on 127.0.0.1 that never accepts. With `backlog_full`, one connection fills its
// queue (listen's backlog 0), so the next connect hangs until the caller gives up.
class Listener {
 public:
  explicit Listener(bool backlog_full) {
    fd_.reset(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    EXPECT_EQ(listen(fd_.get(), 0), 0);
    if (backlog_full) {
      Error error;
      filler_ =
          DialTcp(RealClock::Get(), "127.0.0.1", port_, RealClock::Get().Now() + 2s, 0ms, error);
      EXPECT_TRUE(filler_.valid()) << error.message;
    }
  }
  int port() const { return port_; }

 private:
  UniqueFd fd_;
  UniqueFd filler_;
  int port_ = 0;
};

TEST(DialTcpTest, ConnectsToAListener) {
  Listener listener(/*backlog_full=*/false);
  Error error;
  UniqueFd fd = DialTcp(RealClock::Get(), "127.0.0.1", listener.port(), RealClock::Get().Now() + 2s,
                        0ms, error);
  ASSERT_TRUE(fd.valid()) << error.message;
  EXPECT_EQ(error.kind, ErrorKind::kNone);
  // Ready to write at once: connected.
  pollfd p{fd.get(), POLLOUT, 0};
  EXPECT_EQ(poll(&p, 1, 1000), 1);
}

TEST(DialTcpTest, AClosedPortIsRefused) {
  const int port = testing::FreeLoopbackPort();
  Error error;
  UniqueFd fd =
      DialTcp(RealClock::Get(), "127.0.0.1", port, RealClock::Get().Now() + 2s, 0ms, error);
  EXPECT_FALSE(fd.valid());
  EXPECT_EQ(error.kind, ErrorKind::kConnect);
  EXPECT_EQ(error.message, "dial tcp 127.0.0.1:" + std::to_string(port) + ": Connection refused");
  EXPECT_EQ(error.dial_reason, "Connection refused");
  EXPECT_FALSE(error.unresolved);
}

TEST(DialTcpTest, AnIpv6AddressIsBracketedInTheMessage) {
  const int port = testing::FreeLoopbackPort();
  Error error;
  UniqueFd fd = DialTcp(RealClock::Get(), "::1", port, RealClock::Get().Now() + 2s, 0ms, error);
  EXPECT_FALSE(fd.valid());
  EXPECT_EQ(error.kind, ErrorKind::kConnect);
  EXPECT_EQ(error.message.rfind("dial tcp [::1]:" + std::to_string(port) + ": ", 0), 0u)
      << error.message;
}

TEST(DialTcpTest, AHangingConnectEndsAtTheDeadline) {
  Listener full(/*backlog_full=*/true);
  Error error;
  const auto start = std::chrono::steady_clock::now();
  UniqueFd fd = DialTcp(RealClock::Get(), "127.0.0.1", full.port(), RealClock::Get().Now() + 300ms,
                        0ms, error);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_FALSE(fd.valid());
  EXPECT_EQ(error.kind, ErrorKind::kDeadline) << error.message;
  EXPECT_EQ(error.message, "dial tcp 127.0.0.1:" + std::to_string(full.port()) + ": i/o timeout");
  EXPECT_EQ(error.dial_reason, "i/o timeout");
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 3s);
}

TEST(DialTcpTest, AHangingConnectEndsAtTheIdleTimeoutBeforeTheDeadline) {
  Listener full(/*backlog_full=*/true);
  Error error;
  const auto start = std::chrono::steady_clock::now();
  UniqueFd fd = DialTcp(RealClock::Get(), "127.0.0.1", full.port(), RealClock::Get().Now() + 10s,
                        200ms, error);
  EXPECT_FALSE(fd.valid());
  EXPECT_EQ(error.kind, ErrorKind::kTimeout) << error.message;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

TEST(DialTcpTest, ANameThatDoesNotResolveSaysSo) {
  Error error;
  // A name with an empty label: the resolver refuses it at once, without asking any server.
  UniqueFd fd = DialTcp(RealClock::Get(), "bad..name", 80, RealClock::Get().Now() + 2s, 0ms, error);
  EXPECT_FALSE(fd.valid());
  EXPECT_EQ(error.kind, ErrorKind::kConnect);
  EXPECT_TRUE(error.unresolved);
  EXPECT_EQ(error.message.rfind("dial tcp: lookup bad..name: ", 0), 0u) << error.message;
  EXPECT_FALSE(error.dial_reason.empty());
}

}  // namespace
}  // namespace nodelet::http
