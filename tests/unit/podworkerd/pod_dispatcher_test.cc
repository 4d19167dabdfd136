#include "svc-podworkerd/pod_dispatcher.h"

#include <gtest/gtest.h>

#include "tests/fakes/fake_clock.h"

namespace nodelet::podworkerd {
namespace {

using std::chrono::milliseconds;

class FakeCache : public PodCacheView {
 public:
  bool ready() const override { return ready_; }
  int64_t relist_started_mono_ns() const override { return relist_started_; }
  const std::map<std::string, ipc::pleg::PodRecordT>& pods() const override { return pods_; }

  bool ready_ = true;
  int64_t relist_started_ = 0;
  std::map<std::string, ipc::pleg::PodRecordT> pods_;
};

class RecordingEffects : public DispatcherEffects {
 public:
  void Run(DispatchedWork work) override { runs.push_back(std::move(work)); }
  void ReportStatus(const pod::Pod& pod, const status::PodStatus&) override {
    reported.push_back(pod.metadata.uid);
  }
  void ReportStoppingStatus(const pod::Pod& pod, const ipc::pleg::PodRecordT* record,
                            bool terminal) override {
    stopping.push_back({pod.metadata.uid, record != nullptr, terminal});
  }
  void SendEvents(std::vector<status::PodEvent> events) override {
    for (auto& e : events) this->events.push_back(std::move(e));
  }
  void PodStopped(const pod::Pod& pod) override { stopped.push_back(pod.metadata.uid); }
  void EnsureProbes(const std::string& uid, const pod::Pod&) override { probed.push_back(uid); }
  void RemoveProbes(const std::string& uid) override { unprobed.push_back(uid); }
  void ForgetPod(const std::string& uid) override { forgotten.push_back(uid); }
  void SetGcDesired(std::set<std::string> uids, std::set<std::string> images) override {
    gc_uids = std::move(uids);
    gc_images = std::move(images);
    ++gc_updates;
  }
  void RequestRelist(const std::string& uid) override { relists_asked.push_back(uid); }

  // The work dispatched since the last call.
  std::vector<DispatchedWork> Take() {
    std::vector<DispatchedWork> out;
    out.swap(runs);
    return out;
  }

  std::vector<DispatchedWork> runs;
  std::vector<std::string> reported, stopped, probed, unprobed, forgotten, relists_asked;
  std::vector<status::PodEvent> events;
  struct Stopping {
    std::string uid;
    bool had_record = false;
    bool terminal = false;
    bool operator==(const Stopping&) const = default;
  };
  std::vector<Stopping> stopping;
  std::set<std::string> gc_uids, gc_images;
  int gc_updates = 0;
};

std::shared_ptr<const pod::Pod> MakePod(const std::string& uid, const std::string& image = "img:1",
                                        int64_t grace = 30) {
  auto p = std::make_shared<pod::Pod>();
  p->metadata.uid = uid;
  p->metadata.name = "pod-" + uid;
  p->metadata.namespace_name = "default";
  p->spec.termination_grace_period_seconds = grace;
  pod::Container c;
  c.name = "main";
  c.image = image;
  p->spec.containers.push_back(c);
  return p;
}

ipc::pleg::PodRecordT Record(const std::string& uid, bool foreign = false) {
  ipc::pleg::PodRecordT r;
  r.uid = uid;
  r.name = "leftover-" + uid;
  r.namespace_ = "default";
  r.foreign = foreign;
  return r;
}

class PodDispatcherTest : public ::testing::Test {
 protected:
  // Longer than the whole error back-off sequence, which then never meets a resync.
  static constexpr milliseconds kResync{60000};

  WorkDone Done(const DispatchedWork& w, std::string error = "", bool changed_runtime = false,
                bool finished = false) {
    WorkDone d;
    d.uid = w.work.uid;
    d.kind = w.work.kind;
    d.outcome.error = std::move(error);
    d.outcome.changed_runtime = changed_runtime;
    d.outcome.pod_finished = finished;
    d.completed_mono_ns = clock_.MonoNanos();
    return d;
  }
  // Completes `w` and returns what was dispatched next.
  std::vector<DispatchedWork> Complete(const DispatchedWork& w, std::string error = "",
                                       bool changed_runtime = false) {
    WorkDone d = Done(w, std::move(error), changed_runtime);
    dispatcher_.HandleDone(d);
    return effects_.Take();
  }
  // The single work item dispatched since the last look.
  DispatchedWork One(const char* what) {
    auto runs = effects_.Take();
    EXPECT_EQ(runs.size(), 1u) << what;
    if (runs.size() != 1) return {};
    return runs[0];
  }
  // A desired pod whose first sync has completed, the runtime unchanged.
  void Synced(const std::shared_ptr<const pod::Pod>& p,
              std::vector<std::shared_ptr<const pod::Pod>> all = {}) {
    if (all.empty()) all = {p};
    dispatcher_.ApplyDesired(all, true);
    auto runs = effects_.Take();
    for (const auto& w : runs) EXPECT_TRUE(Complete(w).empty());
  }

