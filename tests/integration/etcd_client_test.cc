// etcd::Client against real etcd 3.4 clusters of three members (tests/testing/etcd_cluster.h):
// on one cluster shared by the tests that leave it as it was, reads, paged prefix listings,
// compare-and-swap, watches (order, compaction, cancel), leases and member status; on a cluster
// of its own, TLS with client certificates whose CN is the etcd user. Failover is in
// etcd_client_failover_test.cc. Suite etcd-integration; it needs no containerd.
#include "lib/etcd/etcd_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/integration/etcd_client_helpers.h"
#include "tests/testing/etcd_cluster.h"

namespace nodelet::etcd {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;
using Steady = std::chrono::steady_clock;
using testing::EtcdCluster;
using testing::EtcdClusterOptions;

// ---------------------------------------------------------------------------------------------
// One cluster for the tests that leave it as it was (each under its own prefix).

class EtcdClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new EtcdCluster();
    Status s = cluster_->Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(cluster_, nullptr);
    auto o = cluster_->ClientOptionsFor();
    ASSERT_TRUE(o.ok());
    options_ = *o;
    client_ = Connect(options_);
    ASSERT_NE(client_, nullptr);
    prefix_ = TestPrefix();
  }
  void TearDown() override {
    if (HasFailure() && cluster_ != nullptr) std::cerr << cluster_->Logs();
  }

  static EtcdCluster* cluster_;
  ClientOptions options_;
  std::unique_ptr<Client> client_;
  std::string prefix_;
};

EtcdCluster* EtcdClientTest::cluster_ = nullptr;

TEST_F(EtcdClientTest, PutGetDelete) {
  auto missing = client_->Get(prefix_ + "a");
  ASSERT_TRUE(missing.ok()) << missing.status().ToString();
  EXPECT_TRUE(missing->kvs.empty());
  EXPECT_GT(missing->revision, 0);

  auto rev = client_->Put(prefix_ + "a", "one");
  ASSERT_TRUE(rev.ok()) << rev.status().ToString();
  auto got = client_->Get(prefix_ + "a");
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->kvs.size(), 1u);
  EXPECT_EQ(got->kvs[0].key, prefix_ + "a");
  EXPECT_EQ(got->kvs[0].value, "one");
  EXPECT_EQ(got->kvs[0].mod_revision, *rev);
  EXPECT_EQ(got->kvs[0].create_revision, *rev);
  EXPECT_EQ(got->kvs[0].version, 1);

  auto rev2 = client_->Put(prefix_ + "a", "two");
  ASSERT_TRUE(rev2.ok());
  EXPECT_GT(*rev2, *rev);
  got = client_->Get(prefix_ + "a");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->kvs[0].value, "two");
  EXPECT_EQ(got->kvs[0].version, 2);
  EXPECT_EQ(got->kvs[0].create_revision, *rev);

  auto del = client_->Delete(prefix_ + "a");
  ASSERT_TRUE(del.ok());
  EXPECT_GT(*del, *rev2);
  got = client_->Get(prefix_ + "a");
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->kvs.empty());
  // Deleting what is not there is not an error.
  EXPECT_TRUE(client_->Delete(prefix_ + "a").ok());
}

