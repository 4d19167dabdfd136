// The service runtime sends WATCHDOG=1 from its main loop only: a forked process runs
// RunService with a service whose fd reader can be made to block, under a NOTIFY_SOCKET and a
// WATCHDOG_USEC of 200 ms bound here. While the loop runs the pings come every 100 ms; while a
// hook blocks the loop, or the process is SIGSTOPped, none comes (systemd's watchdog would
// fire); once the loop moves again they resume.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "lib/service/service_runtime.h"
#include "tests/testing/harness.h"

namespace nodelet {
namespace {

using std::chrono::milliseconds;

// Blocks the main loop inside its fd reader when a byte arrives on `block_fd`, after writing a
// byte to `ack_fd`, until a byte arrives on `release_fd`.
class BlockingService : public Service {
 public:
  BlockingService(EventLoop& loop, int block_fd, int ack_fd, int release_fd)
      : block_fd_(block_fd), ack_fd_(ack_fd), release_fd_(release_fd) {
    source_ = loop.AddFd(block_fd_, [this] { OnReadable(); });
  }

 private:
  void OnReadable() {
    char c;
    if (read(block_fd_, &c, 1) != 1) return;
    (void)!write(ack_fd_, "b", 1);
    (void)!read(release_fd_, &c, 1);  // the hang
  }

  int block_fd_, ack_fd_, release_fd_;
  EventLoop::Handle source_;
};

bool ReadByteWithin(int fd, milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(timeout.count())) != 1) return false;
  char c;
  return read(fd, &c, 1) == 1;
}

class WatchdogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int* p : {block_, ack_, release_}) ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
    notify_ = std::make_unique<testing::NotifyListener>(dir_.Sub("notify.sock"));
    pid_ = fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) RunChild();
    ASSERT_TRUE(notify_->WaitFor("READY=1", milliseconds(10000)));
  }
  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    for (int* p : {block_, ack_, release_}) {
      close(p[0]);
      close(p[1]);
    }
  }

  [[noreturn]] void RunChild() {
    setenv("NOTIFY_SOCKET", notify_->path().c_str(), 1);
    setenv("WATCHDOG_USEC", "200000", 1);
    unsetenv("WATCHDOG_PID");
    ServiceSpec spec{"watchdog-test", ipc::ServiceId::Plegd, "watchdog test service", nullptr,
                     [this](ServiceContext& ctx) -> Result<std::unique_ptr<Service>> {
                       return std::unique_ptr<Service>(std::make_unique<BlockingService>(
                           ctx.loop, block_[0], ack_[1], release_[0]));
                     }};
    std::string dir = dir_.path();
    std::vector<std::string> args = {
        "nodelet-watchdog-test", "--run-dir", dir, "--root-dir", dir, "--log-dir", dir,
        "--log-level",           "warn"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    _exit(RunService(spec, static_cast<int>(args.size()), argv.data()));
  }

  // Datagrams already queued (sent before the loop stopped) do not count.
  void Drain() {
    while (notify_->Receive(milliseconds(0))) {
    }
  }
  // Every datagram that arrives within `window`.
  int PingsWithin(milliseconds window) {
    int pings = 0;
    auto end = std::chrono::steady_clock::now() + window;
    for (;;) {
      auto left = std::chrono::duration_cast<milliseconds>(end - std::chrono::steady_clock::now());
      if (left.count() <= 0) return pings;
      auto d = notify_->Receive(left);
      if (d && d->find("WATCHDOG=1") != std::string::npos) ++pings;
    }
  }
  void ExpectPingsFlow() {
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(notify_->WaitFor("WATCHDOG=1", milliseconds(2000))) << "ping " << i;
    }
  }

  testing::TempDir dir_;
  std::unique_ptr<testing::NotifyListener> notify_;
  int block_[2] = {-1, -1}, ack_[2] = {-1, -1}, release_[2] = {-1, -1};
  pid_t pid_ = -1;
};

TEST_F(WatchdogTest, ABlockedMainLoopStopsThePingsAndTheyResumeWhenItMovesAgain) {
  ExpectPingsFlow();
  ASSERT_EQ(write(block_[1], "x", 1), 1);
  ASSERT_TRUE(ReadByteWithin(ack_[0], milliseconds(5000))) << "the loop never blocked";
  Drain();
  // Five watchdog intervals without a single ping: systemd would have killed it.
  EXPECT_EQ(PingsWithin(milliseconds(1000)), 0);
  ASSERT_EQ(write(release_[1], "x", 1), 1);
  ExpectPingsFlow();
  kill(pid_, SIGTERM);
  EXPECT_TRUE(notify_->WaitFor("STOPPING=1", milliseconds(5000)));
}

TEST_F(WatchdogTest, AStoppedProcessSendsNoPings) {
  ExpectPingsFlow();
  ASSERT_EQ(kill(pid_, SIGSTOP), 0);
  // Wait until the kernel shows it stopped, then drop what it sent before.
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(pid_), &info, WSTOPPED | WNOWAIT), 0);
  Drain();
  EXPECT_EQ(PingsWithin(milliseconds(1000)), 0);
  ASSERT_EQ(kill(pid_, SIGCONT), 0);
  ExpectPingsFlow();
}

}  // namespace
}  // namespace nodelet
