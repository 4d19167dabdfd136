// The volume plugins and the reconciler on a FakeMounter (tests/fakes/fake_mounter.h) and a fake
// clock: each plugin's set-up and tear-down (directories on a real temporary filesystem, mounts
// in memory), the choice of plugin by source, the mountinfo parser, a failed mount retried with
// back-off and never in a busy loop, failed tear-downs and leftover directories retried the
// same way, and a reconciler that does no work when nothing changed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "svc-volumed/volume_manager.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_mounter.h"
#include "tests/testing/harness.h"
#include "tests/unit/volumed/volume_test_pods.h"

namespace nodelet::volumed {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using ::testing::ElementsAre;
using testing::FakeClock;
using testing::FakeMounter;
using ::testing::HasSubstr;
using testing::TempDir;
using namespace test_pods;

class VolumePluginTest : public ::testing::Test {
 protected:
  std::string root() const { return dir_.Sub("root"); }
  // Sets up `v` of `pod` with its plugin; the plugin's state stays in `state_`.
  Status RunSetUp(VolumePlugin& plugin, const pod::Pod& pod, const pod::Volume& v,
                  bool* content_changed) {
    return plugin.SetUp(VolumeSpec{pod, v, {config_maps_, secrets_}}, state_, content_changed);
  }
  TempDir dir_;
  FakeMounter mounter_;
  FakeClock clock_;
  VolumePlugins plugins_{dir_.Sub("root"), mounter_, clock_};
  std::map<std::string, ConfigObject> config_maps_, secrets_;
  PluginVolumeState state_;
};

TEST_F(VolumePluginTest, EachSourceHasItsPlugin) {
  EXPECT_EQ(plugins_.For(EmptyDir("a")).name(), "empty-dir");
  EXPECT_EQ(plugins_.For(HostPath("a", "/x", "")).name(), "host-path");
  EXPECT_EQ(plugins_.For(ConfigMap("a", "c")).name(), "configmap");
  EXPECT_EQ(plugins_.For(Secret("a", "s")).name(), "secret");
  EXPECT_EQ(plugins_.For(DownwardApi("a")).name(), "downward-api");
  pod::Volume none;
  none.name = "no-source";
  EXPECT_EQ(plugins_.For(none).name(), "empty-dir") << "a volume without a source is an emptyDir";
}

TEST_F(VolumePluginTest, EmptyDirIsAWorldWritableDirectoryAndGoesWithTearDown) {
  auto pod = MakePod("u1", {});
  const pod::Volume v = EmptyDir("scratch");
  VolumePlugin& plugin = plugins_.For(v);
  bool changed = false;
  ASSERT_TRUE(RunSetUp(plugin, *pod, v, &changed).ok());
  const std::string dir = root() + "/pods/u1/volumes/kubernetes.io~empty-dir/scratch";
  EXPECT_EQ(state_.host_path, dir);
  struct stat st {};
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0777u);
  EXPECT_FALSE(changed) << "volumed writes no content into an emptyDir";
  EXPECT_TRUE(mounter_.mounts().empty()) << "a disk emptyDir mounts nothing";
  std::ofstream(dir + "/data") << "x";
  ASSERT_TRUE(plugin.TearDown("u1", "scratch").ok());
  EXPECT_FALSE(fs::exists(dir));
}

TEST_F(VolumePluginTest, MemoryEmptyDirMountsOneTmpfsWithItsSizeLimit) {
  pod::Volume v = EmptyDir("mem", "Memory");
  v.empty_dir->size_limit = pod::Quantity::FromValue(16 << 20);
  auto pod = MakePod("u1", {v});
  VolumePlugin& plugin = plugins_.For(v);
  bool changed = false;
  ASSERT_TRUE(RunSetUp(plugin, *pod, v, &changed).ok());
  ASSERT_TRUE(RunSetUp(plugin, *pod, v, &changed).ok());
  const std::string dir = state_.host_path;
  ASSERT_EQ(mounter_.mounts().size(), 1u) << "set up twice, mounted once";
  EXPECT_EQ(mounter_.mounts()[0].path, dir);
  EXPECT_EQ(mounter_.mounts()[0].options, "mode=0777,size=16777216");
  ASSERT_TRUE(plugin.TearDown("u1", "mem").ok());
  EXPECT_TRUE(mounter_.mounts().empty());
  EXPECT_FALSE(fs::exists(dir));
}

