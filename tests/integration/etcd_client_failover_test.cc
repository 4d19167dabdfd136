// etcd::Client when members fail, each test on a real three-member etcd cluster of its own
// (tests/testing/etcd_cluster.h): the leader killed (writes go on after the election, none
// without a quorum), the member under a watch killed (the watch resumes elsewhere, missing
// nothing), the whole cluster stopped and started (the data kept, the client finds it), and no
// member listening at all. Suite etcd-integration; it needs no containerd.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "lib/etcd/etcd_client.h"
#include "tests/integration/etcd_client_helpers.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/harness.h"

namespace nodelet::etcd {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;
using Steady = std::chrono::steady_clock;
using testing::EtcdCluster;

// Polls `done` every 50 ms until it holds or `timeout` passes.
template <typename Fn>
bool Eventually(Fn&& done, milliseconds timeout) {
  const auto deadline = Steady::now() + timeout;
  for (;;) {
    if (done()) return true;
    if (Steady::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(50));
  }
}

// ---------------------------------------------------------------------------------------------
// Failures: each test on a cluster of its own.

class EtcdFailoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Status s = cluster_.Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
    prefix_ = TestPrefix();
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_.Logs();
  }
  // Every endpoint, `first` first: the client starts there.
  ClientOptions OptionsStartingAt(int first) {
    ClientOptions o;
    o.endpoints.push_back(cluster_.endpoint(first));
    for (int i = 0; i < cluster_.size(); ++i) {
      if (i != first) o.endpoints.push_back(cluster_.endpoint(i));
    }
    return o;
  }
  int IndexOf(const std::string& endpoint) {
    for (int i = 0; i < cluster_.size(); ++i) {
      if (cluster_.endpoint(i) == endpoint) return i;
    }
    return -1;
  }

  EtcdCluster cluster_;
  std::string prefix_;
};

TEST_F(EtcdFailoverTest, LeaderKilledWritesGoOnAfterTheElection) {
  auto leader = cluster_.Leader();
  ASSERT_TRUE(leader.ok()) << leader.status().ToString();
  auto client = Connect(OptionsStartingAt(*leader));
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Put(prefix_ + "before", "1").ok());

  ASSERT_TRUE(cluster_.Kill(*leader).ok());
  const auto start = Steady::now();
  auto put = client->Put(prefix_ + "after", "2");
  const milliseconds took = Since(start);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_LT(took, milliseconds(5000));
  std::cerr << "write after the leader's kill took " << took.count() << " ms\n";
  auto got = client->GetPrefix(prefix_);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->kvs.size(), 2u);
  auto new_leader = cluster_.Leader();
  ASSERT_TRUE(new_leader.ok());
  EXPECT_NE(*new_leader, *leader);

  // PutIf goes through the survivors too.
  auto cas = client->PutIf(prefix_ + "cas", "x", 0);
  ASSERT_TRUE(cas.ok()) << cas.status().ToString();
  EXPECT_TRUE(*cas);

  // Without a quorum a write fails, as kUnavailable, within the call's deadline.
  ClientOptions quick = OptionsStartingAt(*new_leader);
  quick.timeout = milliseconds(2000);
  quick.attempt_timeout = milliseconds(700);
  auto quick_client = Connect(quick);
  ASSERT_TRUE(cluster_.Kill(*new_leader).ok());
  const auto lost = Steady::now();
  auto failed = quick_client->Put(prefix_ + "no-quorum", "3");
  const milliseconds failed_after = Since(lost);
  EXPECT_EQ(failed.status().code(), StatusCode::kUnavailable) << failed.status().ToString();
  EXPECT_THAT(failed.status().message(), HasSubstr(prefix_ + "no-quorum"));
  EXPECT_LT(failed_after, milliseconds(3000));
  std::cerr << "no quorum: " << failed.status().ToString() << "\n";

  // The members come back with their data.
  ASSERT_TRUE(cluster_.Restart(*leader).ok());
  ASSERT_TRUE(cluster_.Restart(*new_leader).ok());
  got = client->GetPrefix(prefix_);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_GE(got->kvs.size(), 3u);
}

