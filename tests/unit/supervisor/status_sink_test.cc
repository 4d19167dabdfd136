// SinkSyncer on a FakeClock: each pod synced at its newest version once, failures retried with
// back-off, full passes every 10 s with drift and the first prune, removals, resyncs from a
// list, and the node status (SinkWorker's tests are in sink_worker_test.cc).
#include "supervisor/status_sink.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <stdexcept>

#include "tests/fakes/fake_clock.h"
#include "tests/unit/supervisor/sink_events.h"

namespace nodelet::supervisor {
namespace {

using namespace sink_testing;  // NOLINT: the watch events
using nodelet::testing::FakeClock;
using ::testing::HasSubstr;

// A sink that records what it was sent, can fail for chosen pods, and can report drift.
class FakeSink : public StatusSink {
 public:
  std::string Name() const override { return "fake"; }
  Status Sync(const PodStatusRecord& record) override {
    ++sync_calls[record.pod.uid];
    if (throwing.count(record.pod.uid))
      throw std::runtime_error("cannot serialize " + record.pod.uid);
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
  std::set<std::string> throwing;
  std::set<std::string> drifted;
  std::vector<std::set<std::string>> prunes;
  bool prune_fails = false;
};

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

// A sink that throws on one pod's status (a serializer on the pod's bytes) fails that write
// with an error, retried like any other; the other pods are synced and the worker goes on.
TEST_F(SinkSyncerTest, ASinkThatThrowsFailsThatWriteOnly) {
  sink_.throwing.insert("bad");
  syncer_.Apply(Updated("bad", 1));
  syncer_.Apply(Updated("good", 1));
  std::vector<Status> errors;
  ASSERT_NO_THROW(errors = syncer_.SyncChanged());
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].code(), StatusCode::kInternal);
  EXPECT_THAT(errors[0].message(), HasSubstr("cannot serialize bad"));
  EXPECT_EQ(sink_.stored["good"], 1u);
  EXPECT_EQ(syncer_.SyncedVersion("bad"), 0u) << "not synced: tried again";
  sink_.throwing.clear();
  clock_.Advance(std::chrono::seconds(10));
  syncer_.Tick();
  EXPECT_EQ(sink_.stored["bad"], 1u);
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

// Statuses changed while the sinks' worker was not there to see them (removed, or newer):
// a list brings them, as changes and removals.
TEST_F(SinkSyncerTest, AResyncTakesTheListAndRemovesWhatIsNotInIt) {
  syncer_.Apply(Updated("a", 1));
  syncer_.Apply(Updated("b", 1));
  syncer_.SyncChanged();
  syncer_.Resync({Updated("b", 3).record, Updated("c", 1).record});
  EXPECT_TRUE(syncer_.SyncChanged().empty());
  EXPECT_EQ(sink_.stored, (std::map<std::string, uint64_t>{{"b", 3}, {"c", 1}}));
  EXPECT_EQ(sink_.remove_calls["a"], 1);
}

// A sink that records the node statuses it was sent and can fail.
class NodeSink : public StatusSink {
 public:
  std::string Name() const override { return "node-sink"; }
  Status Sync(const PodStatusRecord&) override { return Status::Ok(); }
  Status Remove(const PodIdentity&) override { return Status::Ok(); }
  Status SyncNode(const status::NodeStatusRecord& node) override {
    ++calls;
    if (failing) return Unavailable("sink down");
    versions.push_back(node.version);
    return Status::Ok();
  }
  int calls = 0;
  bool failing = false;
  std::vector<uint64_t> versions;
};

status::NodeStatusRecord Node(uint64_t version) {
  status::NodeStatusRecord r;
  r.node_json = version % 2 ? R"({"ready":true})" : R"({"ready":false})";
  r.version = version;
  return r;
}

TEST(NodeStatusSinkTest, SyncsTheLatestNodeStatusAndRetriesAFailure) {
  FakeClock clock;
  NodeSink sink;
  SinkSyncer syncer(sink, clock);
  // Nothing known yet: nothing sent.
  EXPECT_TRUE(syncer.SyncChanged().empty());
  EXPECT_EQ(sink.calls, 0);

  syncer.ApplyNode(Node(1));
  syncer.ApplyNode(Node(2));
  EXPECT_TRUE(syncer.SyncChanged().empty());
  EXPECT_EQ(sink.versions, std::vector<uint64_t>{2});
  EXPECT_EQ(syncer.SyncedNodeVersion(), 2u);
  // Already synced: not sent again, also not in a full pass.
  clock.Advance(kSinkFullPassInterval);
  EXPECT_TRUE(syncer.Tick().empty());
  EXPECT_EQ(sink.calls, 1);

  sink.failing = true;
  syncer.ApplyNode(Node(3));
  auto errors = syncer.SyncChanged();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_THAT(errors[0].message(), HasSubstr("sink down"));
  EXPECT_EQ(syncer.SyncedNodeVersion(), 2u);
  // The next full pass retries it.
  sink.failing = false;
  clock.Advance(kSinkFullPassInterval);
  EXPECT_TRUE(syncer.Tick().empty());
  EXPECT_EQ(sink.versions, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(syncer.SyncedNodeVersion(), 3u);
}

}  // namespace
}  // namespace nodelet::supervisor
