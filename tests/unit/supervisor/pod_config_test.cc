#include "supervisor/pod_config.h"

#include <gtest/gtest.h>

namespace nodelet::supervisor {
namespace {

struct P {
  std::string name;
};

SourcePod<P> Pod(const std::string& uid, const std::string& spec, const std::string& meta = "m",
                 bool deleting = false, const std::string& full_name = "") {
  return {uid, spec, meta, deleting, std::make_shared<P>(P{uid}), full_name};
}

// A pod named NAMESPACE/NAME (checked against the other sources' names).
SourcePod<P> Named(const std::string& uid, const std::string& full_name) {
  return Pod(uid, "1", "m", false, full_name);
}

std::vector<std::string> Conflicts(PodConfig<P>& cfg) {
  std::vector<std::string> out;
  for (const auto& c : cfg.TakeNewConflicts()) {
    out.push_back(c.kind + " " + c.source + "/" + c.uid + " lost to " + c.winner_source + "/" +
                  c.winner_uid);
  }
  return out;
}

std::vector<std::pair<PodOp, std::string>> Ops(const std::vector<PodChange<P>>& cs) {
  std::vector<std::pair<PodOp, std::string>> out;
  for (const auto& c : cs) out.emplace_back(c.op, c.uid);
  return out;
}

using V = std::vector<std::pair<PodOp, std::string>>;

TEST(PodConfigTest, AddUpdateReconcileRemove) {
  PodConfig<P> cfg({"file"});
  EXPECT_EQ(Ops(cfg.Merge("file", {Pod("a", "1"), Pod("b", "1")})),
            (V{{PodOp::kAdd, "a"}, {PodOp::kAdd, "b"}}));
  EXPECT_TRUE(cfg.Merge("file", {Pod("a", "1"), Pod("b", "1")}).empty());
  EXPECT_EQ(Ops(cfg.Merge("file", {Pod("a", "2"), Pod("b", "1", "labels changed")})),
            (V{{PodOp::kUpdate, "a"}, {PodOp::kReconcile, "b"}}));
  EXPECT_EQ(Ops(cfg.Merge("file", {Pod("a", "2")})), (V{{PodOp::kRemove, "b"}}));
  EXPECT_EQ(cfg.Pods().size(), 1u);
}

TEST(PodConfigTest, AResetSourceIsNotReadyUntilItsNextReadAndADroppedOneIsNotAwaited) {
  PodConfig<P> cfg({"file"});
  cfg.Merge("file", {Pod("a", "1")});
  ASSERT_TRUE(cfg.AllSourcesReady());
  cfg.ResetSource("file", true);
  EXPECT_FALSE(cfg.AllSourcesReady());
  EXPECT_EQ(cfg.Pods().size(), 1u) << "its pods stay until the next read";
  EXPECT_EQ(Ops(cfg.Merge("file", {Pod("b", "1")})),
            (V{{PodOp::kAdd, "b"}, {PodOp::kRemove, "a"}}));
  EXPECT_TRUE(cfg.AllSourcesReady());
  cfg.ResetSource("http", true);
  EXPECT_FALSE(cfg.AllSourcesReady());
  cfg.ResetSource("http", false);
  EXPECT_TRUE(cfg.AllSourcesReady());
}

TEST(PodConfigTest, DeletionTimestampIsDelete) {
  PodConfig<P> cfg({"file"});
  cfg.Merge("file", {Pod("a", "1")});
  EXPECT_EQ(Ops(cfg.Merge("file", {Pod("a", "1", "m", true)})), (V{{PodOp::kDelete, "a"}}));
  // Still deleting: nothing new.
  EXPECT_TRUE(cfg.Merge("file", {Pod("a", "1", "m", true)}).empty());
}

TEST(PodConfigTest, SourcesAreIndependentAndReadyAfterFirstSnapshot) {
  PodConfig<P> cfg({"file", "http"});
  EXPECT_FALSE(cfg.AllSourcesReady());
  cfg.Merge("file", {Pod("a", "1")});
  EXPECT_FALSE(cfg.AllSourcesReady());
  // An empty first snapshot still makes the source ready, and removes nothing of "file".
  EXPECT_TRUE(cfg.Merge("http", {}).empty());
  EXPECT_TRUE(cfg.AllSourcesReady());
  // The same uid from a second source is ignored: first source wins.
  EXPECT_TRUE(cfg.Merge("http", {Pod("a", "9")}).empty());
  EXPECT_EQ(Ops(cfg.Merge("http", {Pod("h", "1")})), (V{{PodOp::kAdd, "h"}}));
  EXPECT_EQ(cfg.Pods().size(), 2u);
}

// Two sources that serve one uid, or one namespace/name under two uids: never a silent drop.
// The winner is the source that ranks first (file, http, etcd) whichever was read first, the
// pod kept out is reported once (until it goes away), and it comes in once the winner's pod is
// gone.
TEST(PodConfigTest, AConflictBetweenSourcesIsReportedAndTheRankedSourceWins) {
  using S = std::vector<std::string>;
  PodConfig<P> cfg({"file", "http", "etcd"});
  // etcd first: it runs default/web under its uid.
  EXPECT_EQ(Ops(cfg.Merge("etcd", {Named("e1", "default/web")})), (V{{PodOp::kAdd, "e1"}}));
  EXPECT_TRUE(Conflicts(cfg).empty());
  // The manifest directory then serves default/web under another uid: it wins, etcd's goes.
  EXPECT_EQ(Ops(cfg.Merge("file", {Named("f1", "default/web")})),
            (V{{PodOp::kAdd, "f1"}, {PodOp::kRemove, "e1"}}));
  EXPECT_EQ(Conflicts(cfg), (S{"name etcd/e1 lost to file/f1"}));
  // Read again: still kept out, not reported again.
  EXPECT_TRUE(cfg.Merge("etcd", {Named("e1", "default/web")}).empty());
  EXPECT_TRUE(Conflicts(cfg).empty());
  // The same uid from http: file keeps it.
  EXPECT_TRUE(cfg.Merge("http", {Named("f1", "default/other")}).empty());
  EXPECT_EQ(Conflicts(cfg), (S{"uid http/f1 lost to file/f1"}));
  EXPECT_EQ(cfg.PodsOf("file"), 1u);
  EXPECT_EQ(cfg.PodsOf("etcd"), 0u);
  EXPECT_EQ(cfg.PodsOf("http"), 0u);
  // The file's pod goes: the uid is http's now (its pod, same uid), and etcd's name is free.
  EXPECT_EQ(Ops(cfg.Merge("file", {})),
            (V{{PodOp::kRemove, "f1"}, {PodOp::kAdd, "e1"}, {PodOp::kAdd, "f1"}}));
  EXPECT_EQ(cfg.Pods().size(), 2u);
  // Gone and back: reported again.
  EXPECT_EQ(Ops(cfg.Merge("file", {Named("f1", "default/web")})).size(), 3u);
  EXPECT_EQ(Conflicts(cfg), (S{"name etcd/e1 lost to file/f1", "uid http/f1 lost to file/f1"}));
}

// A source that cannot be read changes nothing: its pods stay, it does not become ready by
// failing, and each new reason (not each attempt) is reported once.
// The etcd source's cache: its pods run at once, but the source is ready (and so removals
// happen) only after a real read.
TEST(PodConfigTest, PodsFromASourcesCacheRunButDoNotMakeItReady) {
  PodConfig<P> cfg({"etcd"});
  EXPECT_EQ(Ops(cfg.Merge("etcd", {Pod("a", "1"), Pod("b", "1")}, /*read=*/false)),
            (V{{PodOp::kAdd, "a"}, {PodOp::kAdd, "b"}}));
  EXPECT_FALSE(cfg.Ready("etcd"));
  EXPECT_FALSE(cfg.AllSourcesReady());
  EXPECT_TRUE(cfg.Failed("etcd", "etcd")) << "its first failure: reported";
  EXPECT_EQ(cfg.PodsOf("etcd"), 2u) << "a failed read keeps the cached pods";
  EXPECT_EQ(Ops(cfg.Merge("etcd", {Pod("a", "1")})), (V{{PodOp::kRemove, "b"}}));
  EXPECT_TRUE(cfg.AllSourcesReady());
}

TEST(PodConfigTest, FailedReadKeepsPodsAndReportsEachReasonOnce) {
  PodConfig<P> cfg({"file", "http"});
  cfg.Merge("file", {Pod("f", "1")});
  EXPECT_TRUE(cfg.Failed("http", "fetch"));
  EXPECT_FALSE(cfg.Failed("http", "fetch"));
  EXPECT_FALSE(cfg.Ready("http"));
  EXPECT_FALSE(cfg.AllSourcesReady()) << "a source that never read must hold housekeeping back";
  EXPECT_EQ(Ops(cfg.Merge("http", {Pod("h", "1")})), (V{{PodOp::kAdd, "h"}}));
  EXPECT_TRUE(cfg.AllSourcesReady());
  // Down after a good read: the pod stays, the failure is new again after the success.
  EXPECT_TRUE(cfg.Failed("http", "fetch"));
  EXPECT_TRUE(cfg.Failed("http", "parse"));
  EXPECT_FALSE(cfg.Failed("http", "parse"));
  EXPECT_EQ(cfg.PodsOf("http"), 1u);
  EXPECT_EQ(cfg.Pods().size(), 2u);
  EXPECT_EQ((cfg.failures().at({"http", "fetch"})), 3u);
  EXPECT_EQ((cfg.failures().at({"http", "parse"})), 2u);
  EXPECT_TRUE(cfg.AllSourcesReady());
}

}  // namespace
}  // namespace nodelet::supervisor
