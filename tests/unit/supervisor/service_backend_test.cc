// The two ServiceBackends on a real EventLoop. ChildProcessBackend with real children: READY=1 on
// a service's notify socket makes it RUNNING, its output reaches its log file, an exited child is
// reaped from SIGCHLD and restarted when its backoff timer wakes the loop (nothing else does
// here), more restarts than the intensity make it FATAL, and StopServices stops and reaps the
// rest. SystemdUnitBackend over a fake bus with a real fd: a bus signal is dispatched as soon as
// the fd is readable, pending bus output and the refresh period bring the loop back at once, a
// missing bus fails creation naming the mode, and a stop leaves the units to systemd.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "lib/common/clock.h"
#include "lib/service/event_loop.h"
#include "supervisor/child_process_backend.h"
#include "supervisor/systemd_unit_backend.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_systemd_bus.h"
#include "tests/testing/harness.h"

namespace nodelet::supervisor {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using testing::UnitInState;

// When ChildProcessBackendTest starts this binary as a service (NODELET_BACKEND_TEST_CHILD set),
// it plays one before gtest runs: a line on stdout, READY=1 to its NOTIFY_SOCKET, then it waits
// for the SIGTERM that stops it.
int RunAsServiceIfAsked() {
  if (std::getenv("NODELET_BACKEND_TEST_CHILD") == nullptr) return 0;
  std::printf("test service %d up\n", static_cast<int>(getpid()));
  std::fflush(stdout);
  const char* path = std::getenv("NOTIFY_SOCKET");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path != nullptr && std::strlen(path) < sizeof addr.sun_path) {
    std::strcpy(addr.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    const char kReady[] = "READY=1";
    (void)!sendto(fd, kReady, sizeof kReady - 1, 0, reinterpret_cast<sockaddr*>(&addr),
                  sizeof addr);
  }
  for (;;) pause();
}
const int kRunAsService = RunAsServiceIfAsked();

std::string SelfExe() {
  std::error_code ec;
  return std::filesystem::read_symlink("/proc/self/exe", ec).string();
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

ServiceInfo Info(ServiceBackend& backend, const std::string& name) {
  for (auto& info : backend.services().List()) {
    if (info.name == name) return info;
  }
  ADD_FAILURE() << "no service " << name;
  return {};
}

// Runs the loop until `done` holds or `timeout` passes (each wait is the loop's own, on its
// sources and timers); returns whether it holds.
bool RunUntil(EventLoop& loop, const std::function<bool()>& done, seconds timeout) {
  const auto deadline = steady_clock::now() + timeout;
  while (!done()) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - steady_clock::now());
    if (left.count() <= 0) return false;
    if (!loop.RunOnce(left).ok()) return false;
  }
  return true;
}

class ChildProcessBackendTest : public ::testing::Test {
 protected:
  ChildProcessBackendTest() {
    // As nodelet does before any thread starts: SIGCHLD reaches the loop's signalfd only.
    EventLoop::BlockSignals({SIGCHLD});
    std::filesystem::create_directories(dir_.Sub("run"));
    std::filesystem::create_directories(dir_.Sub("log"));
  }

  ChildProcessBackendOptions Options() {
    ChildProcessBackendOptions o;
    o.run_dir = dir_.Sub("run");
    o.log_dir = dir_.Sub("log");
    o.policy.backoff_initial = milliseconds(20);
    o.policy.backoff_max = milliseconds(100);
    o.policy.restart_intensity = 2;
    o.policy.stop_timeout = seconds(5);
    // The test services send no heartbeats: no hang detection here.
    o.policy.heartbeat_deadline = seconds(600);
    return o;
  }

  testing::TempDir dir_;
  EventLoop loop_{RealClock::Get()};
};

