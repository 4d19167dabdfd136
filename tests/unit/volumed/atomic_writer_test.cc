// The configMap/secret/downwardAPI writer (svc-volumed/atomic_writer.h) on a real filesystem:
// its layout, and what a container could leave in its volume directory before the next update
// (the CVE-2017-1002102 class): `..data`, an old payload directory, a user-visible name or the
// temporary link pointed at a directory outside, a payload directory swapped for a link. Each
// time the directory outside, with a sentinel file in it, must stay as it was.
#include "svc-volumed/atomic_writer.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "lib/common/tree_remover.h"
#include "tests/testing/harness.h"

namespace nodelet::volumed {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::TempDir;

std::string Read(const std::string& path) { return testing::ReadTextFile(path); }

class AtomicWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(vol_);
    fs::create_directories(outside_ + "/sub");
    std::ofstream(outside_ + "/sentinel") << "keep";
    std::ofstream(outside_ + "/sub/sentinel") << "keep";
  }
  // The directory outside the volume is exactly as SetUp left it.
  void ExpectOutsideIntact() {
    EXPECT_EQ(Read(outside_ + "/sentinel"), "keep");
    EXPECT_EQ(Read(outside_ + "/sub/sentinel"), "keep");
    size_t n = 0;
    for (const auto& e : fs::recursive_directory_iterator(outside_)) {
      (void)e;
      ++n;
    }
    EXPECT_EQ(n, 3u) << "something was added to or removed from the directory outside";
  }
  std::string DataTarget() { return fs::read_symlink(vol_ + "/..data").string(); }

  TempDir dir_;
  const std::string vol_ = dir_.Sub("vol");
  const std::string outside_ = dir_.Sub("outside");
};

