// NodeStatusManager (timers on the loop, CRI calls and node reads on its executor) on the fake
// CRI runtime and a FakeClock: the runtime is checked every period and the status rebuilt every
// status period; a failing CRI Status makes the node NotReady at once with the runtime's error,
// and the next good check makes it Ready again; a runtime network that is not ready shows with
// the runtime's reason; a publishing that failed is retried at the next check; a stop with a
// CRI call in flight returns at once. Time moves only when a test advances it.
#include "supervisor/node_status.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "lib/service/event_loop.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_cri_runtime.h"
#include "tests/testing/harness.h"
#include "tests/testing/turn_loop.h"

namespace nodelet::supervisor {
namespace {

using namespace std::chrono_literals;
using testing::CriCall;
using testing::FakeClock;
using testing::FakeCriRuntime;

class NodeStatusManagerTest : public ::testing::Test {
 protected:
  std::unique_ptr<NodeStatusManager> Make() {
    NodeStatusOptions opts;
    opts.node_name = "node-a";
    opts.node_ip = "192.0.2.10";
    opts.root_dir = dir_.path();
    opts.version = "test";
    opts.runtime_check_period = 5s;
    opts.status_period = 10s;
    opts.pressure = [](std::string_view) { return false; };
    opts.publish = [this](const std::string& json) {
      std::lock_guard<std::mutex> lock(mu_);
      published_.push_back(json);
      return publish_ok_;
    };
    opts.on_transition = [this](const std::string& type, bool status) {
      std::lock_guard<std::mutex> lock(mu_);
      transitions_.emplace_back(type, status);
    };
    auto m = std::make_unique<NodeStatusManager>(loop_, opts, &runtime_, &runtime_);
    manager_ = m.get();
    return m;
  }

  // Turns the loop until `done()` holds and no check is in flight, at most 5 s of real time;
  // the fake clock does not move.
  bool RunUntil(const std::function<bool()>& done) {
    return nodelet::testing::TurnLoopUntil(loop_, done, [this] { return manager_->checking(); });
  }
  bool AdvanceAndSettle(std::chrono::milliseconds d) {
    clock_.Advance(d);
    if (!loop_.RunOnce(0ms).ok()) return false;
    return RunUntil([] { return true; });
  }

  // The node's condition `type` as the manager publishes it now.
  nlohmann::json ConditionOf(const std::string& type) {
    auto node = nlohmann::json::parse(manager_->NodeJson());
    for (const auto& c : node["status"]["conditions"]) {
      if (c["type"] == type) return c;
    }
    ADD_FAILURE() << "no condition " << type;
    return {};
  }
  size_t published() {
    std::lock_guard<std::mutex> lock(mu_);
    return published_.size();
  }

