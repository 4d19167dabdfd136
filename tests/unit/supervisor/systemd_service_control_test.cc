// SystemdServiceControl (the supervisor's systemd mode) over a fake D-Bus: unit states mapped
// to the supervisord states of `nodeletctl status`, pid, uptime and restarts from the unit's
// properties, start/stop/restart as unit jobs answered only when the job is removed and the new
// process said hello (or failed, or timed out), FATAL cleared by reset-failed, refreshes on
// PropertiesChanged and on the refresh period, bus errors shown, and the unit prefix.
#include "supervisor/systemd_service_control.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>

#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_systemd_bus.h"

namespace nodelet::supervisor {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::UnitInState;
using Health = ipc::control::Health;

// Records the one answer of a DoneCallback.
struct Answer {
  std::optional<std::pair<bool, std::string>> value;
  int calls = 0;
  DoneCallback Callback() {
    return [this](bool ok, const std::string& msg) {
      ++calls;
      value = {ok, msg};
    };
  }
};

class SystemdServiceControlTest : public ::testing::Test {
 protected:
  SystemdServiceControlTest() {
    for (const auto& n : {"plegd", "statusd", "volumed", "podworkerd"}) {
      pid_t pid = next_pid_++;
      bus_.units[std::string("nodelet-") + n + ".service"] = Running(pid);
    }
    Make("nodelet-");
  }
  void Make(const std::string& prefix) {
    SystemdModeOptions o;
    o.unit_prefix = prefix;
    o.job_timeout = std::chrono::seconds(20);
    o.refresh_period = std::chrono::seconds(5);
    o.heartbeat_deadline = std::chrono::seconds(5);
    control_ = std::make_unique<SystemdServiceControl>(
        clock_, bus_, o, std::vector<std::string>{"plegd", "statusd", "volumed", "podworkerd"});
  }
  UnitStatus Running(pid_t pid) {
    UnitStatus st = UnitInState("active", "running", pid);
    // Became active 3 s before the fake clock's now.
    st.active_enter_monotonic_usec =
        static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::microseconds>(clock_.Now().time_since_epoch())
                .count()) -
        3'000'000;
    st.state_change_usec = 1'700'000'000'000'000ULL;
    return st;
  }
  ServiceInfo Info(const std::string& name) const {
    for (const auto& i : control_->List()) {
      if (i.name == name) return i;
    }
    return {};
  }
  // Delivers the queued signals, as the supervisor's loop does when the bus fd is readable.
  void Deliver() {
    bus_.Process();
    control_->RefreshChanged();
  }

  testing::FakeClock clock_;
  testing::FakeSystemdBus bus_;
  std::unique_ptr<SystemdServiceControl> control_;
  pid_t next_pid_ = 2000;
};

TEST(MapUnitStateTest, MapsEveryActiveStateAndPendingRestarts) {
  EXPECT_EQ(MapUnitState(UnitInState("active", "running")), ProcessState::Running);
  EXPECT_EQ(MapUnitState(UnitInState("reloading", "reload")), ProcessState::Running);
  EXPECT_EQ(MapUnitState(UnitInState("activating", "start")), ProcessState::Starting);
  EXPECT_EQ(MapUnitState(UnitInState("activating", "auto-restart")), ProcessState::Backoff);
  EXPECT_EQ(MapUnitState(UnitInState("failed", "auto-restart")), ProcessState::Backoff);
  EXPECT_EQ(MapUnitState(UnitInState("deactivating", "stop-sigterm")), ProcessState::Stopping);
  EXPECT_EQ(MapUnitState(UnitInState("failed", "failed")), ProcessState::Fatal);
  EXPECT_EQ(MapUnitState(UnitInState("inactive", "dead")), ProcessState::Stopped);
}

TEST(DescribeUnitFailureTest, NamesTheResultAndTheMainProcess) {
  UnitStatus st = UnitInState("failed", "failed");
  EXPECT_EQ(DescribeUnitFailure(st), "");
  st.result = "exit-code";
  st.exec_main_code = 1;
  st.exec_main_status = 3;
  EXPECT_EQ(DescribeUnitFailure(st), "exit 3");
  st.result = "signal";
  st.exec_main_code = 2;
  st.exec_main_status = 9;
  EXPECT_THAT(DescribeUnitFailure(st), HasSubstr("signal 9"));
  st.result = "watchdog";
  st.exec_main_status = 6;
  EXPECT_THAT(DescribeUnitFailure(st), HasSubstr("watchdog timeout (signal 6"));
  st.result = "start-limit-hit";
  st.exec_main_code = 0;
  EXPECT_EQ(DescribeUnitFailure(st), "start limit hit");
}