  testing::FakeClock clock_;
  FakeCache cache_;
  RecordingEffects effects_;
  PodDispatcher dispatcher_{clock_, cache_, effects_, kResync};
};

TEST_F(PodDispatcherTest, CreateUpdateKillRunInOrderOneAtATime) {
  auto v1 = MakePod("u1", "img:1");
  dispatcher_.ApplyDesired({v1}, true);
  DispatchedWork sync = One("create");
  EXPECT_EQ(sync.work.kind, WorkKind::kSync);
  EXPECT_EQ(sync.work.pod->spec.containers[0].image, "img:1");
  EXPECT_TRUE(sync.desired);
  EXPECT_TRUE(sync.seed_readiness);  // the first sync carries readiness over
  EXPECT_EQ(effects_.gc_uids, std::set<std::string>{"u1"});
  EXPECT_EQ(effects_.gc_images, std::set<std::string>{"img:1"});

  // A spec change while the sync runs waits for it; the same spec again changes nothing.
  auto v2 = MakePod("u1", "img:2");
  dispatcher_.ApplyDesired({v2}, true);
  EXPECT_TRUE(effects_.Take().empty());
  auto next = Complete(sync);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].work.kind, WorkKind::kSync);
  EXPECT_EQ(next[0].work.pod->spec.containers[0].image, "img:2");
  EXPECT_FALSE(next[0].seed_readiness);
  EXPECT_EQ(effects_.reported, std::vector<std::string>{"u1"});
  EXPECT_TRUE(Complete(next[0]).empty());
  dispatcher_.ApplyDesired({v2}, true);
  EXPECT_TRUE(effects_.Take().empty());

  // Removed: stopped with the pod's grace period, then removed, then forgotten.
  dispatcher_.ApplyDesired({}, true);
  DispatchedWork kill = One("kill");
  EXPECT_EQ(kill.work.kind, WorkKind::kTerminating);
  EXPECT_EQ(kill.work.grace_period_seconds, 30);
  EXPECT_EQ(dispatcher_.counters().kills, 1u);
  // The removal waits for a relist that shows the stopped pod, and reports its final status.
  EXPECT_TRUE(Complete(kill).empty());
  EXPECT_EQ(dispatcher_.parked(), 1u);
  cache_.relist_started_ = clock_.MonoNanos() + 1;
  dispatcher_.RunParked();
  auto removal = effects_.Take();
  ASSERT_EQ(removal.size(), 1u);
  EXPECT_EQ(removal[0].work.kind, WorkKind::kTerminated);
  EXPECT_FALSE(removal[0].desired);
  EXPECT_EQ(effects_.stopped, std::vector<std::string>{"u1"});
  ASSERT_EQ(effects_.stopping.size(), 1u);
  EXPECT_TRUE(effects_.stopping[0].terminal);
  EXPECT_EQ(dispatcher_.Known(), std::set<std::string>{"u1"}) << "in use until removed";
  EXPECT_TRUE(Complete(removal[0]).empty());
  EXPECT_EQ(effects_.forgotten, std::vector<std::string>{"u1"});
  EXPECT_EQ(effects_.unprobed, std::vector<std::string>{"u1"});
  EXPECT_FALSE(dispatcher_.Knows("u1"));
  EXPECT_TRUE(dispatcher_.Known().empty());
  EXPECT_EQ(dispatcher_.workers(), 0u);
}