TEST_F(EtcdClientTest, PrefixListingInPagesAtOneRevision) {
  ClientOptions small = options_;
  small.page_size = 100;
  auto client = Connect(small);
  ASSERT_NE(client, nullptr);
  // 1200 keys from 4 writers (etcd batches concurrent proposals into one commit).
  constexpr int kKeys = 1200;
  constexpr int kWriters = 4;
  std::vector<std::thread> writers;
  std::atomic<int> failures{0};
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      for (int i = w; i < kKeys; i += kWriters) {
        char name[32];
        std::snprintf(name, sizeof name, "pods/%05d", i);
        if (!client->Put(prefix_ + name, "v" + std::to_string(i)).ok()) ++failures;
      }
    });
  }
  for (auto& t : writers) t.join();
  ASSERT_EQ(failures.load(), 0);
  // Neighbours that share the prefix's bytes but not the prefix.
  ASSERT_TRUE(client->Put(prefix_ + "pods0", "outside").ok());
  ASSERT_TRUE(client->Put(prefix_ + "pod", "outside").ok());

  auto all = client->GetPrefix(prefix_ + "pods/");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->kvs.size(), static_cast<size_t>(kKeys));
  for (int i = 0; i < kKeys; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "pods/%05d", i);
    ASSERT_EQ(all->kvs[i].key, prefix_ + name) << i;
    ASSERT_EQ(all->kvs[i].value, "v" + std::to_string(i));
  }
  const int64_t listed_at = all->revision;

  // Changes after the listing are not in a listing at its revision, and are in a new one.
  ASSERT_TRUE(client->Put(prefix_ + "pods/00000", "changed").ok());
  ASSERT_TRUE(client->Delete(prefix_ + "pods/00001").ok());
  auto then = client->GetPrefix(prefix_ + "pods/", listed_at);
  ASSERT_TRUE(then.ok()) << then.status().ToString();
  ASSERT_EQ(then->kvs.size(), static_cast<size_t>(kKeys));
  EXPECT_EQ(then->kvs[0].value, "v0");
  EXPECT_EQ(then->revision, listed_at);
  auto now = client->GetPrefix(prefix_ + "pods/");
  ASSERT_TRUE(now.ok());
  ASSERT_EQ(now->kvs.size(), static_cast<size_t>(kKeys - 1));
  EXPECT_EQ(now->kvs[0].value, "changed");
  EXPECT_GT(now->revision, listed_at);

  auto deleted = client->DeletePrefix(prefix_ + "pods/");
  ASSERT_TRUE(deleted.ok());
  auto empty = client->GetPrefix(prefix_ + "pods/");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->kvs.empty());
  auto outside = client->GetPrefix(prefix_);
  ASSERT_TRUE(outside.ok());
  EXPECT_EQ(outside->kvs.size(), 2u);  // "pod" and "pods0" stay
}

TEST_F(EtcdClientTest, PutIfComparesModRevision) {
  const std::string key = prefix_ + "status";
  // Create-only.
  auto created = client_->PutIf(key, "v1", 0);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_TRUE(*created);
  std::optional<KeyValue> current;
  auto again = client_->PutIf(key, "v1-again", 0, 0, &current);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
  ASSERT_TRUE(current.has_value());
  EXPECT_EQ(current->value, "v1");
  const int64_t rev1 = current->mod_revision;

  // On the matching mod_revision.
  auto swapped = client_->PutIf(key, "v2", rev1, 0, &current);
  ASSERT_TRUE(swapped.ok());
  EXPECT_TRUE(*swapped);
  auto got = client_->Get(key);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->kvs.at(0).value, "v2");
  const int64_t rev2 = got->kvs[0].mod_revision;
  EXPECT_GT(rev2, rev1);

  // A stale mod_revision fails and shows the key as it is.
  auto stale = client_->PutIf(key, "v3", rev1, 0, &current);
  ASSERT_TRUE(stale.ok());
  EXPECT_FALSE(*stale);
  ASSERT_TRUE(current.has_value());
  EXPECT_EQ(current->value, "v2");
  EXPECT_EQ(current->mod_revision, rev2);
  got = client_->Get(key);
  EXPECT_EQ(got->kvs.at(0).value, "v2");

  // A compare on a key that is gone: current says so.
  auto missing = client_->PutIf(prefix_ + "never", "x", 5, 0, &current);
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(*missing);
  EXPECT_FALSE(current.has_value());

  // DeleteIf: refused on a stale revision, done on the current one.
  auto del_stale = client_->DeleteIf(key, rev1);
  ASSERT_TRUE(del_stale.ok());
  EXPECT_FALSE(*del_stale);
  auto del = client_->DeleteIf(key, rev2);
  ASSERT_TRUE(del.ok());
  EXPECT_TRUE(*del);
  got = client_->Get(key);
  EXPECT_TRUE(got->kvs.empty());
  // Created again from nothing.
  auto recreated = client_->PutIf(key, "v4", 0);
  ASSERT_TRUE(recreated.ok());
  EXPECT_TRUE(*recreated);
}

