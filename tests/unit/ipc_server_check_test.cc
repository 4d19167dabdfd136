// The server-side check of every ipc:// connect (lib/ipc/server_check.h) and which peer is the
// supervisor (lib/ipc/supervisor_peer.h). The "other user" is a forked child that setuid()s to
// 65534 and binds a plain unix socket; the tests run as root.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "lib/ipc/router_receive.h"
#include "lib/ipc/server_check.h"
#include "lib/ipc/sockets.h"
#include "lib/ipc/supervisor_peer.h"
#include "tests/testing/harness.h"

namespace nodelet::ipc {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

constexpr uid_t kOther = 65534;

// A unix socket served by another user: a child that drops to uid 65534, binds and listens at
// `path`, says so on a pipe and then counts the connections it accepts until it is told to stop
// (its pipe closed) or 20 s pass. Stop() returns that count.
class ForeignServer {
 public:
  explicit ForeignServer(const std::string& path) {
    int ready[2], stop[2];
    if (pipe2(ready, O_CLOEXEC) != 0 || pipe2(stop, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      close(ready[0]);
      close(stop[1]);
      Serve(path, ready[1], stop[0]);
    }
    close(ready[1]);
    close(stop[0]);
    stop_fd_ = stop[1];
    pollfd p{ready[0], POLLIN, 0};
    char c = 0;
    bound_ = poll(&p, 1, 10000) == 1 && read(ready[0], &c, 1) == 1 && c == 'y';
    close(ready[0]);
  }
  ~ForeignServer() { (void)Stop(); }
  bool bound() const { return bound_; }
  // The number of connections the server accepted; -1 when it failed.
  int Stop() {
    if (pid_ <= 0) return -1;
    close(stop_fd_);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) && WEXITSTATUS(status) < 100 ? WEXITSTATUS(status) : -1;
  }

 private:
  [[noreturn]] static void Serve(const std::string& path, int ready_fd, int stop_fd) {
    if (setgid(kOther) != 0 || setuid(kOther) != 0) _exit(101);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        listen(fd, 8) != 0) {
      (void)!write(ready_fd, "n", 1);
      _exit(102);
    }
    chmod(path.c_str(), 0777);
    (void)!write(ready_fd, "y", 1);
    int accepted = 0;
    const auto end = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < end) {
      pollfd p[2] = {{fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
      if (poll(p, 2, 1000) <= 0) continue;
      if (p[1].revents != 0) break;
      int c = accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (c >= 0) {
        ++accepted;
        close(c);
      }
    }
    _exit(accepted);
  }

  pid_t pid_ = -1;
  int stop_fd_ = -1;
  bool bound_ = false;
};

class ServerCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (setuid to another uid)";
    // uid 65534 walks to the directories it binds in (0755 is still root's alone).
    ASSERT_EQ(chmod(tmp_.path().c_str(), 0755), 0);
  }
  std::string MakeDir(const std::string& name, mode_t mode) {
    const std::string p = tmp_.Sub(name);
    EXPECT_EQ(mkdir(p.c_str(), 0700), 0);
    EXPECT_EQ(chmod(p.c_str(), mode), 0);
    return p;
  }
  testing::TempDir tmp_;
};

TEST_F(ServerCheckTest, RefusesASocketInADirectoryOthersCanWrite) {
  const std::string open = MakeDir("open", 0777);
  const std::string path = open + "/podworkerd.sock";
  ForeignServer server(path);
  ASSERT_TRUE(server.bound());
  Context ctx;
  DealerClient client(ctx);
  Status s = client.Connect("ipc://" + path);
  ASSERT_EQ(s.code(), StatusCode::kPermissionDenied) << s.message();
  EXPECT_THAT(s.message(),
              HasSubstr("not connecting to socket '" + path + "': its directory '" + open +
                        "' is not trusted: owner 0:0, mode 0777; it is "
                        "writable by every user"));
  std::string secret = "desired set";
  EXPECT_FALSE(client.Send(secret.data(), secret.size()).ok());
  EXPECT_EQ(server.Stop(), 0) << "the other user's server saw a connection";
}