  FakeCriRuntime runtime_;
  FakeClock clock_;
  EventLoop loop_{clock_};
  testing::TempDir dir_;
  NodeStatusManager* manager_ = nullptr;
  std::mutex mu_;
  std::vector<std::string> published_;
  bool publish_ok_ = true;  // set before Start only
  std::vector<std::pair<std::string, bool>> transitions_;
};

TEST_F(NodeStatusManagerTest, ChecksTheRuntimeEveryPeriodAndRebuildsEveryStatusPeriod) {
  auto m = Make();
  m->SetServices(true, "");
  m->Start();
  // Start builds the first status on the calling thread.
  EXPECT_EQ(runtime_.CallCount(CriCall::kStatus), 1);
  EXPECT_EQ(runtime_.CallCount(CriCall::kVersion), 1);
  EXPECT_TRUE(m->runtime_ready());
  EXPECT_EQ(ConditionOf("Ready")["status"], "True");
  EXPECT_GT(m->Allocatable().memory_bytes, 0);
  const std::string first_heartbeat = ConditionOf("Ready")["lastHeartbeatTime"];
  EXPECT_EQ(published(), 0u) << "the first status goes out at the first check";

  ASSERT_TRUE(AdvanceAndSettle(4999ms));
  EXPECT_EQ(runtime_.CallCount(CriCall::kStatus), 1) << "no check before the period";
  ASSERT_TRUE(AdvanceAndSettle(1ms));
  EXPECT_EQ(runtime_.CallCount(CriCall::kStatus), 2);
  EXPECT_EQ(published(), 1u);
  EXPECT_EQ(ConditionOf("Ready")["lastHeartbeatTime"], first_heartbeat)
      << "no rebuild before the status period";

  ASSERT_TRUE(AdvanceAndSettle(5s));
  EXPECT_EQ(runtime_.CallCount(CriCall::kStatus), 3);
  EXPECT_NE(ConditionOf("Ready")["lastHeartbeatTime"], first_heartbeat) << "10 s: rebuilt";
  EXPECT_EQ(published(), 2u) << "each rebuild goes out";
  EXPECT_EQ(ConditionOf("Ready")["lastTransitionTime"], first_heartbeat);

  // The version is asked again at the 12th check.
  for (int i = 3; i <= 11; ++i) ASSERT_TRUE(AdvanceAndSettle(5s));
  EXPECT_EQ(runtime_.CallCount(CriCall::kVersion), 1);
  ASSERT_TRUE(AdvanceAndSettle(5s));
  EXPECT_EQ(runtime_.CallCount(CriCall::kVersion), 2);
  EXPECT_EQ(runtime_.CallCount(CriCall::kStatus), 13);
}

TEST_F(NodeStatusManagerTest, AFailingStatusMakesTheNodeNotReadyAtOnceAndItRecovers) {
  auto m = Make();
  m->SetServices(true, "");
  m->Start();
  ASSERT_EQ(ConditionOf("Ready")["status"], "True");
  runtime_.FailCall(CriCall::kStatus, Unavailable("containerd is gone"), 1);
  ASSERT_TRUE(AdvanceAndSettle(5s));
  // Not the status period yet: the change of readiness rebuilds at once.
  EXPECT_FALSE(m->runtime_ready());
  nlohmann::json ready = ConditionOf("Ready");
  EXPECT_EQ(ready["status"], "False");
  EXPECT_EQ(ready["reason"], "KubeletNotReady");
  const std::string message = ready["message"];
  EXPECT_NE(message.find("container runtime is down"), std::string::npos) << message;
  EXPECT_NE(message.find("containerd is gone"), std::string::npos) << message;

  // The failure was once: the next check (which asks the version again) finds it back.
  ASSERT_TRUE(AdvanceAndSettle(5s));
  EXPECT_TRUE(m->runtime_ready());
  EXPECT_EQ(runtime_.CallCount(CriCall::kVersion), 2);
  ready = ConditionOf("Ready");
  EXPECT_EQ(ready["status"], "True");
  EXPECT_EQ(ready["message"], "nodelet is posting ready status");
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<std::string, bool>> ready_changes;
  for (const auto& t : transitions_) {
    if (t.first == "Ready") ready_changes.push_back(t);
  }
  EXPECT_EQ(ready_changes, (std::vector<std::pair<std::string, bool>>{
                               {"Ready", true}, {"Ready", false}, {"Ready", true}}));
}

TEST_F(NodeStatusManagerTest, ANetworkNotReadyShowsWithTheRuntimesReason) {
  auto m = Make();
  m->SetServices(true, "");
  m->Start();
  runtime_.SetNetworkReady(false, "NetworkPluginNotReady", "cni plugin not initialized");
  ASSERT_TRUE(AdvanceAndSettle(5s));
  EXPECT_EQ(ConditionOf("Ready")["status"], "True") << "the network shows at the next rebuild";
  ASSERT_TRUE(AdvanceAndSettle(5s));
  nlohmann::json ready = ConditionOf("Ready");
  EXPECT_EQ(ready["status"], "False");
  EXPECT_EQ(ready["message"],
            cri::NetworkNotReadyMessage("NetworkPluginNotReady", "cni plugin not initialized"));
  EXPECT_TRUE(m->runtime_ready()) << "the runtime itself is up";
}

TEST_F(NodeStatusManagerTest, AFailedPublishingIsRetriedAtTheNextCheck) {
  publish_ok_ = false;
  auto m = Make();
  m->Start();
  ASSERT_TRUE(AdvanceAndSettle(5s));
  EXPECT_EQ(published(), 1u);
  ASSERT_TRUE(AdvanceAndSettle(5s));
  EXPECT_EQ(published(), 2u);
  {
    std::lock_guard<std::mutex> lock(mu_);
    publish_ok_ = true;
  }
  ASSERT_TRUE(AdvanceAndSettle(5s));
  EXPECT_EQ(published(), 3u);
  // Sent: the next check (not a rebuild) sends nothing.
  ASSERT_TRUE(AdvanceAndSettle(5s));
  EXPECT_EQ(published(), 4u) << "20 s: a rebuild goes out";
  ASSERT_TRUE(AdvanceAndSettle(5s));
  EXPECT_EQ(published(), 4u);
}

TEST_F(NodeStatusManagerTest, StopWithACheckInFlightReturnsAtOnce) {
  auto m = Make();
  m->SetServices(true, "");
  m->Start();
  runtime_.HangCall(CriCall::kStatus);
  clock_.Advance(5s);
  ASSERT_TRUE(loop_.RunOnce(0ms).ok());
  ASSERT_TRUE(runtime_.WaitForHungCalls(1, 5s));
  const auto before = std::chrono::steady_clock::now();
  m->RequestStop();
  EXPECT_LT(std::chrono::steady_clock::now() - before, 1s) << "RequestStop waits for nothing";
  // The call fails once released; a stopped manager applies nothing of it.
  runtime_.ReleaseHangs();
  ASSERT_TRUE(RunUntil([] { return true; }));
  EXPECT_EQ(ConditionOf("Ready")["status"], "True");
  ASSERT_TRUE(AdvanceAndSettle(30s));
  EXPECT_EQ(runtime_.CallCount(CriCall::kStatus), 2) << "no check after the stop";
  EXPECT_EQ(published(), 0u);
}

}  // namespace
}  // namespace nodelet::supervisor
