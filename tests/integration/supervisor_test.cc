// The supervisor with the real binaries: `nodelet` spawning the four services, each test with its
// own directories and a NOTIFY_SOCKET bound here, so the sd_notify datagrams are the real ones.
// Service pids come from `nodeletctl pid`. No containerd: plegd points at a socket that does not
// exist (it reports failing health, which the grace period given here tolerates).
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "lib/ipc/endpoints.h"
#include "lib/ipc/sockets.h"
#include "tests/testing/harness.h"
#include "tests/testing/leak_check.h"

namespace nodelet::testing {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

const std::vector<std::string> kServices = {"plegd", "statusd", "volumed", "podworkerd"};

class SupervisorTest : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> extra = {}, std::map<std::string, std::string> env = {}) {
    notify_ = std::make_unique<NotifyListener>(dir_.Sub("notify.sock"));
    env["NOTIFY_SOCKET"] = notify_->path();
    std::vector<std::string> argv = {BinDir() + "/nodelet",
                                     "--root-dir",
                                     dir_.Sub("root"),
                                     "--run-dir",
                                     dir_.Sub("run"),
                                     "--log-dir",
                                     dir_.Sub("log"),
                                     "--runtime-endpoint",
                                     "unix://" + runtime_socket_,
                                     "--failing-grace",
                                     "1h",
                                     "--cgroup-root",
                                     TestCgroupRoot(dir_.path())};
    argv.insert(argv.end(), extra.begin(), extra.end());
    nodelet_ = std::make_unique<Subprocess>(argv, env, dir_.Sub("nodelet.log"));
  }
  void TearDown() override {
    if (HasFailure()) {
      std::ifstream in(dir_.Sub("nodelet.log"));
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      std::cerr << "---- nodelet.log\n"
                << (text.size() > 5000 ? text.substr(text.size() - 5000) : text);
    }
  }
  CommandResult Ctl(std::vector<std::string> args) {
    std::vector<std::string> argv = {BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run")};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, 10s);
  }
  // nodeletctl as uid and gid 65534 (nobody) with these supplementary groups (setpriv).
  CommandResult CtlAsNobody(std::vector<gid_t> groups, std::vector<std::string> args) {
    std::string groups_flag = "--clear-groups";
    if (!groups.empty()) {
      groups_flag = "--groups=";
      for (size_t i = 0; i < groups.size(); ++i) {
        groups_flag += (i ? "," : "") + std::to_string(groups[i]);
      }
    }
    std::vector<std::string> argv = {"/usr/bin/setpriv", "--reuid=65534",          "--regid=65534",
                                     groups_flag,        BinDir() + "/nodeletctl", "--run-dir",
                                     dir_.Sub("run")};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, 15s);
  }
  pid_t Pid(const std::string& service) {
    auto r = Ctl({"pid", service});
    return r.exit_code == 0 ? static_cast<pid_t>(std::atoi(r.output.c_str())) : 0;
  }
  std::map<std::string, pid_t> Pids() {
    std::map<std::string, pid_t> out;
    for (const auto& s : kServices) out[s] = Pid(s);
    return out;
  }

  TempDir dir_;
  std::string runtime_socket_ = dir_.Sub("no-runtime.sock");
  std::unique_ptr<NotifyListener> notify_;
  std::unique_ptr<Subprocess> nodelet_;
};

TEST_F(SupervisorTest, AllRunningWithDatagramsAndSigtermLeavesNothing) {
  Start({}, {{"WATCHDOG_USEC", "400000"}});
  ASSERT_TRUE(notify_->WaitFor("READY=1", 20s));
  bool status_seen = false;
  for (const auto& d : notify_->history())
    status_seen |= d.find("STATUS=4/4 services running") != std::string::npos;
  EXPECT_TRUE(status_seen) << "READY=1 comes with the summary";
  EXPECT_TRUE(notify_->WaitFor("WATCHDOG=1", 2s)) << "WATCHDOG=1 while the loop runs";

  auto status = Ctl({"status"});
  EXPECT_EQ(status.exit_code, 0) << status.output;
  for (const auto& s : kServices) {
    EXPECT_THAT(status.output, ::testing::ContainsRegex(s + " +RUNNING +pid [0-9]+, uptime "));
  }
  auto json = nlohmann::json::parse(Ctl({"status", "--json"}).output, nullptr, false);
  ASSERT_FALSE(json.is_discarded());

  auto pids = Pids();
  nodelet_->Signal(SIGTERM);
  EXPECT_TRUE(notify_->WaitFor("STOPPING=1", 5s));
  auto st = nodelet_->Wait(15s);
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0);
  for (const auto& [name, pid] : pids) {
    ASSERT_GT(pid, 0) << name;
    EXPECT_TRUE(WaitProcessGone(pid, 1s)) << name << " survived the supervisor";
  }
  EXPECT_EQ(Ctl({"status"}).exit_code, 4) << "no supervisor: exit 4";
  EXPECT_THAT(Ctl({"status"}).output, HasSubstr("not running"));
}

