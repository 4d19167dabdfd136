// subPaths (svc-podworkerd/cri_configs.h) and the fd-based lookups under them
// (lib/common/beneath.h), with openat2 and with the O_NOFOLLOW walk: a link that stays inside
// the volume works, one that leads out is refused, missing directories are made inside, and a
// directory swapped for a link between the lookup and its use (through the seams) either is
// refused or has no effect: what is staged is what was opened. The staging bind mounts need
// root. Also: configMap, secret and downwardAPI mounts are read-only whatever the manifest says.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>

#include "lib/common/beneath.h"
#include "svc-podworkerd/cri_configs.h"
#include "tests/testing/harness.h"

namespace nodelet::podworkerd {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::TempDir;

std::string Read(const std::string& path) { return testing::ReadTextFile(path); }

ino_t InodeOf(int fd) {
  struct stat st {};
  return fstat(fd, &st) == 0 ? st.st_ino : 0;
}
ino_t InodeOf(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

// Runs each test with openat2 and with the walk.
class SubPathTest : public ::testing::TestWithParam<BeneathMode> {
 protected:
  void SetUp() override {
    fs::create_directories(vol_ + "/inside/deeper");
    fs::create_directories(vol_ + "/d");
    fs::create_directories(outside_);
    std::ofstream(vol_ + "/inside/marker") << "inside";
    std::ofstream(vol_ + "/file") << "a file";
    std::ofstream(outside_ + "/marker") << "outside";
    fs::create_symlink(outside_, vol_ + "/escape-abs");
    fs::create_symlink("../outside", vol_ + "/escape-rel");
    fs::create_symlink("../../outside", vol_ + "/d/escape-deep");
    fs::create_symlink("inside", vol_ + "/ok-link");
    fs::create_symlink("../inside", vol_ + "/d/ok-up");
    fs::create_symlink(vol_ + "/inside", vol_ + "/abs-inside");
    fs::create_symlink("loop", vol_ + "/loop");
    fs::create_symlink("/proc/self/root", vol_ + "/magic");
  }
  SubPathOptions Options() {
    SubPathOptions o;
    o.lookup.mode = GetParam();
    return o;
  }
  TempDir dir_;
  const std::string vol_ = dir_.Sub("vol");
  const std::string outside_ = dir_.Sub("outside");
};

INSTANTIATE_TEST_SUITE_P(Lookups, SubPathTest,
                         ::testing::Values(BeneathMode::kAuto, BeneathMode::kWalk),
                         [](const auto& info) {
                           return info.param == BeneathMode::kAuto ? "Openat2" : "Walk";
                         });

TEST_P(SubPathTest, LinksInsideWorkLinksOutAreRefused) {
  for (const char* ok :
       {"inside", "ok-link", "d/ok-up", "ok-link/deeper", "file", "d/ok-up/marker"}) {
    auto fd = OpenSubPath(vol_, ok, Options());
    ASSERT_TRUE(fd.ok()) << ok << ": " << fd.status().message();
  }
  EXPECT_EQ(InodeOf(OpenSubPath(vol_, "d/ok-up", Options())->get()), InodeOf(vol_ + "/inside"));
  for (const char* bad :
       {"escape-abs", "escape-rel", "d/escape-deep", "escape-rel/marker", "escape-abs/new",
        "abs-inside", "magic", "../outside", "/etc", "inside/../../outside", "loop"}) {
    auto fd = OpenSubPath(vol_, bad, Options());
    EXPECT_FALSE(fd.ok()) << bad;
    if (!fd.ok()) {
      EXPECT_THAT(fd.status().message(), HasSubstr("subPath")) << bad;
    }
  }
  auto out = OpenSubPath(vol_, "escape-rel", Options());
  EXPECT_THAT(out.status().message(),
              HasSubstr("subPath \"escape-rel\" resolves outside its volume"));
  EXPECT_FALSE(fs::exists(outside_ + "/new")) << "nothing may be created outside the volume";
}

TEST_P(SubPathTest, MissingDirectoriesAreMadeInside) {
  auto fd = OpenSubPath(vol_, "new/a/b", Options());
  ASSERT_TRUE(fd.ok()) << fd.status().message();
  EXPECT_TRUE(fs::is_directory(vol_ + "/new/a/b"));
  EXPECT_EQ(InodeOf(fd->get()), InodeOf(vol_ + "/new/a/b"));
  struct stat st {};
  ASSERT_EQ(stat((vol_ + "/new/a").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  // Through a link that stays inside.
  ASSERT_TRUE(OpenSubPath(vol_, "ok-link/made", Options()).ok());
  EXPECT_TRUE(fs::is_directory(vol_ + "/inside/made"));
}

TEST_P(SubPathTest, DirectorySwappedForALinkWhileCreatingIsRefused) {
  // subPath inside/x/y: `inside` is looked up, then (the seam) the container swaps it for a link
  // out of the volume, then x would be made in it.
  SubPathOptions o = Options();
  int calls = 0;
  o.while_creating = [&](const std::string& prefix) {
    if (prefix != "inside" || calls++ > 0) return;
    fs::rename(vol_ + "/inside", vol_ + "/inside.old");
    fs::create_symlink(outside_, vol_ + "/inside");
  };
  auto fd = OpenSubPath(vol_, "inside/x/y", o);
  EXPECT_EQ(calls, 1);
  ASSERT_FALSE(fd.ok());
  EXPECT_THAT(fd.status().message(), HasSubstr("resolves outside its volume"));
  EXPECT_FALSE(fs::exists(outside_ + "/x")) << "the swap let nodelet create outside the volume";
  EXPECT_FALSE(fs::exists(outside_ + "/y"));
}

TEST_P(SubPathTest, SwapBetweenLookupAndBindMountHasNoEffect) {
  if (geteuid() != 0) GTEST_SKIP() << "bind mounts need root";
  const std::string staging = dir_.Sub("staging/0");
  SubPathOptions o = Options();
  o.before_use = [&](const std::string&) {
    fs::rename(vol_ + "/inside", vol_ + "/inside.old");
    fs::create_symlink(outside_, vol_ + "/inside");
  };
  auto staged = StageSubPath(vol_, "inside", staging, o);
  ASSERT_TRUE(staged.ok()) << staged.status().message();
  // What is mounted is the directory that was looked up, not the link's target.
  EXPECT_EQ(Read(staging + "/marker"), "inside");
  EXPECT_EQ(InodeOf(staging), InodeOf(vol_ + "/inside.old"));
  EXPECT_NE(InodeOf(staging), InodeOf(outside_));
  ASSERT_EQ(umount2(staging.c_str(), MNT_DETACH), 0);
}

TEST_P(SubPathTest, StagesFilesAndRebinds) {
  if (geteuid() != 0) GTEST_SKIP() << "bind mounts need root";
  const std::string staging = dir_.Sub("staging/1");
  ASSERT_TRUE(StageSubPath(vol_, "file", staging, Options()).ok());
  EXPECT_TRUE(fs::is_regular_file(staging));
  EXPECT_EQ(Read(staging), "a file");
  // A later start of the container binds again; one mount stays, now of a directory.
  auto again = StageSubPath(vol_, "inside", staging, Options());
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(Read(staging + "/marker"), "inside");
  ASSERT_EQ(umount2(staging.c_str(), MNT_DETACH), 0);
  EXPECT_NE(umount2(staging.c_str(), MNT_DETACH), 0) << "a second mount was left stacked";
}

TEST(BeneathTest, InRootScopeFollowsAbsoluteLinksInsideTheRoot) {
  TempDir dir;
  fs::create_directories(dir.Sub("r/etc"));
  std::ofstream(dir.Sub("r/etc/x")) << "x";
  fs::create_symlink("/etc", dir.Sub("r/link"));
  fs::create_symlink("../../..", dir.Sub("r/up"));
  UniqueFd root(open(dir.Sub("r").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  for (BeneathMode mode : {BeneathMode::kAuto, BeneathMode::kWalk}) {
    LookupOptions o{mode, BeneathScope::kInRoot};
    int fd = OpenBeneathRaw(root.get(), "link/x", 0, o);
    ASSERT_GE(fd, 0);
    EXPECT_EQ(InodeOf(fd), InodeOf(dir.Sub("r/etc/x")));
    close(fd);
    fd = OpenBeneathRaw(root.get(), "up/etc", O_DIRECTORY, o);
    ASSERT_GE(fd, 0);
    EXPECT_EQ(InodeOf(fd), InodeOf(dir.Sub("r/etc")));
    close(fd);
    EXPECT_EQ(OpenBeneathRaw(root.get(), "link/x", 0, {mode, BeneathScope::kBeneath}), -EXDEV);
    EXPECT_EQ(OpenBeneathRaw(root.get(), "link", O_NOFOLLOW | O_DIRECTORY, o), -ENOTDIR);
  }
  std::cout << "openat2: " << (KernelHasOpenat2() ? "available" : "missing (walk only)") << "\n";
}

pod::Pod PodWithVolumes() {
  pod::Pod p;
  p.metadata.uid = "u1";
  auto add = [&](const std::string& name, auto setter) {
    pod::Volume v;
    v.name = name;
    setter(v);
    p.spec.volumes.push_back(v);
  };
  add("cm", [](pod::Volume& v) { v.config_map = pod::ConfigMapVolumeSource{}; });
  add("sec", [](pod::Volume& v) { v.secret = pod::SecretVolumeSource{}; });
  add("info", [](pod::Volume& v) { v.downward_api = pod::DownwardApiVolumeSource{}; });
  add("scratch", [](pod::Volume& v) { v.empty_dir = pod::EmptyDirVolumeSource{}; });
  return p;
}

TEST(MakeMountsTest, NodeletWrittenVolumesAreAlwaysReadOnly) {
  pod::Pod p = PodWithVolumes();
  pod::Container c;
  c.name = "app";
  for (const char* name : {"cm", "sec", "info", "scratch"}) {
    pod::VolumeMount vm;
    vm.name = name;
    vm.mount_path = std::string("/") + name;
    c.volume_mounts.push_back(vm);
  }
  std::map<std::string, std::string> paths = {
      {"cm", "/v/cm"}, {"sec", "/v/sec"}, {"info", "/v/info"}, {"scratch", "/v/scratch"}};
  auto mounts = MakeMounts(p, c, paths, "/root-dir");
  ASSERT_TRUE(mounts.ok()) << mounts.status().message();
  ASSERT_EQ(mounts->size(), 4u);
  EXPECT_TRUE((*mounts)[0].readonly());
  EXPECT_TRUE((*mounts)[1].readonly());
  EXPECT_TRUE((*mounts)[2].readonly());
  EXPECT_FALSE((*mounts)[3].readonly());
  EXPECT_EQ((*mounts)[3].host_path(), "/v/scratch");
}

TEST(MakeMountsTest, SubPathIsStagedAndAnEscapeIsNamed) {
  if (geteuid() != 0) GTEST_SKIP() << "bind mounts need root";
  TempDir dir;
  const std::string vol = dir.Sub("vol");
  fs::create_directories(vol + "/conf");
  std::ofstream(vol + "/conf/a") << "a";
  fs::create_symlink("/etc", vol + "/out");
  pod::Pod p = PodWithVolumes();
  pod::Container c;
  c.name = "app";
  pod::VolumeMount vm;
  vm.name = "scratch";
  vm.mount_path = "/conf";
  vm.sub_path = "conf";
  c.volume_mounts.push_back(vm);
  const std::string root = dir.Sub("root");
  auto mounts = MakeMounts(p, c, {{"scratch", vol}}, root);
  ASSERT_TRUE(mounts.ok()) << mounts.status().message();
  const std::string staging = root + "/pods/u1/volume-subpaths/scratch/app/0";
  EXPECT_EQ((*mounts)[0].host_path(), staging);
  EXPECT_EQ(Read(staging + "/a"), "a");
  ASSERT_EQ(umount2(staging.c_str(), MNT_DETACH), 0);

  c.volume_mounts[0].sub_path = "out";
  auto refused = MakeMounts(p, c, {{"scratch", vol}}, root);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(),
              HasSubstr("volume \"scratch\": subPath \"out\" resolves outside its volume"));
  p.metadata.uid = "../x";
  c.volume_mounts[0].sub_path = "conf";
  EXPECT_FALSE(MakeMounts(p, c, {{"scratch", vol}}, root).ok());
  EXPECT_FALSE(fs::exists(dir.Sub("x")));
}

}  // namespace
}  // namespace nodelet::podworkerd
