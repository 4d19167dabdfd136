// lib/ipc/peer_access: who may talk to nodelet. The parsing of libzmq's peer address and of
// /proc/PID/status, the policy (root, nodelet's own uid, the admin group as primary or
// supplementary group), --admin-group's resolution, and the check on real sockets: this test
// binary runs itself again as another user (fork, setgroups/setresgid/setresuid, exec with
// --gtest_filter=PeerAccessChild.*) to connect to a RouterServer bound on a context with a
// PeerGate.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "lib/ipc/peer_access.h"
#include "lib/ipc/sockets.h"
#include "tests/testing/harness.h"

namespace nodelet::ipc {
namespace {

using namespace std::chrono_literals;

TEST(PeerAccessTest, ParsesTheCredentialsLibzmqAppendsToAnIpcPeerAddress) {
  EXPECT_EQ(ParsePeerAddress("localhost:0:0:1234"), (PeerCredentials{0, 0, 1234}));
  EXPECT_EQ(ParsePeerAddress("localhost:65534:65534:7"), (PeerCredentials{65534, 65534, 7}));
  EXPECT_EQ(ParsePeerAddress(":1000:100:0"), (PeerCredentials{1000, 100, 0}));
  // Whatever comes before the last three fields is the host part (it may hold colons).
  EXPECT_EQ(ParsePeerAddress("::1:5:6:7"), (PeerCredentials{5, 6, 7}));
  for (const char* bad : {"", "localhost", "localhost:1:2", "a:b:c:d", "localhost:-1:2:3",
                          "localhost:1:2:", "localhost:1: 2:3", "x:99999999999:1:1",
                          "x:1:1:4294967295", "127.0.0.1"}) {
    EXPECT_EQ(ParsePeerAddress(bad), std::nullopt) << bad;
  }
}

TEST(PeerAccessTest, ParsesUidAndGroupsOfProcStatus) {
  const std::string text =
      "Name:\tbash\nUmask:\t0022\nState:\tS (sleeping)\nPid:\t42\n"
      "Uid:\t1000\t1001\t1002\t1003\nGid:\t100\t100\t100\t100\nFDSize:\t256\n"
      "Groups:\t4 24 27 1001 \nNStgid:\t42\n";
  auto c = ParseProcStatus(text);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->euid, 1001u);
  EXPECT_EQ(c->groups, (std::vector<gid_t>{4, 24, 27, 1001}));

  auto none = ParseProcStatus("Uid:\t0\t0\t0\t0\nGroups:\t\n");
  ASSERT_TRUE(none.has_value());
  EXPECT_TRUE(none->groups.empty());

  EXPECT_EQ(ParseProcStatus("Uid:\t0\t0\t0\t0\n"), std::nullopt) << "no Groups line";
  EXPECT_EQ(ParseProcStatus("Groups:\t1\n"), std::nullopt) << "no Uid line";
  EXPECT_EQ(ParseProcStatus("Uid:\t0\t0\nGroups:\t1\n"), std::nullopt) << "short Uid line";
  EXPECT_EQ(ParseProcStatus("Uid:\t0\t0\t0\t0\nGroups:\t1 x\n"), std::nullopt);
  // A "Uids:"-like key is not "Uid:".
  EXPECT_EQ(ParseProcStatus("Uidx:\t0\t0\t0\t0\nGroups:\t\n"), std::nullopt);

