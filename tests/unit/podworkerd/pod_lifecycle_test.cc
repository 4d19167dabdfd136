#include "svc-podworkerd/pod_lifecycle.h"

#include <gtest/gtest.h>

namespace nodelet::podworkerd {
namespace {

struct FakePod {
  std::string spec;
};

using Lifecycle = PodLifecycle<FakePod>;

PodUpdate<FakePod> Upd(UpdateType t, const std::string& spec = "",
                       std::optional<int64_t> grace = std::nullopt) {
  PodUpdate<FakePod> u;
  u.uid = "u1";
  u.type = t;
  if (!spec.empty()) u.pod = std::make_shared<FakePod>(FakePod{spec});
  u.grace_period_seconds = grace;
  return u;
}

TEST(PodLifecycleTest, CreateStartsASyncAtOnce) {
  Lifecycle l;
  auto w = l.Update(Upd(UpdateType::kCreate, "v1"));
  ASSERT_TRUE(w);
  EXPECT_EQ(w->kind, WorkKind::kSync);
  EXPECT_EQ(w->pod->spec, "v1");
  EXPECT_TRUE(l.Busy("u1"));
}

TEST(PodLifecycleTest, UpdatesWhileBusyCoalesceToTheLatest) {
  Lifecycle l;
  l.Update(Upd(UpdateType::kCreate, "v1"));
  EXPECT_FALSE(l.Update(Upd(UpdateType::kUpdate, "v2")));
  EXPECT_FALSE(l.Update(Upd(UpdateType::kUpdate, "v3")));
  auto next = l.Complete("u1", WorkKind::kSync, false);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->kind, WorkKind::kSync);
  EXPECT_EQ(next->pod->spec, "v3");
  // Nothing more pending after that one.
  EXPECT_FALSE(l.Complete("u1", WorkKind::kSync, false));
  EXPECT_FALSE(l.Busy("u1"));
}

TEST(PodLifecycleTest, PendingKillIsNeverOverwrittenBySync) {
  Lifecycle l;
  l.Update(Upd(UpdateType::kCreate, "v1"));
  l.Update(Upd(UpdateType::kKill, "", 10));
  l.Update(Upd(UpdateType::kUpdate, "v2"));
  l.Update(Upd(UpdateType::kSync));
  auto next = l.Complete("u1", WorkKind::kSync, false);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->kind, WorkKind::kTerminating);
  EXPECT_EQ(next->grace_period_seconds, 10);
  EXPECT_EQ(*l.Phase("u1"), LifecyclePhase::kTerminating);
}

TEST(PodLifecycleTest, GracePeriodOnlyShrinks) {
  Lifecycle l;
  l.Update(Upd(UpdateType::kCreate, "v1"));
  l.Update(Upd(UpdateType::kKill, "", 30));
  l.Update(Upd(UpdateType::kKill, "", 60));
  EXPECT_EQ(*l.GracePeriod("u1"), 30);
  l.Update(Upd(UpdateType::kKill, "", 5));
  EXPECT_EQ(*l.GracePeriod("u1"), 5);
  // Below the kubelet's minimum of 2 s (but not a forced 0) is raised to the minimum.
  l.Update(Upd(UpdateType::kKill, "", 1));
  EXPECT_EQ(*l.GracePeriod("u1"), kMinimumGracePeriodSeconds);
  l.Update(Upd(UpdateType::kKill, "", 0));
  EXPECT_EQ(*l.GracePeriod("u1"), 0);
}

TEST(PodLifecycleTest, TerminatingThenTerminatedThenIgnoredUntilForgotten) {
  Lifecycle l;
  auto w = l.Update(Upd(UpdateType::kKill, "v1", 3));
  ASSERT_TRUE(w);
  EXPECT_EQ(w->kind, WorkKind::kTerminating);
  auto t = l.Complete("u1", WorkKind::kTerminating, false);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->kind, WorkKind::kTerminated);
  EXPECT_FALSE(l.Complete("u1", WorkKind::kTerminated, false));
  EXPECT_EQ(*l.Phase("u1"), LifecyclePhase::kTerminated);
  // A terminated pod's worker ignores updates.
  EXPECT_FALSE(l.Update(Upd(UpdateType::kUpdate, "v2")));
  EXPECT_FALSE(l.Update(Upd(UpdateType::kCreate, "v2")));
  EXPECT_EQ(l.ignored_updates(), 2u);
  EXPECT_TRUE(l.Forget("u1"));
  auto again = l.Update(Upd(UpdateType::kCreate, "v2"));
  ASSERT_TRUE(again);
  EXPECT_EQ(again->kind, WorkKind::kSync);
}

TEST(PodLifecycleTest, KillWhileTerminatingKeepsTerminating) {
  Lifecycle l;
  l.Update(Upd(UpdateType::kKill, "v1", 30));
  EXPECT_FALSE(l.Update(Upd(UpdateType::kKill, "", 5)));
  auto t = l.Complete("u1", WorkKind::kTerminating, false);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->kind, WorkKind::kTerminated);
}

TEST(PodLifecycleTest, FinishedPodTerminatesByItself) {
  Lifecycle l;
  l.Update(Upd(UpdateType::kCreate, "v1"));
  auto t = l.Complete("u1", WorkKind::kSync, /*pod_finished=*/true);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->kind, WorkKind::kTerminating);
}

TEST(PodLifecycleTest, ForgetOnlyTerminated) {
  Lifecycle l;
  l.Update(Upd(UpdateType::kCreate, "v1"));
  EXPECT_FALSE(l.Forget("u1"));
  EXPECT_FALSE(l.Forget("nope"));
}

}  // namespace
}  // namespace nodelet::podworkerd