// While a deleted pod's containers stop, each relist that shows a change reports its status
// (containers terminated one by one); the last one, once everything is stopped, is terminal.
TEST_F(PodDispatcherTest, AStoppingPodReportsItsStatusAsItsContainersStop) {
  auto p = MakePod("u1");
  cache_.pods_["u1"] = Record("u1");
  Synced(p);
  dispatcher_.ApplyDesired({}, true);
  DispatchedWork kill = One("kill");
  dispatcher_.SyncChanged({"u1"});  // a container exited during the grace period
  ASSERT_EQ(effects_.stopping.size(), 1u);
  EXPECT_EQ(effects_.stopping[0], (RecordingEffects::Stopping{"u1", true, false}));
  EXPECT_TRUE(effects_.Take().empty()) << "no sync of a pod being stopped";
  EXPECT_TRUE(Complete(kill).empty());
  // plegd is away: the removal (and the final status) wait for it.
  cache_.ready_ = false;
  cache_.relist_started_ = clock_.MonoNanos() + 1;
  dispatcher_.OnTick();
  EXPECT_TRUE(effects_.Take().empty());
  cache_.ready_ = true;
  cache_.pods_.erase("u1");  // nothing of it left in the runtime's view
  dispatcher_.OnTick();
  auto removal = effects_.Take();
  ASSERT_EQ(removal.size(), 1u);
  EXPECT_EQ(removal[0].work.kind, WorkKind::kTerminated);
  ASSERT_EQ(effects_.stopping.size(), 2u);
  EXPECT_EQ(effects_.stopping[1], (RecordingEffects::Stopping{"u1", false, true}));
}

// The pods in use are complete only once orphans were looked for in a complete relist, with
// every source reported; until then a pod with containers may be missing from them.
TEST_F(PodDispatcherTest, KnownIsCompleteOnlyAfterTheOrphanScan) {
  cache_.pods_["orphan"] = Record("orphan");
  auto p = MakePod("u1");
  dispatcher_.ApplyDesired({p}, false);
  EXPECT_FALSE(dispatcher_.known_complete());
  cache_.ready_ = false;
  dispatcher_.ApplyDesired({p}, true);
  EXPECT_FALSE(dispatcher_.known_complete());
  cache_.ready_ = true;
  dispatcher_.ApplyDesired({p}, true);
  EXPECT_TRUE(dispatcher_.known_complete());
  EXPECT_EQ(dispatcher_.Known(), (std::set<std::string>{"orphan", "u1"}));
}

TEST_F(PodDispatcherTest, DeletionTimestampKillsWithTheDeletionGracePeriod) {
  auto p = MakePod("u1");
  Synced(p);
  auto deleted = std::make_shared<pod::Pod>(*p);
  deleted->metadata.deletion_timestamp = 1;
  deleted->metadata.deletion_grace_period_seconds = 5;
  dispatcher_.ApplyDesired({deleted}, true);
  DispatchedWork kill = One("kill");
  EXPECT_EQ(kill.work.kind, WorkKind::kTerminating);
  EXPECT_EQ(kill.work.grace_period_seconds, 5);
  // Still desired: its removal leaves the pod known (kept until the supervisor drops it).
  auto removal = Complete(kill);
  ASSERT_EQ(removal.size(), 1u);
  EXPECT_TRUE(removal[0].desired);
}

TEST_F(PodDispatcherTest, SyncAfterARuntimeChangeWaitsForALaterRelist) {
  auto p = MakePod("u1");
  dispatcher_.ApplyDesired({p}, true);
  DispatchedWork first = One("create");
  clock_.Advance(milliseconds(50));
  const int64_t changed_at = clock_.MonoNanos();
  EXPECT_TRUE(Complete(first, "", /*changed_runtime=*/true).empty());

  // A PLEG event for the pod: its cache is not newer than the change yet.
  cache_.relist_started_ = changed_at - 1;
  dispatcher_.SyncChanged({"u1"});
  EXPECT_TRUE(effects_.Take().empty());
  EXPECT_EQ(dispatcher_.parked(), 1u);
  cache_.relist_started_ = changed_at;  // a relist that started at the change is not enough
  dispatcher_.RunParked();
  EXPECT_TRUE(effects_.Take().empty());

  cache_.relist_started_ = changed_at + 1;
  cache_.pods_["u1"] = Record("u1");
  dispatcher_.RunParked();
  DispatchedWork second = One("fresh relist");
  EXPECT_EQ(second.work.kind, WorkKind::kSync);
  ASSERT_TRUE(second.record.has_value());
  EXPECT_EQ(second.record->uid, "u1");
  EXPECT_EQ(dispatcher_.parked(), 0u);
}