TEST_F(SystemdServiceControlTest, WatchSubscribesToEveryUnitAndListsTheirState) {
  ASSERT_TRUE(control_->Watch().ok());
  EXPECT_THAT(bus_.watched, ElementsAre("nodelet-plegd.service", "nodelet-statusd.service",
                                        "nodelet-volumed.service", "nodelet-podworkerd.service"));
  auto& plegd = bus_.units["nodelet-plegd.service"];
  plegd.n_restarts = 4;
  bus_.SetUnit("nodelet-plegd.service", plegd);
  Deliver();
  ServiceInfo i = Info("plegd");
  EXPECT_EQ(i.state, ProcessState::Running);
  EXPECT_EQ(i.pid, 2000);
  EXPECT_EQ(i.uptime_ms, 3000u);
  EXPECT_EQ(i.restarts, 4u);
  EXPECT_EQ(i.description, "pid 2000, uptime");
  EXPECT_EQ(i.state_since_epoch_s, 1'700'000'000);
  EXPECT_EQ(i.health, "");  // no hello or heartbeat yet
  EXPECT_TRUE(control_->AllRunning());
  EXPECT_EQ(control_->Summary(), "4/4 services running");
  // Not stopped by a supervisor shutdown: the units are systemd's.
  control_->StopAll();
  EXPECT_TRUE(control_->AllStopped());
  EXPECT_TRUE(bus_.calls.empty());
}

TEST_F(SystemdServiceControlTest, WatchFailsClearlyWithoutABus) {
  bus_.reachable = false;
  Status s = control_->Watch();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("system bus"));
}

TEST_F(SystemdServiceControlTest, BackoffAndFatalShowWhyInListAndSummary) {
  ASSERT_TRUE(control_->Watch().ok());
  UnitStatus st = UnitInState("activating", "auto-restart");
  st.result = "exit-code";
  st.exec_main_code = 1;
  st.exec_main_status = 1;
  st.n_restarts = 2;
  bus_.SetUnit("nodelet-plegd.service", st);
  UnitStatus fatal = UnitInState("failed", "failed");
  fatal.result = "start-limit-hit";
  bus_.SetUnit("nodelet-volumed.service", fatal);
  Deliver();
  EXPECT_EQ(Info("plegd").state, ProcessState::Backoff);
  EXPECT_EQ(Info("plegd").pid, 0);
  EXPECT_EQ(Info("plegd").description, "exit 1, systemd restarts it");
  EXPECT_EQ(Info("volumed").state, ProcessState::Fatal);
  EXPECT_THAT(Info("volumed").description, HasSubstr("start limit hit"));
  EXPECT_FALSE(control_->AllRunning());
  EXPECT_EQ(control_->Summary(),
            "plegd BACKOFF (exit 1), volumed FATAL (start limit hit), 2/4 running");
}

TEST_F(SystemdServiceControlTest, RestartAnswersOnlyAfterTheJobAndTheNewProcessHello) {
  ASSERT_TRUE(control_->Watch().ok());
  ASSERT_TRUE(control_->OnReady("plegd", 2000));
  Answer answer;
  control_->Restart("plegd", answer.Callback());
  ASSERT_EQ(bus_.calls.size(), 1u);
  EXPECT_EQ(bus_.LastCall().method, "RestartUnit");
  EXPECT_EQ(bus_.LastCall().unit, "nodelet-plegd.service");
  EXPECT_FALSE(answer.value);

  // systemd restarts it: a new main pid, active; the job is removed.
  bus_.SetUnit("nodelet-plegd.service", Running(3000));
  bus_.EndJob(bus_.LastCall().job, "done");
  Deliver();
  EXPECT_FALSE(answer.value) << "answered before the new process said hello";
  // A late hello from the old process does not count.
  control_->OnReady("plegd", 2000);
  EXPECT_FALSE(answer.value);
  control_->OnReady("plegd", 3000);
  ASSERT_TRUE(answer.value);
  EXPECT_TRUE(answer.value->first);
  EXPECT_EQ(answer.value->second, "started");
  EXPECT_EQ(answer.calls, 1);
  EXPECT_EQ(Info("plegd").pid, 3000);
  EXPECT_EQ(Info("plegd").health, "ok");
}

TEST_F(SystemdServiceControlTest, RestartAnswersWhenTheHelloCameBeforeTheJobEnded) {
  ASSERT_TRUE(control_->Watch().ok());
  Answer answer;
  control_->Restart("statusd", answer.Callback());
  bus_.units["nodelet-statusd.service"] = Running(3001);
  control_->OnReady("statusd", 3001);  // Type=notify: hello, then READY=1, then the job ends
  EXPECT_FALSE(answer.value);
  bus_.EndJob(bus_.LastCall().job, "done");
  Deliver();
  ASSERT_TRUE(answer.value);
  EXPECT_TRUE(answer.value->first);
}

