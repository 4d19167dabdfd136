// ProbeManager on the fake runtime with exec probes (the fake's exec handler answers), on a loop
// with a FakeClock: success and failure thresholds, a startup probe holding the other two back,
// readiness before the first result and carried over from statusd, results reported as changed
// pods, a probe that hangs holding back no other, and probes dropped with their pod or an older
// instance. Periods pass when a test advances the clock.
#include "svc-podworkerd/probe_manager.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "lib/service/event_loop.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_cri_runtime.h"
#include "tests/unit/podworkerd/runtime_pods.h"

namespace nodelet::podworkerd {
namespace {

using namespace std::chrono_literals;
using testing::FakeCriRuntime;
namespace v1 = ::runtime::v1;

constexpr char kProbeImage[] = "nodelet.local/busybox:1.0";

pod::Probe ExecProbe(const std::string& what, int success_threshold = 1,
                     int failure_threshold = 1) {
  pod::Probe p;
  p.exec = pod::ExecAction{{"probe", what}};
  p.period_seconds = 1;
  p.timeout_seconds = 1;
  p.success_threshold = success_threshold;
  p.failure_threshold = failure_threshold;
  return p;
}

class ProbeManagerTest : public ::testing::Test {
 protected:
  ProbeManagerTest() {
    // Each probe command is {"probe", NAME}; NAME's answer is set by the test (default: fail).
    runtime_.SetExecHandler([this](const std::string&, const std::vector<std::string>& cmd) {
      std::unique_lock<std::mutex> lock(mu_);
      const std::string name = cmd.size() > 1 ? cmd[1] : "";
      ++calls_[name];
      cv_.notify_all();
      cv_.wait(lock, [&] { return !hang_.count(name) || released_; });
      v1::ExecSyncResponse r;
      r.set_exit_code(pass_.count(name) ? 0 : 1);
      return r;
    });
  }
  ~ProbeManagerTest() override { Release(); }

  std::string Running(const std::string& uid, const std::string& name, uint32_t attempt = 0) {
    return pods_.Running(uid, name, attempt);
  }

  void Pass(const std::string& name, bool pass) {
    std::lock_guard<std::mutex> lock(mu_);
    if (pass) {
      pass_.insert(name);
    } else {
      pass_.erase(name);
    }
  }
  void Hang(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    hang_.insert(name);
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      released_ = true;
    }
    cv_.notify_all();
  }
  int Calls(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_[name];
  }
  // Turns the loop (attempts are scheduled there and their results recorded there) until
  // `done()` holds, at most 5 s of real time.
  bool RunUntil(const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      if (!loop_.RunOnce(10ms).ok()) return false;
    }
    return true;
  }
  // Turns the loop until the probe `name` has been called `n` times.
  bool WaitCalls(const std::string& name, int n) {
    return RunUntil([&] { return Calls(name) >= n; });
  }
  // Turns the loop until `done()`, letting one probe period pass whenever nothing happens for
  // a while (an attempt and its result take milliseconds), at most `periods` periods.
  bool PeriodsUntil(const std::function<bool()>& done, int periods = 10) {
    for (int i = 0; i <= periods; ++i) {
      const auto until = std::chrono::steady_clock::now() + 200ms;
      while (std::chrono::steady_clock::now() < until) {
        if (done()) return true;
        if (!loop_.RunOnce(5ms).ok()) return false;
      }
      clock_.Advance(1s);
    }
    return done();
  }
  // Turns the loop for `real` (an attempt wrongly started would be seen in that time) while
  // `periods` probe periods pass; whether `name` stayed at `calls` calls.
  bool StaysAt(const std::string& name, int calls, int periods = 3,
               std::chrono::milliseconds real = 100ms) {
    for (int i = 0; i < periods; ++i) {
      clock_.Advance(1s);
      const auto until = std::chrono::steady_clock::now() + real / periods;
      while (std::chrono::steady_clock::now() < until) {
        if (!loop_.RunOnce(5ms).ok()) return false;
      }
    }
    return Calls(name) == calls;
  }

  static pod::Pod PodOf(const pod::Container& c) {
    pod::Pod p;
    p.metadata.name = "web";
    p.spec.containers.push_back(c);
    return p;
  }

