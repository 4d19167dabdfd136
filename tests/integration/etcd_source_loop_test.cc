// The etcd pod source's schedule on its loop, against a private one-member etcd: the loop runs on
// a FakeClock that moves only when a test advances it, while the etcd calls take real time on the
// source's executor. A burst of changes waits for the gathering window and becomes one snapshot;
// a list that fails is tried again after its back-off and not before; a watch whose stream broke
// is opened again after its back-off, and when its revision was compacted meanwhile the source
// lists again; a stop with a list in flight ends within the client's deadline.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "lib/etcd/fleet_keys.h"
#include "lib/service/event_loop.h"
#include "supervisor/sources/etcd_source.h"
#include "tests/fakes/fake_clock.h"
#include "tests/testing/etcd_cluster.h"

namespace nodelet::supervisor {
namespace {

using namespace std::chrono_literals;
using testing::EtcdCluster;
using testing::EtcdClusterOptions;
using testing::FakeClock;

constexpr char kNode[] = "node-a";

class EtcdSourceLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EtcdClusterOptions o;
    o.members = 1;
    cluster_ = std::make_unique<EtcdCluster>(o);
    Status s = cluster_->Start();
    ASSERT_TRUE(s.ok()) << s.ToString() << cluster_->Logs();
    admin_ = Connect();
    ASSERT_NE(admin_, nullptr);
  }

  // A client of the member; a short deadline so that a call to a member that is down fails soon.
  std::unique_ptr<etcd::Client> Connect() {
    auto o = cluster_->ClientOptionsFor();
    if (!o.ok()) return nullptr;
    o->timeout = 1000ms;
    o->attempt_timeout = 500ms;
    o->connect_timeout = 200ms;
    auto c = etcd::Client::Connect(*o, RealClock::Get());
    return c.ok() ? std::move(*c) : nullptr;
  }

  std::unique_ptr<EtcdPodSource> Make() {
    EtcdSourceOptions o;
    o.prefix = keys_.prefix;
    o.node_name = kNode;
    o.retry_min = 200ms;
    o.retry_max = 5s;
    o.coalesce = 20ms;
    o.on_snapshot = [this] { ++snapshots_; };
    auto client = Connect();
    EXPECT_NE(client, nullptr);
    return std::make_unique<EtcdPodSource>(loop_, std::move(client), o);
  }

  void PutPod(const std::string& name) {
    ASSERT_TRUE(admin_->Put(keys_.Pod(kNode, "default", name), "kind: Pod # " + name).ok());
  }

  // Turns the loop until `done()`, at most 10 s of real time; the fake clock does not move.
  bool RunUntil(const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      if (!loop_.RunOnce(10ms).ok()) return false;
    }
    return true;
  }
  // Turns the loop for `real` time without moving the fake clock.
  void RunFor(std::chrono::milliseconds real) {
    const auto end = std::chrono::steady_clock::now() + real;
    while (std::chrono::steady_clock::now() < end) ASSERT_TRUE(loop_.RunOnce(10ms).ok());
  }
  // Moves the fake clock by `step` at every turn of the loop until `done()` (10 s of real time).
  bool AdvanceUntil(std::chrono::milliseconds step, const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      clock_.Advance(step);
      if (!loop_.RunOnce(10ms).ok()) return false;
    }
    return true;
  }
  // The names (origins) of the pods in `snap`.
  static std::set<std::string> Origins(const SourceSnapshot& snap) {
    std::set<std::string> out;
    for (const auto& m : snap.manifests) out.insert(m.origin);
    return out;
  }
  std::string Origin(const std::string& name) const {
    return "etcd:" + keys_.Pod(kNode, "default", name);
  }

  std::unique_ptr<EtcdCluster> cluster_;
  std::unique_ptr<etcd::Client> admin_;
  etcd::FleetKeys keys_{"/nodelet-test"};
  FakeClock clock_;
  EventLoop loop_{clock_};
  int snapshots_ = 0;
};

TEST_F(EtcdSourceLoopTest, ABurstWaitsForTheWindowAndMakesOneSnapshot) {
  PutPod("first");
  auto src = Make();
  ASSERT_TRUE(src->Start().ok());
  ASSERT_TRUE(RunUntil([&] { return src->watching() && snapshots_ == 1; }));
  auto listed = src->Poll();
  ASSERT_TRUE(listed);
  EXPECT_FALSE(listed->from_cache);
  EXPECT_EQ(Origins(*listed), std::set<std::string>{Origin("first")});
  EXPECT_EQ(src->counters().lists, 1u);

  PutPod("a");
  PutPod("b");
  ASSERT_TRUE(admin_->Delete(keys_.Pod(kNode, "default", "first")).ok());
  ASSERT_TRUE(RunUntil([&] { return src->pending_events() == 3; }));
  // The window has not passed on the loop's clock: nothing is published yet.
  RunFor(100ms);
  EXPECT_EQ(snapshots_, 1);
  EXPECT_FALSE(src->Poll());
  clock_.Advance(20ms);
  ASSERT_TRUE(RunUntil([&] { return snapshots_ == 2; }));
  auto burst = src->Poll();
  ASSERT_TRUE(burst);
  EXPECT_EQ(Origins(*burst), (std::set<std::string>{Origin("a"), Origin("b")}));
  EXPECT_EQ(src->pending_events(), 0u);
  EXPECT_EQ(src->counters().snapshots, 2u);
  src->Stop();
}

