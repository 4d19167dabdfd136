// lib/common: the notify socket never blocks the sender; log lines reach their file at once.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "lib/common/check.h"
#include "lib/common/fs.h"
#include "lib/common/logging.h"
#include "lib/common/safe_path.h"
#include "lib/common/systemd_notify.h"
#include "tests/testing/harness.h"

namespace nodelet {
namespace {

// A datagram socket bound at `address` ("/path" or "@abstract") that the test reads (or not).
class Receiver {
 public:
  explicit Receiver(const std::string& address) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, address.data(), address.size());
    if (address[0] == '@') addr.sun_path[0] = '\0';
    socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address.size() +
                                           (address[0] == '@' ? 0 : 1));
    bound_ = fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) == 0;
  }
  ~Receiver() {
    if (fd_ >= 0) close(fd_);
  }
  bool bound() const { return bound_; }
  // The next queued datagram, or "" when the queue is empty.
  std::string Next() {
    char buf[512];
    ssize_t n = recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  }

 private:
  int fd_ = -1;
  bool bound_ = false;
};

TEST(NotifySocketTest, FullQueueDropsInsteadOfBlocking) {
  testing::TempDir dir;
  const std::string path = dir.Sub("notify.sock");
  Receiver rx(path);
  ASSERT_TRUE(rx.bound());
  // Nobody reads: the queue (net.unix.max_dgram_qlen, 10 by default outside systemd) fills up.
  // libsystemd's sd_notify would block here for good.
  int sent = 0, dropped = 0;
  for (int i = 0; i < 200; ++i) {
    if (NotifySocketSend(path, "STATUS=" + std::to_string(i))) {
      ++sent;
    } else {
      ++dropped;
    }
  }
  EXPECT_GT(sent, 0);
  EXPECT_GT(dropped, 0) << "200 datagrams fit a queue nobody reads?";
  // What was sent arrived whole and in order; what was dropped did not arrive.
  for (int i = 0; i < sent; ++i) EXPECT_EQ(rx.Next(), "STATUS=" + std::to_string(i));
  EXPECT_EQ(rx.Next(), "");
  // With room again, sending works again.
  EXPECT_TRUE(NotifySocketSend(path, "READY=1"));
  EXPECT_EQ(rx.Next(), "READY=1");
}

TEST(NotifySocketTest, AbstractAddressAndEnvironment) {
  const std::string abstract = "@nodelet-notify-test-" + std::to_string(getpid());
  Receiver rx(abstract);
  ASSERT_TRUE(rx.bound());
  const char* saved = std::getenv("NOTIFY_SOCKET");
  std::string saved_value = saved ? saved : "";
  setenv("NOTIFY_SOCKET", abstract.c_str(), 1);
  SystemdNotifierImpl notifier;
  EXPECT_TRUE(notifier.Notify("READY=1\nSTATUS=running"));
  EXPECT_EQ(rx.Next(), "READY=1\nSTATUS=running");
  unsetenv("NOTIFY_SOCKET");
  EXPECT_FALSE(notifier.Notify("READY=1"));
  if (saved) setenv("NOTIFY_SOCKET", saved_value.c_str(), 1);
}

TEST(NotifySocketTest, BadAddressesAreRefused) {
  EXPECT_FALSE(NotifySocketSend("", "READY=1"));
  EXPECT_FALSE(NotifySocketSend("relative/path", "READY=1"));
  EXPECT_FALSE(NotifySocketSend("vsock:2:1234", "READY=1"));
  EXPECT_FALSE(NotifySocketSend("/" + std::string(200, 'x'), "READY=1"));
  testing::TempDir dir;
  EXPECT_FALSE(NotifySocketSend(dir.Sub("nobody-listens.sock"), "READY=1"));
}