TEST_F(ChildProcessBackendTest, ReadyRunsCrashesBackOffToFatalAndStopReapsTheRest) {
  ChildProcessBackendOptions o = Options();
  o.children = {{"steady", {"/usr/bin/env", "NODELET_BACKEND_TEST_CHILD=1", SelfExe()}},
                {"crashy", {"/bin/sh", "-c", "echo crashy output; exit 3"}}};
  auto created = ChildProcessBackend::Create(loop_, std::move(o));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  ServiceBackend& backend = **created;
  EXPECT_EQ(Info(backend, "steady").state, ProcessState::Stopped) << "nothing spawned yet";

  backend.StartServices();
  EXPECT_EQ(Info(backend, "steady").state, ProcessState::Starting);
  // READY=1 from the service's own pid, read from its notify socket.
  ASSERT_TRUE(RunUntil(
      loop_, [&] { return Info(backend, "steady").state == ProcessState::Running; }, seconds(20)))
      << Info(backend, "steady").description;
  const pid_t steady = Info(backend, "steady").pid;
  ASSERT_GT(steady, 0);

  // Three runs of crashy (the first and two restarts after their backoff), each reaped; the
  // third exit is one restart too many.
  ASSERT_TRUE(RunUntil(
      loop_, [&] { return Info(backend, "crashy").state == ProcessState::Fatal; }, seconds(20)))
      << Info(backend, "crashy").description;
  EXPECT_THAT(Info(backend, "crashy").description, HasSubstr("too many restarts"));
  EXPECT_THAT(Info(backend, "crashy").description, HasSubstr("exit 3"));
  EXPECT_EQ(Count(nodelet::testing::ReadTextFile(dir_.Sub("log/crashy.log")), "crashy output\n"),
            3u);
  EXPECT_EQ(Info(backend, "steady").state, ProcessState::Running);
  EXPECT_EQ(Info(backend, "steady").pid, steady) << "only crashy restarted";
  EXPECT_TRUE(RunUntil(
      loop_,
      [&] {
        return nodelet::testing::ReadTextFile(dir_.Sub("log/steady.log")).find(" up\n") !=
               std::string::npos;
      },
      seconds(20)))
      << nodelet::testing::ReadTextFile(dir_.Sub("log/steady.log"));

  backend.StopServices();
  ASSERT_TRUE(RunUntil(
      loop_, [&] { return backend.services().AllStopped(); }, seconds(20)));
  EXPECT_EQ(Info(backend, "steady").state, ProcessState::Stopped);
  // Reaped, not a zombie: the pid no longer exists.
  EXPECT_EQ(kill(steady, 0), -1);
  EXPECT_EQ(errno, ESRCH);
}

TEST_F(ChildProcessBackendTest, CreateFailsWhenANotifySocketCannotBeBound) {
  std::ofstream(dir_.Sub("a-file")) << "x";
  ChildProcessBackendOptions o = Options();
  o.run_dir = dir_.Sub("a-file");
  o.children = {{"steady", {"/bin/true"}}};
  auto created = ChildProcessBackend::Create(loop_, std::move(o));
  ASSERT_FALSE(created.ok());
  EXPECT_THAT(created.status().message(), HasSubstr(dir_.Sub("a-file")));
}

// A FakeSystemdBus whose PollItem is a real fd: Wake() makes it readable as a signal from
// systemd would, and `output_pending` shows output sd-bus could not write yet.
class PollableFakeBus : public testing::FakeSystemdBus {
 public:
  PollableFakeBus() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~PollableFakeBus() override { close(fd_); }
  zmq::pollitem_t PollItem() override {
    return {nullptr, fd_, static_cast<short>(ZMQ_POLLIN | (output_pending ? ZMQ_POLLOUT : 0)), 0};
  }
  void Process() override {
    ++processed;
    uint64_t value = 0;
    (void)!read(fd_, &value, sizeof value);
    FakeSystemdBus::Process();
  }
  void Wake() {
    uint64_t one = 1;
    (void)!write(fd_, &one, sizeof one);
  }
  bool output_pending = false;
  int processed = 0;

