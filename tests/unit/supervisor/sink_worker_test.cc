// SinkWorker on a loop the test turns, on a FakeClock: the first list before any sync, the events
// a list covers, relists after a gap and every minute, the node status, a failed sync's retries
// and the full passes on the loop's timers, a slow sink that holds neither the loop nor another
// sink, and a Stop that does not wait out a period.
#include <gmock/gmock.h>
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

#include "lib/service/event_loop.h"
#include "supervisor/status_sink.h"
#include "tests/fakes/fake_clock.h"
#include "tests/unit/supervisor/sink_events.h"

namespace nodelet::supervisor {
namespace {

using namespace sink_testing;  // NOLINT: the watch events
using nodelet::testing::FakeClock;
using ::testing::HasSubstr;

// Turns the worker's loop (the sinks' and the list's continuations come back through it) until
// `done()` holds, at most 5 s of real time; the fake clock does not move.
bool TurnSinkLoop(EventLoop& loop, const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    if (!loop.RunOnce(std::chrono::milliseconds(10)).ok()) return false;
  }
  return true;
}

// Runs what is due at the fake clock's time and turns the loop until no list and no sink call
// is in flight: nothing more happens until the clock moves or something is pushed.
bool SettleSinks(EventLoop& loop, SinkWorker& worker) {
  if (!loop.RunOnce(std::chrono::milliseconds(0)).ok()) return false;
  return TurnSinkLoop(loop, [&] { return !worker.busy(); });
}

// A sink for SinkWorker's executor: records synced versions under a lock; the waits turn the
// worker's loop until what they wait for holds. Sync can be made to fail for chosen pods, to
// report drift, and to block until the test opens its gate.
class ThreadSafeSink : public StatusSink {
 public:
  explicit ThreadSafeSink(std::string name = "threaded") : name_(std::move(name)) {}
  std::string Name() const override { return name_; }
  Status Sync(const PodStatusRecord& record) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++in_sync_;
    cv_.wait(lock, [&] { return open_; });
    --in_sync_;
    ++syncs_;
    ++sync_calls_[record.pod.uid];
    if (failing_.count(record.pod.uid)) return Unavailable("sink down for " + record.pod.uid);
    synced_[record.pod.uid] = record.version;
    return Status::Ok();
  }
  Status Remove(const PodIdentity& pod) override {
    std::lock_guard<std::mutex> lock(mu_);
    synced_.erase(pod.uid);
    return Status::Ok();
  }
  Status SyncNode(const status::NodeStatusRecord& node) override {
    std::lock_guard<std::mutex> lock(mu_);
    nodes_.push_back(node.version);
    return Status::Ok();
  }
  bool NeedsReconcile(const PodStatusRecord& record) override {
    std::lock_guard<std::mutex> lock(mu_);
    return drifted_.count(record.pod.uid) != 0;
  }
  // Turns `loop` (with a deadline) until `pred(synced)` holds.
  template <typename Pred>
  bool WaitFor(Pred pred) {
    return TurnSinkLoop(*loop, [&] {
      std::lock_guard<std::mutex> lock(mu_);
      return pred(synced_);
    });
  }
  bool WaitForNodes(size_t n) {
    return TurnSinkLoop(*loop, [&] {
      std::lock_guard<std::mutex> lock(mu_);
      return nodes_.size() >= n;
    });
  }
  // Turns `loop` (with a deadline) until a Sync is held at the closed gate.
  bool WaitForHeldSync() {
    return TurnSinkLoop(*loop, [&] {
      std::lock_guard<std::mutex> lock(mu_);
      return in_sync_ > 0;
    });
  }
  void SetGate(bool open) {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = open;
    cv_.notify_all();
  }
  void SetFailing(const std::string& uid, bool failing) {
    std::lock_guard<std::mutex> lock(mu_);
    if (failing) {
      failing_.insert(uid);
    } else {
      failing_.erase(uid);
    }
  }
  void SetDrifted(const std::string& uid) {
    std::lock_guard<std::mutex> lock(mu_);
    drifted_.insert(uid);
  }
  std::map<std::string, uint64_t> synced() {
    std::lock_guard<std::mutex> lock(mu_);
    return synced_;
  }
  int syncs() {
    std::lock_guard<std::mutex> lock(mu_);
    return syncs_;
  }
  int sync_calls(const std::string& uid) {
    std::lock_guard<std::mutex> lock(mu_);
    return sync_calls_[uid];
  }
  std::vector<uint64_t> nodes() {
    std::lock_guard<std::mutex> lock(mu_);
    return nodes_;
  }