TEST_F(EtcdClientTest, WatchFromARevisionGetsEveryLaterEventInOrder) {
  ASSERT_TRUE(client_->Put(prefix_ + "before", "x").ok());
  auto start = client_->Put(prefix_ + "a", "1");
  ASSERT_TRUE(start.ok());
  // Written before the watch exists, after its start revision.
  ASSERT_TRUE(client_->Put(prefix_ + "b", "2").ok());
  ASSERT_TRUE(client_->Delete(prefix_ + "a").ok());
  // Beside the prefix, not under it.
  ASSERT_TRUE(client_->Put(prefix_.substr(0, prefix_.size() - 1) + "-outside", "no").ok());

  auto watch = client_->WatchPrefix(prefix_, *start);
  ASSERT_TRUE(watch.ok()) << watch.status().ToString();
  // And after.
  ASSERT_TRUE(client_->Put(prefix_ + "c", "3").ok());
  ASSERT_TRUE(client_->Put(prefix_ + "b", "2b").ok());

  auto events = Collect(**watch, 5, milliseconds(5000));
  ASSERT_EQ(events.size(), 5u);
  const std::vector<std::pair<Watch::Event::Type, std::string>> want = {
      {Watch::Event::Type::kPut, "a"},
      {Watch::Event::Type::kPut, "b"},
      {Watch::Event::Type::kDelete, "a"},
      {Watch::Event::Type::kPut, "c"},
      {Watch::Event::Type::kPut, "b"}};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(events[i].type, want[i].first) << i;
    EXPECT_EQ(events[i].kv.key, prefix_ + want[i].second) << i;
    if (i > 0) {
      EXPECT_GT(events[i].kv.mod_revision, events[i - 1].kv.mod_revision) << i;
    }
  }
  EXPECT_EQ(events[0].kv.mod_revision, *start);
  EXPECT_EQ(events[4].kv.value, "2b");
  // Nothing more: Next times out and the watch stays usable.
  auto quiet = (*watch)->Next(milliseconds(200));
  EXPECT_EQ(quiet.status().code(), StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(client_->Put(prefix_ + "d", "4").ok());
  auto more = Collect(**watch, 1, milliseconds(5000));
  ASSERT_EQ(more.size(), 1u);
  EXPECT_EQ(more[0].kv.key, prefix_ + "d");
}

TEST_F(EtcdClientTest, WatchFromACompactedRevisionReportsIt) {
  auto first = client_->Put(prefix_ + "k", "1");
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(client_->Put(prefix_ + "k", "2").ok());
  auto last = client_->Put(prefix_ + "k", "3");
  ASSERT_TRUE(last.ok());
  ASSERT_TRUE(client_->Compact(*last).ok());

  auto watch = client_->WatchPrefix(prefix_, *first);
  ASSERT_TRUE(watch.ok()) << watch.status().ToString();
  auto batch = (*watch)->Next(milliseconds(5000));
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  EXPECT_TRUE(batch->compacted);
  EXPECT_EQ(batch->compact_revision, *last);
  EXPECT_TRUE(batch->events.empty());
  // The watch is over.
  EXPECT_EQ((*watch)->Next(milliseconds(10)).status().code(), StatusCode::kFailedPrecondition);

  // A read at the compacted revision says so too; at 0 it works.
  auto old = client_->GetPrefix(prefix_, *first);
  ASSERT_FALSE(old.ok());
  EXPECT_TRUE(IsCompacted(old.status())) << old.status().ToString();
  EXPECT_THAT(old.status().message(), HasSubstr("compacted"));
  auto now = client_->GetPrefix(prefix_);
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(now->kvs.at(0).value, "3");
  // From the compaction's revision on, a watch works.
  auto fresh = client_->WatchPrefix(prefix_, *last);
  ASSERT_TRUE(fresh.ok());
  auto events = Collect(**fresh, 1, milliseconds(5000));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kv.value, "3");
}

TEST_F(EtcdClientTest, CancelEndsABlockedNextPromptly) {
  auto watch = client_->WatchPrefix(prefix_, 0);
  ASSERT_TRUE(watch.ok()) << watch.status().ToString();
  Watch* w = watch->get();
  std::thread canceller([w] {
    std::this_thread::sleep_for(milliseconds(200));
    w->Cancel();
  });
  const auto start = Steady::now();
  auto r = w->Next(milliseconds(10000));
  canceller.join();
  EXPECT_EQ(r.status().code(), StatusCode::kCancelled) << r.status().ToString();
  EXPECT_LT(Since(start), milliseconds(2000));
}

