// VolumeManager and the pieces around it on a real filesystem in a temporary directory: the
// atomic writer, emptyDir, hostPath type checks, configMap/secret/downwardAPI content and
// updates, backoff of a failing volume, teardown; tmpfs mounts when running as root. Time is a
// fake clock. The writer against tampering: atomic_writer_test.cc; subPaths: subpath_test.cc.
#include "svc-volumed/volume_manager.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/fakes/fake_clock.h"
#include "tests/testing/harness.h"
#include "tests/unit/volumed/volume_test_pods.h"

namespace nodelet::volumed {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::TempDir;
using namespace test_pods;

class VolumeManagerTest : public ::testing::Test {
 protected:
  std::string root() const { return dir_.Sub("root"); }
  TempDir dir_;
  testing::FakeClock clock_;
  VolumeManager manager_{dir_.Sub("root"), clock_};
};

TEST(AtomicWriteFilesTest, SwapsDataAndRemovesStaleNames) {
  TempDir dir;
  const std::string d = dir.Sub("vol");
  ASSERT_TRUE(AtomicWriteFiles(RealClock::Get(), d, {{"a", {"1", 0644}}, {"b", {"2", 0600}}}).ok());
  EXPECT_EQ(Read(d + "/a"), "1");
  EXPECT_TRUE(fs::is_symlink(d + "/a"));
  EXPECT_TRUE(fs::is_symlink(d + "/..data"));
  std::string first = fs::read_symlink(d + "/..data");
  ASSERT_TRUE(AtomicWriteFiles(RealClock::Get(), d, {{"a", {"3", 0644}}}).ok());
  EXPECT_EQ(Read(d + "/a"), "3");
  EXPECT_FALSE(fs::exists(d + "/b")) << "a key that went away disappears";
  EXPECT_FALSE(fs::exists(d + "/" + first)) << "the previous data directory is removed";
  EXPECT_FALSE(AtomicWriteFiles(RealClock::Get(), d, {{"../escape", {"x", 0644}}}).ok());
}

TEST_F(VolumeManagerTest, EmptyDirAndHostPathTypes) {
  const std::string existing_dir = dir_.Sub("dir");
  fs::create_directories(existing_dir);
  const std::string file = dir_.Sub("file");
  std::ofstream(file) << "x";
  DesiredState d;
  d.pods["u1"] = MakePod(
      "u1", {EmptyDir("scratch"), HostPath("d", existing_dir, "Directory"),
             HostPath("f", file, "File"), HostPath("c", dir_.Sub("made"), "DirectoryOrCreate"),
             HostPath("g", dir_.Sub("made-file"), "FileOrCreate")});
  manager_.SetDesired(d);
  auto changed = manager_.Reconcile();
  EXPECT_TRUE(changed.count("u1"));
  auto info = manager_.Get("u1");
  EXPECT_TRUE(info.ready) << info.reason;
  EXPECT_TRUE(fs::is_directory(root() + "/pods/u1/volumes/kubernetes.io~empty-dir/scratch"));
  EXPECT_TRUE(fs::is_directory(dir_.Sub("made")));
  EXPECT_TRUE(fs::is_regular_file(dir_.Sub("made-file")));
  // Nothing changed: a second pass reports nothing.
  EXPECT_TRUE(manager_.Reconcile().empty());
}

// hostPath type checks on fds: links in the path the manifest names are followed (the kubelet
// stats through them), but *OrCreate never creates through a link: a dangling link under the
// name is not followed to make its target, and what is made gets its mode on its own fd.
TEST(CheckHostPathTest, CreatesOnFdsAndNeverThroughADanglingLink) {
  TempDir dir;
  fs::create_directories(dir.Sub("real"));
  fs::create_symlink(dir.Sub("real"), dir.Sub("via-link"));
  for (BeneathMode mode : {BeneathMode::kAuto, BeneathMode::kWalk}) {
    LookupOptions o{mode, BeneathScope::kInRoot};
    const std::string tag = mode == BeneathMode::kAuto ? "a" : "w";
    ASSERT_TRUE(CheckHostPath(dir.Sub("via-link/" + tag + "/b"), "DirectoryOrCreate", o).ok());
    EXPECT_TRUE(fs::is_directory(dir.Sub("real/" + tag + "/b")));
    struct stat st {};
    ASSERT_EQ(stat(dir.Sub("real/" + tag).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0755u);
    EXPECT_TRUE(CheckHostPath(dir.Sub("via-link/" + tag), "Directory", o).ok());
    // A dangling link where the file or directory should be made: refused, target not made.
    fs::create_symlink(dir.Sub("target-" + tag), dir.Sub("dangling-" + tag));
    EXPECT_FALSE(CheckHostPath(dir.Sub("dangling-" + tag), "FileOrCreate", o).ok());
    EXPECT_FALSE(CheckHostPath(dir.Sub("dangling-" + tag), "DirectoryOrCreate", o).ok());
    EXPECT_FALSE(fs::exists(dir.Sub("target-" + tag)));
    ASSERT_TRUE(CheckHostPath(dir.Sub("real/f-" + tag), "FileOrCreate", o).ok());
    EXPECT_TRUE(CheckHostPath(dir.Sub("via-link/f-" + tag), "File", o).ok());
    EXPECT_FALSE(CheckHostPath(dir.Sub("real/f-" + tag), "Directory", o).ok());
    EXPECT_FALSE(CheckHostPath("relative/path", "Directory", o).ok());
  }
}

TEST_F(VolumeManagerTest, WrongHostPathTypesFailWithReasonAndBackOff) {
  const std::string file = dir_.Sub("file");
  std::ofstream(file) << "x";
  DesiredState d;
  d.pods["u1"] = MakePod("u1", {HostPath("d", file, "Directory")});
  manager_.SetDesired(d);
  manager_.Reconcile();
  auto info = manager_.Get("u1");
  EXPECT_FALSE(info.ready);
  EXPECT_THAT(info.reason, HasSubstr("not a directory"));
  EXPECT_THAT(info.reason, HasSubstr(file));
  for (const char* type : {"File", "Socket", "CharDevice", "BlockDevice"}) {
    DesiredState d2;
    d2.pods["u2"] = MakePod("u2", {HostPath("x", dir_.Sub("nothing-here"), type)});
    VolumeManager m(dir_.Sub("root2"), clock_);
    m.SetDesired(d2);
    m.Reconcile();
    EXPECT_FALSE(m.Get("u2").ready) << type;
  }
  // Backoff: fixing the cause is not noticed before the retry time (500 ms), then it is.
  fs::remove(file);
  fs::create_directories(file);
  manager_.Reconcile();
  EXPECT_FALSE(manager_.Get("u1").ready);
  clock_.Advance(std::chrono::milliseconds(600));
  manager_.Reconcile();
  EXPECT_TRUE(manager_.Get("u1").ready);
}

TEST_F(VolumeManagerTest, ConfigMapContentUpdatesAndMissingObject) {
  DesiredState d;
  d.pods["u1"] = MakePod("u1", {ConfigMap("cfg", "settings")});
  manager_.SetDesired(d);
  manager_.Reconcile();
  EXPECT_THAT(manager_.Get("u1").reason, HasSubstr("configmap \"settings\" not found"));
  d.config_maps["default/settings"] = ConfigObject{"default", "settings", {{"k", "v1"}}};
  manager_.SetDesired(d);
  clock_.Advance(std::chrono::seconds(1));
  EXPECT_TRUE(manager_.Reconcile().count("u1"));
  const std::string path = root() + "/pods/u1/volumes/kubernetes.io~configmap/cfg/k";
  EXPECT_EQ(Read(path), "v1");
  d.config_maps["default/settings"].data["k"] = "v2";
  manager_.SetDesired(d);
  EXPECT_TRUE(manager_.Reconcile().count("u1")) << "a content change is reported";
  EXPECT_EQ(Read(path), "v2");
}

TEST_F(VolumeManagerTest, RemovedPodIsTornDown) {
  DesiredState d;
  d.pods["u1"] = MakePod("u1", {EmptyDir("scratch")});
  d.sources_ready = true;
  d.in_use_known = true;  // podworkerd runs nothing that is not desired
  manager_.SetDesired(d);
  manager_.Reconcile();
  ASSERT_TRUE(fs::exists(root() + "/pods/u1"));
  // A leftover directory of a previous run, for a pod nobody wants.
  fs::create_directories(root() + "/pods/stale/volumes");
  d.pods.clear();
  manager_.SetDesired(d);
  manager_.Reconcile();
  EXPECT_FALSE(fs::exists(root() + "/pods/u1"));
  EXPECT_FALSE(fs::exists(root() + "/pods/stale"));
}

// What a container leaves in an emptyDir: a chain of `depth` directories and `files` files
// beside it, made on fds (the chain is far too deep for a path).
void FillVolume(const std::string& vol, int depth, int files) {
  int fd = open(vol.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << vol;
  for (int i = 0; i < files; ++i) {
    int f = openat(fd, ("f" + std::to_string(i)).c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    ASSERT_GE(f, 0);
    close(f);
  }
  for (int i = 0; i < depth; ++i) {
    ASSERT_EQ(mkdirat(fd, "d", 0755), 0) << i;
    int next = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    close(fd);
    ASSERT_GE(next, 0);
    fd = next;
  }
  close(fd);
}

TEST_F(VolumeManagerTest, APodDirectoryOfAnyDepthAndSizeGoesInBoundedPasses) {
  DesiredState d;
  d.pods["u1"] = MakePod("u1", {EmptyDir("scratch")});
  d.sources_ready = true;
  d.in_use_known = true;
  manager_.SetDesired(d);
  manager_.Reconcile();
  const std::string pod_dir = root() + "/pods/u1";
  struct Cleanup {
    std::string path;
    ~Cleanup() { (void)TreeRemover(path).RemoveAll(); }
  } cleanup{pod_dir};
  FillVolume(pod_dir + "/volumes/kubernetes.io~empty-dir/scratch", 3000,
             static_cast<int>(VolumeManager::kRemovalOpsPerPass));
  // u1 goes and u2 comes in the same change: u2 is set up in the first pass, while u1's
  // directory is still being removed.
  d.pods.clear();
  d.pods["u2"] = MakePod("u2", {EmptyDir("scratch")});
  manager_.SetDesired(d);
  manager_.Reconcile();
  EXPECT_TRUE(manager_.Get("u2").ready) << manager_.Get("u2").reason;
  EXPECT_TRUE(fs::exists(pod_dir)) << "one pass removes no more than its budget";
  EXPECT_EQ(manager_.NextReconcile(), MonoTime{}) << "the removal goes on at the next pass";
  int passes = 1;
  while (fs::exists(pod_dir) && passes < 50) {
    manager_.Reconcile();
    ++passes;
  }
  EXPECT_FALSE(fs::exists(pod_dir)) << "after " << passes << " passes";
  EXPECT_GE(passes, 2);
  EXPECT_EQ(manager_.failures(), 0u);
  EXPECT_NE(manager_.NextReconcile(), MonoTime{});
  EXPECT_TRUE(fs::exists(root() + "/pods/u2/volumes/kubernetes.io~empty-dir/scratch"));
}

TEST_F(VolumeManagerTest, MemoryEmptyDirIsATmpfsAndUnmountedOnRemoval) {
  if (geteuid() != 0) GTEST_SKIP() << "mounting a tmpfs needs root";
  pod::Volume v = EmptyDir("mem");
  v.empty_dir->medium = "Memory";
  DesiredState d;
  d.pods["u1"] = MakePod("u1", {v});
  d.sources_ready = true;
  d.in_use_known = true;
  manager_.SetDesired(d);
  manager_.Reconcile();
  const std::string path = root() + "/pods/u1/volumes/kubernetes.io~empty-dir/mem";
  ASSERT_TRUE(IsMountPoint(path)) << manager_.Get("u1").reason;
  // A second manager (volumed restarted) does not mount twice.
  VolumeManager again(root(), clock_);
  again.SetDesired(d);
  again.Reconcile();
  EXPECT_EQ(MountsUnder(path).size(), 1u);
  d.pods.clear();
  again.SetDesired(d);
  manager_.SetDesired(d);
  manager_.Reconcile();
  EXPECT_TRUE(MountsUnder(root()).empty());
}

}  // namespace
}  // namespace nodelet::volumed