  testing::FakeClock clock_;
  EventLoop loop_{clock_};
  FakeCriRuntime runtime_;
  testing::RuntimePods pods_{runtime_, kProbeImage};
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<std::string> pass_, hang_;
  std::map<std::string, int> calls_;
  bool released_ = false;
};

TEST_F(ProbeManagerTest, ReadinessPassesAtItsSuccessThresholdAndThePodIsReportedChanged) {
  ProbeManager probes(loop_, runtime_, [] {});
  const std::string id = Running("u1", "app");
  pod::Container c;
  c.name = "app";
  c.readiness_probe = ExecProbe("ready", /*success_threshold=*/2);
  Pass("ready", true);
  probes.Ensure("u1", PodOf(c), c, id, "127.0.0.1");
  // No result before the first attempts: not ready.
  EXPECT_FALSE(probes.Ready(id, true, false));
  ASSERT_TRUE(WaitCalls("ready", 1));
  // One success of two needed.
  EXPECT_FALSE(probes.Ready(id, true, false));
  ASSERT_TRUE(PeriodsUntil([&] { return probes.Ready(id, true, false); }));
  EXPECT_GE(Calls("ready"), 2);
  EXPECT_EQ(probes.TakeChanged(), std::set<std::string>{"u1"});
  EXPECT_TRUE(probes.TakeChanged().empty());
}

TEST_F(ProbeManagerTest, LivenessFailsAtItsFailureThresholdAndIsNotProbedAgain) {
  ProbeManager probes(loop_, runtime_, [] {});
  const std::string id = Running("u1", "app");
  pod::Container c;
  c.name = "app";
  c.liveness_probe = ExecProbe("live", 1, /*failure_threshold=*/2);
  probes.Ensure("u1", PodOf(c), c, id, "127.0.0.1");
  ASSERT_TRUE(WaitCalls("live", 1));
  EXPECT_FALSE(probes.LivenessFailed(id));
  ASSERT_TRUE(PeriodsUntil([&] { return probes.LivenessFailed(id); }));
  EXPECT_EQ(probes.TakeChanged(), std::set<std::string>{"u1"});
  // A failed liveness probe waits for the container's restart: no further attempts.
  const int calls = Calls("live");
  EXPECT_TRUE(StaysAt("live", calls));
}

TEST_F(ProbeManagerTest, AStartupProbeHoldsTheOthersBackUntilItPasses) {
  ProbeManager probes(loop_, runtime_, [] {});
  const std::string id = Running("u1", "app");
  pod::Container c;
  c.name = "app";
  c.startup_probe = ExecProbe("startup", 1, /*failure_threshold=*/100);
  c.readiness_probe = ExecProbe("ready");
  c.liveness_probe = ExecProbe("live");
  Pass("ready", true);
  Pass("live", true);
  probes.Ensure("u1", PodOf(c), c, id, "127.0.0.1");
  ASSERT_TRUE(PeriodsUntil([&] { return Calls("startup") >= 2; }));
  EXPECT_EQ(Calls("ready"), 0);
  EXPECT_EQ(Calls("live"), 0);
  EXPECT_FALSE(probes.Ready(id, true, true));
  Pass("startup", true);
  ASSERT_TRUE(PeriodsUntil([&] { return probes.Ready(id, true, true); }));
  ASSERT_TRUE(WaitCalls("live", 1));
  EXPECT_FALSE(probes.LivenessFailed(id));
}

// A startup probe that reaches its failureThreshold before it ever passed fails the container
// (it is killed and restarted, as for liveness), is not probed again, and never lets the others
// run.
TEST_F(ProbeManagerTest, AStartupProbeThatNeverPassesFailsTheContainer) {
  ProbeManager probes(loop_, runtime_, [] {});
  const std::string id = Running("u1", "app");
  pod::Container c;
  c.name = "app";
  c.startup_probe = ExecProbe("startup", 1, /*failure_threshold=*/2);
  c.liveness_probe = ExecProbe("live");
  Pass("live", true);
  probes.Ensure("u1", PodOf(c), c, id, "127.0.0.1");
  ASSERT_TRUE(WaitCalls("startup", 1));
  EXPECT_EQ(probes.FailedToRestart(id), std::nullopt) << "one failure of two";
  ASSERT_TRUE(PeriodsUntil([&] { return probes.FailedToRestart(id).has_value(); }));
  EXPECT_EQ(probes.FailedToRestart(id), ProbeKind::kStartup);
  EXPECT_FALSE(probes.LivenessFailed(id));
  EXPECT_EQ(probes.TakeChanged(), std::set<std::string>{"u1"});
  const int calls = Calls("startup");
  EXPECT_TRUE(StaysAt("startup", calls)) << "probed again before a restart";
  EXPECT_EQ(Calls("live"), 0);
  EXPECT_FALSE(probes.Ready(id, false, true));
}

