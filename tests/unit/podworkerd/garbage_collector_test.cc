// GarbageCollector (podworkerd's GC, scheduled on the loop, run on its executor) on the fake
// runtime and a FakeClock: nothing is collected before the desired pods are known; then the
// dead-container pass runs every period with the desired pods protected, the periodic sweep
// runs, failures become node events with the kubelet's reasons, a reclaim brings the passes
// forward, and destruction does not wait out a period. Time moves only when a test advances it.
#include "svc-podworkerd/garbage_collector.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "lib/service/event_loop.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_cri_runtime.h"
#include "tests/fakes/fake_image_fs.h"
#include "tests/testing/turn_loop.h"
#include "tests/unit/podworkerd/runtime_pods.h"

namespace nodelet::podworkerd {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using testing::FakeClock;
using testing::FakeCriRuntime;
using testing::FakeImageFs;
using ::testing::HasSubstr;
namespace v1 = ::runtime::v1;

constexpr char kGcImage[] = "nodelet.local/busybox:1.0";
constexpr uint64_t kGcMiB = 1024 * 1024;

class GarbageCollectorTest : public ::testing::Test {
 protected:
  GarbageCollectorTest() : fs_(runtime_, 100 * kGcMiB) {}

  // `count` exited instances (attempts 0..count-1) of container `name` in pod `uid`.
  void DeadInstances(const std::string& uid, const std::string& name, int count) {
    pods_.Instances(uid, name, count);
  }
  std::vector<std::string> Left() { return pods_.Left(); }

  // Periods long enough that only the first pass of each kind runs unless a test shortens them.
  GarbageCollectionConfig Config() {
    GarbageCollectionConfig config;
    config.container_gc_period = 1h;
    config.image_gc_period = 1h;
    // Image GC's first pass comes min(period, 5 s) after start: keep it out of the way.
    config.image.high_threshold_percent = 100;
    config.pod_infra_container_image = "nodelet.local/pause:1.0";
    return config;
  }

  std::unique_ptr<GarbageCollector> Make(GarbageCollectionConfig config,
                                         FsStatsSource* fs = nullptr) {
    auto gc = std::make_unique<GarbageCollector>(loop_, runtime_, runtime_, fs ? *fs : fs_,
                                                 std::move(config), [this](status::PodEvent e) {
                                                   std::lock_guard<std::mutex> lock(mu_);
                                                   events_.push_back(std::move(e));
                                                 });
    gc_ = gc.get();
    return gc;
  }

  static uint64_t Counter(const GarbageCollector& gc, const std::string& name) {
    for (const auto& [n, v] : gc.Counters()) {
      if (n == name) return v;
    }
    ADD_FAILURE() << "no counter " << name;
    return 0;
  }

  // Turns the loop (the passes' continuations come back through it) until `done()` holds and
  // no pass is in flight (a period counts from the end of its pass, which must come before the
  // test moves the clock again), at most 5 s of real time; the fake clock does not move.
  bool RunUntil(const std::function<bool()>& done) {
    return nodelet::testing::TurnLoopUntil(loop_, done, [this] { return gc_->pass_running(); });
  }
  // Runs what is due now and turns the loop until no pass is in flight (nothing more is due
  // until the fake clock moves).
  bool Settle() {
    if (!loop_.RunOnce(0ms).ok()) return false;
    return RunUntil([] { return true; });
  }
  // Advances the fake clock by `d`, then turns the loop until `done()`.
  bool AdvanceUntil(std::chrono::milliseconds d, const std::function<bool()>& done) {
    clock_.Advance(d);
    return RunUntil(done);
  }

  // The event with `reason` seen so far, or an empty event.
  status::PodEvent EventWith(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& e : events_) {
      if (e.reason == reason) return e;
    }
    return {};
  }

  FakeCriRuntime runtime_;
  testing::RuntimePods pods_{runtime_, kGcImage};
  FakeImageFs fs_;
  FakeClock clock_;
  EventLoop loop_{clock_};
  GarbageCollector* gc_ = nullptr;  // the last one made
  std::atomic<int> sweeps_{0};
  std::mutex mu_;
  std::vector<status::PodEvent> events_;
};