// A socket that accepts connections (into its backlog) and never answers: a runtime that
// hangs, as a SIGSTOPped containerd does.
class HungSocket {
 public:
  explicit HungSocket(const std::string& path) {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
    ok_ = fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
          listen(fd_, 64) == 0;
  }
  ~HungSocket() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return ok_; }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

// Fills the datagram queue of `path` (nobody reads it yet); returns how many were queued.
int FillDatagramQueue(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  int queued = 0;
  for (int i = 0; i < 1000; ++i) {
    const std::string text = "FILLER=" + std::to_string(i);
    if (sendto(fd, text.data(), text.size(), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&addr),
               sizeof addr) < 0) {
      break;
    }
    ++queued;
  }
  close(fd);
  return queued;
}

// The chaos soak's hung SIGTERM: libsystemd's sd_notify blocks on a notify socket whose queue
// is full, and the supervisor's loop stopped there (no ctl answers, no restarts, SIGTERM never
// read). Now a full queue drops STATUS= (READY=1 is sent again until it fits), and SIGTERM
// stops everything within the stop timeout plus one runtime call, also while the runtime hangs.
TEST_F(SupervisorTest, FullNotifySocketAndHungRuntimeNeverStallTheLoopOrTheStop) {
  HungSocket runtime(runtime_socket_);
  ASSERT_TRUE(runtime.ok());
  Start({"--stop-timeout", "5s"});
  // Start() bound a fresh listener; fill it before nodelet's first datagram can be read.
  const int filler = FillDatagramQueue(notify_->path());
  ASSERT_GT(filler, 0);
  // The loop answers ctl requests while nobody reads the notify socket.
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  CommandResult status;
  do {
    status = Ctl({"status"});
  } while (status.exit_code != 0 && std::chrono::steady_clock::now() < deadline);
  ASSERT_EQ(status.exit_code, 0) << "every service RUNNING, answered by the loop: "
                                 << status.output;
  // Reading makes room: READY=1, dropped while the queue was full, arrives.
  EXPECT_TRUE(notify_->WaitFor("READY=1", 10s));
  // Full again, and the runtime hangs: SIGTERM must still stop everything.
  FillDatagramQueue(notify_->path());
  auto pids = Pids();
  const auto term = std::chrono::steady_clock::now();
  nodelet_->Signal(SIGTERM);
  auto st = nodelet_->Wait(30s);
  ASSERT_TRUE(st.has_value()) << "nodelet did not exit within 30 s of SIGTERM";
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0);
  std::cerr << "stopped in "
            << std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now() - term)
                   .count()
            << " ms\n";
  for (const auto& [name, pid] : pids) {
    ASSERT_GT(pid, 0) << name;
    EXPECT_TRUE(WaitProcessGone(pid, 1s)) << name << " survived the supervisor";
  }
}