TEST_F(VolumePluginTest, HostPathChecksTheTypeAndTearDownLeavesTheHostPathAlone) {
  const std::string host = dir_.Sub("host");
  auto pod = MakePod("u1", {});
  const pod::Volume v = HostPath("h", host, "DirectoryOrCreate");
  VolumePlugin& plugin = plugins_.For(v);
  bool changed = false;
  ASSERT_TRUE(RunSetUp(plugin, *pod, v, &changed).ok());
  EXPECT_EQ(state_.host_path, host);
  EXPECT_TRUE(fs::is_directory(host));
  std::ofstream(host + "/keep") << "keep";
  ASSERT_TRUE(plugin.TearDown("u1", "h").ok());
  EXPECT_TRUE(fs::exists(host + "/keep"));
  EXPECT_EQ(mounter_.calls(), 0);
  const pod::Volume wrong = HostPath("h", host + "/keep", "Directory");
  Status s = RunSetUp(plugin, *pod, wrong, &changed);
  EXPECT_THAT(s.message(), HasSubstr("not a directory"));
}

TEST_F(VolumePluginTest, ConfigMapIsWrittenRewrittenOnlyOnChangeAndTornDown) {
  auto pod = MakePod("u1", {});
  const pod::Volume v = ConfigMap("cfg", "settings");
  VolumePlugin& plugin = plugins_.For(v);
  bool changed = false;
  EXPECT_THAT(RunSetUp(plugin, *pod, v, &changed).message(),
              HasSubstr("configmap \"settings\" not found"));
  config_maps_["default/settings"] = ConfigObject{"default", "settings", {{"k", "v1"}}};
  ASSERT_TRUE(RunSetUp(plugin, *pod, v, &changed).ok());
  EXPECT_TRUE(changed);
  const std::string dir = root() + "/pods/u1/volumes/kubernetes.io~configmap/cfg";
  EXPECT_EQ(Read(dir + "/k"), "v1");
  EXPECT_TRUE(fs::is_symlink(dir + "/..data"));
  const std::string data = fs::read_symlink(dir + "/..data");
  changed = false;
  ASSERT_TRUE(RunSetUp(plugin, *pod, v, &changed).ok());
  EXPECT_FALSE(changed) << "the same payload is not written again";
  EXPECT_EQ(fs::read_symlink(dir + "/..data").string(), data);
  config_maps_["default/settings"].data["k"] = "v2";
  ASSERT_TRUE(RunSetUp(plugin, *pod, v, &changed).ok());
  EXPECT_TRUE(changed);
  EXPECT_EQ(Read(dir + "/k"), "v2");
  EXPECT_TRUE(mounter_.mounts().empty()) << "a configMap is on disk";
  ASSERT_TRUE(plugin.TearDown("u1", "cfg").ok());
  EXPECT_FALSE(fs::exists(dir));
}

TEST_F(VolumePluginTest, SecretIsOnATmpfsMountedOnce) {
  secrets_["default/creds"] = ConfigObject{"default", "creds", {{"password", "secret"}}};
  auto pod = MakePod("u1", {});
  const pod::Volume v = Secret("s", "creds");
  VolumePlugin& plugin = plugins_.For(v);
  bool changed = false;
  ASSERT_TRUE(RunSetUp(plugin, *pod, v, &changed).ok());
  ASSERT_TRUE(RunSetUp(plugin, *pod, v, &changed).ok());
  const std::string dir = root() + "/pods/u1/volumes/kubernetes.io~secret/s";
  EXPECT_EQ(Read(dir + "/password"), "secret");
  ASSERT_EQ(mounter_.mounts().size(), 1u);
  EXPECT_EQ(mounter_.mounts()[0].path, dir);
  EXPECT_EQ(mounter_.mounts()[0].options, "mode=0777");
  ASSERT_TRUE(plugin.TearDown("u1", "s").ok());
  EXPECT_TRUE(mounter_.mounts().empty());
  EXPECT_FALSE(fs::exists(dir));
  // A mount that does not go keeps the directory: nothing is removed under a mount.
  state_ = {};  // torn down: the manager forgets the volume
  ASSERT_TRUE(RunSetUp(plugin, *pod, v, &changed).ok());
  mounter_.FailUnmounts(1);
  EXPECT_FALSE(plugin.TearDown("u1", "s").ok());
  EXPECT_EQ(Read(dir + "/password"), "secret");
  ASSERT_TRUE(plugin.TearDown("u1", "s").ok());
}

