#include "svc-statusd/status_sink.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <set>

#include "tests/fakes/fake_clock.h"
#include "tests/unit/statusd/status_samples.h"

namespace nodelet::statusd {
namespace {

using namespace nodelet::statusd::testing;  // NOLINT
using nodelet::testing::FakeClock;

// A sink that records what it was sent, can fail for chosen pods, and can report drift.
class FakeSink : public StatusSink {
 public:
  std::string Name() const override { return "fake"; }
  Status Sync(const PodStatusRecord& record) override {
    ++sync_calls[record.pod.uid];
    if (failing.count(record.pod.uid)) return Unavailable("sink down for " + record.pod.uid);
    stored[record.pod.uid] = record.version;
    return Status::Ok();
  }
  Status Remove(const PodIdentity& pod) override {
    ++remove_calls[pod.uid];
    if (failing.count(pod.uid)) return Unavailable("sink down for " + pod.uid);
    stored.erase(pod.uid);
    return Status::Ok();
  }
  bool NeedsReconcile(const PodStatusRecord& record) override {
    return drifted.count(record.pod.uid) != 0;
  }
  Status Prune(const std::set<std::string>& uids) override {
    prunes.push_back(uids);
    if (prune_fails) return Unavailable("sink down");
    for (auto it = stored.begin(); it != stored.end();) {
      it = uids.count(it->first) ? std::next(it) : stored.erase(it);
    }
    return Status::Ok();
  }

  std::map<std::string, uint64_t> stored;
  std::map<std::string, int> sync_calls;
  std::map<std::string, int> remove_calls;
  std::set<std::string> failing;
  std::set<std::string> drifted;
  std::vector<std::set<std::string>> prunes;
  bool prune_fails = false;
};

StatusChange Updated(const std::string& uid, uint64_t version) {
  PodStatusRecord r;
  r.pod = SamplePod(uid);
  r.status = RunningStatus("v" + std::to_string(version));
  r.version = version;
  return {StatusChange::Kind::kUpdated, r};
}

StatusChange Removed(const std::string& uid, uint64_t version) {
  StatusChange c = Updated(uid, version);
  c.kind = StatusChange::Kind::kRemoved;
  return c;
}

class SinkSyncerTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  FakeSink sink_;
  SinkSyncer syncer_{sink_, clock_};
};

TEST_F(SinkSyncerTest, SyncsOnlyWhatIsNewerThanTheSinksVersion) {
  syncer_.Apply(Updated("a", 1));
  syncer_.Apply(Updated("b", 1));
  EXPECT_TRUE(syncer_.SyncChanged().empty());
  EXPECT_EQ(sink_.sync_calls["a"], 1);
  EXPECT_EQ(sink_.sync_calls["b"], 1);
  EXPECT_EQ(syncer_.SyncedVersion("a"), 1u);

  // Nothing newer: nothing sent.
  syncer_.SyncChanged();
  EXPECT_EQ(sink_.sync_calls["a"], 1);

  // Several versions between two syncs: only the latest is sent.
  syncer_.Apply(Updated("a", 2));
  syncer_.Apply(Updated("a", 3));
  syncer_.SyncChanged();
  EXPECT_EQ(sink_.sync_calls["a"], 2);
  EXPECT_EQ(sink_.stored["a"], 3u);
  EXPECT_EQ(sink_.sync_calls["b"], 1);
}

// What the sink kept of pods statusd no longer holds (removed while statusd was down) goes at
// the first full pass, with every pod statusd holds; a failed prune is tried again at the next.
TEST_F(SinkSyncerTest, TheFirstFullPassPrunesWhatStatusdNoLongerHolds) {
  sink_.stored["gone"] = 4;  // from before this statusd
  sink_.prune_fails = true;
  syncer_.Apply(Updated("a", 1));
  syncer_.SyncChanged();
  EXPECT_TRUE(sink_.prunes.empty()) << "not before the first full pass";
  clock_.Advance(std::chrono::seconds(10));
  EXPECT_EQ(syncer_.Tick().size(), 1u) << "the failed prune";
  sink_.prune_fails = false;
  clock_.Advance(std::chrono::seconds(10));
  EXPECT_TRUE(syncer_.Tick().empty());
  ASSERT_EQ(sink_.prunes.size(), 2u);
  EXPECT_EQ(sink_.prunes[1], (std::set<std::string>{"a"}));
  EXPECT_EQ(sink_.stored.count("gone"), 0u);
  EXPECT_EQ(sink_.stored.count("a"), 1u);
  clock_.Advance(std::chrono::seconds(10));
  syncer_.Tick();
  EXPECT_EQ(sink_.prunes.size(), 2u) << "once it succeeded";
}

TEST_F(SinkSyncerTest, FailedSyncIsRetriedAndFullPassRunsEveryTenSeconds) {
  sink_.failing.insert("a");
  syncer_.Apply(Updated("a", 1));
  auto errors = syncer_.SyncChanged();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].message().find("sink down for a"), std::string::npos);
  EXPECT_EQ(syncer_.SyncedVersion("a"), 0u);

  // Retried with back-off while it fails: 250 ms, then 500 ms, 1 s, 2 s, ...
  EXPECT_EQ(syncer_.NextWake(), clock_.Now() + std::chrono::milliseconds(250));
  clock_.Advance(std::chrono::milliseconds(249));
  EXPECT_TRUE(syncer_.Tick().empty()) << "not due yet";
  EXPECT_EQ(sink_.sync_calls["a"], 1);
  clock_.Advance(std::chrono::milliseconds(1));
  EXPECT_EQ(syncer_.Tick().size(), 1u);
  EXPECT_EQ(sink_.sync_calls["a"], 2);
  EXPECT_EQ(syncer_.NextWake(), clock_.Now() + std::chrono::milliseconds(500));
  clock_.Advance(std::chrono::milliseconds(500));
  EXPECT_EQ(syncer_.Tick().size(), 1u);
  EXPECT_EQ(syncer_.NextWake(), clock_.Now() + std::chrono::seconds(1));

  sink_.failing.clear();
  clock_.Advance(std::chrono::seconds(1));
  EXPECT_TRUE(syncer_.Tick().empty());
  EXPECT_EQ(sink_.sync_calls["a"], 4);
  EXPECT_EQ(syncer_.SyncedVersion("a"), 1u);
  // Nothing failed: no retry, only the full pass, 10 s after the start, which sends nothing
  // that is current.
  EXPECT_EQ(syncer_.NextWake(), syncer_.NextFullPass());
  clock_.Advance(syncer_.NextFullPass() - clock_.Now());
  syncer_.Tick();
  EXPECT_EQ(sink_.sync_calls["a"], 4);
  EXPECT_EQ(syncer_.NextFullPass(), clock_.Now() + std::chrono::seconds(10));

  // The back-off starts over at 250 ms, and never waits past the full-pass interval.
  sink_.failing.insert("a");
  syncer_.Apply(Updated("a", 2));
  syncer_.SyncChanged();
  EXPECT_EQ(syncer_.NextWake(), clock_.Now() + std::chrono::milliseconds(250));
  Duration last{};
  for (int i = 0; i < 12; ++i) {
    const MonoTime before = clock_.Now();
    clock_.Advance(syncer_.NextWake() - clock_.Now());
    syncer_.Tick();
    last = clock_.Now() - before;
  }
  EXPECT_LE(last, std::chrono::seconds(10));
}

