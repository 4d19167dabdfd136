// EvictionManager (scheduled on the loop, sampling on its executor) on a FakeClock with a
// scripted stats source and stand-ins for the pods and the runtime: the first sample at start,
// none before the monitoring period and one each period after; a hard threshold evicts the pod
// the kubelet's ranking picks, a soft one only after its grace period; MemoryPressure outlasts
// the threshold by the transition period; a reload changes the period; a stop with a sample in
// flight returns at once and runs no round for it. Time moves only when a test advances it.
#include "supervisor/eviction_manager.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "lib/pod/quantity.h"
#include "lib/service/event_loop.h"
#include "tests/fakes/fake_clock.h"
#include "tests/testing/harness.h"
#include "tests/testing/turn_loop.h"

namespace nodelet::supervisor {
namespace {

using namespace std::chrono_literals;
using testing::FakeClock;

constexpr int64_t kEvictMiB = 1024 * 1024;

// Samples of a node with 1 GiB of memory and `available` of it free, with the pods' working
// sets in `usage`; counts whole and node-only samples. `Hold` makes the next samples block
// until `Release`.
class EvictionFakeStats : public StatsSource {
 public:
  explicit EvictionFakeStats(const Clock& clock) : clock_(clock) {}

  NodeStats Sample() override { return Take(true); }
  NodeStats SampleNode() override { return Take(false); }

  void SetAvailable(int64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    available_ = bytes;
  }
  void SetUsage(const std::string& uid, int64_t working_set) {
    std::lock_guard<std::mutex> lock(mu_);
    usage_[uid] = working_set;
  }
  int whole() const {
    std::lock_guard<std::mutex> lock(mu_);
    return whole_;
  }
  int node_only() const {
    std::lock_guard<std::mutex> lock(mu_);
    return node_only_;
  }
  int total() const { return whole() + node_only(); }
  void Hold() {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = true;
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      hold_ = false;
    }
    cv_.notify_all();
  }
  // Waits (real time) until a sample is blocked in Hold.
  bool WaitHeld(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [this] { return held_ > 0; });
  }

 private:
  NodeStats Take(bool with_pods) {
    std::unique_lock<std::mutex> lock(mu_);
    ++(with_pods ? whole_ : node_only_);
    ++held_;
    cv_.notify_all();
    cv_.wait(lock, [this] { return !hold_; });
    --held_;
    NodeStats s;
    s.time_unix_ms = clock_.WallSeconds() * 1000;
    s.memory = stats::NodeMemory{1024 * kEvictMiB, 0, 0, available_};
    s.pods_sampled = with_pods;
    if (!with_pods) return s;
    for (const auto& [uid, working_set] : usage_) {
      PodStats p;
      p.uid = uid;
      stats::MemoryUsage m;
      m.working_set_bytes = working_set;
      p.memory = m;
      p.containers.push_back(ContainerStats{"app", uid + "-app", 0, std::nullopt, m});
      s.pods.push_back(std::move(p));
    }
    return s;
  }

  const Clock& clock_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int64_t available_ = 800 * kEvictMiB;
  std::map<std::string, int64_t> usage_;
  int whole_ = 0, node_only_ = 0, held_ = 0;
  bool hold_ = false;
};

// The admitted pods and what the manager did to them.
class EvictionFakePods : public EvictionPods {
 public:
  // A pod with one container "app" requesting `memory_request` (none: BestEffort).
  void Admit(const std::string& uid, const std::string& memory_request = "") {
    auto p = std::make_shared<pod::Pod>();
    p->metadata.name = uid;
    p->metadata.namespace_name = "default";
    p->metadata.uid = uid;
    pod::Container c;
    c.name = "app";
    if (!memory_request.empty()) {
      c.resources.requests["memory"] = *pod::Quantity::Parse(memory_request);
    }
    p->spec.containers.push_back(c);
    admitted_[uid] = std::move(p);
  }

  const std::map<std::string, std::shared_ptr<const pod::Pod>>& admitted() const override {
    return admitted_;
  }
  const std::map<std::string, PodEviction>& evictions() const override { return evictions_; }
  void Evict(const std::string& uid, PodEviction eviction) override {
    evictions_[uid] = eviction;
    evicted.push_back(uid);
  }
  std::set<std::string> ForgetGoneEvictions() override { return {}; }
  void RequestReclaim() override { ++reclaims; }
  std::set<std::string> TerminalPods() override { return {}; }

  std::vector<std::string> evicted;  // in order
  int reclaims = 0;

 private:
  std::map<std::string, std::shared_ptr<const pod::Pod>> admitted_;
  std::map<std::string, PodEviction> evictions_;
};

// A runtime with no running container: an evicted pod is cleaned up at once.
class EvictionEmptyRuntime : public RuntimeView {
 public:
  RuntimeSnapshot Runtime() const override { return {}; }
};

