// ProcessManager's supervisord state machine on a fake clock with a fake launcher: READY moves
// STARTING to RUNNING, start timeouts, exponential backoff and its reset, the intensity limit
// and FATAL's cooldown, an operator's start clearing FATAL, hang and failing-health detection
// (SIGTERM, then SIGKILL after the stop timeout), restarts that touch one service only, StopAll,
// and the STATUS summary. No sleeps: time only moves when a test advances it.
#include "supervisor/process_manager.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <map>
#include <vector>

#include "tests/fakes/fake_clock.h"

namespace nodelet::supervisor {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;
using Health = ipc::control::Health;

class FakeLauncher : public ProcessLauncher {
 public:
  Result<pid_t> Spawn(const std::string& name) override {
    if (fail_spawn) return Unavailable("cannot spawn");
    pid_t pid = next_pid_++;
    spawned.push_back({name, pid});
    return pid;
  }
  void SignalGroup(pid_t pid, int sig) override { signals.push_back({pid, sig}); }
  std::string LogPath(const std::string& name) const override { return "/log/" + name + ".log"; }

  pid_t LastPid(const std::string& name) const {
    for (auto it = spawned.rbegin(); it != spawned.rend(); ++it) {
      if (it->first == name) return it->second;
    }
    return 0;
  }
  int SpawnCount(const std::string& name) const {
    int n = 0;
    for (const auto& [s, _] : spawned) n += s == name;
    return n;
  }
  bool Signalled(pid_t pid, int sig) const {
    for (const auto& [p, s] : signals) {
      if (p == pid && s == sig) return true;
    }
    return false;
  }

  std::vector<std::pair<std::string, pid_t>> spawned;
  std::vector<std::pair<pid_t, int>> signals;
  bool fail_spawn = false;

 private:
  pid_t next_pid_ = 1000;
};

int Exited(int code) { return code << 8; }  // a wait status for exit(code)
int Killed(int sig) { return sig; }         // a wait status for death by signal

class ProcessManagerTest : public ::testing::Test {
 protected:
  ProcessManagerTest() { Make({"plegd", "statusd", "volumed", "podworkerd"}); }
  void Make(std::vector<std::string> names) {
    manager_ = std::make_unique<ProcessManager>(clock_, launcher_, policy_, std::move(names));
  }
  ProcessState State(const std::string& name) const {
    for (const auto& s : manager_->List()) {
      if (s.name == name) return s.state;
    }
    return ProcessState::Stopped;
  }
  ServiceInfo Info(const std::string& name) const {
    for (const auto& s : manager_->List()) {
      if (s.name == name) return s;
    }
    return {};
  }
  void StartAllReady() {
    manager_->StartAll();
    for (const auto& s : manager_->List()) manager_->OnReady(s.name, launcher_.LastPid(s.name));
  }
  // Advances the clock and runs the timers.
  void Advance(milliseconds d) {
    clock_.Advance(d);
    manager_->Tick();
  }
  // `name`'s process exits with wait status `status`.
  void CrashAndRestart(const std::string& name, int status = 1 << 8) {
    manager_->OnExit(launcher_.LastPid(name), status);
  }
  // Advances in 1 s steps, every service but `silent` sending heartbeats.
  void AdvanceAlive(milliseconds d, const std::string& silent = "") {
    while (d.count() > 0) {
      milliseconds step = std::min(d, milliseconds(1000));
      clock_.Advance(step);
      for (const auto& s : manager_->List()) {
        if (s.name != silent) manager_->OnHeartbeat(s.name, Health::Ok, "");
      }
      manager_->Tick();
      d -= step;
    }
  }
  // Keeps the other services' heartbeats fresh.
  void HeartbeatAll() {
    for (const auto& s : manager_->List()) manager_->OnHeartbeat(s.name, Health::Ok, "");
  }