TEST_F(SystemdServiceControlTest, AFailedJobIsAnsweredWithItsResult) {
  ASSERT_TRUE(control_->Watch().ok());
  Answer answer;
  control_->Restart("volumed", answer.Callback());
  bus_.EndJob(bus_.LastCall().job, "failed");
  Deliver();
  ASSERT_TRUE(answer.value);
  EXPECT_FALSE(answer.value->first);
  EXPECT_EQ(answer.value->second, "restart job of nodelet-volumed.service: failed");
}

TEST_F(SystemdServiceControlTest, AStartThatEndsInBackoffFailsWithoutWaitingForTheDeadline) {
  bus_.units["nodelet-plegd.service"] = UnitInState("inactive", "dead");
  ASSERT_TRUE(control_->Watch().ok());
  Answer answer;
  control_->Start("plegd", answer.Callback());
  EXPECT_EQ(bus_.LastCall().method, "StartUnit");
  UnitStatus st = UnitInState("activating", "auto-restart");
  st.result = "exit-code";
  st.exec_main_code = 1;
  st.exec_main_status = 2;
  bus_.SetUnit("nodelet-plegd.service", st);
  bus_.EndJob(bus_.LastCall().job, "done");
  Deliver();
  ASSERT_TRUE(answer.value);
  EXPECT_FALSE(answer.value->first);
  EXPECT_EQ(answer.value->second, "BACKOFF (exit 2)");
}

TEST_F(SystemdServiceControlTest, ARestartWithoutHelloTimesOut) {
  ASSERT_TRUE(control_->Watch().ok());
  Answer answer;
  control_->Restart("podworkerd", answer.Callback());
  EXPECT_LE(control_->NextDeadline(), clock_.Now() + std::chrono::seconds(20));
  clock_.Advance(std::chrono::seconds(19));
  control_->Tick();
  EXPECT_FALSE(answer.value);
  clock_.Advance(std::chrono::seconds(2));
  control_->Tick();
  ASSERT_TRUE(answer.value);
  EXPECT_FALSE(answer.value->first);
  EXPECT_THAT(answer.value->second, HasSubstr("timed out after 20s"));
  EXPECT_THAT(answer.value->second, HasSubstr("job of nodelet-podworkerd.service did not finish"));
}

TEST_F(SystemdServiceControlTest, StopIsAStopJobAndStartOfARunningUnitIsRefused) {
  ASSERT_TRUE(control_->Watch().ok());
  Answer already;
  control_->Start("plegd", already.Callback());
  ASSERT_TRUE(already.value);
  EXPECT_EQ(*already.value, std::make_pair(false, std::string("already started")));
  EXPECT_TRUE(bus_.calls.empty());

  Answer stop;
  control_->Stop("plegd", stop.Callback());
  EXPECT_EQ(bus_.LastCall().method, "StopUnit");
  EXPECT_FALSE(stop.value);
  bus_.SetUnit("nodelet-plegd.service", UnitInState("inactive", "dead"));
  bus_.EndJob(bus_.LastCall().job, "done");
  Deliver();
  ASSERT_TRUE(stop.value);
  EXPECT_EQ(*stop.value, std::make_pair(true, std::string("stopped")));
  EXPECT_EQ(Info("plegd").state, ProcessState::Stopped);
  EXPECT_EQ(Info("plegd").pid, 0);

  Answer again;
  control_->Stop("plegd", again.Callback());
  EXPECT_EQ(*again.value, std::make_pair(false, std::string("not running")));
  Answer unknown;
  control_->Restart("kubelet", unknown.Callback());
  EXPECT_EQ(*unknown.value, std::make_pair(false, std::string("no such process")));
  EXPECT_FALSE(control_->Has("kubelet"));
}

TEST_F(SystemdServiceControlTest, StartingAFatalUnitResetsItsFailedStateFirst) {
  UnitStatus fatal = UnitInState("failed", "failed");
  fatal.result = "start-limit-hit";
  bus_.units["nodelet-volumed.service"] = fatal;
  ASSERT_TRUE(control_->Watch().ok());
  Answer answer;
  control_->Start("volumed", answer.Callback());
  EXPECT_THAT(bus_.reset_failed, ElementsAre("nodelet-volumed.service"));
  EXPECT_EQ(bus_.LastCall().method, "StartUnit");
  bus_.SetUnit("nodelet-volumed.service", Running(4000));
  bus_.EndJob(bus_.LastCall().job, "done");
  control_->OnReady("volumed", 4000);
  Deliver();
  ASSERT_TRUE(answer.value);
  EXPECT_TRUE(answer.value->first);
}