TEST_F(ProbeManagerTest, ReadinessOfAContainerWithoutRegisteredProbes) {
  ProbeManager probes(loop_, runtime_, [] {});
  // No readiness or startup probe: ready as soon as it runs.
  EXPECT_TRUE(probes.Ready("c1", false, false));
  // Probes declared but not registered yet: not ready.
  EXPECT_FALSE(probes.Ready("c1", true, false));
  EXPECT_FALSE(probes.Ready("c1", false, true));
  // Carried over from the previous podworkerd (statusd's last status): kept until probed.
  probes.SeedReady("c1", true);
  EXPECT_TRUE(probes.Ready("c1", true, false));
}

TEST_F(ProbeManagerTest, ASeededReadinessStaysWhileItIsProbedAgain) {
  ProbeManager probes(loop_, runtime_, [] {});
  const std::string id = Running("u1", "app");
  probes.SeedReady(id, true);
  pod::Container c;
  c.name = "app";
  c.readiness_probe = ExecProbe("ready", 1, /*failure_threshold=*/3);
  probes.Ensure("u1", PodOf(c), c, id, "127.0.0.1");
  ASSERT_TRUE(WaitCalls("ready", 1));
  // One failure of three: no flip to unready after a restart of podworkerd.
  EXPECT_TRUE(probes.Ready(id, true, false));
  ASSERT_TRUE(PeriodsUntil([&] { return !probes.Ready(id, true, false); }));
}

TEST_F(ProbeManagerTest, AProbeThatHangsHoldsBackNoOther) {
  ProbeManager probes(
      loop_, runtime_, [] {}, /*min_threads=*/1);
  // Declared after the manager, so destroyed first: the hung probe returns before the manager
  // waits for its threads, also when an assertion ends the test early.
  struct ReleaseAtEnd {
    std::function<void()> release;
    ~ReleaseAtEnd() { release(); }
  } release_at_end{[this] { Release(); }};
  const std::string stuck = Running("u1", "stuck");
  const std::string fine = Running("u2", "fine");
  pod::Container a;
  a.name = "stuck";
  a.readiness_probe = ExecProbe("hang");
  Hang("hang");
  probes.Ensure("u1", PodOf(a), a, stuck, "127.0.0.1");
  ASSERT_TRUE(WaitCalls("hang", 1));
  pod::Container b;
  b.name = "fine";
  b.readiness_probe = ExecProbe("ready");
  Pass("ready", true);
  probes.Ensure("u2", PodOf(b), b, fine, "127.0.0.1");
  ASSERT_TRUE(PeriodsUntil([&] { return probes.Ready(fine, true, false); }));
  EXPECT_GE(probes.threads(), 2u);
  EXPECT_FALSE(probes.Ready(stuck, true, false));
}

TEST_F(ProbeManagerTest, ProbesEndWithTheirPodAndWithAnOlderInstance) {
  ProbeManager probes(loop_, runtime_, [] {});
  const std::string first = Running("u1", "app");
  pod::Container c;
  c.name = "app";
  c.readiness_probe = ExecProbe("ready");
  Pass("ready", true);
  probes.Ensure("u1", PodOf(c), c, first, "127.0.0.1");
  ASSERT_TRUE(PeriodsUntil([&] { return probes.Ready(first, true, false); }));
  // The container restarted: the old instance's probe stops, the new one starts unready.
  const std::string second = Running("u1", "app", /*attempt=*/1);
  probes.Ensure("u1", PodOf(c), c, second, "127.0.0.1");
  EXPECT_FALSE(probes.Ready(first, true, false));
  ASSERT_TRUE(PeriodsUntil([&] { return probes.Ready(second, true, false); }));
  probes.RemovePod("u1");
  EXPECT_FALSE(probes.Ready(second, true, false));
  const int calls = Calls("ready");
  EXPECT_TRUE(StaysAt("ready", calls));
}

}  // namespace
}  // namespace nodelet::podworkerd