TEST_F(VolumePluginTest, DownwardApiFollowsTheLabels) {
  const pod::Volume v = DownwardApi("info");
  VolumePlugin& plugin = plugins_.For(v);
  bool changed = false;
  auto pod = MakePod("u1", {v}, {{"tier", "web"}});
  ASSERT_TRUE(RunSetUp(plugin, *pod, v, &changed).ok());
  const std::string dir = root() + "/pods/u1/volumes/kubernetes.io~downward-api/info";
  EXPECT_EQ(Read(dir + "/labels"), "tier=\"web\"\n");
  auto relabelled = MakePod("u1", {v}, {{"tier", "db"}});
  changed = false;
  ASSERT_TRUE(RunSetUp(plugin, *relabelled, v, &changed).ok());
  EXPECT_TRUE(changed);
  EXPECT_EQ(Read(dir + "/labels"), "tier=\"db\"\n");
  ASSERT_TRUE(plugin.TearDown("u1", "info").ok());
  EXPECT_FALSE(fs::exists(dir));
}

TEST(MountInfoTest, ParsesEscapesAndKeepsToThePrefix) {
  std::istringstream in(
      "22 1 0:21 / /proc rw,nosuid - proc proc rw\n"
      "40 22 0:40 / /r/pods/u1/volumes/kubernetes.io~empty-dir/mem rw - tmpfs tmpfs rw\n"
      "41 22 0:41 / /r/pods/u1/volume-subpaths/v/c/0 rw - ext4 /dev/sda1 rw\n"
      "42 22 0:42 / /r/pods/u1/with\\040space rw - tmpfs tmpfs rw\n"
      "43 22 0:43 / /r/pods/u10 rw - tmpfs tmpfs rw\n"
      "44 22 0:44 / /r/pods/u1 rw - tmpfs tmpfs rw\n"
      "garbage\n");
  EXPECT_THAT(
      ParseMountPoints(in, "/r/pods/u1"),
      ElementsAre("/r/pods/u1/volumes/kubernetes.io~empty-dir/mem",
                  "/r/pods/u1/volume-subpaths/v/c/0", "/r/pods/u1/with space", "/r/pods/u1"));
}

TEST(UnmountAndRemoveTreeTest, AnUnreadableMountTableRemovesNothing) {
  TempDir dir;
  FakeMounter mounter;
  fs::create_directories(dir.Sub("pod/volumes"));
  mounter.FailLists(1);
  EXPECT_FALSE(UnmountAndRemoveTree(mounter, dir.Sub("pod")).ok());
  EXPECT_TRUE(fs::exists(dir.Sub("pod/volumes")));
  ASSERT_TRUE(mounter.MountTmpfs(dir.Sub("pod/volumes"), "mode=0777").ok());
  ASSERT_TRUE(mounter.MountTmpfs(dir.Sub("pod/volumes"), "mode=0777").ok());
  ASSERT_TRUE(UnmountAndRemoveTree(mounter, dir.Sub("pod")).ok());
  EXPECT_TRUE(mounter.mounts().empty()) << "a path mounted twice is unmounted twice";
  EXPECT_FALSE(fs::exists(dir.Sub("pod")));
}

class ReconcilerTest : public ::testing::Test {
 protected:
  std::string root() const { return dir_.Sub("root"); }
  std::string VolumeDir(const std::string& uid, const std::string& plugin,
                        const std::string& name) const {
    return root() + "/pods/" + uid + "/volumes/kubernetes.io~" + plugin + "/" + name;
  }
  MonoTime Now() const { return clock_.Now(); }
  TempDir dir_;
  FakeClock clock_;
  FakeMounter mounter_;
  VolumeManager manager_{dir_.Sub("root"), clock_, mounter_};
};