TEST_F(GarbageCollectorTest, NothingIsCollectedUntilTheDesiredPodsAreKnown) {
  DeadInstances("gone", "app", 2);
  DeadInstances("keep", "app", 3);
  auto config = Config();
  config.container_gc_period = 20ms;
  config.containers = {1, 0};  // node-wide maximum 0: only a live pod's newest instance stays
  auto gc = Make(config);
  // Ten periods without desired pods: no pass may run (it could not tell whose containers to
  // protect).
  for (int i = 0; i < 10; ++i) {
    clock_.Advance(20ms);
    ASSERT_TRUE(loop_.RunOnce(0ms).ok());
  }
  ASSERT_TRUE(Settle());
  EXPECT_EQ(Counter(*gc, "container_gc_runs"), 0u);
  EXPECT_EQ(Left().size(), 5u);

  gc->SetDesired({"keep"}, {});
  ASSERT_TRUE(RunUntil([&] { return Left().size() == 1; })) << ::testing::PrintToString(Left());
  EXPECT_THAT(Left(), ElementsAre("keep/app/2"));
  EXPECT_EQ(Counter(*gc, "containers_garbage_collected_node"), 4u);
  ASSERT_TRUE(Settle());
  EXPECT_EQ(Counter(*gc, "container_gc_runs"), 1u) << "the next pass is a period away";
  // The pass goes on every period.
  ASSERT_TRUE(AdvanceUntil(20ms, [&] { return Counter(*gc, "container_gc_runs") == 2; }));
  ASSERT_TRUE(AdvanceUntil(20ms, [&] { return Counter(*gc, "container_gc_runs") == 3; }));
  EXPECT_EQ(Counter(*gc, "container_gc_failures"), 0u);
}

TEST_F(GarbageCollectorTest, DesiredPodsChangeWhatTheNextPassProtects) {
  DeadInstances("a", "app", 2);
  auto config = Config();
  config.container_gc_period = 20ms;
  config.containers = {1, 0};
  auto gc = Make(config);
  gc->SetDesired({"a"}, {});
  ASSERT_TRUE(RunUntil([&] { return Left().size() == 1; }));
  EXPECT_THAT(Left(), ElementsAre("a/app/1"));
  ASSERT_TRUE(Settle());
  // Pod a is no longer desired: its last dead instance goes with the next pass, not before.
  gc->SetDesired({}, {});
  ASSERT_TRUE(Settle());
  EXPECT_EQ(Left().size(), 1u);
  ASSERT_TRUE(AdvanceUntil(20ms, [&] { return Left().empty(); }))
      << ::testing::PrintToString(Left());
}

TEST_F(GarbageCollectorTest, AFailedPassIsANodeEventAndTheNextPassRetries) {
  DeadInstances("gone", "app", 1);
  runtime_.FailCall(testing::CriCall::kListContainers, Unavailable("runtime away"), 1);
  auto config = Config();
  config.container_gc_period = 20ms;
  config.containers = {1, 0};
  auto gc = Make(config);
  gc->SetDesired({}, {});
  ASSERT_TRUE(RunUntil([&] { return !EventWith("ContainerGCFailed").reason.empty(); }));
  status::PodEvent e = EventWith("ContainerGCFailed");
  EXPECT_EQ(e.type, "Warning");
  EXPECT_EQ(e.pod_uid, "node");
  EXPECT_THAT(e.message, HasSubstr("runtime away"));
  EXPECT_EQ(Left().size(), 1u);
  // The failure was injected once: the next pass removes the container.
  ASSERT_TRUE(AdvanceUntil(20ms, [&] { return Left().empty(); }));
  EXPECT_EQ(Counter(*gc, "container_gc_failures"), 1u);
}

TEST_F(GarbageCollectorTest, ImageGcFailuresCarryTheKubeletsReasons) {
  auto config = Config();
  config.image_gc_period = 20ms;
  config.image.high_threshold_percent = 85;
  config.image.low_threshold_percent = 80;
  config.image.minimum_age = 0ms;
  // An unreadable image filesystem: ImageGCFailed.
  fs_.fail = true;
  auto gc = Make(config);
  gc->SetDesired({}, {kGcImage});
  // The first image pass comes min(period, 5 s) after the desired pods: here one period.
  ASSERT_TRUE(Settle());
  EXPECT_EQ(Counter(*gc, "image_gc_runs"), 0u);
  ASSERT_TRUE(AdvanceUntil(20ms, [&] { return !EventWith("ImageGCFailed").reason.empty(); }));
  EXPECT_THAT(EventWith("ImageGCFailed").message, HasSubstr("injected"));
  EXPECT_EQ(Counter(*gc, "image_gc_failures"), 1u);
}