// The supervisor keeps its services' output and its own stderr in files; a line must be there
// as soon as it is logged (a process killed a moment later loses nothing it logged).
TEST(LoggingTest, EveryLineReachesTheFileAtOnce) {
  testing::TempDir dir;
  const std::string path = dir.Sub("stderr.log");
  int file = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(file, 0);
  int saved = dup(2);
  ASSERT_GE(saved, 0);
  dup2(file, 2);
  close(file);
  InitLogging("common-test", "info");
  auto log = GetLogger("common-test.component");
  auto read_file = [&] {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  log->info("first line {}", 1);
  const std::string after_info = read_file();
  log->warn("second line");
  const std::string after_warn = read_file();
  log->debug("not at this level");
  const std::string after_debug = read_file();
  dup2(saved, 2);
  close(saved);
  EXPECT_NE(after_info.find("info [common-test.component] first line 1\n"), std::string::npos)
      << after_info;
  EXPECT_NE(after_warn.find("warning [common-test.component] second line\n"), std::string::npos)
      << after_warn;
  EXPECT_EQ(after_debug.find("not at this level"), std::string::npos);
}

// What each format makes of one message logged at a known UTC time.
std::string Formatted(const std::string& format, bool journal, const std::string& text) {
  spdlog::details::log_msg msg(spdlog::source_loc{}, "plegd.relist", spdlog::level::warn, text);
  msg.time = std::chrono::system_clock::time_point(std::chrono::milliseconds(1764413100123));
  spdlog::memory_buf_t out;
  LogFormatter(format, journal)->format(msg, out);
  return std::string(out.data(), out.size());
}

TEST(LoggingTest, TextLinesCarryUtcWithTheZoneAndJsonLinesAreJson) {
  EXPECT_EQ(Formatted("text", false, "relist took 3 s"),
            "2025-11-29T10:45:00.123Z warning [plegd.relist] relist took 3 s\n");
  EXPECT_EQ(Formatted("text", true, "relist took 3 s"), "<4>[plegd.relist] relist took 3 s\n");
  const std::string hostile = std::string("a \"quote\", a \\ and\na line; \x01\x7f") + "\xff";
  const std::string line = Formatted("json", false, hostile);
  auto doc = nlohmann::json::parse(line);
  EXPECT_EQ(doc["ts"], "2025-11-29T10:45:00.123Z");
  EXPECT_EQ(doc["level"], "warning");
  EXPECT_EQ(doc["logger"], "plegd.relist");
  EXPECT_EQ(doc["msg"], "a \"quote\", a \\ and\na line; \x01\x7f\xEF\xBF\xBD")
      << "escaped as JSON, the byte that is not UTF-8 replaced";
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1) << "one line";
  EXPECT_EQ(Formatted("json", true, "x").substr(0, 4), "<4>{") << "the journal's priority first";
}

}  // namespace
}  // namespace nodelet

namespace nodelet {
namespace {

TEST(SafePathTest, JoinsOneName) {
  auto a = JoinComponent("/var/lib/nodelet/pods", "abc");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a.value(), "/var/lib/nodelet/pods/abc");
  auto b = JoinComponent("/root/", "v-1");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b.value(), "/root/v-1");
}

TEST(SafePathTest, RefusesAnythingButOneName) {
  for (const std::string& bad : std::vector<std::string>{"", ".", "..", "/", "a/b", "../x", "/etc",
                                                         std::string("a\0b", 3)}) {
    EXPECT_FALSE(JoinComponent("/root", bad).ok()) << bad;
  }
}

// The lock that keeps one holder per socket path (and per root directory): a second taker,
// even in the same process through another open, is told the holder's pid; once the holder
// closes it, the next taker gets it.
TEST(PidLockTest, OneHolderAtATimeAndTheOthersAreToldWho) {
  testing::TempDir dir;
  const std::string path = dir.Sub("x.lock");
  auto first = TryPidLock(path);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_GE(first->fd, 0);
  EXPECT_NE(fcntl(first->fd, F_GETFD) & FD_CLOEXEC, 0);
  auto second = TryPidLock(path);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->fd, -1);
  EXPECT_EQ(second->holder, getpid());

  auto sock = LockSocketPath(dir.Sub("x"));
  ASSERT_FALSE(sock.ok());
  EXPECT_EQ(sock.status().message(), "'" + dir.Sub("x") + "' is served by another process (pid " +
                                         std::to_string(getpid()) + "), which holds '" + path +
                                         "'");
  close(first->fd);
  auto third = LockSocketPath(dir.Sub("x"));
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  close(*third);
  // A lock path that is a link is not followed.
  symlink(path.c_str(), dir.Sub("link.lock").c_str());
  EXPECT_FALSE(TryPidLock(dir.Sub("link.lock")).ok());
}

// A failed check names the file, the line, the condition and the message, and aborts; a check
// that holds evaluates nothing of its message.
TEST(CheckDeathTest, AFailedCheckAbortsWithWhereAndWhy) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  int parts = 0;
  NODELET_CHECK(parts == 0) << "never " << ++parts;
  EXPECT_EQ(parts, 0);
  const int answer = 41;
  EXPECT_DEATH(NODELET_CHECK(answer + 1 == 43) << "the answer is " << answer + 1,
               "common_test.cc:[0-9]+: check failed: answer \\+ 1 == 43: the answer is 42");
  EXPECT_DEATH(NODELET_CHECK(answer == 0), "check failed: answer == 0\n");
}

}  // namespace
}  // namespace nodelet