TEST_F(PodDispatcherTest, ARelistOfThePodAloneAfterTheChangeIsFreshEnoughAndIsAskedFor) {
  auto p = MakePod("u1");
  auto q = MakePod("u2");
  dispatcher_.ApplyDesired({p, q}, true);
  auto runs = effects_.Take();
  ASSERT_EQ(runs.size(), 2u);
  clock_.Advance(milliseconds(50));
  const int64_t changed_at = clock_.MonoNanos();
  EXPECT_TRUE(Complete(runs[0], "", /*changed_runtime=*/true).empty());
  EXPECT_TRUE(Complete(runs[1], "", /*changed_runtime=*/false).empty());
  // Only the pod that changed the runtime asks plegd for a relist of it.
  EXPECT_EQ(effects_.relists_asked, (std::vector<std::string>{"u1"}));

  cache_.relist_started_ = changed_at - 1;  // no full relist since
  auto older = Record("u1");
  older.listed_at_mono_ns = changed_at;  // listed at the change: not after it
  cache_.pods_["u1"] = older;
  dispatcher_.SyncChanged({"u1"});
  EXPECT_TRUE(effects_.Take().empty());
  auto fresh = Record("u1");
  fresh.listed_at_mono_ns = changed_at + 1;
  cache_.pods_["u1"] = fresh;
  dispatcher_.RunParked();
  DispatchedWork second = One("the pod's own relist");
  EXPECT_EQ(second.work.kind, WorkKind::kSync);
  ASSERT_TRUE(second.record.has_value());
  EXPECT_EQ(second.record->listed_at_mono_ns, changed_at + 1);
}

TEST_F(PodDispatcherTest, ParkedPodsStartInTheOrderTheyCameNotByUid) {
  cache_.ready_ = false;
  dispatcher_.ApplyDesired({MakePod("z"), MakePod("a"), MakePod("m")}, true);
  EXPECT_TRUE(effects_.Take().empty());
  cache_.ready_ = true;
  dispatcher_.RunParked();
  auto runs = effects_.Take();
  std::vector<std::string> order;
  for (const auto& w : runs) order.push_back(w.work.uid);
  EXPECT_EQ(order, (std::vector<std::string>{"z", "a", "m"}));
}

TEST_F(PodDispatcherTest, CacheNotReadyParksEverySyncButNoKill) {
  cache_.ready_ = false;
  dispatcher_.ApplyDesired({MakePod("a"), MakePod("b")}, true);
  EXPECT_TRUE(effects_.Take().empty());
  EXPECT_EQ(dispatcher_.parked(), 2u);
  dispatcher_.OnTick();
  EXPECT_TRUE(effects_.Take().empty());

  cache_.ready_ = true;
  dispatcher_.RunParked();
  auto runs = effects_.Take();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].work.uid, "a");
  EXPECT_EQ(runs[1].work.uid, "b");
  for (const auto& w : runs) EXPECT_TRUE(Complete(w).empty());

  // A kill does not wait for the cache.
  cache_.ready_ = false;
  dispatcher_.ApplyDesired({MakePod("a")}, true);
  DispatchedWork kill = One("kill while not ready");
  EXPECT_EQ(kill.work.uid, "b");
  EXPECT_EQ(kill.work.kind, WorkKind::kTerminating);
}

TEST_F(PodDispatcherTest, FailedSyncIsRetriedWithDoublingBackoffResetBySuccess) {
  dispatcher_.ApplyDesired({MakePod("u1")}, true);
  DispatchedWork w = One("create");
  milliseconds expected[] = {milliseconds(100),  milliseconds(200),  milliseconds(400),
                             milliseconds(800),  milliseconds(1600), milliseconds(3200),
                             milliseconds(5000), milliseconds(5000)};
  for (milliseconds delay : expected) {
    EXPECT_TRUE(Complete(w, "runtime down").empty());
    clock_.Advance(delay - milliseconds(1));
    dispatcher_.OnTick();
    EXPECT_TRUE(effects_.Take().empty()) << "retried before " << delay.count() << " ms";
    clock_.Advance(milliseconds(1));
    dispatcher_.OnTick();
    w = One("retry");
  }
  EXPECT_EQ(dispatcher_.counters().sync_errors, 8u);

  // A success resets the back-off: the next failure is retried after 100 ms again.
  EXPECT_TRUE(Complete(w).empty());
  dispatcher_.SyncChanged({"u1"});
  w = One("event");
  EXPECT_TRUE(Complete(w, "runtime down").empty());
  clock_.Advance(milliseconds(100));
  dispatcher_.OnTick();
  EXPECT_EQ(effects_.Take().size(), 1u);
}