TEST_F(EtcdClientTest, LeasesExpireWithoutKeepAliveAndLiveWithIt) {
  auto dying = client_->GrantLease(2);
  auto kept = client_->GrantLease(2);
  ASSERT_TRUE(dying.ok()) << dying.status().ToString();
  ASSERT_TRUE(kept.ok());
  ASSERT_TRUE(client_->Put(prefix_ + "dying", "x", *dying).ok());
  ASSERT_TRUE(client_->Put(prefix_ + "kept", "y", *kept).ok());
  auto ttl = client_->LeaseTimeToLive(*dying);
  ASSERT_TRUE(ttl.ok());
  EXPECT_GT(*ttl, 0);
  EXPECT_LE(*ttl, 2);
  auto got = client_->Get(prefix_ + "kept");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->kvs.at(0).lease, *kept);

  // Renew one every 500 ms; the other's key goes within its TTL (plus etcd's expiry check).
  const auto start = Steady::now();
  bool dying_gone = false;
  while (Since(start) < milliseconds(4500)) {
    auto renewed = client_->KeepAliveOnce(*kept);
    ASSERT_TRUE(renewed.ok()) << renewed.status().ToString();
    EXPECT_EQ(*renewed, 2);
    auto d = client_->Get(prefix_ + "dying");
    ASSERT_TRUE(d.ok());
    if (d->kvs.empty() && !dying_gone) {
      dying_gone = true;
      EXPECT_GE(Since(start), milliseconds(1000));
    }
    std::this_thread::sleep_for(milliseconds(500));
  }
  EXPECT_TRUE(dying_gone);
  auto k = client_->Get(prefix_ + "kept");
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->kvs.size(), 1u);
  auto expired_ttl = client_->LeaseTimeToLive(*dying);
  ASSERT_TRUE(expired_ttl.ok());
  EXPECT_EQ(*expired_ttl, -1);
  EXPECT_EQ(client_->KeepAliveOnce(*dying).status().code(), StatusCode::kNotFound);

  // Revoking takes the key at once.
  ASSERT_TRUE(client_->RevokeLease(*kept).ok());
  k = client_->Get(prefix_ + "kept");
  ASSERT_TRUE(k.ok());
  EXPECT_TRUE(k->kvs.empty());
  EXPECT_EQ(client_->RevokeLease(*kept).code(), StatusCode::kNotFound);
}

TEST_F(EtcdClientTest, MemberStatusNamesTheLeader) {
  std::map<uint64_t, int> leaders;
  for (const auto& e : cluster_->endpoints()) {
    auto st = client_->GetMemberStatus(e);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    EXPECT_NE(st->member_id, 0u);
    EXPECT_EQ(st->version, "3.4.23");
    leaders[st->leader_id]++;
  }
  EXPECT_EQ(leaders.size(), 1u);
  auto leader = cluster_->Leader();
  ASSERT_TRUE(leader.ok());
  auto st = client_->GetMemberStatus(cluster_->endpoint(*leader));
  ASSERT_TRUE(st.ok());
  EXPECT_TRUE(st->is_leader());
  EXPECT_EQ(client_->GetMemberStatus("http://127.0.0.1:1").status().code(),
            StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// TLS with client certificates, and etcd auth: the certificate's CN is the user.

class EtcdTlsAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EtcdClusterOptions o;
    o.tls = true;
    cluster_ = std::make_unique<EtcdCluster>(o);
    Status s = cluster_->Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
    prefix_ = TestPrefix();
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_->Logs();
  }
  std::unique_ptr<Client> As(const std::string& cn) {
    auto o = cluster_->ClientOptionsFor(cn);
    EXPECT_TRUE(o.ok()) << o.status().ToString();
    return o.ok() ? Connect(*o) : nullptr;
  }

  std::unique_ptr<EtcdCluster> cluster_;
  std::string prefix_;
};