TEST_F(GarbageCollectorTest, ImageGcThatCannotFreeEnoughIsFreeDiskSpaceFailed) {
  // 95 of 100 MiB used by something else, and the only image is named by a desired pod: nothing
  // may be removed, so the space cannot be freed.
  FakeImageFs full(runtime_, 100 * kGcMiB, 95 * kGcMiB);
  auto config = Config();
  config.image_gc_period = 20ms;
  config.image.high_threshold_percent = 85;
  config.image.low_threshold_percent = 80;
  config.image.minimum_age = 0ms;
  auto gc = Make(config, &full);
  gc->SetDesired({}, {kGcImage});
  ASSERT_TRUE(AdvanceUntil(20ms, [&] { return !EventWith("FreeDiskSpaceFailed").reason.empty(); }));
  EXPECT_EQ(EventWith("FreeDiskSpaceFailed").type, "Warning");
  auto images = runtime_.ListImages({});
  ASSERT_TRUE(images.ok());
  EXPECT_EQ(images->size(), 1u) << "a desired pod's image was removed";
}

TEST_F(GarbageCollectorTest, TheSweepRunsEveryPeriodOnceTheDesiredPodsAreKnown) {
  auto gc = Make(Config());
  gc->set_periodic_sweep(20ms, [&] { ++sweeps_; });
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(20ms);
    ASSERT_TRUE(loop_.RunOnce(0ms).ok());
  }
  EXPECT_EQ(sweeps_.load(), 0);
  gc->SetDesired({}, {});
  ASSERT_TRUE(Settle());
  EXPECT_EQ(sweeps_.load(), 0) << "the first sweep is one period (at most 5 s) away";
  for (int n = 1; n <= 3; ++n) {
    ASSERT_TRUE(AdvanceUntil(20ms, [&] { return sweeps_.load() == n; })) << n;
  }
}

// A long period (the default is a minute) must not postpone the first sweep after a start: it
// comes 5 s after the desired pods are known, then every period.
TEST_F(GarbageCollectorTest, TheFirstSweepComesWithinFiveSecondsWhateverThePeriod) {
  auto gc = Make(Config());
  gc->set_periodic_sweep(std::chrono::hours(1), [&] { ++sweeps_; });
  gc->SetDesired({}, {});
  clock_.Advance(4999ms);
  ASSERT_TRUE(Settle());
  EXPECT_EQ(sweeps_.load(), 0) << "not before its 5 s";
  ASSERT_TRUE(AdvanceUntil(1ms, [&] { return sweeps_.load() == 1; }));
  clock_.Advance(std::chrono::minutes(59));
  ASSERT_TRUE(Settle());
  EXPECT_EQ(sweeps_.load(), 1) << "then an hour to the next";
  ASSERT_TRUE(AdvanceUntil(std::chrono::minutes(1), [&] { return sweeps_.load() == 2; }));
}

TEST_F(GarbageCollectorTest, AReclaimBringsBothPassesForward) {
  DeadInstances("gone", "app", 1);
  auto config = Config();
  config.containers = {1, 0};
  auto gc = Make(config);
  gc->RequestReclaim();  // before the desired pods are known: nothing to do yet
  ASSERT_TRUE(Settle());
  EXPECT_EQ(Counter(*gc, "container_gc_runs"), 0u);
  gc->SetDesired({}, {});
  ASSERT_TRUE(RunUntil([&] { return Counter(*gc, "container_gc_runs") == 1; }));
  ASSERT_TRUE(Settle());
  EXPECT_EQ(Counter(*gc, "image_gc_runs"), 0u);
  DeadInstances("gone2", "app", 1);
  gc->RequestReclaim();
  ASSERT_TRUE(RunUntil([&] {
    return Counter(*gc, "container_gc_runs") == 2 && Counter(*gc, "image_gc_runs") == 1;
  }));
  EXPECT_TRUE(Left().empty()) << ::testing::PrintToString(Left());
}

TEST_F(GarbageCollectorTest, DestructionDoesNotWaitOutAPeriod) {
  auto gc = Make(Config());
  gc->SetDesired({}, {});
  ASSERT_TRUE(RunUntil([&] { return Counter(*gc, "container_gc_runs") >= 1; }));
  auto start = std::chrono::steady_clock::now();
  gc.reset();  // the next pass is an hour away
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  // Nothing the destroyed collector scheduled runs afterwards.
  clock_.Advance(std::chrono::hours(2));
  ASSERT_TRUE(loop_.RunOnce(10ms).ok());
}

}  // namespace
}  // namespace nodelet::podworkerd