TEST_F(SinkSyncerTest, FullPassReconcilesDrift) {
  syncer_.Apply(Updated("a", 4));
  syncer_.SyncChanged();
  sink_.drifted.insert("a");
  // Only full passes ask about drift.
  syncer_.SyncChanged();
  EXPECT_EQ(sink_.sync_calls["a"], 1);
  clock_.Advance(std::chrono::seconds(10));
  syncer_.Tick();
  EXPECT_EQ(sink_.sync_calls["a"], 2);
  EXPECT_EQ(sink_.stored["a"], 4u);
}

TEST_F(SinkSyncerTest, RemovalsReachTheSinkAndAreRetried) {
  syncer_.Apply(Updated("a", 2));
  syncer_.SyncChanged();
  sink_.failing.insert("a");
  syncer_.Apply(Removed("a", 2));
  EXPECT_EQ(syncer_.SyncChanged().size(), 1u);
  EXPECT_EQ(sink_.stored.count("a"), 1u);
  sink_.failing.clear();
  clock_.Advance(std::chrono::seconds(10));
  EXPECT_TRUE(syncer_.Tick().empty());
  EXPECT_EQ(sink_.stored.count("a"), 0u);
  EXPECT_EQ(sink_.remove_calls["a"], 2);
  EXPECT_EQ(syncer_.SyncedVersion("a"), 0u);
  // A reused uid starts again at version 1 and is synced.
  syncer_.Apply(Updated("a", 1));
  syncer_.SyncChanged();
  EXPECT_EQ(sink_.stored["a"], 1u);
}

// A sink for SinkWorker's thread: records synced versions under a lock and wakes the test.
class ThreadSafeSink : public StatusSink {
 public:
  std::string Name() const override { return "threaded"; }
  Status Sync(const PodStatusRecord& record) override {
    std::lock_guard<std::mutex> lock(mu_);
    synced_[record.pod.uid] = record.version;
    cv_.notify_all();
    return Status::Ok();
  }
  Status Remove(const PodIdentity& pod) override {
    std::lock_guard<std::mutex> lock(mu_);
    synced_.erase(pod.uid);
    cv_.notify_all();
    return Status::Ok();
  }
  // Waits (with a deadline) until `pred(synced)` holds.
  template <typename Pred>
  bool WaitFor(Pred pred) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(5), [&] { return pred(synced_); });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, uint64_t> synced_;
};

TEST(SinkWorkerTest, PushedChangesReachTheSinkFromItsThread) {
  auto sink = std::make_unique<ThreadSafeSink>();
  ThreadSafeSink* raw = sink.get();
  std::vector<std::unique_ptr<StatusSink>> sinks;
  sinks.push_back(std::move(sink));
  std::vector<std::string> errors;
  SinkWorker worker(std::move(sinks), RealClock::Get(),
                    [&](const std::string&, const Status& s) { errors.push_back(s.message()); });
  worker.Push({Updated("a", 1), Updated("b", 1), Updated("a", 2)});
  EXPECT_TRUE(raw->WaitFor([](const auto& m) {
    return m.count("a") && m.at("a") == 2 && m.count("b") && m.at("b") == 1;
  }));
  worker.Push({Removed("b", 1)});
  EXPECT_TRUE(raw->WaitFor([](const auto& m) { return m.count("b") == 0; }));
  worker.Stop();
  EXPECT_TRUE(errors.empty());
}

}  // namespace
}  // namespace nodelet::statusd