  EventLoop* loop = nullptr;  // the worker's, turned by the waits

 private:
  const std::string name_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, uint64_t> synced_;
  std::map<std::string, int> sync_calls_;
  std::set<std::string> failing_;
  std::set<std::string> drifted_;
  bool open_ = true;
  int in_sync_ = 0;
  int syncs_ = 0;
  std::vector<uint64_t> nodes_;
};

// What statusd answers to the worker's lists: set by the test, read on the worker's executor.
struct FakeStatusd {
  std::mutex mu;
  Status error = Status::Ok();
  status::PodStatusList list;
  int calls = 0;

  SinkWorker::Lister Lister() {
    return [this]() -> Result<status::PodStatusList> {
      std::lock_guard<std::mutex> lock(mu);
      ++calls;
      if (!error.ok()) return error;
      return list;
    };
  }
  void Set(std::vector<WatchEvent> records, uint64_t sequence, uint64_t incarnation = 7) {
    std::lock_guard<std::mutex> lock(mu);
    error = Status::Ok();
    list.records.clear();
    for (auto& e : records) list.records.push_back(e.record);
    list.watch_sequence = sequence;
    list.watch_incarnation = incarnation;
  }
  int Calls() {
    std::lock_guard<std::mutex> lock(mu);
    return calls;
  }
};

// A worker on a loop the test turns, on a fake clock, with one ThreadSafeSink per name.
struct Worker {
  explicit Worker(FakeStatusd& statusd, std::vector<std::string> names = {"threaded"}) {
    std::vector<std::unique_ptr<StatusSink>> sinks;
    for (const auto& name : names) {
      auto sink = std::make_unique<ThreadSafeSink>(name);
      sink->loop = &loop;
      all.push_back(sink.get());
      sinks.push_back(std::move(sink));
    }
    raw = all.front();
    worker = std::make_unique<SinkWorker>(loop, std::move(sinks), statusd.Lister(),
                                          [this](const std::string& sink, const Status& s) {
                                            std::lock_guard<std::mutex> lock(mu);
                                            errors.push_back(s.message());
                                            error_sinks.push_back(sink);
                                          });
  }
  bool WaitForErrors(size_t n) {
    return TurnSinkLoop(loop, [&] {
      std::lock_guard<std::mutex> lock(mu);
      return errors.size() >= n;
    });
  }
  size_t Errors() {
    std::lock_guard<std::mutex> lock(mu);
    return errors.size();
  }
  bool Settle() { return SettleSinks(loop, *worker); }
  // Moves the fake clock by `d`, then settles.
  bool Advance(Duration d) {
    clock.Advance(d);
    return Settle();
  }

  FakeClock clock;
  EventLoop loop{clock};
  ThreadSafeSink* raw = nullptr;  // the first sink
  std::vector<ThreadSafeSink*> all;
  std::mutex mu;
  std::vector<std::string> errors;
  std::vector<std::string> error_sinks;
  // Last: stopped before the loop and what its callbacks use go.
  std::unique_ptr<SinkWorker> worker;
};