TEST_F(ReconcilerTest, NoWorkWhenNothingChanged) {
  DesiredState d;
  d.pods["u1"] = MakePod("u1", {EmptyDir("mem", "Memory"), DownwardApi("info")}, {{"a", "b"}});
  d.config_maps["default/other"] = ConfigObject{"default", "other", {{"k", "v"}}};
  EXPECT_EQ(manager_.NextReconcile(), MonoTime::max()) << "nothing desired yet";
  manager_.SetDesired(d);
  EXPECT_LE(manager_.NextReconcile(), Now()) << "a new pod is set up at once";
  EXPECT_THAT(manager_.Reconcile(), ElementsAre("u1"));
  ASSERT_TRUE(manager_.Get("u1").ready);
  EXPECT_EQ(manager_.NextReconcile(), MonoTime::max()) << "no timer while nothing fails";

  const int calls = mounter_.calls();
  const uint64_t operations = manager_.operations();
  // The same state again (the supervisor resends it every 2 s), and a ConfigMap the pod does
  // not use: nothing to do.
  manager_.SetDesired(d);
  d.config_maps["default/other"].data["k"] = "w";
  manager_.SetDesired(d);
  EXPECT_EQ(manager_.NextReconcile(), MonoTime::max());
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(std::chrono::minutes(1));
    EXPECT_TRUE(manager_.Reconcile().empty());
  }
  EXPECT_EQ(mounter_.calls(), calls) << "no mountinfo read, no mount";
  EXPECT_EQ(manager_.operations(), operations);

  // A label the downwardAPI volume shows: that pod is set up again, at once.
  d.pods["u1"] = MakePod("u1", d.pods["u1"]->spec.volumes, {{"a", "c"}});
  manager_.SetDesired(d);
  EXPECT_LE(manager_.NextReconcile(), Now());
  EXPECT_THAT(manager_.Reconcile(), ElementsAre("u1")) << "new content is reported";
  EXPECT_EQ(Read(VolumeDir("u1", "downward-api", "info") + "/labels"), "a=\"c\"\n");
  EXPECT_EQ(mounter_.Count(VolumeDir("u1", "empty-dir", "mem")), 1);
  EXPECT_EQ(manager_.NextReconcile(), MonoTime::max());
}

TEST_F(ReconcilerTest, AChangedConfigMapOrSecretSetsUpOnlyThePodsUsingIt) {
  DesiredState d;
  d.pods["u1"] = MakePod("u1", {ConfigMap("cfg", "settings")});
  d.pods["u2"] = MakePod("u2", {ConfigMap("cfg", "other")});
  d.pods["u3"] = MakePod("u3", {Secret("s", "creds")});
  d.config_maps["default/settings"] = ConfigObject{"default", "settings", {{"k", "v1"}}};
  d.config_maps["default/other"] = ConfigObject{"default", "other", {{"k", "o"}}};
  d.secrets["default/creds"] = ConfigObject{"default", "creds", {{"p", "1"}}};
  manager_.SetDesired(d);
  EXPECT_THAT(manager_.Reconcile(), ElementsAre("u1", "u2", "u3"));
  uint64_t operations = manager_.operations();
  d.config_maps["default/settings"].data["k"] = "v2";
  manager_.SetDesired(d);
  EXPECT_THAT(manager_.Reconcile(), ElementsAre("u1"));
  EXPECT_EQ(manager_.operations(), operations + 1) << "only u1's volume was set up again";
  EXPECT_EQ(Read(VolumeDir("u1", "configmap", "cfg") + "/k"), "v2");
  operations = manager_.operations();
  d.secrets["default/creds"].data["p"] = "2";
  manager_.SetDesired(d);
  EXPECT_THAT(manager_.Reconcile(), ElementsAre("u3"));
  EXPECT_EQ(manager_.operations(), operations + 1);
  EXPECT_EQ(Read(VolumeDir("u3", "secret", "s") + "/p"), "2");
  // A Secret that goes fails the volume that reads it, and that pod only.
  d.secrets.clear();
  manager_.SetDesired(d);
  EXPECT_THAT(manager_.Reconcile(), ElementsAre("u3"));
  EXPECT_THAT(manager_.Get("u3").reason, HasSubstr("secret \"creds\" not found"));
  EXPECT_TRUE(manager_.Get("u1").ready);
}