  testing::FakeClock clock_;
  FakeLauncher launcher_;
  SupervisorPolicy policy_;
  std::unique_ptr<ProcessManager> manager_;
};

TEST_F(ProcessManagerTest, StartingBecomesRunningOnlyOnReady) {
  manager_->StartAll();
  EXPECT_EQ(State("plegd"), ProcessState::Starting);
  EXPECT_FALSE(manager_->AllRunning());
  EXPECT_FALSE(manager_->OnReady("plegd", 4242)) << "READY from a stranger's pid is ignored";
  EXPECT_EQ(State("plegd"), ProcessState::Starting);
  EXPECT_TRUE(manager_->OnReady("plegd", launcher_.LastPid("plegd")));
  EXPECT_EQ(State("plegd"), ProcessState::Running);
  for (const char* n : {"statusd", "volumed", "podworkerd"}) {
    manager_->OnReady(n, launcher_.LastPid(n));
  }
  EXPECT_TRUE(manager_->AllRunning());
  EXPECT_EQ(manager_->Summary(), "4/4 services running");
}

TEST_F(ProcessManagerTest, StartTimeoutKillsAndBacksOff) {
  manager_->StartAll();
  pid_t pid = launcher_.LastPid("plegd");
  for (const char* n : {"statusd", "volumed", "podworkerd"})
    manager_->OnReady(n, launcher_.LastPid(n));
  Advance(policy_.start_timeout + milliseconds(1));
  EXPECT_EQ(State("plegd"), ProcessState::Stopping);
  EXPECT_TRUE(launcher_.Signalled(pid, SIGTERM));
  manager_->OnExit(pid, Killed(SIGTERM));
  EXPECT_EQ(State("plegd"), ProcessState::Backoff);
  EXPECT_THAT(Info("plegd").description + manager_->Summary(), HasSubstr("start timeout"));
}

TEST_F(ProcessManagerTest, BackoffDoublesFrom100msTo10sAndResetsAfterAGoodRun) {
  StartAllReady();
  std::vector<long> delays;
  for (int i = 0; i < 9; ++i) {
    int before = launcher_.SpawnCount("plegd");
    CrashAndRestart("plegd");
    ASSERT_EQ(State("plegd"), ProcessState::Backoff);
    // Find the delay: advance in 10 ms steps until a new spawn happens.
    long waited = 0;
    while (launcher_.SpawnCount("plegd") == before && waited < 20000) {
      Advance(milliseconds(10));
      waited += 10;
    }
    delays.push_back(waited);
    manager_->OnReady("plegd", launcher_.LastPid("plegd"));
    // Spread the crashes so that the intensity limit (10 in 60 s) is not reached.
    Advance(milliseconds(7000));
    HeartbeatAll();
  }
  std::vector<long> expected = {100, 200, 400, 800, 1600, 3200, 6400, 10000, 10000};
  EXPECT_EQ(delays, expected);
  // After 60 s of good running the next crash starts from 100 ms again.
  for (int i = 0; i < 13; ++i) {
    Advance(milliseconds(5000));
    HeartbeatAll();
  }
  int before = launcher_.SpawnCount("plegd");
  CrashAndRestart("plegd");
  Advance(milliseconds(100));
  EXPECT_EQ(launcher_.SpawnCount("plegd"), before + 1);
}

TEST_F(ProcessManagerTest, TooManyRestartsIsFatalRetriedAfterCooldownOrByOperator) {
  policy_.restart_intensity = 3;
  policy_.backoff_initial = milliseconds(10);
  policy_.backoff_max = milliseconds(10);
  Make({"plegd", "statusd"});
  StartAllReady();
  for (int i = 0; i < 4; ++i) {
    CrashAndRestart("plegd", Exited(1));
    Advance(milliseconds(10));
  }
  EXPECT_EQ(State("plegd"), ProcessState::Fatal);
  EXPECT_THAT(manager_->Summary(), HasSubstr("plegd FATAL"));
  EXPECT_THAT(manager_->Summary(), HasSubstr("1/2 running"));
  EXPECT_EQ(State("statusd"), ProcessState::Running) << "the others are not touched";
  int spawns = launcher_.SpawnCount("plegd");
  Advance(policy_.fatal_cooldown - milliseconds(100));
  EXPECT_EQ(State("plegd"), ProcessState::Fatal);
  Advance(milliseconds(200));
  EXPECT_EQ(launcher_.SpawnCount("plegd"), spawns + 1) << "FATAL is retried after the cooldown";

  // FATAL again, then an operator's start clears it at once.
  for (int i = 0; i < 4 && State("plegd") != ProcessState::Fatal; ++i) {
    CrashAndRestart("plegd", Exited(1));
    Advance(milliseconds(10));
  }
  ASSERT_EQ(State("plegd"), ProcessState::Fatal);
  spawns = launcher_.SpawnCount("plegd");
  bool done = false;
  manager_->Start("plegd", [&](bool, const std::string&) { done = true; });
  EXPECT_EQ(launcher_.SpawnCount("plegd"), spawns + 1);
  manager_->OnReady("plegd", launcher_.LastPid("plegd"));
  EXPECT_TRUE(done);
  EXPECT_EQ(State("plegd"), ProcessState::Running);
}

TEST_F(ProcessManagerTest, SilentServiceIsHungKilledAndRestarted) {
  policy_.heartbeat_deadline = milliseconds(5000);
  policy_.stop_timeout = milliseconds(10000);
  Make({"plegd", "statusd"});
  StartAllReady();
  pid_t hung = launcher_.LastPid("plegd");
  for (int i = 0; i < 6; ++i) {
    Advance(milliseconds(1000));
    manager_->OnHeartbeat("statusd", Health::Ok, "");  // only statusd stays alive
  }
  EXPECT_EQ(State("plegd"), ProcessState::Stopping);
  EXPECT_TRUE(launcher_.Signalled(hung, SIGTERM));
  EXPECT_FALSE(launcher_.Signalled(hung, SIGKILL));
  // A SIGSTOPped process ignores SIGTERM: SIGKILL after the stop timeout.
  AdvanceAlive(policy_.stop_timeout + milliseconds(1), "plegd");
  EXPECT_TRUE(launcher_.Signalled(hung, SIGKILL));
  manager_->OnExit(hung, Killed(SIGKILL));
  Advance(policy_.backoff_initial);
  EXPECT_NE(launcher_.LastPid("plegd"), hung);
  EXPECT_EQ(State("plegd"), ProcessState::Starting);
  EXPECT_EQ(State("statusd"), ProcessState::Running);
}

TEST_F(ProcessManagerTest, FailingHealthBeyondGraceIsRestarted) {
  policy_.failing_grace = milliseconds(3000);
  Make({"plegd"});
  StartAllReady();
  pid_t pid = launcher_.LastPid("plegd");
  manager_->OnHeartbeat("plegd", Health::Failing, "runtime unreachable");
  Advance(milliseconds(2000));
  manager_->OnHeartbeat("plegd", Health::Failing, "runtime unreachable");
  EXPECT_EQ(State("plegd"), ProcessState::Running) << "within the grace period";
  Advance(milliseconds(1500));
  manager_->OnHeartbeat("plegd", Health::Failing, "runtime unreachable");
  Advance(milliseconds(1));
  EXPECT_EQ(State("plegd"), ProcessState::Stopping);
  EXPECT_TRUE(launcher_.Signalled(pid, SIGTERM));
  // Recovering in time resets the clock.
  manager_->OnExit(pid, Killed(SIGTERM));
  Advance(policy_.backoff_initial);
  manager_->OnReady("plegd", launcher_.LastPid("plegd"));
  manager_->OnHeartbeat("plegd", Health::Failing, "x");
  Advance(milliseconds(2000));
  manager_->OnHeartbeat("plegd", Health::Ok, "");
  Advance(milliseconds(2000));
  manager_->OnHeartbeat("plegd", Health::Ok, "");
  EXPECT_EQ(State("plegd"), ProcessState::Running);
}

TEST_F(ProcessManagerTest, RestartTouchesOnlyTheNamedServiceAndDoesNotCountAsCrash) {
  StartAllReady();
  std::map<std::string, pid_t> before;
  for (const auto& s : manager_->List()) before[s.name] = s.pid;
  bool ok = false;
  manager_->Restart("statusd", [&](bool result, const std::string&) { ok = result; });
  EXPECT_TRUE(launcher_.Signalled(before["statusd"], SIGTERM));
  manager_->OnExit(before["statusd"], Killed(SIGTERM));
  manager_->OnReady("statusd", launcher_.LastPid("statusd"));
  EXPECT_TRUE(ok);
  for (const auto& s : manager_->List()) {
    if (s.name == "statusd") {
      EXPECT_NE(s.pid, before[s.name]);
    } else {
      EXPECT_EQ(s.pid, before[s.name]) << s.name;
    }
  }
  EXPECT_EQ(Info("statusd").restarts, 0u) << "an operator's restart is not a crash";
}

TEST_F(ProcessManagerTest, StopLeavesItStoppedAndStopAllEscalates) {
  StartAllReady();
  pid_t vol = launcher_.LastPid("volumed");
  manager_->Stop("volumed", [](bool, const std::string&) {});
  manager_->OnExit(vol, Killed(SIGTERM));
  EXPECT_EQ(State("volumed"), ProcessState::Stopped);
  AdvanceAlive(milliseconds(60000));
  EXPECT_EQ(launcher_.SpawnCount("volumed"), 1) << "a stopped service stays stopped";
  EXPECT_THAT(manager_->Summary(), HasSubstr("volumed STOPPED"));
  EXPECT_THAT(manager_->Summary(), HasSubstr("3/4 running"));

  HeartbeatAll();
  manager_->StopAll();
  for (const char* n : {"plegd", "statusd", "podworkerd"}) {
    EXPECT_TRUE(launcher_.Signalled(launcher_.LastPid(n), SIGTERM)) << n;
  }
  manager_->OnExit(launcher_.LastPid("plegd"), Killed(SIGTERM));
  manager_->OnExit(launcher_.LastPid("statusd"), Exited(0));
  EXPECT_FALSE(manager_->AllStopped());
  Advance(policy_.stop_timeout + milliseconds(1));
  EXPECT_TRUE(launcher_.Signalled(launcher_.LastPid("podworkerd"), SIGKILL));
  manager_->OnExit(launcher_.LastPid("podworkerd"), Killed(SIGKILL));
  EXPECT_TRUE(manager_->AllStopped());
  Advance(milliseconds(60000));
  EXPECT_EQ(launcher_.SpawnCount("plegd"), 1) << "nothing restarts during shutdown";
}

TEST_F(ProcessManagerTest, SummaryNamesTheServiceStateAndReason) {
  StartAllReady();
  CrashAndRestart("plegd", Exited(1));
  EXPECT_EQ(manager_->Summary(), "plegd BACKOFF (exit 1), 3/4 running");
  CrashAndRestart("statusd", Killed(SIGKILL));
  EXPECT_THAT(manager_->Summary(), HasSubstr("statusd BACKOFF"));
  EXPECT_THAT(manager_->Summary(), HasSubstr("2/4 running"));
}

}  // namespace
}  // namespace nodelet::supervisor