TEST_F(SupervisorTest, KillNineRestartsOnlyThatServiceAndCtlRestartChangesOnePid) {
  Start();
  ASSERT_TRUE(notify_->WaitFor("READY=1", 20s));
  auto before = Pids();
  ASSERT_EQ(kill(before["plegd"], SIGKILL), 0);
  ASSERT_TRUE(notify_->WaitFor("plegd BACKOFF", 5s));
  ASSERT_TRUE(notify_->WaitFor("STATUS=4/4 services running", 10s));
  auto after = Pids();
  EXPECT_NE(after["plegd"], before["plegd"]);
  for (const char* s : {"statusd", "volumed", "podworkerd"}) EXPECT_EQ(after[s], before[s]) << s;

  auto r = Ctl({"restart", "statusd"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto again = Pids();
  EXPECT_NE(again["statusd"], after["statusd"]);
  for (const char* s : {"plegd", "volumed", "podworkerd"}) EXPECT_EQ(again[s], after[s]) << s;

  // stop → exit 3 for status; start → 0; an unknown name → 4.
  EXPECT_EQ(Ctl({"stop", "volumed"}).exit_code, 0);
  auto st = Ctl({"status"});
  EXPECT_EQ(st.exit_code, 3) << st.output;
  EXPECT_THAT(st.output, ::testing::ContainsRegex("volumed +STOPPED"));
  EXPECT_EQ(Ctl({"start", "volumed"}).exit_code, 0);
  EXPECT_EQ(Ctl({"status"}).exit_code, 0);
  EXPECT_EQ(Ctl({"status", "nosuch"}).exit_code, 4);
  EXPECT_EQ(Ctl({"restart", "nosuch"}).exit_code, 4);
}

TEST_F(SupervisorTest, FailingCommandGoesBackoffThenFatal) {
  std::ofstream(dir_.Sub("config.yaml"))
      << "supervisor:\n  services:\n    volumed:\n      command: [\"/bin/false\"]\n";
  Start({"--config", dir_.Sub("config.yaml"), "--restart-intensity", "3", "--backoff-initial",
         "20ms", "--backoff-max", "40ms"});
  ASSERT_TRUE(notify_->WaitFor("volumed BACKOFF (exit 1)", 10s));
  ASSERT_TRUE(notify_->WaitFor("volumed FATAL", 10s));
  auto st = Ctl({"status", "volumed"});
  EXPECT_EQ(st.exit_code, 3) << st.output;
  EXPECT_THAT(st.output, ::testing::ContainsRegex("volumed +FATAL"));
  EXPECT_THAT(st.output, HasSubstr("too many restarts"));
  EXPECT_EQ(Ctl({"status", "plegd"}).exit_code, 0) << "the others run on";
}

TEST_F(SupervisorTest, SigstoppedServiceIsKilledAndRestarted) {
  Start({"--heartbeat-deadline", "1s", "--stop-timeout", "1s"});
  ASSERT_TRUE(notify_->WaitFor("READY=1", 20s));
  pid_t pid = Pid("statusd");
  ASSERT_GT(pid, 0);
  ASSERT_EQ(kill(pid, SIGSTOP), 0);
  ASSERT_TRUE(notify_->WaitFor("statusd STOPPING (hung", 5s));
  ASSERT_TRUE(WaitProcessGone(pid, 5s)) << "SIGKILL after the stop timeout";
  ASSERT_TRUE(notify_->WaitFor("STATUS=4/4 services running", 10s));
  EXPECT_NE(Pid("statusd"), pid);
}

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

// Hostile peers on the supervisor's sockets (docs/supervisor.md, "Hostile input").

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

// The data directories are made at start (root/pods, root/plugins, log/pods); one that cannot
// be made stops nodelet with an error naming it, before any service is spawned.
TEST_F(SupervisorTest, DataDirectoriesAreMadeOrStartFailsClearly) {
  Start();
  ASSERT_TRUE(notify_->WaitFor("READY=1", 20s));
  for (const char* d : {"root/pods", "root/plugins", "log/pods"}) {
    EXPECT_TRUE(std::filesystem::is_directory(dir_.Sub(d))) << d;
  }
  nodelet_->Signal(SIGTERM);
  ASSERT_TRUE(nodelet_->Wait(15s).has_value());

  std::ofstream(dir_.Sub("a-file")) << "x";
  Subprocess bad({BinDir() + "/nodelet", "--root-dir", dir_.Sub("a-file/root"), "--run-dir",
                  dir_.Sub("run2"), "--log-dir", dir_.Sub("log2"), "--http-address", ""},
                 {}, dir_.Sub("bad.log"));
  auto st = bad.Wait(10s);
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) != 0);
  std::ifstream in(dir_.Sub("bad.log"));
  std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(log, HasSubstr(dir_.Sub("a-file/root")));
}

// systemd mode without a system bus (as in this VM, where PID 1 is not systemd): nodelet spawns
// nothing, says why and exits 1. The mode itself runs under a real systemd in the nspawn test.
TEST_F(SupervisorTest, SystemdModeWithoutABusFailsClearlyAndSpawnsNothing) {
  Subprocess sd({BinDir() + "/nodelet", "--mode", "systemd", "--root-dir", dir_.Sub("root"),
                 "--run-dir", dir_.Sub("run"), "--log-dir", dir_.Sub("log"), "--http-address", ""},
                {{"DBUS_SYSTEM_BUS_ADDRESS", "unix:path=" + dir_.Sub("no-bus.sock")}},
                dir_.Sub("sd.log"));
  auto st = sd.Wait(10s);
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 1);
  std::ifstream in(dir_.Sub("sd.log"));
  std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(log, HasSubstr("systemd mode: Failed to connect to the system bus"));
  EXPECT_THAT(log, ::testing::Not(HasSubstr("plegd 0.1")));
  auto bad = RunCommand({BinDir() + "/nodelet", "--mode", "launchd"}, 10s);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
}