TEST_F(ReconcilerTest, AFailedMountIsRetriedWithBackoffNotInABusyLoop) {
  DesiredState d;
  d.pods["u1"] = MakePod("u1", {EmptyDir("mem", "Memory")});
  mounter_.FailMounts(4);
  manager_.SetDesired(d);
  manager_.Reconcile();
  EXPECT_EQ(mounter_.mount_calls(), 1);
  auto info = manager_.Get("u1");
  EXPECT_FALSE(info.ready);
  EXPECT_THAT(info.reason, HasSubstr("injected failure"));
  // 500 ms, then doubling; nothing is tried in between, however often the loop turns.
  milliseconds backoff(500);
  for (int attempt = 2; attempt <= 5; ++attempt) {
    EXPECT_EQ(manager_.NextReconcile(), Now() + backoff) << "attempt " << attempt;
    clock_.Advance(backoff - milliseconds(1));
    for (int i = 0; i < 100; ++i) manager_.Reconcile();
    EXPECT_EQ(mounter_.mount_calls(), attempt - 1) << "not before the retry time";
    clock_.Advance(milliseconds(1));
    auto changed = manager_.Reconcile();
    EXPECT_EQ(mounter_.mount_calls(), attempt);
    if (attempt < 5) {
      EXPECT_TRUE(changed.empty()) << "the same failure again is no news";
      backoff *= 2;
    } else {
      EXPECT_THAT(changed, ElementsAre("u1")) << "ready now";
    }
  }
  EXPECT_TRUE(manager_.Get("u1").ready);
  EXPECT_EQ(manager_.NextReconcile(), MonoTime::max());
  EXPECT_EQ(mounter_.Count(VolumeDir("u1", "empty-dir", "mem")), 1);
}

TEST_F(ReconcilerTest, BackoffIsCappedAndADesiredChangeDoesNotSkipIt) {
  DesiredState d;
  d.pods["u1"] = MakePod("u1", {EmptyDir("mem", "Memory")});
  mounter_.FailMounts(1000);
  manager_.SetDesired(d);
  manager_.Reconcile();
  for (int i = 0; i < 12; ++i) {
    clock_.Advance(manager_.NextReconcile() - Now());
    manager_.Reconcile();
  }
  EXPECT_EQ(manager_.NextReconcile() - Now(), RetryBackoff::kMax);
  // A change to the pod marks it, but its failing volume waits for its retry time.
  const int calls = mounter_.mount_calls();
  d.pods["u1"] = MakePod("u1", d.pods["u1"]->spec.volumes, {{"new", "label"}});
  manager_.SetDesired(d);
  manager_.Reconcile();
  EXPECT_EQ(mounter_.mount_calls(), calls);
}