TEST_F(EtcdSourceLoopTest, AListThatFailsIsTriedAgainAfterItsBackOff) {
  PutPod("web");
  ASSERT_TRUE(cluster_->Stop(0).ok());
  auto src = Make();
  ASSERT_TRUE(src->Start().ok());
  ASSERT_TRUE(RunUntil([&] { return !src->call_running() && snapshots_ == 1; }));
  auto failed = src->Poll();
  ASSERT_TRUE(failed && failed->failure);
  EXPECT_EQ(failed->failure->reason, "etcd");
  EXPECT_EQ(src->counters().list_failures, 1u);

  Status restarted = cluster_->Restart(0);
  ASSERT_TRUE(restarted.ok()) << restarted.ToString();
  // The back-off (200 ms) has not passed on the loop's clock: no second list.
  clock_.Advance(199ms);
  RunFor(200ms);
  EXPECT_FALSE(src->call_running());
  EXPECT_EQ(src->counters().list_failures, 1u);
  EXPECT_EQ(src->counters().lists, 0u);
  clock_.Advance(1ms);
  ASSERT_TRUE(RunUntil([&] { return src->counters().lists == 1 && snapshots_ == 2; }));
  auto listed = src->Poll();
  ASSERT_TRUE(listed);
  EXPECT_FALSE(listed->failure);
  EXPECT_EQ(Origins(*listed), std::set<std::string>{Origin("web")});
  src->Stop();
}

TEST_F(EtcdSourceLoopTest, ABrokenWatchIsOpenedAgainAfterItsBackOffAndACompactionListsAgain) {
  PutPod("old");
  auto src = Make();
  ASSERT_TRUE(src->Start().ok());
  ASSERT_TRUE(RunUntil([&] { return src->watching() && snapshots_ == 1; }));
  ASSERT_TRUE(src->Poll());

  // Both pod watches break with the member.
  ASSERT_TRUE(cluster_->Kill(0).ok());
  ASSERT_TRUE(RunUntil([&] { return src->counters().watch_restarts == 2; }));
  EXPECT_FALSE(src->watching());
  Status restarted = cluster_->Restart(0);
  ASSERT_TRUE(restarted.ok()) << restarted.ToString();
  // Meanwhile the pods change and the history they were watched from is compacted.
  ASSERT_TRUE(admin_->Delete(keys_.Pod(kNode, "default", "old")).ok());
  PutPod("new");
  auto rev = admin_->Get(keys_.Pod(kNode, "default", "new"));
  ASSERT_TRUE(rev.ok()) << rev.status().ToString();
  ASSERT_TRUE(admin_->Compact(rev->revision).ok());

  // Not opened again before the back-off.
  clock_.Advance(199ms);
  RunFor(300ms);
  EXPECT_FALSE(src->watching());
  EXPECT_EQ(src->counters().compactions, 0u);
  EXPECT_EQ(src->counters().lists, 1u);
  EXPECT_EQ(snapshots_, 1);
  // Then opened from the compacted revision: the source lists again and serves what etcd holds.
  clock_.Advance(1ms);
  ASSERT_TRUE(AdvanceUntil(20ms, [&] { return src->counters().lists == 2 && snapshots_ >= 2; }));
  EXPECT_GE(src->counters().compactions, 1u);
  std::optional<SourceSnapshot> snap = src->Poll();
  ASSERT_TRUE(snap);
  EXPECT_FALSE(snap->failure);
  EXPECT_EQ(Origins(*snap), std::set<std::string>{Origin("new")});
  ASSERT_TRUE(RunUntil([&] { return src->watching(); }));
  src->Stop();
}

TEST_F(EtcdSourceLoopTest, StopWithAListInFlightEndsWithinTheClientsDeadline) {
  ASSERT_TRUE(cluster_->Stop(0).ok());
  auto src = Make();
  ASSERT_TRUE(src->Start().ok());
  EXPECT_TRUE(src->call_running());
  const auto start = std::chrono::steady_clock::now();
  src->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  RunFor(50ms);
  clock_.Advance(10s);
  RunFor(50ms);
  EXPECT_EQ(snapshots_, 0) << "nothing is delivered after Stop";
  EXPECT_FALSE(src->Poll());
}

}  // namespace
}  // namespace nodelet::supervisor