// /metrics passes promtool; /healthz is 503 while a service is FATAL and 200 after it is
// started again; /pods is a v1 PodList.
TEST_F(SupervisorTest, HttpEndpointHealthzMetricsAndPods) {
  const int port = FreeLoopbackPort();
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  Start({"--http-address", addr, "--heartbeat-interval", "200", "--restart-intensity", "1",
         "--backoff-initial", "20ms"});
  ASSERT_TRUE(notify_->WaitFor("READY=1", 20s));
  httplib::Client http("127.0.0.1", port);
  http.set_connection_timeout(5s);
  http.set_read_timeout(5s);
  auto health = http.Get("/healthz");
  ASSERT_TRUE(health) << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 200) << health->body;

  // Metrics: wait until a few heartbeats of every service have arrived.
  auto messages_from = [](const std::string& body, const std::string& svc) {
    std::string key = "nodelet_ipc_messages_total{service=\"" + svc + "\"} ";
    auto at = body.find(key);
    return at == std::string::npos ? 0 : std::atoi(body.c_str() + at + key.size());
  };
  std::string body;
  auto end = std::chrono::steady_clock::now() + 10s;
  for (;;) {
    auto got = http.Get("/metrics");
    ASSERT_TRUE(got);
    body = got->body;
    int fewest = 1 << 30;
    for (const auto& s : kServices) fewest = std::min(fewest, messages_from(body, s));
    // Counters go with every fifth heartbeat (lib/service/service_runtime.cc).
    const bool counted =
        body.find("nodelet_service_stat{service=\"plegd\",name=\"relists\"}") != std::string::npos;
    if ((fewest >= 3 && counted) || std::chrono::steady_clock::now() > end) break;
    notify_->Receive(200ms);
  }
  EXPECT_GE(messages_from(body, "plegd"), 3) << body;
  for (const char* name :
       {"kubelet_running_pods", "kubelet_running_containers", "kubelet_pleg_last_seen_seconds",
        "kubelet_runtime_operations_total", "nodelet_service_up{service=\"plegd\"} 1",
        "nodelet_service_restarts_total", "nodelet_ipc_messages_total",
        "nodelet_ipc_bad_messages_total",
        "nodelet_service_stat{service=\"plegd\",name=\"relists\"} ",
        // The process figures of the supervisor and of each running service, and the build.
        "\nprocess_resident_memory_bytes ", "\nprocess_start_time_seconds ", "\nprocess_open_fds ",
        "nodelet_build_info{version=\"",
        "nodelet_service_resident_memory_bytes{service=\"plegd\"} ",
        "nodelet_service_cpu_seconds_total{service=\"statusd\"} ",
        "# TYPE kubelet_evictions counter", "# TYPE kubelet_started_containers_total counter"}) {
    EXPECT_THAT(body, HasSubstr(name));
  }
  auto promtool = [&](const std::string& text, const std::string& what) {
    { std::ofstream(dir_.Sub("metrics.txt")) << text; }
    auto check =
        RunCommand({"/bin/sh", "-c", "promtool check metrics < " + dir_.Sub("metrics.txt")}, 30s);
    EXPECT_EQ(check.exit_code, 0) << what << ": " << check.output;
  };
  promtool(body, "/metrics");
  // The kubelet's two other metric paths: the prober's metrics, and the resource metrics.
  auto probes = http.Get("/metrics/probes");
  ASSERT_TRUE(probes);
  EXPECT_EQ(probes->status, 200);
  EXPECT_THAT(probes->body, ::testing::Not(HasSubstr("kubelet_"))) << probes->body;
  promtool(probes->body, "/metrics/probes");
  auto resource = http.Get("/metrics/resource");
  ASSERT_TRUE(resource);
  EXPECT_EQ(resource->status, 200);
  EXPECT_THAT(resource->body, HasSubstr("resource_scrape_error")) << resource->body;
  EXPECT_THAT(resource->body, ::testing::Not(HasSubstr("nodelet_service_up"))) << resource->body;
  promtool(resource->body, "/metrics/resource");

  auto pods = http.Get("/pods");
  ASSERT_TRUE(pods);
  EXPECT_EQ(pods->status, 200);
  // Read-only: anything but GET and HEAD is 405, on every path.
  for (const char* path : {"/pods", "/healthz", "/metrics", "/node", "/"}) {
    auto post = http.Post(path, "{}", "application/json");
    ASSERT_TRUE(post) << path;
    EXPECT_EQ(post->status, 405) << path;
    auto put = http.Put(path, "{}", "application/json");
    ASSERT_TRUE(put) << path;
    EXPECT_EQ(put->status, 405) << path;
    auto del = http.Delete(path);
    ASSERT_TRUE(del) << path;
    EXPECT_EQ(del->status, 405) << path;
  }
  auto list = nlohmann::json::parse(pods->body, nullptr, false);
  ASSERT_FALSE(list.is_discarded()) << pods->body;
  EXPECT_EQ(list.value("kind", ""), "PodList");
  EXPECT_TRUE(list.contains("items"));

  // Make volumed FATAL: with intensity 1, two quick crashes.
  pid_t pid = Pid("volumed");
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  ASSERT_TRUE(notify_->WaitFor("STATUS=4/4 services running", 10s));
  pid = Pid("volumed");
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  ASSERT_TRUE(notify_->WaitFor("volumed FATAL", 10s));
  health = http.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 503) << health->body;
  EXPECT_THAT(health->body, HasSubstr("volumed: FATAL"));
  ASSERT_EQ(Ctl({"start", "volumed"}).exit_code, 0);
  health = http.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200) << health->body;

  // Each step was a node event, recorded in statusd with the next housekeeping.
  std::string events;
  auto seen = [&](const std::string& reason) {
    return events.find("\"reason\": \"" + reason + "\"") != std::string::npos;
  };
  const auto deadline = std::chrono::steady_clock::now() + 15s;
  do {
    events = Ctl({"events", "-o", "json"}).output;
    if (seen("ServiceRestarted") && seen("ServiceFatal") && seen("ServiceRecovered")) break;
    notify_->Receive(500ms);
  } while (std::chrono::steady_clock::now() < deadline);
  EXPECT_TRUE(seen("ServiceRestarted")) << events;
  EXPECT_TRUE(seen("ServiceFatal")) << events;
  EXPECT_TRUE(seen("ServiceRecovered")) << events;
  EXPECT_THAT(events, HasSubstr("nodelet-volumed is FATAL: ")) << events;
  // The node's conditions too (NodeNotReady: no runtime here).
  EXPECT_TRUE(seen("NodeNotReady")) << events;
  EXPECT_TRUE(seen("NodeHasSufficientMemory")) << events;
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