TEST_F(ReconcilerTest, TearDownUnmountsEveryVolumeAndAFailureIsRetriedWithBackoff) {
  DesiredState d;
  d.pods["u1"] = MakePod("u1", {EmptyDir("mem", "Memory"), Secret("s", "creds"),
                                HostPath("h", dir_.Sub("host"), "DirectoryOrCreate")});
  d.secrets["default/creds"] = ConfigObject{"default", "creds", {{"p", "x"}}};
  d.sources_ready = true;
  d.in_use_known = true;  // podworkerd runs nothing that is not desired
  manager_.SetDesired(d);
  manager_.Reconcile();
  ASSERT_TRUE(manager_.Get("u1").ready) << manager_.Get("u1").reason;
  ASSERT_EQ(mounter_.mounts().size(), 2u);
  // podworkerd's subPath staging mount lives in the pod directory too.
  const std::string staging = root() + "/pods/u1/volume-subpaths/mem/app/0";
  fs::create_directories(staging);
  ASSERT_TRUE(mounter_.MountTmpfs(staging, "").ok());

  d.pods.clear();
  mounter_.FailUnmounts(1);
  manager_.SetDesired(d);
  EXPECT_LE(manager_.NextReconcile(), Now());
  EXPECT_TRUE(manager_.Reconcile().empty()) << "not torn down yet";
  EXPECT_TRUE(fs::exists(root() + "/pods/u1"));
  EXPECT_EQ(manager_.NextReconcile(), Now() + RetryBackoff::kInitial);
  const int calls = mounter_.calls();
  manager_.Reconcile();
  EXPECT_EQ(mounter_.calls(), calls) << "no retry before its time";
  clock_.Advance(RetryBackoff::kInitial);
  EXPECT_THAT(manager_.Reconcile(), ElementsAre("u1"));
  EXPECT_TRUE(mounter_.mounts().empty());
  EXPECT_FALSE(fs::exists(root() + "/pods/u1"));
  EXPECT_TRUE(fs::is_directory(dir_.Sub("host"))) << "a hostPath is the host's";
  EXPECT_FALSE(manager_.Get("u1").known);
  // Nothing left but the periodic sweep for leftovers.
  EXPECT_GT(manager_.NextReconcile(), Now());
  EXPECT_LE(manager_.NextReconcile(), Now() + VolumeManager::kSweepPeriod);
}

TEST_F(ReconcilerTest, LeftoverDirectoriesAreSweptOnlyOnceSourcesHaveReported) {
  const std::string stale = root() + "/pods/stale";
  fs::create_directories(stale + "/volumes/kubernetes.io~empty-dir/x");
  ASSERT_TRUE(mounter_.MountTmpfs(stale + "/volumes/kubernetes.io~empty-dir/x", "").ok());
  DesiredState d;
  d.pods["u1"] = MakePod("u1", {EmptyDir("scratch")});
  manager_.SetDesired(d);
  manager_.Reconcile();
  EXPECT_TRUE(fs::exists(stale)) << "sources have not all reported";
  EXPECT_EQ(manager_.NextReconcile(), MonoTime::max());

  d.sources_ready = true;
  d.in_use_known = true;
  mounter_.FailUnmounts(1);
  manager_.SetDesired(d);
  EXPECT_LE(manager_.NextReconcile(), Now());
  manager_.Reconcile();
  EXPECT_TRUE(fs::exists(stale));
  EXPECT_EQ(manager_.failures(), 1u);
  EXPECT_EQ(manager_.NextReconcile(), Now() + RetryBackoff::kInitial);
  clock_.Advance(RetryBackoff::kInitial);
  manager_.Reconcile();
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(mounter_.mounts().empty());
  EXPECT_TRUE(fs::exists(root() + "/pods/u1"));

  // A directory that appears later (another process after a tear-down) goes at the next sweep.
  EXPECT_EQ(manager_.NextReconcile(), Now() + VolumeManager::kSweepPeriod);
  fs::create_directories(root() + "/pods/late/volume-subpaths");
  const int calls = mounter_.calls();
  manager_.Reconcile();
  EXPECT_TRUE(fs::exists(root() + "/pods/late")) << "not before the sweep";
  EXPECT_EQ(mounter_.calls(), calls);
  clock_.Advance(VolumeManager::kSweepPeriod);
  manager_.Reconcile();
  EXPECT_FALSE(fs::exists(root() + "/pods/late"));
  EXPECT_EQ(manager_.failures(), 1u);
}

// A restarted supervisor may say again that its sources have not reported: no sweep then, and
// no timer that stays due because a leftover's retry cannot run.
TEST_F(ReconcilerTest, SourcesNoLongerReadyStopTheSweepWithoutABusyLoop) {
  fs::create_directories(root() + "/pods/stale/volumes");
  ASSERT_TRUE(mounter_.MountTmpfs(root() + "/pods/stale/volumes", "").ok());
  DesiredState d;
  d.sources_ready = true;
  d.in_use_known = true;
  mounter_.FailUnmounts(1);
  manager_.SetDesired(d);
  manager_.Reconcile();
  ASSERT_TRUE(fs::exists(root() + "/pods/stale"));
  d.sources_ready = false;
  manager_.SetDesired(d);
  manager_.Reconcile();
  EXPECT_EQ(manager_.NextReconcile(), MonoTime::max());
  clock_.Advance(std::chrono::minutes(5));
  manager_.Reconcile();
  EXPECT_TRUE(fs::exists(root() + "/pods/stale")) << "nothing is removed before sources report";
  EXPECT_EQ(manager_.NextReconcile(), MonoTime::max());
  d.sources_ready = true;
  manager_.SetDesired(d);
  EXPECT_LE(manager_.NextReconcile(), Now());
  manager_.Reconcile();
  EXPECT_FALSE(fs::exists(root() + "/pods/stale"));
}