  // This process's own file parses, with our euid.
  auto self = ReadProcCredentials(getpid());
  ASSERT_TRUE(self.has_value());
  EXPECT_EQ(self->euid, geteuid());
  EXPECT_EQ(ReadProcCredentials(0), std::nullopt);
}

struct FakeProc {
  std::optional<ProcCredentials> answer;
  int calls = 0;
  ProcCredentialsReader reader() {
    return [this](pid_t) {
      ++calls;
      return answer;
    };
  }
};

TEST(PeerAccessTest, PolicyAllowsRootItsOwnUidAndTheAdminGroupOnly) {
  const PeerPolicy no_group{1500, std::nullopt};
  const PeerPolicy with_group{0, gid_t{4242}};
  FakeProc proc;

  EXPECT_TRUE(CheckPeer(no_group, {0, 0, 10}, proc.reader()).allowed);
  EXPECT_EQ(CheckPeer(no_group, {0, 0, 10}, proc.reader()).reason, "root");
  EXPECT_TRUE(CheckPeer(no_group, {1500, 1500, 10}, proc.reader()).allowed) << "own uid";
  PeerDecision other = CheckPeer(no_group, {65534, 4242, 10}, proc.reader());
  EXPECT_FALSE(other.allowed);
  EXPECT_EQ(other.reason, "uid 65534 gid 4242 is not root, not uid 1500 (no --admin-group is set)");
  EXPECT_EQ(proc.calls, 0) << "without an admin group no groups are read";

  // The admin group as the primary gid (SO_PEERCRED's) needs no lookup.
  PeerDecision primary = CheckPeer(with_group, {65534, 4242, 10}, proc.reader());
  EXPECT_TRUE(primary.allowed);
  EXPECT_EQ(primary.reason, "primary group 4242");
  EXPECT_EQ(proc.calls, 0);

  // As a supplementary group of the pid, when /proc still shows the same euid.
  proc.answer = ProcCredentials{65534, {27, 4242}};
  PeerDecision supplementary = CheckPeer(with_group, {65534, 65534, 10}, proc.reader());
  EXPECT_TRUE(supplementary.allowed);
  EXPECT_EQ(supplementary.reason, "supplementary group 4242");
  EXPECT_EQ(proc.calls, 1);

  // A pid now owned by someone else (exited, reused) does not lend its groups.
  proc.answer = ProcCredentials{1000, {4242}};
  EXPECT_FALSE(CheckPeer(with_group, {65534, 65534, 10}, proc.reader()).allowed);
  // Not in the group, a process that is gone, or a pid we cannot see (0): refused.
  proc.answer = ProcCredentials{65534, {27}};
  PeerDecision outside = CheckPeer(with_group, {65534, 65534, 10}, proc.reader());
  EXPECT_FALSE(outside.allowed);
  EXPECT_EQ(outside.reason, "uid 65534 gid 65534 is not root, not uid 0 and not in group 4242");
  proc.answer.reset();
  EXPECT_FALSE(CheckPeer(with_group, {65534, 65534, 10}, proc.reader()).allowed);
  const int calls = proc.calls;
  proc.answer = ProcCredentials{65534, {4242}};
  EXPECT_FALSE(CheckPeer(with_group, {65534, 65534, 0}, proc.reader()).allowed);
  EXPECT_EQ(proc.calls, calls) << "pid 0: nothing to read";
}

TEST(PeerAccessTest, AdminGroupIsANameOrAGidAndAnUnknownNameIsAnError) {
  auto root = ResolveAdminGroup("root");
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  EXPECT_EQ(*root, 0u);
  auto number = ResolveAdminGroup("4242");
  ASSERT_TRUE(number.ok());
  EXPECT_EQ(*number, 4242u);
  auto unknown = ResolveAdminGroup("no-such-group-for-nodelet");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(unknown.status().message(),
            "--admin-group: no group named 'no-such-group-for-nodelet'");
  EXPECT_FALSE(ResolveAdminGroup("").ok());
  EXPECT_FALSE(ResolveAdminGroup("4294967295").ok()) << "(gid_t)-1 is no gid";
}

TEST(PeerAccessTest, RunDirectoryIs0700WithoutAGroupAnd2750OfTheGroupWithOne) {
  testing::TempDir dir;
  const std::string run = dir.Sub("run");
  ASSERT_TRUE(PrepareRunDirectory(run, PeerPolicy{0, std::nullopt}).ok());
  struct stat st {};
  ASSERT_EQ(stat(run.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  ASSERT_TRUE(PrepareRunDirectory(run, PeerPolicy{0, gid_t{4242}}).ok());
  ASSERT_EQ(stat(run.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 02750u);
  EXPECT_EQ(st.st_gid, 4242u);
  // What is made inside is the group's without a chown.
  const std::string file = run + "/f";
  { std::ofstream(file) << "x"; }
  ASSERT_EQ(stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_gid, 4242u);
  // Taken back to root only when the group goes.
  ASSERT_TRUE(PrepareRunDirectory(run, PeerPolicy{0, std::nullopt}).ok());
  ASSERT_EQ(stat(run.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
}

// ---- Real sockets, a client of another uid.

constexpr const char* kChildUriEnv = "NODELET_PEER_ACCESS_CHILD_URI";
// The child's exit codes.
constexpr int kChildAnswered = 0;
constexpr int kChildRefused = 3;
constexpr int kChildNoAnswer = 4;
constexpr int kChildNotWritable = 5;

// Runs in the re-executed child only: connects, sends "ping", and exits with what happened.
TEST(PeerAccessChild, ConnectAndPing) {
  const char* uri = std::getenv(kChildUriEnv);
  if (uri == nullptr) GTEST_SKIP() << "only in the child of PeerGateTest";
  Context ctx;
  int code = kChildNoAnswer;
  {
    DealerClient client(ctx);
    if (!client.Connect(uri).ok()) _exit(kChildNotWritable);
    if (!client.WaitWritable(5s)) {
      Status refused = client.Refused();
      code = refused.code() == StatusCode::kPermissionDenied ? kChildRefused : kChildNotWritable;
      if (!refused.ok()) std::fprintf(stderr, "child: %s\n", refused.message().c_str());
    } else if (client.Send("ping", 4).ok()) {
      auto reply = client.Receive(5s);
      if (reply.ok() && reply->to_string() == "pong") code = kChildAnswered;
    }
  }
  std::fflush(nullptr);
  _exit(code);
}

struct ChildIdentity {
  uid_t uid;
  gid_t gid;
  std::vector<gid_t> groups;
};

// Starts this binary again as `who`, running PeerAccessChild against `uri`; returns its pid.
pid_t SpawnChild(const std::string& uri, const ChildIdentity& who) {
  std::string exe(4096, '\0');
  ssize_t n = readlink("/proc/self/exe", exe.data(), exe.size() - 1);
  if (n <= 0) return -1;
  exe.resize(static_cast<size_t>(n));
  std::string filter = "--gtest_filter=PeerAccessChild.*";
  std::string env_uri = std::string(kChildUriEnv) + "=" + uri;
  std::vector<char*> argv = {exe.data(), filter.data(), nullptr};
  std::vector<char*> envp = {env_uri.data(), nullptr};
  pid_t pid = fork();
  if (pid != 0) return pid;
  // The child: only async-signal-safe calls until exec.
  if (setgroups(who.groups.size(), who.groups.data()) != 0 ||
      setresgid(who.gid, who.gid, who.gid) != 0 || setresuid(who.uid, who.uid, who.uid) != 0) {
    _exit(100);
  }
  execve(exe.c_str(), argv.data(), envp.data());
  _exit(101);
}

// Serves "pong" to every "ping" until the child exits; its exit code, or -1 at the deadline.
int ServeUntilChildExits(RouterServer& server, pid_t child) {
  for (int i = 0; i < 400; ++i) {  // 400 x 50 ms: a 20 s deadline
    auto in = server.Receive(50ms);
    if (in.ok()) (void)server.Send(in->peer, "pong", 4);
    int st = 0;
    if (waitpid(child, &st, WNOHANG) == child) return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  return -1;
}

// The child's exit code, or -1 when it does not exit within 10 s (then it is killed).
int WaitChild(pid_t child) {
  for (int i = 0; i < 1000; ++i) {
    int st = 0;
    if (waitpid(child, &st, WNOHANG) == child) return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    usleep(10'000);
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  return -1;
}

class PeerGateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to run a client as another user";
    // The child (uid 65534) must reach the socket through the test directory.
    ASSERT_EQ(chmod(dir_.path().c_str(), 0755), 0);
  }
  testing::TempDir dir_;
};

TEST_F(PeerGateTest, PeerOfAnotherUidIsRefusedAtTheHandshakeWhateverTheFileMode) {
  Context ctx;
  ASSERT_TRUE(ctx.RequirePeerPolicy(PeerPolicy{0, std::nullopt}).ok());
  RouterServer server(ctx);
  const std::string uri = "ipc://" + dir_.Sub("s.sock");
  // World-writable: only the credential check stands in the way.
  ASSERT_TRUE(server.Bind(uri, 0666).ok());

  pid_t child = SpawnChild(uri, {65534, 65534, {}});
  ASSERT_GT(child, 0);
  EXPECT_EQ(ServeUntilChildExits(server, child), kChildRefused);
  EXPECT_GE(ctx.gate()->refused(), 1u);
  EXPECT_EQ(ctx.gate()->allowed(), 0u);

  // Root (this process) is let in on the same socket.
  DealerClient client(ctx);
  ASSERT_TRUE(client.Connect(uri).ok());
  ASSERT_TRUE(client.WaitWritable(5s));
  ASSERT_TRUE(client.Send("hi", 2).ok());
  auto got = server.Receive(5s);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->payload.to_string(), "hi");
  EXPECT_TRUE(client.Refused().ok());
}

TEST_F(PeerGateTest, AdminGroupMembersGetInAsPrimaryOrSupplementaryGroup) {
  constexpr gid_t kAdmin = 4242;
  Context ctx;
  ASSERT_TRUE(ctx.RequirePeerPolicy(PeerPolicy{0, kAdmin}).ok());
  RouterServer server(ctx);
  const std::string path = dir_.Sub("s.sock");
  ASSERT_TRUE(server.Bind("ipc://" + path).ok());
  // The file follows the group: 0660, group kAdmin.
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0660u);
  EXPECT_EQ(st.st_gid, kAdmin);

  pid_t supplementary = SpawnChild("ipc://" + path, {65534, 65534, {kAdmin}});
  ASSERT_GT(supplementary, 0);
  EXPECT_EQ(ServeUntilChildExits(server, supplementary), kChildAnswered);
  pid_t primary = SpawnChild("ipc://" + path, {65534, kAdmin, {}});
  ASSERT_GT(primary, 0);
  EXPECT_EQ(ServeUntilChildExits(server, primary), kChildAnswered);
  EXPECT_EQ(ctx.gate()->allowed(), 2u);
  EXPECT_EQ(ctx.gate()->refused(), 0u);

  // Outside the group the file's mode already refuses (connect: EACCES), and the probe says so.
  // Make the file world-writable to reach the credential check: refused there.
  ASSERT_EQ(chmod(path.c_str(), 0666), 0);
  pid_t outsider = SpawnChild("ipc://" + path, {65534, 65534, {27}});
  ASSERT_GT(outsider, 0);
  EXPECT_EQ(ServeUntilChildExits(server, outsider), kChildRefused);
  EXPECT_GE(ctx.gate()->refused(), 1u);
}

TEST_F(PeerGateTest, ProbeTellsAFileSystemRefusalApartFromNoServer) {
  Context ctx;
  RouterServer server(ctx);
  const std::string run = dir_.Sub("run");
  ASSERT_TRUE(PrepareRunDirectory(run, PeerPolicy{0, std::nullopt}).ok());
  ASSERT_TRUE(server.Bind("ipc://" + run + "/s.sock").ok());
  EXPECT_TRUE(ProbeIpcSocket(run + "/s.sock").ok());
  Status none = ProbeIpcSocket(run + "/none.sock");
  EXPECT_EQ(none.code(), StatusCode::kUnavailable);
  EXPECT_NE(none.message().find("No such file or directory"), std::string::npos);
  // As uid 65534 (a thread cannot switch alone: glibc's setresuid changes every thread, so a
  // child does it and reports through its exit code).
  pid_t pid = fork();
  if (pid == 0) {
    if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0) _exit(100);
    Status s = ProbeIpcSocket(run + "/s.sock");
    const bool ok = s.code() == StatusCode::kPermissionDenied &&
                    s.message() == "permission denied: " + run + "/s.sock (needs root)";
    _exit(ok ? 0 : 1);
  }
  ASSERT_GT(pid, 0);
  EXPECT_EQ(WaitChild(pid), 0);
}

}  // namespace
}  // namespace nodelet::ipc