class EvictionManagerTest : public ::testing::Test {
 protected:
  std::unique_ptr<EvictionManager> Make(const std::string& hard, const std::string& soft = "",
                                        const std::string& soft_grace = "") {
    EvictionManagerOptions opts;
    auto thresholds = EvictionThresholdsFromFlags(hard, soft, soft_grace);
    EXPECT_TRUE(thresholds.ok()) << thresholds.status().message();
    opts.thresholds = *thresholds;
    opts.monitoring_period = 10s;
    opts.pressure_transition_period = 60s;
    opts.records_path = dir_.Sub("evictions");
    auto m =
        std::make_unique<EvictionManager>(loop_, clock_, opts, stats_, pods_, runtime_, pressure_);
    manager_ = m.get();
    return m;
  }

  // Turns the loop until `done()` holds and no sample is in flight, at most 5 s of real time;
  // the fake clock does not move.
  bool RunUntil(const std::function<bool()>& done) {
    return nodelet::testing::TurnLoopUntil(loop_, done, [this] { return manager_->sampling(); });
  }
  // Runs what is due now, and the sample it started (if any) to its round.
  bool Settle() {
    if (!loop_.RunOnce(0ms).ok()) return false;
    return RunUntil([] { return true; });
  }
  bool AdvanceAndSettle(std::chrono::milliseconds d) {
    clock_.Advance(d);
    return Settle();
  }

  FakeClock clock_;
  EventLoop loop_{clock_};
  testing::TempDir dir_;
  EvictionFakeStats stats_{clock_};
  EvictionFakePods pods_;
  EvictionEmptyRuntime runtime_;
  std::shared_ptr<NodePressure> pressure_ = std::make_shared<NodePressure>();
  EvictionManager* manager_ = nullptr;
};

TEST_F(EvictionManagerTest, SamplesAtStartThenOncePerMonitoringPeriod) {
  auto m = Make("memory.available<100Mi");
  EXPECT_EQ(stats_.total(), 0) << "nothing is sampled before Start";
  ASSERT_TRUE(m->Start().ok());
  ASSERT_TRUE(RunUntil([&] { return stats_.total() == 1; }));
  EXPECT_EQ(stats_.whole(), 1) << "the first sample reads the pods";
  // Nothing more until the period has passed.
  for (int i = 0; i < 9; ++i) ASSERT_TRUE(AdvanceAndSettle(1s));
  ASSERT_TRUE(AdvanceAndSettle(999ms));
  EXPECT_EQ(stats_.total(), 1);
  ASSERT_TRUE(AdvanceAndSettle(1ms));
  EXPECT_EQ(stats_.total(), 2);
  // No threshold met and no pod with a local-storage limit: node-only samples from now on.
  EXPECT_EQ(stats_.node_only(), 1);
  ASSERT_TRUE(AdvanceAndSettle(10s));
  EXPECT_EQ(stats_.total(), 3);
  EXPECT_EQ(m->evictions(), 0u);
  EXPECT_FALSE(pressure_->Get("MemoryPressure"));
}

TEST_F(EvictionManagerTest, AHardThresholdEvictsTheBestEffortPodOverItsRequestFirst) {
  // The Burstable pod uses more memory, but within its request; the BestEffort pod uses less,
  // all of it over its request (0): the kubelet evicts the BestEffort pod.
  pods_.Admit("burstable", "500Mi");
  pods_.Admit("besteffort");
  stats_.SetUsage("burstable", 300 * kEvictMiB);
  stats_.SetUsage("besteffort", 50 * kEvictMiB);
  auto m = Make("memory.available<100Mi");
  ASSERT_TRUE(m->Start().ok());
  ASSERT_TRUE(RunUntil([&] { return stats_.total() == 1; }));
  ASSERT_TRUE(AdvanceAndSettle(10s));
  EXPECT_TRUE(pods_.evicted.empty());
  EXPECT_EQ(stats_.node_only(), 1);

  stats_.SetAvailable(80 * kEvictMiB);
  ASSERT_TRUE(AdvanceAndSettle(9s));
  EXPECT_TRUE(pods_.evicted.empty()) << "the threshold is seen only at the next sample";
  // The node-only sample meets the threshold: a whole sample follows at once, and its round
  // evicts.
  clock_.Advance(1s);
  ASSERT_TRUE(RunUntil([&] { return !pods_.evicted.empty(); }));
  EXPECT_EQ(stats_.node_only(), 2);
  EXPECT_EQ(stats_.whole(), 2);
  ASSERT_EQ(pods_.evicted, std::vector<std::string>{"besteffort"});
  const PodEviction& e = pods_.evictions().at("besteffort");
  EXPECT_EQ(e.grace_seconds, 1) << "a hard threshold kills at once";
  EXPECT_NE(e.message.find("memory"), std::string::npos) << e.message;
  EXPECT_TRUE(pressure_->Get("MemoryPressure"));
  EXPECT_EQ(m->evictions(), 1u);
  EXPECT_EQ(m->evictions_by_signal().at("memory.available"), 1u);
}