 private:
  int fd_;
};

class SystemdUnitBackendTest : public ::testing::Test {
 protected:
  SystemdUnitBackendTest() {
    auto bus = std::make_unique<PollableFakeBus>();
    bus_ = bus.get();
    owned_bus_ = std::move(bus);
    pid_t pid = 100;
    for (const auto& n : {"plegd", "statusd", "volumed", "podworkerd"}) {
      bus_->units[std::string("nodelet-") + n + ".service"] =
          UnitInState("active", "running", pid++);
    }
  }

  Result<std::unique_ptr<SystemdUnitBackend>> Create(milliseconds refresh_period) {
    SystemdUnitBackendOptions o;
    o.units.refresh_period = refresh_period;
    o.names = {"plegd", "statusd", "volumed", "podworkerd"};
    o.run_dir = "/run/nodelet-test";
    return SystemdUnitBackend::Create(loop_, std::move(owned_bus_), std::move(o));
  }

  // Runs one iteration that may wait up to 30 s; returns how long it took.
  steady_clock::duration TimedRunOnce() {
    const auto start = steady_clock::now();
    EXPECT_TRUE(loop_.RunOnce(seconds(30)).ok());
    return steady_clock::now() - start;
  }

  testing::FakeClock clock_;
  EventLoop loop_{clock_};
  PollableFakeBus* bus_ = nullptr;
  std::unique_ptr<SystemdBus> owned_bus_;
};

TEST_F(SystemdUnitBackendTest, CreateFailsNamingTheModeWithoutABus) {
  bus_->reachable = false;
  auto created = Create(seconds(5));
  ASSERT_FALSE(created.ok());
  EXPECT_THAT(created.status().message(), StartsWith("systemd mode: "));
  EXPECT_THAT(created.status().message(), HasSubstr("Failed to connect to the system bus"));
}

TEST_F(SystemdUnitBackendTest, ABusSignalIsDispatchedAsSoonAsTheFdIsReadable) {
  auto created = Create(std::chrono::hours(1));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  ServiceBackend& backend = **created;
  backend.StartServices();
  EXPECT_TRUE(backend.services().AllRunning());

  bus_->SetUnit("nodelet-plegd.service", UnitInState("activating", "auto-restart", 0));
  bus_->Wake();
  // Nothing is due for an hour: only the bus fd can end this wait early.
  EXPECT_LT(TimedRunOnce(), seconds(10));
  EXPECT_EQ(Info(backend, "plegd").state, ProcessState::Backoff);
  EXPECT_GE(bus_->processed, 1);
}

TEST_F(SystemdUnitBackendTest, PendingBusOutputBringsTheLoopBackAtOnce) {
  auto created = Create(std::chrono::hours(1));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  bus_->output_pending = true;
  (*created)->StartServices();
  EXPECT_LT(TimedRunOnce(), seconds(10));
  EXPECT_GE(bus_->processed, 1);
}

TEST_F(SystemdUnitBackendTest, TheRefreshPeriodWakesTheLoopToReadEveryUnit) {
  auto created = Create(seconds(5));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  (*created)->StartServices();
  const int reads = bus_->reads["nodelet-statusd.service"];
  clock_.Advance(seconds(5));
  EXPECT_LT(TimedRunOnce(), seconds(10));
  EXPECT_GT(bus_->reads["nodelet-statusd.service"], reads);
}

TEST_F(SystemdUnitBackendTest, StopLeavesTheUnitsToSystemd) {
  auto created = Create(seconds(5));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  ServiceBackend& backend = **created;
  backend.StartServices();
  EXPECT_FALSE(backend.services().AllStopped());
  backend.StopServices();
  EXPECT_TRUE(backend.services().AllStopped());
  EXPECT_TRUE(bus_->calls.empty()) << "no job was asked of systemd";
  EXPECT_TRUE(backend.services().AllRunning());
}

}  // namespace
}  // namespace nodelet::supervisor