// The cgroup flags are checked at start, by nodelet and by podworkerd alike: a --cgroup-root
// that is not an absolute path of plain components, or with the systemd driver not a slice's
// path, is refused naming the flag (docs/resources.md); podworkerd refuses the systemd driver
// when no systemd answers on the system bus (this machine's PID 1 is not systemd).
TEST_F(SupervisorTest, UnsupportedCgroupFlagsAreStartupErrorsNamingTheFlag) {
  for (const std::string bin : {"nodelet", "nodelet-podworkerd"}) {
    auto driver = RunCommand({BinDir() + "/" + bin, "--root-dir", dir_.Sub("root"), "--run-dir",
                              dir_.Sub("run"), "--cgroup-driver", "upstart"},
                             15s);
    EXPECT_EQ(driver.exit_code, 2) << driver.output;
    EXPECT_THAT(driver.output, HasSubstr("--cgroup-driver"));
    EXPECT_THAT(driver.output, HasSubstr("\"upstart\" is not a cgroup driver (cgroupfs, systemd)"));
    auto root = RunCommand({BinDir() + "/" + bin, "--root-dir", dir_.Sub("root"), "--run-dir",
                            dir_.Sub("run"), "--cgroup-root", "/a/../b"},
                           15s);
    EXPECT_EQ(root.exit_code, 2) << root.output;
    EXPECT_THAT(root.output, HasSubstr("--cgroup-root"));
    auto slice = RunCommand(
        {BinDir() + "/" + bin, "--root-dir", dir_.Sub("root"), "--run-dir", dir_.Sub("run"),
         "--cgroup-driver", "systemd", "--cgroup-root", "/nodelet-test/x"},
        15s);
    EXPECT_NE(slice.exit_code, 0) << slice.output;
    EXPECT_THAT(slice.output,
                HasSubstr("--cgroup-root \"/nodelet-test/x\": with the systemd driver"));
  }
  EXPECT_FALSE(std::filesystem::exists(dir_.Sub("run"))) << "nothing is made or bound";
  if (!std::filesystem::exists("/run/systemd/system")) {
    auto no_systemd =
        RunCommand({BinDir() + "/nodelet-podworkerd", "--root-dir", dir_.Sub("root"), "--run-dir",
                    dir_.Sub("run-systemd"), "--cgroup-driver", "systemd"},
                   15s);
    EXPECT_NE(no_systemd.exit_code, 0) << no_systemd.output;
    EXPECT_THAT(no_systemd.output,
                HasSubstr("--cgroup-driver systemd needs systemd on the system bus"));
  }
  auto levels = RunCommand({BinDir() + "/nodelet", "--root-dir", dir_.Sub("root"), "--run-dir",
                            dir_.Sub("run"), "--enforce-node-allocatable", "pods,system-reserved"},
                           15s);
  EXPECT_EQ(levels.exit_code, 2) << levels.output;
  EXPECT_THAT(levels.output, HasSubstr("\"system-reserved\" is not supported by nodelet yet"));
  auto per_qos = RunCommand({BinDir() + "/nodelet", "--root-dir", dir_.Sub("root"), "--run-dir",
                             dir_.Sub("run"), "--cgroups-per-qos=false"},
                            15s);
  EXPECT_NE(per_qos.exit_code, 0) << per_qos.output;
  EXPECT_THAT(per_qos.output, HasSubstr("--enforce-node-allocatable=pods needs --cgroups-per-qos"));
}