TEST_F(AtomicWriterTest, LayoutModesAndUpdate) {
  ASSERT_TRUE(AtomicWriteFiles(RealClock::Get(), vol_,
                               {{"a", {"1", 0644}}, {"b", {"2", 0600}}, {"d/e/f", {"3", 0400}}})
                  .ok());
  EXPECT_TRUE(IsPayloadDirName(DataTarget())) << DataTarget();
  EXPECT_EQ(fs::read_symlink(vol_ + "/a"), "..data/a");
  EXPECT_EQ(fs::read_symlink(vol_ + "/d"), "..data/d");
  EXPECT_EQ(Read(vol_ + "/a"), "1");
  EXPECT_EQ(Read(vol_ + "/d/e/f"), "3");
  struct stat st {};
  ASSERT_EQ(stat((vol_ + "/b").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_EQ(stat((vol_ + "/d/e/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0400u);
  ASSERT_EQ(stat((vol_ + "/d/e").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);

  const std::string first = DataTarget();
  ASSERT_TRUE(AtomicWriteFiles(RealClock::Get(), vol_, {{"a", {"new", 0644}}}).ok());
  EXPECT_EQ(Read(vol_ + "/a"), "new");
  EXPECT_NE(DataTarget(), first);
  EXPECT_FALSE(fs::exists(vol_ + "/" + first)) << "the previous payload directory is removed";
  EXPECT_FALSE(fs::exists(fs::symlink_status(vol_ + "/b"))) << "a key that went away disappears";
  EXPECT_FALSE(fs::exists(fs::symlink_status(vol_ + "/d")));
  // Exactly ..data, one payload directory and the one name.
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(vol_)) {
    (void)e;
    ++n;
  }
  EXPECT_EQ(n, 3u);
}

// With an fsGroup, everything written is in that group and readable by it, the directories
// set-group-ID; modes keep their other bits.
TEST_F(AtomicWriterTest, FsGroupOwnsThePayload) {
  if (geteuid() != 0) GTEST_SKIP() << "chown to another group needs root";
  constexpr int kGroup = 4242;
  ASSERT_TRUE(AtomicWriteFiles(RealClock::Get(), vol_,
                               {{"a", {"1", 0644}}, {"b", {"2", 0400}}, {"d/e", {"3", 0600}}},
                               kGroup)
                  .ok());
  struct Want {
    std::string path;
    unsigned mode;
  };
  for (const Want& w :
       {Want{vol_, 02755}, Want{vol_ + "/..data/", 02755}, Want{vol_ + "/a", 0644},
        Want{vol_ + "/b", 0440}, Want{vol_ + "/d", 02755}, Want{vol_ + "/d/e", 0640}}) {
    struct stat st {};
    ASSERT_EQ(stat(w.path.c_str(), &st), 0) << w.path;
    EXPECT_EQ(st.st_gid, static_cast<gid_t>(kGroup)) << w.path;
    EXPECT_EQ(st.st_mode & 07777, w.mode) << w.path;
    EXPECT_EQ(st.st_uid, 0u) << w.path;
  }
  // Without one, nothing is chowned and the modes are as given.
  ASSERT_TRUE(AtomicWriteFiles(RealClock::Get(), dir_.Sub("plain"), {{"b", {"2", 0400}}}).ok());
  struct stat st {};
  ASSERT_EQ(stat(dir_.Sub("plain/b").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0400u);
  EXPECT_EQ(st.st_gid, getegid());
}

TEST_F(AtomicWriterTest, RefusesUnsafePayloadPaths) {
  for (const char* bad :
       {"../escape", "/abs", "a/../b", "..hidden", "a/..b", "a//b", "./a", "", "a/"}) {
    EXPECT_FALSE(AtomicWriteFiles(RealClock::Get(), vol_, {{bad, {"x", 0644}}}).ok()) << bad;
  }
  EXPECT_FALSE(fs::exists(dir_.Sub("escape")));
  EXPECT_TRUE(IsSafePayloadPath("a.b/c..d/e"));
}

TEST_F(AtomicWriterTest, DataLinkPointedOutsideIsNeverFollowed) {
  ASSERT_TRUE(AtomicWriteFiles(RealClock::Get(), vol_, {{"k", {"1", 0644}}}).ok());
  // What the container did with a read-write mount: ln -sfn ../../outside ..data
  fs::remove(vol_ + "/..data");
  fs::create_symlink("../outside", vol_ + "/..data");
  ASSERT_TRUE(AtomicWriteFiles(RealClock::Get(), vol_, {{"k", {"2", 0644}}}).ok());
  EXPECT_EQ(Read(vol_ + "/k"), "2");
  EXPECT_TRUE(IsPayloadDirName(DataTarget()));
  ExpectOutsideIntact();
  // An absolute link, and a payload-looking name: the same.
  fs::remove(vol_ + "/..data");
  fs::create_symlink(outside_, vol_ + "/..data");
  ASSERT_TRUE(AtomicWriteFiles(RealClock::Get(), vol_, {{"k", {"3", 0644}}}).ok());
  EXPECT_EQ(Read(vol_ + "/k"), "3");
  ExpectOutsideIntact();
}

TEST_F(AtomicWriterTest, PayloadDirectorySwappedForALinkIsNotFollowed) {
  ASSERT_TRUE(AtomicWriteFiles(RealClock::Get(), vol_, {{"k", {"1", 0644}}}).ok());
  const std::string old = DataTarget();
  fs::remove_all(vol_ + "/" + old);
  fs::create_symlink(outside_, vol_ + "/" + old);    // the current one
  fs::create_symlink(outside_, vol_ + "/..data_1");  // and one more by our pattern
  ASSERT_TRUE(AtomicWriteFiles(RealClock::Get(), vol_, {{"k", {"2", 0644}}}).ok());
  EXPECT_EQ(Read(vol_ + "/k"), "2");
  ExpectOutsideIntact();
  EXPECT_TRUE(fs::is_symlink(vol_ + "/..data_1")) << "what is not ours stays";
}

TEST_F(AtomicWriterTest, LinksInsideAnOldPayloadAreRemovedNotFollowed) {
  ASSERT_TRUE(AtomicWriteFiles(RealClock::Get(), vol_, {{"dir/k", {"1", 0644}}}).ok());
  const std::string old = vol_ + "/" + DataTarget();
  fs::remove_all(old + "/dir");
  fs::create_symlink(outside_, old + "/dir");
  fs::create_symlink(outside_ + "/sentinel", old + "/file-link");
  fs::create_symlink("/", old + "/root");
  ASSERT_TRUE(AtomicWriteFiles(RealClock::Get(), vol_, {{"dir/k", {"2", 0644}}}).ok());
  EXPECT_FALSE(fs::exists(fs::symlink_status(old)));
  EXPECT_EQ(Read(vol_ + "/dir/k"), "2");
  ExpectOutsideIntact();
}

TEST_F(AtomicWriterTest, UserVisibleNameAndTempLinkPointedOutside) {
  ASSERT_TRUE(AtomicWriteFiles(RealClock::Get(), vol_, {{"sentinel", {"1", 0644}}}).ok());
  fs::remove(vol_ + "/sentinel");
  fs::create_symlink(outside_ + "/sentinel", vol_ + "/sentinel");
  fs::create_symlink(outside_ + "/sub", vol_ + "/..data_tmp");
  fs::create_symlink(outside_ + "/sub", vol_ + "/gone");  // not ours: stays
  ASSERT_TRUE(AtomicWriteFiles(RealClock::Get(), vol_, {{"sentinel", {"2", 0644}}}).ok());
  EXPECT_EQ(fs::read_symlink(vol_ + "/sentinel"), "..data/sentinel");
  EXPECT_EQ(Read(vol_ + "/sentinel"), "2");
  EXPECT_TRUE(fs::is_symlink(vol_ + "/gone"));
  ExpectOutsideIntact();
}

TEST_F(AtomicWriterTest, WhatStandsInTheWayIsAnErrorNotRemoved) {
  std::ofstream(vol_ + "/k") << "planted";
  auto s = AtomicWriteFiles(RealClock::Get(), vol_, {{"k", {"1", 0644}}});
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("k is in the way"));
  EXPECT_EQ(Read(vol_ + "/k"), "planted");
  // A directory where ..data belongs: refused; the new payload does not stay behind.
  fs::remove(vol_ + "/k");
  fs::remove(vol_ + "/..data");
  fs::create_directories(vol_ + "/..data/x");
  auto payloads = [&] {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator(vol_)) {
      if (IsPayloadDirName(e.path().filename())) out.insert(e.path().filename());
    }
    return out;
  };
  const auto before = payloads();
  EXPECT_FALSE(AtomicWriteFiles(RealClock::Get(), vol_, {{"k", {"1", 0644}}}).ok());
  EXPECT_TRUE(fs::is_directory(vol_ + "/..data/x"));
  EXPECT_EQ(payloads(), before);
}

TEST_F(AtomicWriterTest, VolumeDirectoryThatIsALinkIsRefused) {
  fs::remove(vol_);
  fs::create_symlink(outside_, vol_);
  EXPECT_FALSE(AtomicWriteFiles(RealClock::Get(), vol_, {{"k", {"1", 0644}}}).ok());
  ExpectOutsideIntact();
}

// A container's tree under a pod directory, deeper than any path: removed whole, and a link
// at its bottom to the directory outside is removed, not followed.
TEST_F(AtomicWriterTest, RemoveTreeNoFollowRemovesATreeOfAnyDepth) {
  const std::string top = vol_ + "/deep";
  ASSERT_EQ(mkdir(top.c_str(), 0755), 0);
  int fd = open(top.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  for (int i = 0; i < 5000; ++i) {
    ASSERT_EQ(mkdirat(fd, "d", 0755), 0) << i;
    int next = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    close(fd);
    ASSERT_GE(next, 0);
    fd = next;
  }
  ASSERT_EQ(symlinkat(outside_.c_str(), fd, "escape"), 0);
  close(fd);
  Status s = RemoveTreeNoFollow(top);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_FALSE(fs::exists(top));
  ExpectOutsideIntact();
  if (!s.ok()) (void)TreeRemover(top).RemoveAll();  // what the failed check left
}

TEST_F(AtomicWriterTest, PayloadNames) {
  EXPECT_TRUE(IsPayloadDirName("..data_1"));
  EXPECT_TRUE(IsPayloadDirName("..data_1764000000000000000"));
  for (const char* bad : {"..data", "..data_", "..data_tmp", "..data_1/x", "..data_1a", "x..data_1",
                          "..data_123456789012345678901"}) {
    EXPECT_FALSE(IsPayloadDirName(bad)) << bad;
  }
}

// A pod directory whose emptyDir a container filled with links to a host directory (and a
// directory deep inside): the whole tree goes, the links as links; the host directory stays.
TEST_F(AtomicWriterTest, RemoveTreeNeverFollowsALink) {
  fs::create_directories(vol_ + "/a/b/c");
  std::ofstream(vol_ + "/a/b/c/f") << "x";
  fs::create_directory_symlink(outside_, vol_ + "/a/to-outside");
  fs::create_directory_symlink(outside_ + "/sub", vol_ + "/a/b/sub");
  fs::create_symlink(outside_ + "/sentinel", vol_ + "/file-link");
  ASSERT_TRUE(RemoveTreeNoFollow(vol_).ok());
  EXPECT_FALSE(fs::exists(fs::symlink_status(vol_)));
  ExpectOutsideIntact();
  EXPECT_TRUE(RemoveTreeNoFollow(vol_).ok()) << "a missing tree is removed already";
  // The tree itself a link: refused, and nothing behind it touched.
  fs::create_directory_symlink(outside_, vol_);
  EXPECT_FALSE(RemoveTreeNoFollow(vol_).ok());
  ExpectOutsideIntact();
  fs::remove(vol_);
}

}  // namespace
}  // namespace nodelet::volumed