TEST_F(EtcdFailoverTest, AWatchResumesElsewhereAfterItsMemberIsKilled) {
  auto leader = cluster_.Leader();
  ASSERT_TRUE(leader.ok());
  // The watch on the leader: its death also means an election for the writers.
  auto client = Connect(OptionsStartingAt(*leader));
  ASSERT_NE(client, nullptr);
  auto start = client->Put(prefix_ + "start", "0");
  ASSERT_TRUE(start.ok());
  auto watch = client->WatchPrefix(prefix_, *start + 1);
  ASSERT_TRUE(watch.ok()) << watch.status().ToString();
  const int watched = IndexOf((*watch)->endpoint());
  ASSERT_EQ(watched, *leader);

  // A writer that goes on through the kill: every key it was told is written must be seen.
  std::mutex mu;
  std::map<int64_t, std::string> written;  // revision -> key
  std::atomic<bool> stop{false};
  std::atomic<int> failed_puts{0};
  auto writer_client = Connect(OptionsStartingAt(*leader));
  std::thread writer([&] {
    for (int i = 0; !stop.load(); ++i) {
      const std::string key = prefix_ + "k" + std::to_string(i);
      auto rev = writer_client->Put(key, std::to_string(i));
      if (rev.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        written[*rev] = key;
      } else {
        ++failed_puts;
      }
      std::this_thread::sleep_for(milliseconds(10));
    }
  });

  std::vector<Watch::Event> seen;
  auto take = [&](Watch& w, milliseconds timeout) -> Status {
    auto batch = w.Next(timeout);
    if (!batch.ok()) return batch.status();
    for (auto& e : batch->events) seen.push_back(std::move(e));
    return Status::Ok();
  };
  // Some events before the kill.
  const auto warmup = Steady::now() + milliseconds(3000);
  while (seen.size() < 10 && Steady::now() < warmup) (void)take(**watch, milliseconds(500));
  ASSERT_GE(seen.size(), 10u);

  ASSERT_TRUE(cluster_.Kill(watched).ok());
  const auto killed = Steady::now();
  Status broken;
  while (Since(killed) < milliseconds(5000)) {
    broken = take(**watch, milliseconds(500));
    if (!broken.ok() && broken.code() != StatusCode::kDeadlineExceeded) break;
  }
  EXPECT_EQ(broken.code(), StatusCode::kUnavailable) << broken.ToString();
  std::cerr << "the watch saw: " << broken.ToString() << " after " << Since(killed).count()
            << " ms\n";

  // Again from the last revision seen + 1; the client goes to another member.
  const int64_t resume = seen.empty() ? *start + 1 : seen.back().kv.mod_revision + 1;
  auto again = client->WatchPrefix(prefix_, resume);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_NE(IndexOf((*again)->endpoint()), watched);

  // Let the writer get through the election and write some more, then stop it.
  ASSERT_TRUE(Eventually(
      [&] {
        std::lock_guard<std::mutex> lock(mu);
        return !written.empty() && written.rbegin()->first > resume + 20;
      },
      milliseconds(10000)));
  stop = true;
  writer.join();
  int64_t last_written;
  {
    std::lock_guard<std::mutex> lock(mu);
    last_written = written.rbegin()->first;
  }
  const auto deadline = Steady::now() + milliseconds(10000);
  while ((seen.empty() || seen.back().kv.mod_revision < last_written) && Steady::now() < deadline) {
    Status s = take(**again, milliseconds(500));
    ASSERT_TRUE(s.ok() || s.code() == StatusCode::kDeadlineExceeded) << s.ToString();
  }

  // In order, no repeats, and every acknowledged write among them.
  std::map<int64_t, std::string> by_revision;
  for (size_t i = 0; i < seen.size(); ++i) {
    if (i > 0) {
      ASSERT_GT(seen[i].kv.mod_revision, seen[i - 1].kv.mod_revision) << i;
    }
    by_revision[seen[i].kv.mod_revision] = seen[i].kv.key;
  }
  for (const auto& [rev, key] : written) {
    auto it = by_revision.find(rev);
    ASSERT_NE(it, by_revision.end()) << "write of " << key << " at " << rev << " not seen";
    EXPECT_EQ(it->second, key);
  }
  std::cerr << written.size() << " writes acknowledged, " << failed_puts.load() << " failed, "
            << seen.size() << " events seen\n";
}

TEST_F(EtcdFailoverTest, TheWholeClusterStoppedAndStartedKeepsItsDataAndTheClientFindsIt) {
  auto client = Connect(OptionsStartingAt(0));
  ClientOptions quick_options = OptionsStartingAt(0);
  quick_options.timeout = milliseconds(1500);
  auto quick = Connect(quick_options);
  ASSERT_NE(client, nullptr);
  ASSERT_NE(quick, nullptr);
  auto written = client->Put(prefix_ + "kept", "across restarts");
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  ASSERT_TRUE(quick->Get(prefix_ + "kept").ok());

  ASSERT_TRUE(cluster_.StopAll().ok());  // SIGTERM each, reaped
  for (int i = 0; i < cluster_.size(); ++i) EXPECT_FALSE(cluster_.running(i));
  const auto start = Steady::now();
  auto down = quick->Get(prefix_ + "kept");
  EXPECT_EQ(down.status().code(), StatusCode::kUnavailable) << down.status().ToString();
  EXPECT_LT(Since(start), milliseconds(2500));

  // Same ports, same data: the clients' channels connect again (within a call's deadline).
  Status started = cluster_.StartAll();
  ASSERT_TRUE(started.ok()) << started.ToString();
  auto up = client->Get(prefix_ + "kept");
  ASSERT_TRUE(up.ok()) << up.status().ToString();
  ASSERT_EQ(up->kvs.size(), 1u);
  EXPECT_EQ(up->kvs[0].value, "across restarts");
  EXPECT_EQ(up->kvs[0].mod_revision, *written);
}

TEST(EtcdUnreachableTest, FailsWithinTheDeadlineNamingTheMember) {
  ClientOptions o;
  const int a = testing::FreeLoopbackPort();
  const int b = testing::FreeLoopbackPort();
  o.endpoints = {"http://127.0.0.1:" + std::to_string(a), "127.0.0.1:" + std::to_string(b)};
  o.timeout = milliseconds(1000);
  auto client = Connect(o);
  ASSERT_NE(client, nullptr);
  const auto start = Steady::now();
  auto r = client->Get("/x");
  EXPECT_LT(Since(start), milliseconds(1500));
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(r.status().message(), HasSubstr("'/x'"));
  EXPECT_THAT(r.status().message(), HasSubstr("127.0.0.1:"));
  auto w = client->WatchPrefix("/x/", 0);
  EXPECT_EQ(w.status().code(), StatusCode::kUnavailable);
  EXPECT_LT(Since(start), milliseconds(3000));
}

}  // namespace
}  // namespace nodelet::etcd