TEST_F(SupervisorTest, UnknownAdminGroupIsAStartupErrorNamingTheFlag) {
  auto r = RunCommand(
      {BinDir() + "/nodelet", "--root-dir", dir_.Sub("root"), "--run-dir", dir_.Sub("run"),
       "--log-dir", dir_.Sub("log"), "--admin-group", "no-such-group-for-nodelet"},
      15s);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("nodelet: --admin-group: no group named "
                                  "'no-such-group-for-nodelet'"));
  EXPECT_FALSE(std::filesystem::exists(dir_.Sub("run"))) << "nothing is made or bound";
  // Each service binary refuses it alike (systemd mode gives them the flag themselves).
  auto svc = RunCommand({BinDir() + "/nodelet-statusd", "--root-dir", dir_.Sub("root"), "--run-dir",
                         dir_.Sub("run"), "--admin-group", "no-such-group-for-nodelet"},
                        15s);
  EXPECT_EQ(svc.exit_code, 2) << svc.output;
  EXPECT_THAT(svc.output, HasSubstr("nodelet-statusd: --admin-group: no group named "
                                    "'no-such-group-for-nodelet'"));
}

// A rejected manifest is visible without reading logs. A good manifest and
// one with a bad field in the manifest directory: `nodeletctl manifests` shows the pod of the
// first and the field error of the second (exit 1), and a FailedToParseManifest Warning reaches
// statusd (`nodeletctl events`); a broken file dropped in later gets its own event, and once it
// is fixed every manifest is taken (exit 0).
TEST_F(SupervisorTest, RejectedManifestIsShownByCtlAndSentAsAWarningEvent) {
  const std::string manifests = dir_.Sub("manifests");
  std::filesystem::create_directories(manifests);
  auto pod = [](const std::string& name, const std::string& port) {
    return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
           "\nspec:\n  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
           "    ports:\n    - containerPort: " +
           port + "\n";
  };
  { std::ofstream(manifests + "/good.yaml") << pod("good", "8080"); }
  { std::ofstream(manifests + "/bad.yaml") << pod("bad", "0"); }
  Start({"--pod-manifest-path", manifests, "--node-name", "testnode"});
  ASSERT_TRUE(notify_->WaitFor("READY=1", 20s));

  auto listed = Ctl({"manifests"});
  EXPECT_EQ(listed.exit_code, 1) << "a manifest was rejected: exit 1\n" << listed.output;
  EXPECT_THAT(listed.output, HasSubstr("SOURCE"));
  EXPECT_THAT(listed.output, HasSubstr("PODS/REASON"));
  EXPECT_THAT(listed.output,
              ::testing::ContainsRegex("file +" + manifests +
                                       "/good.yaml +Taken +pod default/good-testnode \\(uid "
                                       "[0-9a-f-]+\\) admitted"));
  EXPECT_THAT(listed.output,
              ::testing::ContainsRegex(
                  "file +" + manifests +
                  "/bad.yaml +Rejected +spec\\.containers\\[0\\]\\.ports\\[0\\]\\.containerPort: "
                  "Invalid value: 0: must be between 1 and 65535, inclusive"));
  auto json = nlohmann::json::parse(Ctl({"manifests", "-o", "json"}).output, nullptr, false);
  ASSERT_FALSE(json.is_discarded());
  ASSERT_EQ(json["manifests"].size(), 2u) << json.dump();
  EXPECT_EQ(json["manifests"][0]["status"], "Rejected");
  EXPECT_EQ(json["manifests"][1]["pods"][0]["name"], "good-testnode");
  EXPECT_EQ(json["manifests"][1]["pods"][0]["admission"], "admitted");

  // The event is recorded once statusd is up (the pod manager read the directory before the
  // services started, and retries its events with each housekeeping send, every 2 s).
  auto wait_for_event = [&](const std::string& needle) {
    CommandResult events;
    const auto end = std::chrono::steady_clock::now() + 20s;
    do {
      events = Ctl({"events"});
      if (events.output.find(needle) != std::string::npos) break;
      notify_->Receive(200ms);  // paces the polling; datagrams are not what we wait for
    } while (std::chrono::steady_clock::now() < end);
    return events;
  };
  const std::string bad_event = "Rejected manifest " + manifests +
                                "/bad.yaml: spec.containers[0].ports[0].containerPort: Invalid "
                                "value: 0";
  auto events = wait_for_event(bad_event);
  EXPECT_THAT(events.output, HasSubstr(bad_event));
  EXPECT_THAT(events.output,
              ::testing::ContainsRegex("Warning +FailedToParseManifest +node/testnode"));

  // A file dropped in later that is not YAML at all: seen through inotify, its own event.
  { std::ofstream(manifests + "/broken.yaml") << "kind: Pod\napiVersion: v1\n  bad: [indent\n"; }
  events = wait_for_event(manifests + "/broken.yaml");
  EXPECT_THAT(events.output, HasSubstr("Rejected manifest " + manifests + "/broken.yaml"));
  listed = Ctl({"manifests"});
  EXPECT_THAT(listed.output,
              ::testing::ContainsRegex("file +" + manifests + "/broken.yaml +Rejected +[^\n]+"));

  // Fixed and removed: every manifest taken, exit 0.
  { std::ofstream(manifests + "/bad.yaml") << pod("bad", "8081"); }
  std::filesystem::remove(manifests + "/broken.yaml");
  const auto end = std::chrono::steady_clock::now() + 20s;
  do {
    listed = Ctl({"manifests"});
    if (listed.exit_code == 0) break;
    notify_->Receive(200ms);
  } while (std::chrono::steady_clock::now() < end);
  EXPECT_EQ(listed.exit_code, 0) << listed.output;
  EXPECT_THAT(listed.output,
              ::testing::ContainsRegex("/bad.yaml +Taken +pod default/bad-testnode \\(uid"));
  EXPECT_THAT(listed.output, ::testing::Not(HasSubstr("broken.yaml")));
}

}  // namespace
TEST_F(SupervisorTest, SighupReloadsTheConfigFileAppliesWhatIsLiveAndNamesTheRest) {
  const std::string config = dir_.Sub("nodelet.yaml");
  const std::string first = dir_.Sub("manifests-a"), second = dir_.Sub("manifests-b");
  std::filesystem::create_directories(first);
  std::filesystem::create_directories(second);
  auto pod = [](const std::string& name) {
    return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
           "\nspec:\n  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n";
  };
  WriteTextFile(first + "/a.yaml", pod("a"));
  WriteTextFile(second + "/b.yaml", pod("b"));
  auto write_config = [&](const std::string& level, const std::string& dir,
                          const std::string& max_pods) {
    WriteTextFile(config, "log-level: " + level + "\nsupervisor:\n  pod-manifest-path: " + dir +
                              "\n  max-pods: " + max_pods +
                              "\n  eviction-hard: memory.available<100Mi\n");
  };
  write_config("info", first, "110");
  Start({"--config", config, "--node-name", "testnode"});
  ASSERT_TRUE(notify_->WaitFor("READY=1", 20s));
  EXPECT_THAT(Ctl({"manifests"}).output, HasSubstr(first + "/a.yaml"));
  const auto before = Pids();

  // The log level and the manifest directory change live; max-pods needs a restart.
  write_config("debug", second, "5");
  nodelet_->Signal(SIGHUP);
  ASSERT_TRUE(notify_->WaitFor("RELOADING=1", 10s));
  ASSERT_TRUE(notify_->WaitFor("READY=1", 10s));
  std::string log = ReadTextFile(dir_.Sub("nodelet.log"));
  EXPECT_THAT(log, HasSubstr("Reloaded " + config +
                             ": applied log-level, pod-manifest-path; not applied (a restart is "
                             "needed): max-pods"));
  auto listed = Ctl({"manifests"});
  EXPECT_THAT(listed.output, HasSubstr(second + "/b.yaml"));
  EXPECT_THAT(listed.output, ::testing::Not(HasSubstr(first))) << "the old directory's pods go";
  // Each service takes the supervisor's level (its command line holds the old one).
  for (const auto& service : kServices) {
    const std::string path = dir_.Sub("log") + "/" + service + ".log";
    const auto end = std::chrono::steady_clock::now() + 10s;
    while (ReadTextFile(path).find("log level debug, the supervisor's") == std::string::npos &&
           std::chrono::steady_clock::now() < end) {
      notify_->Receive(100ms);  // paces the polling
    }
    EXPECT_THAT(ReadTextFile(path), HasSubstr("Reloaded " + config)) << service;
    EXPECT_THAT(ReadTextFile(path), HasSubstr("log level debug, the supervisor's")) << service;
  }
  EXPECT_EQ(Pids(), before) << "a reload restarts no service";

  // Unchanged again: max-pods is named once more (still not applied), nothing else.
  nodelet_->Signal(SIGHUP);
  ASSERT_TRUE(notify_->WaitFor("RELOADING=1", 10s));
  ASSERT_TRUE(notify_->WaitFor("READY=1", 10s));
  EXPECT_THAT(ReadTextFile(dir_.Sub("nodelet.log")),
              HasSubstr("Reloaded " + config + ": not applied (a restart is needed): max-pods"));

  // A broken file, or an invalid value, is refused whole: nothing changes, nodelet runs on.
  WriteTextFile(config, "log-levle: info\nsupervisor:\n  pod-manifest-path: " + first + "\n");
  nodelet_->Signal(SIGHUP);
  ASSERT_TRUE(notify_->WaitFor("RELOADING=1", 10s));
  ASSERT_TRUE(notify_->WaitFor("READY=1", 10s));
  WriteTextFile(config, "supervisor:\n  pod-manifest-path: " + first +
                            "\n  eviction-hard: memory.available<lots\n");
  nodelet_->Signal(SIGHUP);
  ASSERT_TRUE(notify_->WaitFor("RELOADING=1", 10s));
  ASSERT_TRUE(notify_->WaitFor("READY=1", 10s));
  log = ReadTextFile(dir_.Sub("nodelet.log"));
  EXPECT_THAT(log, ::testing::ContainsRegex("Reload of " + config +
                                            " refused, nothing changed: [^\n]*log-levle"));
  EXPECT_THAT(log, ::testing::ContainsRegex("Reload of " + config +
                                            " refused, nothing changed: [^\n]*eviction-hard"));
  listed = Ctl({"manifests"});
  EXPECT_THAT(listed.output, HasSubstr(second + "/b.yaml"));
  EXPECT_EQ(Ctl({"status"}).exit_code, 0);
  EXPECT_EQ(Pids(), before);
}