// The kubelet's order: a deleted pod keeps its volumes while any of its containers may run
// (podworkerd names it in use), and everything is kept while that is not known, or while a pod
// source has not reported (a restarted supervisor).
TEST_F(ReconcilerTest, APodInUseKeepsItsVolumesUntilPodworkerdHasStoppedIt) {
  DesiredState d;
  d.pods["u1"] = MakePod("u1", {EmptyDir("mem", "Memory")});
  d.sources_ready = true;
  d.in_use = {"u1"};
  manager_.SetDesired(d);
  manager_.Reconcile();
  ASSERT_TRUE(manager_.Get("u1").ready);
  const std::string mem = VolumeDir("u1", "empty-dir", "mem");
  ASSERT_EQ(mounter_.mounts().size(), 1u);

  // Deleted, but podworkerd's report is not complete (it restarted): nothing is torn down.
  d.pods.clear();
  manager_.SetDesired(d);
  manager_.Reconcile();
  EXPECT_TRUE(fs::exists(mem));
  EXPECT_EQ(mounter_.mounts().size(), 1u);
  // Complete, and the pod is still in use (its containers are in their grace period).
  d.in_use_known = true;
  manager_.SetDesired(d);
  manager_.Reconcile();
  EXPECT_TRUE(fs::exists(mem)) << "unmounted while a container may still use it";
  EXPECT_EQ(mounter_.mounts().size(), 1u);
  // A restarted supervisor whose sources have not all reported: still nothing.
  d.in_use.clear();
  d.sources_ready = false;
  manager_.SetDesired(d);
  manager_.Reconcile();
  EXPECT_TRUE(fs::exists(mem)) << "torn down before every source reported";
  // A restarted volumed knows the pod only as a directory: the sweep keeps it too.
  VolumeManager again(root(), clock_, mounter_);
  DesiredState in_use = d;
  in_use.sources_ready = true;
  in_use.in_use = {"u1"};
  again.SetDesired(in_use);
  again.Reconcile();
  clock_.Advance(VolumeManager::kSweepPeriod);
  again.Reconcile();
  EXPECT_TRUE(fs::exists(mem)) << "the sweep removed a pod in use";
  // podworkerd has stopped it: it goes, at once.
  d.sources_ready = true;
  manager_.SetDesired(d);
  EXPECT_LE(manager_.NextReconcile(), Now());
  EXPECT_THAT(manager_.Reconcile(), ElementsAre("u1"));
  EXPECT_TRUE(mounter_.mounts().empty());
  EXPECT_FALSE(fs::exists(root() + "/pods/u1"));
}

TEST_F(ReconcilerTest, AVolumeWhoseSourceChangesGetsTheNewPlugin) {
  DesiredState d;
  d.pods["u1"] = MakePod("u1", {EmptyDir("data")});
  manager_.SetDesired(d);
  manager_.Reconcile();
  EXPECT_EQ(manager_.Get("u1").volumes.at(0).plugin, "empty-dir");
  d.pods["u1"] = MakePod("u1", {HostPath("data", dir_.Sub("host"), "DirectoryOrCreate")});
  manager_.SetDesired(d);
  EXPECT_THAT(manager_.Reconcile(), ElementsAre("u1"));
  auto info = manager_.Get("u1");
  ASSERT_TRUE(info.ready);
  EXPECT_EQ(info.volumes.at(0).plugin, "host-path");
  EXPECT_EQ(info.volumes.at(0).host_path, dir_.Sub("host"));
}

}  // namespace
}  // namespace nodelet::volumed