TEST_F(EtcdTlsAuthTest, ANodeReadsOnlyItsOwnPods) {
  auto root = As("root");
  ASSERT_NE(root, nullptr);
  // Before auth: root, a node user with a read-only role on its prefix, a status writer
  // that logs in by password.
  ASSERT_TRUE(root->AddUser("root", "").ok());
  ASSERT_TRUE(root->AddRole("root").ok());
  ASSERT_TRUE(root->GrantRole("root", "root").ok());
  const std::string mine = prefix_ + "pods/node-a/";
  const std::string theirs = prefix_ + "pods/node-b/";
  ASSERT_TRUE(root->AddUser("node-a", "").ok());
  ASSERT_TRUE(root->AddRole("node-a-pods").ok());
  Status granted =
      root->GrantPermission("node-a-pods", mine, PrefixRangeEnd(mine), Permission::kRead);
  ASSERT_TRUE(granted.ok()) << granted.ToString();
  ASSERT_TRUE(root->GrantRole("node-a", "node-a-pods").ok());
  ASSERT_TRUE(root->AddUser("status-writer", "s3cret").ok());
  ASSERT_TRUE(root->AddRole("statuses").ok());
  const std::string statuses = prefix_ + "status/";
  ASSERT_TRUE(
      root->GrantPermission("statuses", statuses, PrefixRangeEnd(statuses), Permission::kReadWrite)
          .ok());
  ASSERT_TRUE(root->GrantRole("status-writer", "statuses").ok());
  EXPECT_EQ(root->AddUser("node-a", "").code(), StatusCode::kAlreadyExists);
  ASSERT_TRUE(root->Put(mine + "web", "pod-a").ok());
  ASSERT_TRUE(root->Put(theirs + "db", "pod-b").ok());
  Status enabled = root->EnableAuth();
  ASSERT_TRUE(enabled.ok()) << enabled.ToString();

  // The CN "node-a" is the user: its prefix only, read only.
  auto node = As("node-a");
  ASSERT_NE(node, nullptr);
  auto own = node->GetPrefix(mine);
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  ASSERT_EQ(own->kvs.size(), 1u);
  EXPECT_EQ(own->kvs[0].value, "pod-a");
  auto other = node->GetPrefix(theirs);
  EXPECT_EQ(other.status().code(), StatusCode::kPermissionDenied) << other.status().ToString();
  EXPECT_THAT(other.status().message(), HasSubstr(theirs));
  EXPECT_THAT(other.status().message(), HasSubstr("permission denied"));
  EXPECT_EQ(node->Get(theirs + "db").status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(node->Put(mine + "web", "changed").status().code(), StatusCode::kPermissionDenied);
  auto watch_other = node->WatchPrefix(theirs, 0);
  EXPECT_EQ(watch_other.status().code(), StatusCode::kPermissionDenied)
      << watch_other.status().ToString();
  auto watch_own = node->WatchPrefix(mine, 0);
  ASSERT_TRUE(watch_own.ok()) << watch_own.status().ToString();
  ASSERT_TRUE(root->Put(mine + "api", "pod-a2").ok());
  auto events = Collect(**watch_own, 1, milliseconds(5000));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kv.key, mine + "api");

  // A CN that is no etcd user gets nothing.
  auto stranger = As("node-z");
  ASSERT_NE(stranger, nullptr);
  EXPECT_EQ(stranger->GetPrefix(mine).status().code(), StatusCode::kPermissionDenied);

  // Password auth over the same TLS: the token goes with each call. The certificate of a
  // user without roles is presented too; the password's user is the one that counts.
  auto writer_options = cluster_->ClientOptionsFor("node-z");
  ASSERT_TRUE(writer_options.ok());
  writer_options->username = "status-writer";
  writer_options->password = "s3cret";
  auto writer = Connect(*writer_options);
  ASSERT_NE(writer, nullptr);
  auto put = writer->Put(statuses + "web", "Running");
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(writer->Put(mine + "web", "x").status().code(), StatusCode::kPermissionDenied);
  auto wrong_options = *writer_options;
  wrong_options.password = "wrong";
  auto wrong = Connect(wrong_options);
  auto refused = wrong->Get(statuses + "web");
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied) << refused.status().ToString();

  // Without a client certificate the TLS handshake itself fails.
  etcd::ClientOptions anonymous;
  anonymous.endpoints = cluster_->endpoints();
  anonymous.ca_file = cluster_->ca_file();
  anonymous.timeout = milliseconds(1500);
  auto nobody = Connect(anonymous);
  ASSERT_NE(nobody, nullptr);
  EXPECT_FALSE(nobody->GetPrefix(mine).ok());
}

}  // namespace
}  // namespace nodelet::etcd