TEST_F(SupervisorTest, AKubeletConfigurationAsConfigRunsEveryService) {
  const std::string manifests = dir_.Sub("static");
  std::filesystem::create_directories(manifests);
  WriteTextFile(manifests + "/a.yaml",
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\nspec:\n  containers:\n"
                "  - name: app\n    image: nodelet.local/busybox:1.0\n");
  const std::string config = dir_.Sub("kubelet.yaml");
  WriteTextFile(config,
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                "staticPodPath: " +
                    manifests +
                    "\nmaxPods: 5\nreadOnlyPort: 0\nsyncFrequency: 30s\n"
                    "logging: {verbosity: 4}\nfailSwapOn: false\n");
  Start({"--config", config, "--node-name", "testnode"});
  ASSERT_TRUE(notify_->WaitFor("READY=1", 20s)) << "every service read the kubelet's file";
  for (const auto& service : kServices) EXPECT_GT(Pid(service), 0) << service;
  EXPECT_THAT(Ctl({"manifests"}).output, HasSubstr(manifests + "/a.yaml"));
  EXPECT_THAT(ReadTextFile(dir_.Sub("nodelet.log")), HasSubstr(" debug [ipc] Allowed uid 0"))
      << "logging.verbosity 4 is debug: nodeletctl's connections are logged";

  // A field nodelet does not have stops it at start, naming the file and the field.
  nodelet_->Signal(SIGTERM);
  ASSERT_TRUE(nodelet_->Wait(30s).has_value());
  WriteTextFile(config,
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                "cpuManagerPolicy: static\n");
  Start({"--config", config});
  auto code = nodelet_->Wait(20s);
  ASSERT_TRUE(code.has_value());
  EXPECT_TRUE(WIFEXITED(*code) && WEXITSTATUS(*code) == 2) << *code;
  EXPECT_THAT(ReadTextFile(dir_.Sub("nodelet.log")),
              HasSubstr(config + ": KubeletConfiguration fields nodelet refuses: "
                                 "'cpuManagerPolicy' (nodelet supports only none)"));
}

}  // namespace nodelet::testing