TEST(SinkWorkerTest, ListsFirstThenPushedChangesReachTheSinkFromItsThread) {
  FakeStatusd statusd;
  statusd.Set({Updated("a", 1)}, 3);
  Worker w(statusd);
  ASSERT_TRUE(w.raw->WaitFor([](const auto& m) { return m.count("a") && m.at("a") == 1; }));
  w.worker->Push(At(Updated("a", 2), 4));
  w.worker->Push(At(Updated("b", 1), 5));
  w.worker->Push(At(Updated("a", 3), 6));
  EXPECT_TRUE(w.raw->WaitFor([](const auto& m) {
    return m.count("a") && m.at("a") == 3 && m.count("b") && m.at("b") == 1;
  }));
  w.worker->Push(At(Removed("b", 1), 7));
  EXPECT_TRUE(w.raw->WaitFor([](const auto& m) { return m.count("b") == 0; }));
  w.worker->Stop();
  EXPECT_TRUE(w.errors.empty());
}

// Until statusd answers a list nothing is synced (a sink must not be pruned against a partial
// view); what was pushed meanwhile is in the list when it comes. The failed list is tried again
// after its back-off (1 s), not before.
TEST(SinkWorkerTest, NothingIsSyncedBeforeTheFirstListAndAFailedListIsRetried) {
  FakeStatusd statusd;
  statusd.error = Unavailable("statusd is not there");
  Worker w(statusd);
  w.worker->Push(At(Updated("a", 1), 1));
  w.worker->PushNode({"{}", 4, 0});
  ASSERT_TRUE(w.WaitForErrors(1));
  EXPECT_TRUE(w.raw->synced().empty()) << "synced before any list";
  {
    std::lock_guard<std::mutex> lock(w.mu);
    ASSERT_EQ(w.errors.size(), 1u) << "each new failure once";
    EXPECT_THAT(w.errors[0], HasSubstr("statusd is not there"));
  }
  statusd.Set({Updated("a", 2)}, 2);
  ASSERT_TRUE(w.Settle());
  ASSERT_TRUE(w.Advance(std::chrono::milliseconds(999)));
  EXPECT_EQ(statusd.Calls(), 1) << "listed again before its back-off";
  EXPECT_TRUE(w.raw->synced().empty());
  w.clock.Advance(std::chrono::milliseconds(1));
  ASSERT_TRUE(w.raw->WaitFor([](const auto& m) { return m.count("a") && m.at("a") == 2; }));
  ASSERT_TRUE(w.raw->WaitForNodes(1)) << "the node status held until the list";
  EXPECT_EQ(w.raw->nodes(), std::vector<uint64_t>{4});
  EXPECT_EQ(w.worker->lists(), 1u);
  EXPECT_EQ(statusd.Calls(), 2);
}

// After a list, what the stream says up to the list's sequence is old news and skipped; a gap
// brings another list, which also removes what statusd no longer holds.
TEST(SinkWorkerTest, EventsTheListCoversAreSkippedAndAGapListsAgain) {
  FakeStatusd statusd;
  statusd.Set({Updated("a", 2), Updated("b", 1)}, 10);
  Worker w(statusd);
  ASSERT_TRUE(w.raw->WaitFor([](const auto& m) { return m.size() == 2; }));
  const int syncs = w.raw->syncs();
  // Published before the list answered (sequence 9): an older version of a.
  w.worker->Push(At(Updated("a", 1), 9));
  w.worker->Push(At(Updated("c", 1), 11));
  ASSERT_TRUE(w.raw->WaitFor([](const auto& m) { return m.count("c") == 1; }));
  EXPECT_EQ(w.raw->synced()["a"], 2u);
  EXPECT_EQ(w.raw->syncs(), syncs + 1) << "only c";

  // Messages missed: statusd now holds a (newer) and c; b went meanwhile.
  statusd.Set({Updated("a", 5), Updated("c", 1)}, 20);
  w.worker->Push(At(Updated("c", 1), 20, 7, /*gap=*/true));
  EXPECT_TRUE(w.raw->WaitFor(
      [](const auto& m) { return m.size() == 2 && m.at("a") == 5 && m.count("b") == 0; }));
  EXPECT_EQ(w.worker->lists(), 2u);

  // A statusd restarted (another incarnation) numbers from 1 again: its first message is a
  // gap, and the new list's sequence is what counts from then on.
  statusd.Set({Updated("a", 5), Updated("c", 1), Updated("d", 1)}, 1, 8);
  w.worker->Push(At(Updated("d", 1), 1, 8, /*gap=*/true));
  ASSERT_TRUE(w.raw->WaitFor([](const auto& m) { return m.count("d") == 1; }));
  EXPECT_EQ(w.worker->lists(), 3u);
  w.worker->Push(At(Updated("d", 2), 2, 8));
  EXPECT_TRUE(w.raw->WaitFor([](const auto& m) { return m.count("d") && m.at("d") == 2; }));
  w.worker->Stop();
}