TEST_F(PodDispatcherTest, EveryPodIsResyncedPeriodically) {
  Synced(MakePod("u1"));
  clock_.Advance(kResync - milliseconds(1));
  dispatcher_.OnTick();
  EXPECT_TRUE(effects_.Take().empty());
  clock_.Advance(milliseconds(1));
  dispatcher_.OnTick();
  DispatchedWork w = One("resync");
  EXPECT_EQ(w.work.kind, WorkKind::kSync);
  // Not again while it runs, nor before another period.
  dispatcher_.OnTick();
  EXPECT_TRUE(effects_.Take().empty());
  EXPECT_TRUE(Complete(w).empty());
  clock_.Advance(kResync - milliseconds(1));
  dispatcher_.OnTick();
  EXPECT_TRUE(effects_.Take().empty());
  clock_.Advance(milliseconds(1));
  dispatcher_.OnTick();
  EXPECT_EQ(effects_.Take().size(), 1u);
}

// NextDue tells the service when its tick has work (it ticks every second when idle, every
// 100 ms while work is parked): now while parked, else the earliest retry or resync.
TEST_F(PodDispatcherTest, NextDueIsNowWhileParkedElseTheEarliestRetryOrResync) {
  EXPECT_FALSE(dispatcher_.NextDue().has_value()) << "no pods";
  cache_.ready_ = false;
  dispatcher_.ApplyDesired({MakePod("a"), MakePod("b")}, true);
  ASSERT_EQ(dispatcher_.parked(), 2u);
  ASSERT_TRUE(dispatcher_.NextDue().has_value());
  EXPECT_EQ(*dispatcher_.NextDue(), clock_.Now()) << "parked";
  cache_.ready_ = true;
  dispatcher_.RunParked();
  auto runs = effects_.Take();
  ASSERT_EQ(runs.size(), 2u);
  const MonoTime synced = clock_.Now();
  EXPECT_TRUE(Complete(runs[0]).empty());
  EXPECT_EQ(*dispatcher_.NextDue(), synced + kResync) << "a's resync";
  clock_.Advance(milliseconds(10));
  EXPECT_TRUE(Complete(runs[1], "runtime down").empty());
  EXPECT_EQ(*dispatcher_.NextDue(), clock_.Now() + milliseconds(100)) << "b's retry";
}

TEST_F(PodDispatcherTest, RemovalsWaitUntilSourcesAreReady) {
  auto a = MakePod("a", "img:a");
  auto b = MakePod("b", "img:b");
  dispatcher_.ApplyDesired({a, b}, false);
  for (const auto& w : effects_.Take()) EXPECT_TRUE(Complete(w).empty());
  EXPECT_EQ(effects_.gc_updates, 0);  // the GC's desired set waits for every source too

  dispatcher_.ApplyDesired({a}, false);
  EXPECT_TRUE(effects_.Take().empty());
  EXPECT_EQ(dispatcher_.counters().kills, 0u);

  dispatcher_.ApplyDesired({a}, true);
  DispatchedWork kill = One("kill once sources are ready");
  EXPECT_EQ(kill.work.uid, "b");
  EXPECT_EQ(kill.work.kind, WorkKind::kTerminating);
  EXPECT_EQ(effects_.gc_uids, std::set<std::string>{"a"});
  EXPECT_EQ(effects_.gc_images, std::set<std::string>{"img:a"});
}

TEST_F(PodDispatcherTest, KillWhileASyncRunsIsNotLost) {
  dispatcher_.ApplyDesired({MakePod("u1")}, true);
  DispatchedWork sync = One("create");
  dispatcher_.ApplyDesired({}, true);
  dispatcher_.SyncChanged({"u1"});  // an event after the kill must not replace it
  dispatcher_.OnTick();
  EXPECT_TRUE(effects_.Take().empty());
  auto next = Complete(sync);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].work.kind, WorkKind::kTerminating);
  EXPECT_EQ(next[0].work.grace_period_seconds, 30);
}

