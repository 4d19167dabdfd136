// The supervisor with the real binaries (the fixture is in supervisor_fixture.h): the four
// services spawned and reported in the sd_notify datagrams, `kill -9` and `nodeletctl restart`
// changing one pid, stop and exit codes, a failing command going BACKOFF then FATAL, a
// SIGSTOPped service killed and restarted, a full notify socket and a hung runtime stalling
// neither the loop nor the stop, the data directories, systemd mode without a bus, and the HTTP
// endpoint (/healthz, /metrics, /pods). Hostile peers and who may talk to nodelet are in
// supervisor_hostile_test.cc; flags and the config file in supervisor_config_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/integration/supervisor_fixture.h"
#include "tests/testing/harness.h"

namespace nodelet::testing {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

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

}  // namespace
}  // namespace nodelet::testing