TEST_F(ServerCheckTest, RefusesASocketAnotherUserBoundInAGoodDirectory) {
  // The other user binds where it may, and the socket is then found in a directory of root's
  // (as a socket left from an earlier, careless setup would be).
  const std::string open = MakeDir("open", 0777);
  const std::string good = MakeDir("run", 0700);
  ForeignServer server(open + "/ctl.sock");
  ASSERT_TRUE(server.bound());
  const std::string path = good + "/ctl.sock";
  ASSERT_EQ(rename((open + "/ctl.sock").c_str(), path.c_str()), 0);
  Context ctx;
  DealerClient client(ctx);
  Status s = client.Connect("ipc://" + path);
  ASSERT_EQ(s.code(), StatusCode::kPermissionDenied) << s.message();
  EXPECT_THAT(s.message(),
              HasSubstr("not connecting to socket '" + path + "': it is owned by uid 65534"));
  Subscriber sub(ctx, 1024, 1024 * 1024);
  EXPECT_EQ(sub.Connect("ipc://" + path).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(server.Stop(), 0) << "the other user's server saw a connection";
}

TEST_F(ServerCheckTest, AcceptsRootsSocketInRootsDirectoryAndNonIpc) {
  const std::string good = MakeDir("run", 0755);
  Context ctx;
  RouterServer server(ctx);
  ASSERT_TRUE(server.Bind("ipc://" + good + "/a.sock").ok());
  DealerClient client(ctx);
  EXPECT_TRUE(client.Connect("ipc://" + good + "/a.sock").ok());
  // Not bound yet: the directory is root's, so only root can bind it later.
  EXPECT_TRUE(CheckIpcServer("ipc://" + good + "/later.sock").ok());
  // Its directory not made yet: fine below root's directory, not right below a sticky one.
  EXPECT_TRUE(CheckIpcServer("ipc://" + good + "/missing/x.sock").ok());
  const std::string sticky = MakeDir("sticky", 01777);
  Status s = CheckIpcServer("ipc://" + sticky + "/missing/x.sock");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.message();
  EXPECT_THAT(s.message(), HasSubstr("any user may make it in '" + sticky + "'"));
  EXPECT_TRUE(CheckIpcServer("inproc://x").ok());
}

TEST(SupervisorPeerTest, TheSupervisorIsThisProcessItsParentOrItsUnit) {
  SupervisorPeerCheck check;
  check.self = 100;
  check.parent = 50;
  check.read_cgroup = [](pid_t pid) -> std::optional<std::string> {
    if (pid == 70) return "0::/system.slice/nodelet-supervisor.service\n";
    if (pid == 80) return "0::/system.slice/nodelet-statusd.service\n";
    if (pid == 90) return "0::/user.slice/nodelet-supervisor.service.evil\n";
    return std::nullopt;
  };
  auto peer = [](pid_t pid) { return PeerCredentials{0, 0, pid}; };
  EXPECT_TRUE(CheckSupervisorPeer(check, peer(100)).allowed);
  EXPECT_TRUE(CheckSupervisorPeer(check, peer(50)).allowed);
  EXPECT_TRUE(CheckSupervisorPeer(check, peer(70)).allowed);
  auto statusd = CheckSupervisorPeer(check, peer(80));
  EXPECT_FALSE(statusd.allowed);
  EXPECT_THAT(statusd.reason, HasSubstr("uid 0 gid 0 pid 80 is not the supervisor"));
  EXPECT_FALSE(CheckSupervisorPeer(check, peer(90)).allowed);
  EXPECT_FALSE(CheckSupervisorPeer(check, peer(0)).allowed);
  EXPECT_FALSE(CheckSupervisorPeer(check, std::nullopt).allowed);
  // Reparented to init: pid 1 is never the supervisor.
  check.parent = 1;
  EXPECT_FALSE(CheckSupervisorPeer(check, peer(1)).allowed);
}

TEST(SupervisorPeerTest, CgroupIsUnitReadsEachLinesPath) {
  EXPECT_TRUE(CgroupIsUnit("12:pids:/system.slice/nodelet-supervisor.service\n",
                           "nodelet-supervisor.service"));
  EXPECT_FALSE(
      CgroupIsUnit("0::/nodelet-supervisor.service/child\n", "nodelet-supervisor.service"));
  EXPECT_FALSE(CgroupIsUnit("garbage", "nodelet-supervisor.service"));
}

// ReceiveWithCredentials hands each message's sender credentials (SO_PEERCRED through libzmq).
TEST(RouterCredentialsTest, ReceiveWithCredentialsGivesTheSendersPid) {
  testing::TempDir tmp;
  Context ctx;
  RouterServer server(ctx);
  ASSERT_TRUE(server.Bind("ipc://" + tmp.Sub("r.sock")).ok());
  DealerClient client(ctx);
  ASSERT_TRUE(client.Connect("ipc://" + tmp.Sub("r.sock")).ok());
  ASSERT_TRUE(client.WaitWritable(5s));
  ASSERT_TRUE(client.Send("x", 1).ok());
  std::optional<PeerCredentials> sender;
  auto in = ReceiveWithCredentials(server, 5000ms, &sender);
  ASSERT_TRUE(in.ok()) << in.status().message();
  ASSERT_TRUE(sender.has_value());
  EXPECT_EQ(sender->pid, getpid());
  EXPECT_EQ(sender->uid, geteuid());
}

}  // namespace
}  // namespace nodelet::ipc