TEST_F(PodDispatcherTest, PodReAddedWhileTerminatingIsCreatedAgain) {
  auto p = MakePod("u1");
  Synced(p);
  dispatcher_.ApplyDesired({}, true);
  DispatchedWork kill = One("kill");
  // Re-added while its containers stop.
  dispatcher_.ApplyDesired({p}, true);
  EXPECT_TRUE(effects_.Take().empty());
  auto cleanup = Complete(kill);
  ASSERT_EQ(cleanup.size(), 1u);
  EXPECT_EQ(cleanup[0].work.kind, WorkKind::kTerminated);
  EXPECT_TRUE(cleanup[0].desired);  // desired again: nothing is removed
  // Created again, once the cache shows the pod after its containers were stopped.
  EXPECT_TRUE(Complete(cleanup[0]).empty());
  EXPECT_EQ(dispatcher_.parked(), 1u);
  cache_.relist_started_ = clock_.MonoNanos() + 1;
  dispatcher_.RunParked();
  auto again = effects_.Take();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].work.kind, WorkKind::kSync);
  EXPECT_EQ(again[0].work.uid, "u1");
  EXPECT_TRUE(effects_.forgotten.empty());
  EXPECT_EQ(*dispatcher_.lifecycle().Phase("u1"), LifecyclePhase::kSyncing);
}

TEST_F(PodDispatcherTest, OrphansAreKilledOnlyWithSourcesAndCacheReady) {
  cache_.pods_["orphan"] = Record("orphan");
  cache_.pods_["theirs"] = Record("theirs", /*foreign=*/true);
  auto p = MakePod("u1");
  cache_.pods_["u1"] = Record("u1");

  dispatcher_.ApplyDesired({p}, false);
  for (const auto& w : effects_.Take()) EXPECT_NE(w.work.uid, "orphan");
  cache_.ready_ = false;
  dispatcher_.ApplyDesired({p}, true);
  EXPECT_TRUE(effects_.Take().empty());
  EXPECT_EQ(dispatcher_.counters().orphans_killed, 0u);

  cache_.ready_ = true;
  dispatcher_.ApplyDesired({p}, true);
  auto runs = effects_.Take();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].work.uid, "orphan");
  EXPECT_EQ(runs[0].work.kind, WorkKind::kTerminating);
  EXPECT_EQ(runs[0].work.pod, nullptr);
  EXPECT_EQ(dispatcher_.counters().orphans_killed, 1u);
  // Once: it is known now.
  dispatcher_.ApplyDesired({p}, true);
  EXPECT_TRUE(effects_.Take().empty());
  auto removal = Complete(runs[0]);
  ASSERT_EQ(removal.size(), 1u);
  EXPECT_EQ(removal[0].work.kind, WorkKind::kTerminated);
  EXPECT_FALSE(removal[0].desired);
  EXPECT_TRUE(effects_.stopped.empty());  // no pod, no Killing event
  EXPECT_TRUE(Complete(removal[0]).empty());
  EXPECT_EQ(effects_.forgotten, std::vector<std::string>{"orphan"});
}

// An evicted pod's content goes once it has finished (the kubelet's ShouldPodContentBeRemoved):
// garbage collection stops protecting it and it leaves InUse(), though the dispatcher still
// knows it (and keeps it finished while it stays desired).
TEST_F(PodDispatcherTest, AnEvictedPodLeavesInUseAndGcProtectionOnlyOnceFinished) {
  auto a = MakePod("a"), b = MakePod("b");
  Synced(a, {a, b});
  // The mark alone makes the pod sync at once (its sync stops it for good).
  dispatcher_.ApplyDesired({a, b}, true, {"a"});
  auto runs = effects_.Take();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].work.uid, "a");
  EXPECT_EQ(dispatcher_.InUse(), (std::set<std::string>{"a", "b"}));
  EXPECT_EQ(effects_.gc_uids, (std::set<std::string>{"a", "b"}));
  WorkDone d = Done(runs[0], "", true, /*finished=*/true);
  dispatcher_.HandleDone(d);
  effects_.Take();
  dispatcher_.ApplyDesired({a, b}, true, {"a"});
  EXPECT_EQ(dispatcher_.InUse(), (std::set<std::string>{"b"}));
  EXPECT_EQ(dispatcher_.Known(), (std::set<std::string>{"a", "b"}));
  EXPECT_EQ(effects_.gc_uids, (std::set<std::string>{"b"}));
  EXPECT_TRUE(effects_.Take().empty());  // not synced again
  // A finished pod that was not evicted keeps its content.
  dispatcher_.ApplyDesired({a, b}, true, {});
  EXPECT_EQ(dispatcher_.InUse(), (std::set<std::string>{"a", "b"}));
}

}  // namespace
}  // namespace nodelet::podworkerd
