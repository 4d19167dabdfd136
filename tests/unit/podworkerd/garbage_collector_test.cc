// GarbageCollector (podworkerd's GC thread) on the fake runtime: nothing is collected before the
// desired pods are known; then the dead-container pass runs every period with the desired pods
// protected, the periodic sweep runs, failures become node events with the kubelet's reasons,
// and destruction stops the thread without waiting out a period.
#include "svc-podworkerd/garbage_collector.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/fakes/fake_cri_runtime.h"
#include "tests/fakes/fake_image_fs.h"
#include "tests/unit/podworkerd/runtime_pods.h"

namespace nodelet::podworkerd {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
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

  std::unique_ptr<GarbageCollector> Make(GarbageCollectionConfig config) {
    return std::make_unique<GarbageCollector>(runtime_, runtime_, fs_, clock_, std::move(config),
                                              [this](status::PodEvent e) {
                                                std::lock_guard<std::mutex> lock(mu_);
                                                events_.push_back(std::move(e));
                                                cv_.notify_all();
                                              });
  }

  static uint64_t Counter(const GarbageCollector& gc, const std::string& name) {
    for (const auto& [n, v] : gc.Counters()) {
      if (n == name) return v;
    }
    ADD_FAILURE() << "no counter " << name;
    return 0;
  }

  // Waits (at most `timeout`) until `done()` holds, checking every few milliseconds.
  template <typename Pred>
  static bool WaitFor(Pred done, std::chrono::milliseconds timeout = 5s) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(5ms);
    }
    return true;
  }

  // Waits (at most 5 s) for an event with `reason`; returns it, or an empty event.
  status::PodEvent WaitForEvent(const std::string& reason) {
    std::unique_lock<std::mutex> lock(mu_);
    status::PodEvent found;
    cv_.wait_for(lock, 5s, [&] {
      for (const auto& e : events_) {
        if (e.reason == reason) {
          found = e;
          return true;
        }
      }
      return false;
    });
    return found;
  }

  FakeCriRuntime runtime_;
  testing::RuntimePods pods_{runtime_, kGcImage};
  FakeImageFs fs_;
  RealClock clock_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<status::PodEvent> events_;
};

TEST_F(GarbageCollectorTest, NothingIsCollectedUntilTheDesiredPodsAreKnown) {
  DeadInstances("gone", "app", 2);
  DeadInstances("keep", "app", 3);
  auto config = Config();
  config.container_gc_period = 20ms;
  config.containers = {1, 0};  // node-wide maximum 0: only a live pod's newest instance stays
  auto gc = Make(config);
  gc->Start();
  // Ten periods without desired pods: no pass may run (it could not tell whose containers to
  // protect).
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(Counter(*gc, "container_gc_runs"), 0u);
  EXPECT_EQ(Left().size(), 5u);

  gc->SetDesired({"keep"}, {});
  ASSERT_TRUE(WaitFor([&] { return Left().size() == 1; })) << ::testing::PrintToString(Left());
  EXPECT_THAT(Left(), ElementsAre("keep/app/2"));
  EXPECT_EQ(Counter(*gc, "containers_garbage_collected_node"), 4u);
  // The pass goes on every period.
  ASSERT_TRUE(WaitFor([&] { return Counter(*gc, "container_gc_runs") >= 3; }));
  EXPECT_EQ(Counter(*gc, "container_gc_failures"), 0u);
}

TEST_F(GarbageCollectorTest, DesiredPodsChangeWhatTheNextPassProtects) {
  DeadInstances("a", "app", 2);
  auto config = Config();
  config.container_gc_period = 20ms;
  config.containers = {1, 0};
  auto gc = Make(config);
  gc->Start();
  gc->SetDesired({"a"}, {});
  ASSERT_TRUE(WaitFor([&] { return Left().size() == 1; }));
  EXPECT_THAT(Left(), ElementsAre("a/app/1"));
  // Pod a is no longer desired: its last dead instance goes with the next pass.
  gc->SetDesired({}, {});
  ASSERT_TRUE(WaitFor([&] { return Left().empty(); })) << ::testing::PrintToString(Left());
}

TEST_F(GarbageCollectorTest, AFailedPassIsANodeEventAndTheNextPassRetries) {
  DeadInstances("gone", "app", 1);
  runtime_.FailCall(testing::CriCall::kListContainers, Unavailable("runtime away"), 1);
  auto config = Config();
  config.container_gc_period = 20ms;
  config.containers = {1, 0};
  auto gc = Make(config);
  gc->Start();
  gc->SetDesired({}, {});
  status::PodEvent e = WaitForEvent("ContainerGCFailed");
  EXPECT_EQ(e.type, "Warning");
  EXPECT_EQ(e.pod_uid, "node");
  EXPECT_THAT(e.message, HasSubstr("runtime away"));
  // The failure was injected once: a later pass removes the container.
  ASSERT_TRUE(WaitFor([&] { return Left().empty(); }));
  EXPECT_GE(Counter(*gc, "container_gc_failures"), 1u);
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
  gc->Start();
  gc->SetDesired({}, {kGcImage});
  status::PodEvent e = WaitForEvent("ImageGCFailed");
  EXPECT_THAT(e.message, HasSubstr("injected"));
  EXPECT_GE(Counter(*gc, "image_gc_failures"), 1u);
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
  GarbageCollector gc(runtime_, runtime_, full, clock_, config, [this](status::PodEvent e) {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(e));
    cv_.notify_all();
  });
  gc.Start();
  gc.SetDesired({}, {kGcImage});
  status::PodEvent e = WaitForEvent("FreeDiskSpaceFailed");
  EXPECT_EQ(e.type, "Warning");
  auto images = runtime_.ListImages({});
  ASSERT_TRUE(images.ok());
  EXPECT_EQ(images->size(), 1u) << "a desired pod's image was removed";
}

TEST_F(GarbageCollectorTest, TheSweepRunsEveryPeriodOnceTheDesiredPodsAreKnown) {
  std::atomic<int> sweeps{0};
  auto gc = Make(Config());
  gc->set_periodic_sweep(20ms, [&] { ++sweeps; });
  gc->Start();
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(sweeps.load(), 0);
  gc->SetDesired({}, {});
  ASSERT_TRUE(WaitFor([&] { return sweeps.load() >= 3; }));
}

// A long period (the default is a minute) must not postpone the first sweep after a start: it
// comes 5 s after the desired pods are known, then every period.
TEST_F(GarbageCollectorTest, TheFirstSweepComesWithinFiveSecondsWhateverThePeriod) {
  std::atomic<int> sweeps{0};
  auto gc = Make(Config());
  gc->set_periodic_sweep(std::chrono::hours(1), [&] { ++sweeps; });
  gc->Start();
  const auto start = std::chrono::steady_clock::now();
  gc->SetDesired({}, {});
  ASSERT_TRUE(WaitFor([&] { return sweeps.load() >= 1; }, 10s));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 4s) << "not before its 5 s";
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(sweeps.load(), 1) << "then an hour to the next";
}

TEST_F(GarbageCollectorTest, DestructionDoesNotWaitOutAPeriod) {
  auto gc = Make(Config());
  gc->Start();
  gc->SetDesired({}, {});
  ASSERT_TRUE(WaitFor([&] { return Counter(*gc, "container_gc_runs") >= 1; }));
  auto start = std::chrono::steady_clock::now();
  gc.reset();  // the next pass is an hour away
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
}

}  // namespace
}  // namespace nodelet::podworkerd