TEST_F(SystemdServiceControlTest, AJobSystemdRefusesIsAnsweredAtOnce) {
  ASSERT_TRUE(control_->Watch().ok());
  bus_.refuse_jobs = true;
  Answer answer;
  control_->Restart("plegd", answer.Callback());
  ASSERT_TRUE(answer.value);
  EXPECT_FALSE(answer.value->first);
  EXPECT_THAT(answer.value->second, HasSubstr("Access denied"));
}

TEST_F(SystemdServiceControlTest, ReadsAUnitOnItsSignalAndEveryUnitEachRefreshPeriod) {
  ASSERT_TRUE(control_->Watch().ok());
  const int plegd_reads = bus_.reads["nodelet-plegd.service"];
  const int statusd_reads = bus_.reads["nodelet-statusd.service"];
  // Without a signal, nothing is re-read before the refresh period.
  Deliver();
  control_->Tick();
  EXPECT_EQ(bus_.reads["nodelet-plegd.service"], plegd_reads);
  // A kill -9 seen through PropertiesChanged: systemd restarts it (auto-restart).
  UnitStatus st = UnitInState("activating", "auto-restart");
  st.result = "signal";
  st.exec_main_code = 2;
  st.exec_main_status = 9;
  bus_.SetUnit("nodelet-plegd.service", st);
  Deliver();
  EXPECT_EQ(bus_.reads["nodelet-plegd.service"], plegd_reads + 1);
  EXPECT_EQ(bus_.reads["nodelet-statusd.service"], statusd_reads);
  EXPECT_EQ(Info("plegd").state, ProcessState::Backoff);
  // A change without a signal is caught by the periodic refresh.
  bus_.units["nodelet-statusd.service"] = UnitInState("deactivating", "stop-sigterm", 2001);
  EXPECT_EQ(Info("statusd").state, ProcessState::Running);
  EXPECT_LE(control_->NextDeadline(), clock_.Now() + std::chrono::seconds(5));
  clock_.Advance(std::chrono::seconds(5));
  control_->Tick();
  EXPECT_EQ(Info("statusd").state, ProcessState::Stopping);
  EXPECT_EQ(Info("statusd").description, "pid 2001, stopping");
}

TEST_F(SystemdServiceControlTest, ABusErrorShowsInTheDescription) {
  ASSERT_TRUE(control_->Watch().ok());
  bus_.reachable = false;
  clock_.Advance(std::chrono::seconds(5));
  control_->Tick();
  EXPECT_THAT(Info("plegd").description,
              HasSubstr("systemd: Failed to read nodelet-plegd.service"));
  EXPECT_THAT(control_->Summary(), HasSubstr("systemd: Failed to read"));
}

TEST_F(SystemdServiceControlTest, HealthComesFromHeartbeatsAndGoesStaleWithoutThem) {
  ASSERT_TRUE(control_->Watch().ok());
  control_->OnReady("statusd", 2001);
  control_->OnHeartbeat("statusd", Health::Degraded, "store slow");
  EXPECT_EQ(Info("statusd").health, "degraded: store slow");
  clock_.Advance(std::chrono::seconds(6));
  EXPECT_THAT(Info("statusd").health, HasSubstr("failing: no heartbeat for 6.0s"));
  EXPECT_FALSE(control_->OnHeartbeat("kubelet", Health::Ok, ""));
}

TEST_F(SystemdServiceControlTest, AMissingUnitIsStoppedAndSaysSo) {
  bus_.units.erase("nodelet-volumed.service");
  ASSERT_TRUE(control_->Watch().ok());
  EXPECT_EQ(Info("volumed").state, ProcessState::Stopped);
  EXPECT_EQ(Info("volumed").description, "unit nodelet-volumed.service not found");
}

TEST_F(SystemdServiceControlTest, TheUnitPrefixIsConfigurable) {
  Make("test-");
  bus_.units["test-plegd.service"] = Running(5000);
  ASSERT_TRUE(control_->Watch().ok());
  EXPECT_EQ(control_->UnitName("plegd"), "test-plegd.service");
  EXPECT_EQ(Info("plegd").pid, 5000);
  Answer answer;
  control_->Restart("plegd", answer.Callback());
  EXPECT_EQ(bus_.LastCall().unit, "test-plegd.service");
}

}  // namespace
}  // namespace nodelet::supervisor
