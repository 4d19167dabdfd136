// Hostile peers on the supervisor's sockets (docs/supervisor.md, "Hostile input"), with the real
// binaries (the fixture is in supervisor_fixture.h): garbage, clients that never speak, a frame
// claiming a huge length and a flood are dropped or bounded while everyone else is served. And
// who may talk to nodelet: only root, or with --admin-group the members of that group.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "lib/ipc/endpoints.h"
#include "lib/ipc/sockets.h"
#include "tests/integration/supervisor_fixture.h"
#include "tests/testing/harness.h"

namespace nodelet::testing {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

TEST_F(SupervisorTest, GarbageOnControlAndCtlSocketsIsDropped) {
  Start();
  ASSERT_TRUE(notify_->WaitFor("READY=1", 20s));
  ipc::Context ctx;
  std::mt19937 rng(42);
  for (const auto& ep : {ipc::kControlEndpoint, ipc::kCtlEndpoint}) {
    ipc::DealerClient dealer(ctx);
    ASSERT_TRUE(dealer.Connect(ep.Uri(dir_.Sub("run"))).ok());
    ASSERT_TRUE(dealer.WaitWritable(5s));
    for (int i = 0; i < 200; ++i) {
      std::string junk(static_cast<size_t>(rng() % 512), '\0');
      for (auto& ch : junk) ch = static_cast<char>(rng());
      if (i % 3 == 0) junk.replace(0, std::min<size_t>(junk.size(), 8), "\x10\0\0\0NLCT", 8);
      (void)dealer.Send(junk.data(), junk.size());
    }
  }
  auto st = Ctl({"status"});
  EXPECT_EQ(st.exit_code, 0) << st.output;
  EXPECT_TRUE(nodelet_->running());
}

// A raw connection to a ZeroMQ ipc:// socket file, below ZeroMQ: the test speaks (or does not
// speak) ZMTP itself.
int RawConnect(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Reads (and discards) what the server sends until it closes the connection; false if it is
// still open at the deadline.
bool WaitClosedByPeer(int fd, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  char buf[512];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return true;
  }
}

// The resident set of a process, in MiB.
long RssMiB(pid_t pid) {
  std::istringstream in(ReadTextFile("/proc/" + std::to_string(pid) + "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6) / 1024;
  }
  return -1;
}

// Clients that connect to the control and ctl sockets and never say a word hold no slot: the
// operator is still served while they sit there, and the server drops each of them once the
// ZMTP handshake deadline has passed.
TEST_F(SupervisorTest, SilentClientsAreDroppedAndOthersStillServed) {
  Start();
  ASSERT_TRUE(notify_->WaitFor("READY=1", 20s));
  std::vector<int> fds;
  for (const auto& ep : {ipc::kControlEndpoint, ipc::kCtlEndpoint}) {
    for (int i = 0; i < 50; ++i) {
      int fd = RawConnect(ep.Path(dir_.Sub("run")));
      ASSERT_GE(fd, 0) << ep.Path(dir_.Sub("run")) << ": " << strerror(errno);
      fds.push_back(fd);
    }
  }
  auto st = Ctl({"status"});
  EXPECT_EQ(st.exit_code, 0) << st.output;
  // Handshake deadline (lib/ipc/sockets.cc) plus slack.
  for (int fd : fds) EXPECT_TRUE(WaitClosedByPeer(fd, 20s)) << "a silent client is still connected";
  for (int fd : fds) close(fd);
  EXPECT_EQ(Ctl({"status"}).exit_code, 0);
  EXPECT_TRUE(nodelet_->running());
}

// A peer that completes the ZMTP handshake and then announces a frame of 1 TiB (and one of
// just over the ctl socket's 64 KiB limit) is disconnected at the header: nothing is allocated
// for it, and everyone else is served as before.
TEST_F(SupervisorTest, FrameClaimingAHugeLengthIsDroppedWithoutAllocating) {
  Start();
  ASSERT_TRUE(notify_->WaitFor("READY=1", 20s));
  const long rss_before = RssMiB(nodelet_->pid());
  // ZMTP 3.0: greeting (signature, version 3.0, NULL mechanism, as-server 0, filler), then a
  // READY command naming our socket type.
  std::string greeting(64, '\0');
  greeting[0] = '\xff';
  greeting[9] = '\x7f';
  greeting[10] = 3;
  greeting.replace(12, 4, "NULL");
  std::string ready =
      std::string("\x05READY", 6) + "\x0bSocket-Type" + std::string("\0\0\0\x06", 4) + "DEALER";
  std::string command = std::string("\x04", 1) + static_cast<char>(ready.size()) + ready;
  auto long_frame = [](uint64_t size) {
    std::string f(1, '\x02');  // a long message frame, the last one
    for (int i = 7; i >= 0; --i) f += static_cast<char>((size >> (8 * i)) & 0xff);
    return f + "NLCT";  // the first few bytes of the promised body
  };
  const std::pair<ipc::Endpoint, uint64_t> cases[] = {
      {ipc::kCtlEndpoint, uint64_t{1} << 40},
      {ipc::kControlEndpoint, uint64_t{1} << 40},
      {ipc::kCtlEndpoint, 64 * 1024 + 1},
  };
  for (const auto& [ep, size] : cases) {
    int fd = RawConnect(ep.Path(dir_.Sub("run")));
    ASSERT_GE(fd, 0);
    std::string out = greeting + command + long_frame(size);
    ASSERT_EQ(send(fd, out.data(), out.size(), MSG_NOSIGNAL), static_cast<ssize_t>(out.size()));
    EXPECT_TRUE(WaitClosedByPeer(fd, 10s))
        << ep.file << ": a frame of " << size << " bytes did not get the peer dropped";
    close(fd);
  }
  auto st = Ctl({"status"});
  EXPECT_EQ(st.exit_code, 0) << st.output;
  EXPECT_LT(RssMiB(nodelet_->pid()) - rss_before, 64) << "memory grew for a promised frame";
  EXPECT_TRUE(nodelet_->running());
}

// A peer that floods the control and ctl sockets with as much garbage as it can send: memory
// stays bounded (ZeroMQ's high-water marks push back on the flooder, nothing queues without
// limit), the garbage is counted on /metrics, and the operator and the services are served
// while the flood goes on.
TEST_F(SupervisorTest, FloodingPeerIsBoundedCountedAndOthersStillServed) {
  const int port = FreeLoopbackPort();
  Start({"--http-address", "127.0.0.1:" + std::to_string(port)});
  ASSERT_TRUE(notify_->WaitFor("READY=1", 20s));
  const long rss_before = RssMiB(nodelet_->pid());
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> sent{0};
  std::vector<std::thread> flooders;
  for (const auto& ep : {ipc::kControlEndpoint, ipc::kCtlEndpoint}) {
    flooders.emplace_back([&, uri = ep.Uri(dir_.Sub("run")),
                           big = std::string(ep.file) == ipc::kControlEndpoint.file] {
      ipc::Context ctx;
      // Frames just under each socket's limit: the most bytes per message the server accepts.
      ipc::DealerClient dealer(ctx, 8 << 20);
      if (!dealer.Connect(uri).ok() || !dealer.WaitWritable(5s)) return;
      std::string junk(big ? 4 * 1024 * 1024 - 64 : 64 * 1024 - 64, '\x5a');
      while (!stop.load()) {
        if (dealer.Send(junk.data(), junk.size()).ok()) {
          ++sent;
        } else {
          (void)dealer.WaitWritable(10ms);  // the high-water mark pushes back
        }
      }
    });
  }
  // While the flood runs: the operator gets answers, the services keep heartbeating.
  long rss_peak = rss_before;
  for (int i = 0; i < 5; ++i) {
    auto st = Ctl({"status"});
    EXPECT_EQ(st.exit_code, 0) << st.output;
    EXPECT_THAT(st.output, HasSubstr("plegd"));
    rss_peak = std::max(rss_peak, RssMiB(nodelet_->pid()));
  }
  stop = true;
  for (auto& t : flooders) t.join();
  EXPECT_GT(sent.load(), 10u);
  EXPECT_LT(rss_peak - rss_before, 512) << "the flood was queued without bound";
  httplib::Client http("127.0.0.1", port);
  http.set_read_timeout(5s);
  auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  const std::string key = "nodelet_ipc_bad_messages_total{service=\"supervisor\"} ";
  auto at = metrics->body.find(key);
  ASSERT_NE(at, std::string::npos) << metrics->body;
  EXPECT_GT(std::atoll(metrics->body.c_str() + at + key.size()), 0);
  // No service was taken for dead while the supervisor's sockets were flooded.
  for (const auto& svc : kServices) {
    EXPECT_THAT(metrics->body, HasSubstr("nodelet_service_up{service=\"" + svc + "\"} 1"));
  }
  EXPECT_EQ(Ctl({"status"}).exit_code, 0);
  EXPECT_TRUE(nodelet_->running());
}

// Who may talk to nodelet. Without --admin-group only root (and nodelet's own
// uid) may: a non-root `nodeletctl status` is refused with "permission denied" by the run
// directory's mode (0700), and, with the directory and every socket opened to everyone, by the
// credential check of each socket (SO_PEERCRED through ZAP), which nodelet logs. Root is still
// served throughout.
TEST_F(SupervisorTest, NonRootNodeletctlIsRefusedWithPermissionDenied) {
  // The test directory must let uid 65534 walk to the run directory.
  ASSERT_EQ(chmod(dir_.path().c_str(), 0755), 0);
  Start();
  ASSERT_TRUE(notify_->WaitFor("READY=1", 20s));
  ASSERT_EQ(Ctl({"status"}).exit_code, 0);
  struct stat st {};
  ASSERT_EQ(stat(dir_.Sub("run").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);

  const std::string ctl_sock = dir_.Sub("run") + "/ctl.sock";
  auto status = CtlAsNobody({}, {"status"});
  EXPECT_NE(status.exit_code, 0) << status.output;
  EXPECT_FALSE(status.timed_out);
  EXPECT_THAT(status.output,
              HasSubstr("nodeletctl: permission denied: " + ctl_sock + " (needs root)"));
  for (const std::vector<std::string>& cmd :
       std::vector<std::vector<std::string>>{{"pods"}, {"volumes"}, {"pid"}}) {
    auto r = CtlAsNobody({}, cmd);
    EXPECT_NE(r.exit_code, 0) << cmd[0] << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr("permission denied")) << cmd[0];
  }

  // The directory and the sockets opened to everyone (as a careless chmod would): the
  // file system lets nobody in, the credential check of each socket does not.
  ASSERT_EQ(chmod(dir_.Sub("run").c_str(), 0755), 0);
  for (const char* sock :
       {"ctl.sock", "statusd.sock", "volumed.sock", "control.sock", "plegd-events.sock",
        "plegd-snapshot.sock", "statusd-watch.sock", "volumed-events.sock", "podworkerd.sock"}) {
    ASSERT_EQ(chmod(dir_.Sub("run/" + std::string(sock)).c_str(), 0666), 0) << sock;
  }
  status = CtlAsNobody({}, {"status"});
  EXPECT_NE(status.exit_code, 0) << status.output;
  EXPECT_FALSE(status.timed_out);
  EXPECT_THAT(status.output, HasSubstr("nodeletctl: permission denied: " + ctl_sock));
  EXPECT_THAT(status.output, HasSubstr("nodelet refused uid 65534 gid 65534"));
  auto pods = CtlAsNobody({}, {"pods"});
  EXPECT_NE(pods.exit_code, 0) << pods.output;
  EXPECT_THAT(pods.output, HasSubstr("permission denied: " + dir_.Sub("run") + "/statusd.sock"));
  auto volumes = CtlAsNobody({}, {"volumes"});
  EXPECT_NE(volumes.exit_code, 0) << volumes.output;
  EXPECT_THAT(volumes.output, HasSubstr("permission denied"));
  // The refusals are logged with the peer's credentials: the supervisor's for ctl.sock, and
  // statusd's in its own log (which reaches the file through the supervisor: waited for).
  auto logged = [&](const std::string& file, const std::string& needle) {
    for (int i = 0; i < 50; ++i) {
      if (ReadTextFile(file).find(needle) != std::string::npos) return true;
      notify_->Receive(100ms);
    }
    return false;
  };
  EXPECT_TRUE(logged(dir_.Sub("nodelet.log"),
                     "Refused a connection to ctl.sock from uid 65534 gid 65534 pid "))
      << ReadTextFile(dir_.Sub("nodelet.log"));
  EXPECT_TRUE(logged(dir_.Sub("log/statusd.log"),
                     "Refused a connection to statusd.sock from uid 65534 gid 65534 pid "));
  // Root is served as before, and no service was disturbed.
  auto again = Ctl({"status"});
  EXPECT_EQ(again.exit_code, 0) << again.output;
}

// With --admin-group the run directory is 2750 and every socket 0660, both of that group, and a
// member (as a supplementary or primary group) is served by every socket nodeletctl uses; anyone
// else is still refused, and told which group would let them in.
TEST_F(SupervisorTest, AdminGroupMemberIsServedAndOthersAreRefused) {
  constexpr gid_t kAdmin = 4242;  // a gid needs no name
  ASSERT_EQ(chmod(dir_.path().c_str(), 0755), 0);
  Start({"--admin-group", std::to_string(kAdmin)});
  ASSERT_TRUE(notify_->WaitFor("READY=1", 20s));
  ASSERT_EQ(Ctl({"status"}).exit_code, 0);
  struct stat st {};
  ASSERT_EQ(stat(dir_.Sub("run").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 02750u);
  EXPECT_EQ(st.st_gid, kAdmin);
  for (const char* sock :
       {"ctl.sock", "statusd.sock", "volumed.sock", "control.sock", "plegd-events.sock",
        "plegd-snapshot.sock", "statusd-watch.sock", "volumed-events.sock", "podworkerd.sock"}) {
    ASSERT_EQ(stat(dir_.Sub("run/" + std::string(sock)).c_str(), &st), 0) << sock;
    EXPECT_EQ(st.st_mode & 07777, 0660u) << sock;
    EXPECT_EQ(st.st_gid, kAdmin) << sock;
  }

  auto status = CtlAsNobody({kAdmin}, {"status"});
  EXPECT_EQ(status.exit_code, 0) << status.output;
  for (const auto& s : kServices) {
    EXPECT_THAT(status.output, ::testing::ContainsRegex(s + " +RUNNING +pid [0-9]+"));
  }
  auto pods = CtlAsNobody({kAdmin}, {"pods"});
  EXPECT_EQ(pods.exit_code, 0) << pods.output;
  EXPECT_THAT(pods.output, ::testing::Not(HasSubstr("permission denied")));
  auto volumes = CtlAsNobody({kAdmin}, {"volumes"});
  EXPECT_EQ(volumes.exit_code, 0) << volumes.output;
  // The group as the primary gid.
  auto primary = RunCommand(
      {"/usr/bin/setpriv", "--reuid=65534", "--regid=" + std::to_string(kAdmin), "--clear-groups",
       BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "status"},
      15s);
  EXPECT_EQ(primary.exit_code, 0) << primary.output;

  auto outsider = CtlAsNobody({}, {"status"});
  EXPECT_NE(outsider.exit_code, 0) << outsider.output;
  EXPECT_THAT(outsider.output, HasSubstr("nodeletctl: permission denied: " + dir_.Sub("run") +
                                         "/ctl.sock (needs root or group 4242)"));
}

}  // namespace
}  // namespace nodelet::testing
