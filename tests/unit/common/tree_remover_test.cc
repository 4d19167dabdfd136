// TreeRemover: trees of any depth and file count removed on fds, in bounded steps, never
// through a link, with a bounded number of fds open.
#include "lib/common/tree_remover.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/testing/harness.h"

namespace nodelet {
namespace {

namespace fs = std::filesystem;

bool Exists(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0;
}

void Touch(int dir, const std::string& name) {
  int fd = openat(dir, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << name << ": " << std::strerror(errno);
  close(fd);
}

size_t OpenFds() {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator("/proc/self/fd")) {
    (void)e;
    ++n;
  }
  return n;
}

// Whatever a failed test leaves (a tree too deep for TempDir's own clean-up) goes first.
struct RemoveOnExit {
  std::string path;
  ~RemoveOnExit() { (void)TreeRemover(path).RemoveAll(); }
};

// A chain `depth` directories deep under `top` (made), each holding a file, built on fds so no
// path grows with it. Each directory is named `name`.
void MakeChain(const std::string& top, int depth, const std::string& name = "d") {
  ASSERT_EQ(mkdir(top.c_str(), 0755), 0);
  int fd = open(top.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  for (int i = 0; i < depth; ++i) {
    Touch(fd, "f");
    ASSERT_EQ(mkdirat(fd, name.c_str(), 0755), 0) << i;
    int next = openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    close(fd);
    ASSERT_GE(next, 0) << i;
    fd = next;
  }
  close(fd);
}

TEST(TreeRemoverTest, RemovesATreeAThousandDeepPastPathMaxWithBoundedFds) {
  testing::TempDir dir;
  const std::string top = dir.Sub("deep");
  RemoveOnExit guard{top};
  // Names of 200 bytes: a chain of 1,000 is a path of 200 KB, far past PATH_MAX, which a
  // remover that built paths could not open.
  MakeChain(top, 1000, std::string(200, 'd'));
  const size_t fds_before = OpenFds();
  TreeRemover remover(top);
  size_t steps = 0, most_fds = 0;
  for (;;) {
    auto done = remover.Step(100);
    ASSERT_TRUE(done.ok()) << done.status().message();
    most_fds = std::max(most_fds, OpenFds());
    ++steps;
    if (*done) break;
    ASSERT_LT(steps, 1000u);
  }
  EXPECT_FALSE(Exists(top));
  EXPECT_EQ(remover.removed(), 2001u);  // 1,000 directories, 1,000 files, the top
  // The parent and the deepest levels' streams, never one per level.
  EXPECT_LE(most_fds, fds_before + TreeRemover::kOpenLevels + 2);
}

TEST(TreeRemoverTest, RemovesTwentyThousandFilesInBoundedSteps) {
  testing::TempDir dir;
  const std::string top = dir.Sub("wide");
  ASSERT_EQ(mkdir(top.c_str(), 0755), 0);
  ASSERT_EQ(mkdir((top + "/sub").c_str(), 0755), 0);
  int fd = open(top.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int sub = open((top + "/sub").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_GE(sub, 0);
  for (int i = 0; i < 20000; ++i) Touch(i % 2 ? fd : sub, "file-" + std::to_string(i));
  close(fd);
  close(sub);
  TreeRemover remover(top);
  constexpr size_t kBudget = 1024;
  auto first = remover.Step(kBudget);
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_FALSE(*first);  // not finished: a step does no more than its budget
  EXPECT_LE(remover.operations(), kBudget);
  EXPECT_TRUE(Exists(top));
  size_t steps = 1;
  for (bool done = false; !done; ++steps) {
    ASSERT_LT(steps, 200u);
    auto s = remover.Step(kBudget);
    ASSERT_TRUE(s.ok()) << s.status().message();
    done = *s;
  }
  EXPECT_GE(steps, 20000 / kBudget);
  EXPECT_FALSE(Exists(top));
  EXPECT_EQ(remover.removed(), 20002u);
}

TEST(TreeRemoverTest, NeverFollowsALink) {
  testing::TempDir dir;
  const std::string outside = dir.Sub("outside");
  ASSERT_EQ(mkdir(outside.c_str(), 0755), 0);
  std::ofstream(outside + "/keep") << "mine";
  ASSERT_EQ(mkdir((outside + "/keepdir").c_str(), 0755), 0);
  std::ofstream(outside + "/keepdir/keep") << "mine";
  const std::string top = dir.Sub("tree");
  MakeChain(top, 40);  // deeper than the streams kept open
  // Links to outside at the top and at the bottom of the tree, to a directory and to a file.
  std::string bottom = top;
  for (int i = 0; i < 40; ++i) bottom += "/d";
  for (const std::string& at : {top, bottom}) {
    ASSERT_EQ(symlink(outside.c_str(), (at + "/to-dir").c_str()), 0);
    ASSERT_EQ(symlink((outside + "/keep").c_str(), (at + "/to-file").c_str()), 0);
    ASSERT_EQ(symlink("../../../../outside/keepdir", (at + "/relative").c_str()), 0);
  }
  ASSERT_TRUE(TreeRemover(top).RemoveAll().ok());
  EXPECT_FALSE(Exists(top));
  EXPECT_TRUE(Exists(outside + "/keep"));
  EXPECT_TRUE(Exists(outside + "/keepdir/keep"));
  // The tree itself a link. By path: refused, nothing behind it touched. By (directory, name):
  // the link goes, not what it points at.
  ASSERT_EQ(symlink(outside.c_str(), top.c_str()), 0);
  Status refused = TreeRemover(top).RemoveAll();
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("not a directory"), std::string::npos) << refused.message();
  EXPECT_TRUE(Exists(top));
  int parent = open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(parent, 0);
  EXPECT_TRUE(TreeRemover(parent, "tree", "tree").RemoveAll().ok());
  close(parent);
  EXPECT_FALSE(Exists(top));
  EXPECT_TRUE(Exists(outside + "/keep"));
  EXPECT_TRUE(Exists(outside + "/keepdir/keep"));
}

TEST(TreeRemoverTest, AStepAtATimeThenFinishedAndMissingIsDone) {
  testing::TempDir dir;
  const std::string top = dir.Sub("small");
  MakeChain(top, 3);  // 3 directories, 3 files and the top: 7 removals
  TreeRemover remover(top);
  size_t steps = 0;
  for (;;) {
    auto done = remover.Step(1);
    ASSERT_TRUE(done.ok()) << done.status().message();
    ++steps;
    if (*done) break;
    ASSERT_LT(steps, 100u);
  }
  EXPECT_GT(steps, 7u);
  EXPECT_FALSE(Exists(top));
  EXPECT_EQ(remover.removed(), 7u);
  auto again = remover.Step(1);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(*again);
  auto missing = TreeRemover(dir.Sub("never-there")).Step(1);
  ASSERT_TRUE(missing.ok());
  EXPECT_TRUE(*missing);
  auto bad = TreeRemover(dir.path() + "/..").Step(1);
  EXPECT_FALSE(bad.ok());
}

TEST(TreeRemoverTest, ATreeMovedAboutMidwayIsStillRemovedAndNothingElse) {
  testing::TempDir dir;
  const std::string top = dir.Sub("moving");
  RemoveOnExit guard{top};
  MakeChain(top, 60);
  const std::string other = dir.Sub("other");
  ASSERT_EQ(mkdir(other.c_str(), 0755), 0);
  std::ofstream(other + "/keep") << "mine";
  TreeRemover remover(top);
  // Down to the bottom (its streams above kOpenLevels closed), then the middle of the chain
  // moves to the top: the ".." the remover climbs to is no longer the one it came down.
  auto first = remover.Step(100);
  ASSERT_TRUE(first.ok());
  ASSERT_FALSE(*first);
  std::string mid = top;
  for (int i = 0; i < 10; ++i) mid += "/d";
  ASSERT_EQ(rename(mid.c_str(), (top + "/moved").c_str()), 0);
  ASSERT_TRUE(remover.RemoveAll().ok());
  EXPECT_FALSE(Exists(top));
  EXPECT_TRUE(Exists(other + "/keep"));
}

}  // namespace
}  // namespace nodelet