TEST_F(EvictionManagerTest, ASoftThresholdEvictsOnlyOnceItHeldForItsGracePeriod) {
  pods_.Admit("burstable", "500Mi");
  pods_.Admit("besteffort");
  stats_.SetUsage("burstable", 300 * kEvictMiB);
  stats_.SetUsage("besteffort", 50 * kEvictMiB);
  stats_.SetAvailable(150 * kEvictMiB);
  auto m = Make("memory.available<100Mi", "memory.available<200Mi", "memory.available=30s");
  ASSERT_TRUE(m->Start().ok());
  ASSERT_TRUE(RunUntil([&] { return stats_.total() == 1; }));
  EXPECT_TRUE(pressure_->Get("MemoryPressure")) << "the condition does not wait for the grace";
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(AdvanceAndSettle(10s));
    EXPECT_TRUE(pods_.evicted.empty()) << "after " << (i + 1) * 10 << " s";
  }
  clock_.Advance(10s);
  ASSERT_TRUE(RunUntil([&] { return !pods_.evicted.empty(); }));
  ASSERT_EQ(pods_.evicted, std::vector<std::string>{"besteffort"});
  EXPECT_EQ(pods_.evictions().at("besteffort").grace_seconds,
            pod::kDefaultTerminationGracePeriodSeconds)
      << "a soft threshold gives the pod its own grace period";
}

TEST_F(EvictionManagerTest, MemoryPressureHoldsForTheTransitionPeriod) {
  stats_.SetAvailable(80 * kEvictMiB);
  auto m = Make("memory.available<100Mi");
  ASSERT_TRUE(m->Start().ok());
  ASSERT_TRUE(RunUntil([&] { return stats_.total() == 1; }));
  EXPECT_TRUE(pressure_->Get("MemoryPressure"));
  // Freed: the condition stays for the transition period (60 s) from the last sample that met
  // the threshold, then goes.
  stats_.SetAvailable(800 * kEvictMiB);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(AdvanceAndSettle(10s));
    EXPECT_TRUE(pressure_->Get("MemoryPressure")) << "after " << (i + 1) * 10 << " s";
  }
  ASSERT_TRUE(AdvanceAndSettle(10s));
  EXPECT_FALSE(pressure_->Get("MemoryPressure"));
  EXPECT_TRUE(pods_.evicted.empty());
}

TEST_F(EvictionManagerTest, ReconfigureSamplesAtOnceAndChangesThePeriod) {
  auto m = Make("memory.available<100Mi");
  ASSERT_TRUE(m->Start().ok());
  ASSERT_TRUE(RunUntil([&] { return stats_.total() == 1; }));
  ASSERT_TRUE(AdvanceAndSettle(1s));
  auto thresholds = EvictionThresholdsFromFlags("memory.available<100Mi", "", "");
  ASSERT_TRUE(thresholds.ok());
  m->Reconfigure(*thresholds, 60s, 0, 2s);
  ASSERT_TRUE(Settle());
  EXPECT_EQ(stats_.total(), 2) << "a reload samples at once";
  ASSERT_TRUE(AdvanceAndSettle(1999ms));
  EXPECT_EQ(stats_.total(), 2);
  ASSERT_TRUE(AdvanceAndSettle(1ms));
  EXPECT_EQ(stats_.total(), 3) << "the new period, 2 s";
  ASSERT_TRUE(AdvanceAndSettle(2s));
  EXPECT_EQ(stats_.total(), 4);
}

TEST_F(EvictionManagerTest, StopWithASampleInFlightReturnsAtOnceAndDecidesNothing) {
  pods_.Admit("besteffort");
  stats_.SetUsage("besteffort", 50 * kEvictMiB);
  stats_.SetAvailable(80 * kEvictMiB);  // the held sample would evict
  stats_.Hold();
  auto m = Make("memory.available<100Mi");
  ASSERT_TRUE(m->Start().ok());
  ASSERT_TRUE(stats_.WaitHeld(5s));
  const auto before = std::chrono::steady_clock::now();
  m->RequestStop();
  EXPECT_LT(std::chrono::steady_clock::now() - before, 1s) << "RequestStop waits for nothing";
  stats_.Release();
  ASSERT_TRUE(RunUntil([] { return true; }));
  ASSERT_TRUE(AdvanceAndSettle(30s));
  EXPECT_EQ(stats_.total(), 1) << "no sample after the stop";
  EXPECT_TRUE(pods_.evicted.empty()) << "no round after the stop";
  EXPECT_FALSE(pressure_->Get("MemoryPressure"));
}

TEST_F(EvictionManagerTest, DestructionWaitsOnlyForTheSampleInFlight) {
  stats_.Hold();
  auto m = Make("memory.available<100Mi");
  ASSERT_TRUE(m->Start().ok());
  ASSERT_TRUE(stats_.WaitHeld(5s));
  // The blocking read returns a moment later; the destructor waits for it, not for a period.
  std::thread release([this] {
    std::this_thread::sleep_for(50ms);
    stats_.Release();
  });
  const auto before = std::chrono::steady_clock::now();
  m.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - before, 2s);
  release.join();
  ASSERT_TRUE(loop_.RunOnce(0ms).ok());
  EXPECT_EQ(stats_.total(), 1);
}

}  // namespace
}  // namespace nodelet::supervisor