// The node's status goes to every sink, the newest first.
TEST(SinkWorkerTest, NodeStatusReachesTheSinkAfterTheList) {
  FakeStatusd statusd;
  statusd.Set({Updated("a", 1)}, 1);
  Worker w(statusd);
  ASSERT_TRUE(w.raw->WaitFor([](const auto& m) { return m.count("a") == 1; }));
  w.worker->PushNode({"{}", 5, 0});
  ASSERT_TRUE(w.raw->WaitForNodes(1));
  w.worker->PushNode({"{}", 6, 0});
  ASSERT_TRUE(w.raw->WaitForNodes(2));
  EXPECT_EQ(w.raw->nodes(), (std::vector<uint64_t>{5, 6}));
}

// A failed sync is tried again on the loop's timer after its back-off (250 ms, then 500 ms),
// not before; once it succeeds nothing more is sent until a full pass finds drift, 10 s after
// the list.
TEST(SinkWorkerTest, AFailedSyncIsRetriedAfterItsBackOffAndFullPassesComeEveryTenSeconds) {
  FakeStatusd statusd;
  statusd.Set({Updated("a", 1)}, 1);
  Worker w(statusd);
  w.raw->SetFailing("a", true);
  ASSERT_TRUE(w.WaitForErrors(1));
  ASSERT_TRUE(w.Settle());
  EXPECT_EQ(w.raw->sync_calls("a"), 1);
  EXPECT_THAT(w.errors[0], HasSubstr("sink down for a"));
  EXPECT_EQ(w.error_sinks[0], "threaded");
  ASSERT_TRUE(w.Advance(std::chrono::milliseconds(249)));
  EXPECT_EQ(w.raw->sync_calls("a"), 1) << "retried before its back-off";
  ASSERT_TRUE(w.Advance(std::chrono::milliseconds(1)));
  EXPECT_EQ(w.raw->sync_calls("a"), 2);
  ASSERT_TRUE(w.Advance(std::chrono::milliseconds(499)));
  EXPECT_EQ(w.raw->sync_calls("a"), 2) << "the back-off doubles";
  w.raw->SetFailing("a", false);
  ASSERT_TRUE(w.Advance(std::chrono::milliseconds(1)));
  EXPECT_EQ(w.raw->sync_calls("a"), 3);
  EXPECT_EQ(w.raw->synced()["a"], 1u);
  EXPECT_EQ(w.Errors(), 2u);

  // Current and not drifted: the full pass sends nothing. Drifted: the full pass 10 s after the
  // list sends it again, and not a moment before.
  w.raw->SetDrifted("a");
  ASSERT_TRUE(w.Advance(std::chrono::milliseconds(10'000 - 750 - 1)));
  EXPECT_EQ(w.raw->sync_calls("a"), 3) << "a full pass before its time";
  ASSERT_TRUE(w.Advance(std::chrono::milliseconds(1)));
  EXPECT_EQ(w.raw->sync_calls("a"), 4);
  ASSERT_TRUE(w.Advance(std::chrono::seconds(10)));
  EXPECT_EQ(w.raw->sync_calls("a"), 5) << "every full pass";
}

// statusd is listed again every minute though no gap showed, not sooner.
TEST(SinkWorkerTest, StatusdIsListedAgainEveryMinute) {
  FakeStatusd statusd;
  statusd.Set({Updated("a", 1)}, 1);
  Worker w(statusd);
  ASSERT_TRUE(w.raw->WaitFor([](const auto& m) { return m.count("a") == 1; }));
  ASSERT_TRUE(w.Settle());
  EXPECT_EQ(w.worker->lists(), 1u);
  // b came with a message the stream lost, and no later one showed the gap.
  statusd.Set({Updated("a", 1), Updated("b", 1)}, 2);
  for (int i = 0; i < 59; ++i) ASSERT_TRUE(w.Advance(std::chrono::seconds(1)));
  ASSERT_TRUE(w.Advance(std::chrono::milliseconds(999)));
  EXPECT_EQ(w.worker->lists(), 1u);
  EXPECT_EQ(w.raw->synced().count("b"), 0u);
  w.clock.Advance(std::chrono::milliseconds(1));
  ASSERT_TRUE(w.raw->WaitFor([](const auto& m) { return m.count("b") == 1; }));
  EXPECT_EQ(w.worker->lists(), 2u);
}

// Each sink's calls run on its own executor: one that hangs holds neither the loop (changes are
// still taken) nor the other sink, and gets the newest versions once it returns.
TEST(SinkWorkerTest, ASlowSinkHoldsNeitherTheLoopNorTheOtherSinks) {
  FakeStatusd statusd;
  statusd.Set({}, 1);
  Worker w(statusd, {"slow", "quick"});
  ThreadSafeSink* slow = w.all[0];
  ThreadSafeSink* quick = w.all[1];
  ASSERT_TRUE(TurnSinkLoop(w.loop, [&] { return w.worker->lists() == 1; }));
  slow->SetGate(false);
  w.worker->Push(At(Updated("a", 1), 2));
  ASSERT_TRUE(quick->WaitFor([](const auto& m) { return m.count("a") && m.at("a") == 1; }));
  ASSERT_TRUE(slow->WaitForHeldSync());
  w.worker->Push(At(Updated("a", 2), 3));
  w.worker->Push(At(Updated("b", 1), 4));
  ASSERT_TRUE(quick->WaitFor([](const auto& m) { return m.size() == 2 && m.at("a") == 2; }));
  EXPECT_TRUE(slow->synced().empty());
  slow->SetGate(true);
  ASSERT_TRUE(slow->WaitFor([](const auto& m) { return m.size() == 2 && m.at("a") == 2; }));
  EXPECT_EQ(slow->sync_calls("a"), 2) << "version 1, then the newest once";
  EXPECT_EQ(w.Errors(), 0u);
}

// Stop waits for the call in flight only (not for a period), and nothing the worker scheduled
// runs afterwards.
TEST(SinkWorkerTest, StopEndsPromptlyWithASyncInFlight) {
  FakeStatusd statusd;
  statusd.Set({}, 1);
  Worker w(statusd);
  ASSERT_TRUE(TurnSinkLoop(w.loop, [&] { return w.worker->lists() == 1; }));
  w.raw->SetGate(false);
  w.raw->SetFailing("a", true);
  w.worker->Push(At(Updated("a", 1), 2));
  ASSERT_TRUE(w.raw->WaitForHeldSync());
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    w.raw->SetGate(true);
  });
  const auto start = std::chrono::steady_clock::now();
  w.worker->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  opener.join();
  // The failure's continuation, the retry and the relist never come.
  w.worker->Push(At(Updated("b", 1), 3));
  w.worker->PushNode({"{}", 5, 0});
  w.clock.Advance(std::chrono::hours(1));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(w.loop.RunOnce(std::chrono::milliseconds(10)).ok());
  EXPECT_EQ(w.raw->sync_calls("a"), 1);
  EXPECT_EQ(w.raw->sync_calls("b"), 0);
  EXPECT_TRUE(w.raw->nodes().empty());
  EXPECT_EQ(w.Errors(), 0u);
  EXPECT_EQ(statusd.Calls(), 1);
}

}  // namespace
}  // namespace nodelet::supervisor
