// lib/stats: cgroup counters on stand-in v1 (separate and joined cpu,cpuacct) and v2 trees, the
// pod cgroup lookup, the node's memory and CPU, statvfs, and directory walks that never follow
// a symlink, never cross into another filesystem, count hard links once and stop at their
// limits.
#include "lib/stats/usage.h"

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/testing/harness.h"

namespace nodelet::stats {
namespace {

namespace fs = std::filesystem;

int64_t Blocks(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
  return static_cast<int64_t>(st.st_blocks) * 512;
}

constexpr int64_t kMiB = 1 << 20;

std::string V1MemoryStat(int64_t inactive_file, int64_t rss, int64_t pgfault, int64_t pgmajfault) {
  // The cgroup's own lines come first and differ from the hierarchical totals, which are what
  // counts.
  return "cache 1\nrss 2\ninactive_file 3\npgfault 4\npgmajfault 5\n"
         "total_cache 99\ntotal_rss " +
         std::to_string(rss) + "\ntotal_pgfault " + std::to_string(pgfault) +
         "\ntotal_pgmajfault " + std::to_string(pgmajfault) +
         "\ntotal_inactive_anon 7\ntotal_inactive_file " + std::to_string(inactive_file) + "\n";
}

class UsageTest : public ::testing::Test {
 protected:
  std::string root() const { return dir_.Sub("cgroup"); }
  std::string proc() const { return dir_.Sub("proc"); }
  testing::TempDir dir_;
};

TEST_F(UsageTest, V1CountersFromTheCpuacctAndMemoryHierarchies) {
  const std::string cg = "/kubepods/burstable/podu1";
  testing::WriteTextFile(root() + "/cpuacct" + cg + "/cpuacct.usage", "123456789\n");
  testing::WriteTextFile(root() + "/memory" + cg + "/memory.usage_in_bytes",
                         std::to_string(100 * kMiB) + "\n");
  testing::WriteTextFile(root() + "/memory" + cg + "/memory.stat",
                         V1MemoryStat(30 * kMiB, 60 * kMiB, 500, 7));
  // Needed to find the cpuacct hierarchy: its root's counter.
  testing::WriteTextFile(root() + "/cpuacct/cpuacct.usage", "1\n");

  CgroupUsage u = ReadCgroupUsage(root(), cg);
  ASSERT_TRUE(u.cpu.has_value());
  EXPECT_EQ(u.cpu->usage_core_nanoseconds, 123456789u);
  ASSERT_TRUE(u.memory.has_value());
  EXPECT_EQ(u.memory->usage_bytes, 100 * kMiB);
  EXPECT_EQ(u.memory->working_set_bytes, 70 * kMiB);
  EXPECT_EQ(u.memory->rss_bytes, 60 * kMiB);
  EXPECT_EQ(u.memory->page_faults, 500);
  EXPECT_EQ(u.memory->major_page_faults, 7);
  EXPECT_FALSE(u.processes.has_value()) << "no pids hierarchy";
  testing::WriteTextFile(root() + "/pids" + cg + "/pids.current", "42\n");
  EXPECT_EQ(ReadCgroupUsage(root(), cg).processes, 42);
}

TEST_F(UsageTest, NodePidsAreTheSmallerLimitLessTheTasks) {
  EXPECT_FALSE(ReadNodePids(proc()).ok());
  testing::WriteTextFile(proc() + "/sys/kernel/pid_max", "32768\n");
  testing::WriteTextFile(proc() + "/sys/kernel/threads-max", "192730\n");
  testing::WriteTextFile(proc() + "/loadavg", "0.12 0.08 0.05 3/345 6789\n");
  auto p = ReadNodePids(proc());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->max, 32768);
  EXPECT_EQ(p->in_use, 345);
  testing::WriteTextFile(proc() + "/sys/kernel/threads-max", "1000\n");
  EXPECT_EQ(ReadNodePids(proc())->max, 1000);
  testing::WriteTextFile(proc() + "/loadavg", "0.12 0.08 0.05\n");
  EXPECT_FALSE(ReadNodePids(proc()).ok());
}

TEST_F(UsageTest, V1JoinedCpuCpuacctThroughItsSymlinks) {
  const std::string cg = "/kubepods/podu2";
  testing::WriteTextFile(root() + "/cpu,cpuacct/cpuacct.usage", "1\n");
  testing::WriteTextFile(root() + "/cpu,cpuacct" + cg + "/cpuacct.usage", "42\n");
  fs::create_directory_symlink("cpu,cpuacct", root() + "/cpu");
  fs::create_directory_symlink("cpu,cpuacct", root() + "/cpuacct");
  CgroupUsage u = ReadCgroupUsage(root(), cg);
  ASSERT_TRUE(u.cpu.has_value());
  EXPECT_EQ(u.cpu->usage_core_nanoseconds, 42u);
  EXPECT_FALSE(u.memory.has_value()) << "no memory hierarchy in this tree";

  fs::remove(root() + "/cpuacct");  // joined, without the cpuacct alias
  u = ReadCgroupUsage(root(), cg);
  ASSERT_TRUE(u.cpu.has_value());
  EXPECT_EQ(u.cpu->usage_core_nanoseconds, 42u);
}

TEST_F(UsageTest, WorkingSetIsUsageLessInactiveFileAndNeverNegative) {
  const std::string cg = "/c";
  testing::WriteTextFile(root() + "/memory" + cg + "/memory.usage_in_bytes", "1000\n");
  testing::WriteTextFile(root() + "/memory" + cg + "/memory.stat", V1MemoryStat(5000, 0, 0, 0));
  auto u = ReadCgroupUsage(root(), cg);
  ASSERT_TRUE(u.memory.has_value());
  EXPECT_EQ(u.memory->usage_bytes, 1000);
  EXPECT_EQ(u.memory->working_set_bytes, 0);
}

TEST_F(UsageTest, V2CountersFromTheUnifiedFiles) {
  const std::string cg = "/kubepods/besteffort/podu3";
  testing::WriteTextFile(root() + "/cgroup.controllers", "cpu io memory pids\n");
  testing::WriteTextFile(root() + cg + "/cpu.stat",
                         "usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n");
  testing::WriteTextFile(root() + cg + "/memory.current", std::to_string(50 * kMiB) + "\n");
  testing::WriteTextFile(root() + cg + "/memory.stat",
                         "anon " + std::to_string(20 * kMiB) + "\nfile 100\ninactive_file " +
                             std::to_string(10 * kMiB) + "\npgfault 31\npgmajfault 2\n");
  EXPECT_TRUE(IsCgroupV2(root()));
  CgroupUsage u = ReadCgroupUsage(root(), cg);
  ASSERT_TRUE(u.cpu.has_value());
  EXPECT_EQ(u.cpu->usage_core_nanoseconds, 2500000u);
  ASSERT_TRUE(u.memory.has_value());
  EXPECT_EQ(u.memory->usage_bytes, 50 * kMiB);
  EXPECT_EQ(u.memory->working_set_bytes, 40 * kMiB);
  EXPECT_EQ(u.memory->rss_bytes, 20 * kMiB);
  EXPECT_EQ(u.memory->page_faults, 31);
  EXPECT_EQ(u.memory->major_page_faults, 2);
}

TEST_F(UsageTest, MissingOrGarbledFilesLeaveTheFigureOut) {
  const std::string cg = "/kubepods/podu4";
  fs::create_directories(root() + "/memory" + cg);
  fs::create_directories(root() + "/cpuacct" + cg);
  testing::WriteTextFile(root() + "/cpuacct/cpuacct.usage", "1\n");
  CgroupUsage u = ReadCgroupUsage(root(), cg);
  EXPECT_FALSE(u.cpu.has_value());
  EXPECT_FALSE(u.memory.has_value());

  testing::WriteTextFile(root() + "/cpuacct" + cg + "/cpuacct.usage", "twelve\n");
  testing::WriteTextFile(root() + "/memory" + cg + "/memory.usage_in_bytes",
                         "4096\n");  // no memory.stat
  u = ReadCgroupUsage(root(), cg);
  EXPECT_FALSE(u.cpu.has_value());
  ASSERT_TRUE(u.memory.has_value());
  EXPECT_EQ(u.memory->usage_bytes, 4096);
  EXPECT_EQ(u.memory->working_set_bytes, 4096) << "without memory.stat, all of it";

  EXPECT_FALSE(ReadCgroupUsage(dir_.Sub("nothing"), cg).memory.has_value());
}

TEST_F(UsageTest, CgroupPathsThatCouldLeaveTheHierarchyAreRefused) {
  // A counter outside the tree that a path with ".." would reach.
  testing::WriteTextFile(dir_.Sub("memory.usage_in_bytes"), "777\n");
  testing::WriteTextFile(root() + "/memory/x/memory.usage_in_bytes", "1\n");
  for (const std::string bad : {"/../..", "/x/../..", "x", "", "/x/", "//x", "/x//y", "/a b"}) {
    EXPECT_FALSE(ReadCgroupUsage(root(), bad).memory.has_value()) << bad;
  }
  EXPECT_TRUE(ReadCgroupUsage(root(), "/x").memory.has_value());
}

TEST_F(UsageTest, FindPodCgroupLooksInEachQosClass) {
  const std::string croot = "/nodelet-test/t1";
  fs::create_directories(root() + "/memory" + croot + "/kubepods/burstable/podaaa");
  fs::create_directories(root() + "/memory" + croot + "/kubepods/podbbb");
  fs::create_directories(root() + "/cpu" + croot + "/kubepods/besteffort/podccc");
  EXPECT_EQ(FindPodCgroup(root(), croot, "aaa"), croot + "/kubepods/burstable/podaaa");
  EXPECT_EQ(FindPodCgroup(root(), croot, "bbb"), croot + "/kubepods/podbbb");
  EXPECT_EQ(FindPodCgroup(root(), croot, "ccc"), croot + "/kubepods/besteffort/podccc");
  EXPECT_EQ(FindPodCgroup(root(), croot, "ddd"), std::nullopt);
  EXPECT_EQ(FindPodCgroup(root(), "/", "aaa"), std::nullopt) << "another cgroup root";
  fs::create_directories(root() + "/memory/kubepods/podaaa");
  EXPECT_EQ(FindPodCgroup(root(), "/", "aaa"), "/kubepods/podaaa");
  // A uid or root that is not plain cgroup components.
  fs::create_directories(root() + "/memory" + croot + "/kubepods/pod..");
  EXPECT_EQ(FindPodCgroup(root(), croot, "/../podaaa"), std::nullopt);
  EXPECT_EQ(FindPodCgroup(root(), croot, "a/b"), std::nullopt);
  EXPECT_EQ(FindPodCgroup(root(), croot + "/..", "aaa"), std::nullopt);
}

TEST_F(UsageTest, FindPodCgroupKnowsTheSystemdDriversSlices) {
  const std::string burstable =
      "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podu_1.slice";
  fs::create_directories(root() + "/memory" + burstable);
  fs::create_directories(root() + "/cpu/kubepods.slice/kubepods-podu_2.slice");
  EXPECT_EQ(FindPodCgroup(root(), "/", "u-1", true), burstable);
  EXPECT_EQ(FindPodCgroup(root(), "/", "u-2", true), "/kubepods.slice/kubepods-podu_2.slice");
  EXPECT_EQ(FindPodCgroup(root(), "/", "u-1", false), std::nullopt) << "the cgroupfs names";
  // A root that is no slice path.
  EXPECT_EQ(FindPodCgroup(root(), "/a/b", "u-1", true), std::nullopt);
}

TEST_F(UsageTest, FindPodCgroupOnV2) {
  testing::WriteTextFile(root() + "/cgroup.controllers", "cpu memory\n");
  fs::create_directories(root() + "/kubepods/burstable/podeee");
  EXPECT_EQ(FindPodCgroup(root(), "/", "eee"), "/kubepods/burstable/podeee");
  EXPECT_EQ(FindPodCgroup(root(), "/", "fff"), std::nullopt);
}

TEST_F(UsageTest, NodeMemoryOnV1IsTheRootCgroupsWorkingSet) {
  testing::WriteTextFile(
      proc() + "/meminfo",
      "MemTotal:        1048576 kB\nMemFree:          524288 kB\nInactive(file):   1024 kB\n");
  testing::WriteTextFile(root() + "/memory/memory.usage_in_bytes",
                         std::to_string(600 * kMiB) + "\n");
  testing::WriteTextFile(root() + "/memory/memory.stat", V1MemoryStat(100 * kMiB, 0, 0, 0));
  auto m = ReadNodeMemory(root(), proc());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->capacity_bytes, 1024 * kMiB);
  EXPECT_EQ(m->usage_bytes, 600 * kMiB);
  EXPECT_EQ(m->working_set_bytes, 500 * kMiB);
  EXPECT_EQ(m->available_bytes, 524 * kMiB);
}

TEST_F(UsageTest, NodeMemoryOnV2ComesFromMeminfo) {
  testing::WriteTextFile(root() + "/cgroup.controllers", "memory\n");
  testing::WriteTextFile(
      proc() + "/meminfo",
      "MemTotal:        1048576 kB\nMemFree:          262144 kB\nMemAvailable: 900000 kB\n"
      "Inactive(file):   131072 kB\n");
  auto m = ReadNodeMemory(root(), proc());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->capacity_bytes, 1024 * kMiB);
  EXPECT_EQ(m->usage_bytes, 768 * kMiB);
  EXPECT_EQ(m->working_set_bytes, 640 * kMiB);
  EXPECT_EQ(m->available_bytes, 384 * kMiB);

  EXPECT_FALSE(ReadNodeMemory(root(), dir_.Sub("noproc")).ok());
  testing::WriteTextFile(proc() + "/meminfo", "MemFree: 1 kB\n");
  EXPECT_FALSE(ReadNodeMemory(root(), proc()).ok()) << "no MemTotal";
}

TEST_F(UsageTest, NodeCpuFromTheRootCpuacctOrProcStat) {
  testing::WriteTextFile(root() + "/cpuacct/cpuacct.usage", "987654321\n");
  auto v1 = ReadNodeCpu(root(), proc());
  ASSERT_TRUE(v1.ok()) << v1.status().ToString();
  EXPECT_EQ(v1->usage_core_nanoseconds, 987654321u);

  const std::string v2 = dir_.Sub("v2");
  testing::WriteTextFile(v2 + "/cgroup.controllers", "cpu\n");
  // user nice system idle iowait irq softirq steal guest guest_nice
  testing::WriteTextFile(proc() + "/stat",
                         "cpu  100 20 30 5000 70 4 6 0 10 0\ncpu0 1 2 3\nbtime 1700000000\n");
  auto cpu = ReadNodeCpu(v2, proc());
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  const uint64_t tick = 1000000000ULL / static_cast<uint64_t>(sysconf(_SC_CLK_TCK));
  EXPECT_EQ(cpu->usage_core_nanoseconds, (100 + 20 + 30 + 4 + 6 + 0) * tick)
      << "idle, iowait and guest (inside user) are not busy time";
  auto boot = ReadBootTime(proc());
  ASSERT_TRUE(boot.ok());
  EXPECT_EQ(*boot, 1700000000);
}

TEST_F(UsageTest, StatFilesystemReportsTheFilesystemOfThePath) {
  auto fs_stats = StatFilesystem(dir_.path());
  ASSERT_TRUE(fs_stats.ok()) << fs_stats.status().ToString();
  EXPECT_GT(fs_stats->capacity_bytes, 0);
  EXPECT_LE(fs_stats->available_bytes, fs_stats->capacity_bytes);
  EXPECT_LE(fs_stats->used_bytes, fs_stats->capacity_bytes);
  EXPECT_EQ(fs_stats->inodes_used, fs_stats->inodes - fs_stats->inodes_free);
  auto missing = StatFilesystem(dir_.Sub("missing"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find(dir_.Sub("missing")), std::string::npos);
}

class MeasureDirectoryTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (!mounted_.empty()) umount2(mounted_.c_str(), MNT_DETACH);
  }
  std::string vol() const { return dir_.Sub("vol"); }
  testing::TempDir dir_;
  std::string mounted_;
};

TEST_F(MeasureDirectoryTest, CountsBlocksAndInodesOfTheTree) {
  testing::WriteDataFile(vol() + "/a", 64 * 1024);
  testing::WriteDataFile(vol() + "/sub/b", 128 * 1024);
  testing::WriteDataFile(vol() + "/sub/deeper/c", 4096);
  int64_t expected = 0;
  for (const char* p : {"", "/a", "/sub", "/sub/b", "/sub/deeper", "/sub/deeper/c"}) {
    expected += Blocks(vol() + p);
  }
  DirUsage u = MeasureDirectory(vol());
  EXPECT_EQ(u.inodes_used, 6);
  EXPECT_EQ(u.used_bytes, expected);
  EXPECT_GE(u.used_bytes, (64 + 128 + 4) * 1024);
}

TEST_F(MeasureDirectoryTest, MissingPathIsZero) {
  DirUsage u = MeasureDirectory(dir_.Sub("nope"));
  EXPECT_EQ(u.used_bytes, 0);
  EXPECT_EQ(u.inodes_used, 0);
}

TEST_F(MeasureDirectoryTest, SymlinksAreCountedAsLinksNeverFollowed) {
  // A big tree outside the volume that a pod's symlinks point at.
  testing::WriteDataFile(dir_.Sub("outside/big"), 1024 * 1024);
  testing::WriteDataFile(vol() + "/small", 4096);
  fs::create_directory_symlink(dir_.Sub("outside"), vol() + "/to-dir");
  fs::create_symlink(dir_.Sub("outside/big"), vol() + "/to-file");
  DirUsage u = MeasureDirectory(vol());
  EXPECT_EQ(u.inodes_used, 4) << "the directory, small and the two links";
  EXPECT_EQ(u.used_bytes, Blocks(vol()) + Blocks(vol() + "/small") + Blocks(vol() + "/to-dir") +
                              Blocks(vol() + "/to-file"));
  EXPECT_LT(u.used_bytes, 1024 * 1024);

  // The path itself a symlink (a pod swapped its volume for one): only the link.
  fs::create_directory_symlink(dir_.Sub("outside"), dir_.Sub("swapped"));
  DirUsage link = MeasureDirectory(dir_.Sub("swapped"));
  EXPECT_EQ(link.inodes_used, 1);
  EXPECT_LT(link.used_bytes, 1024 * 1024);
}

TEST_F(MeasureDirectoryTest, HardLinksAreCountedOnce) {
  testing::WriteDataFile(vol() + "/x/data", 256 * 1024);
  fs::create_directories(vol() + "/y");
  ASSERT_EQ(link((vol() + "/x/data").c_str(), (vol() + "/y/one").c_str()), 0);
  ASSERT_EQ(link((vol() + "/x/data").c_str(), (vol() + "/two").c_str()), 0);
  DirUsage u = MeasureDirectory(vol());
  EXPECT_EQ(u.inodes_used, 4) << "vol, x, y and the one file";
  EXPECT_EQ(u.used_bytes,
            Blocks(vol()) + Blocks(vol() + "/x") + Blocks(vol() + "/y") + Blocks(vol() + "/two"));
  EXPECT_LT(u.used_bytes, 2 * 256 * 1024);
}

TEST_F(MeasureDirectoryTest, AnotherFilesystemMountedInsideIsNotEntered) {
  fs::create_directories(vol() + "/mnt");
  testing::WriteDataFile(vol() + "/kept", 4096);
  if (mount("tmpfs", (vol() + "/mnt").c_str(), "tmpfs", 0, "size=8m") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  }
  mounted_ = vol() + "/mnt";
  testing::WriteDataFile(vol() + "/mnt/hidden", 2 * 1024 * 1024);
  DirUsage u = MeasureDirectory(vol());
  EXPECT_EQ(u.inodes_used, 2) << "vol and kept: neither the mountpoint nor what is in it";
  EXPECT_EQ(u.used_bytes, Blocks(vol()) + Blocks(vol() + "/kept"));
  // Measured from inside, the tmpfs is measured.
  EXPECT_GE(MeasureDirectory(vol() + "/mnt").used_bytes, 2 * 1024 * 1024);
}

TEST_F(MeasureDirectoryTest, LimitsStopTheWalkAndSaySo) {
  for (int i = 0; i < 20; ++i) testing::WriteDataFile(vol() + "/f" + std::to_string(i), 10);
  DirWalkLimits limits;
  limits.max_entries = 5;
  DirMeasurement m = MeasureDirectoryBounded(vol(), limits);
  EXPECT_FALSE(m.complete);
  EXPECT_EQ(m.entries, 5);
  EXPECT_EQ(m.usage.inodes_used, 6);
  DirMeasurement all = MeasureDirectoryBounded(vol(), DirWalkLimits{});
  EXPECT_TRUE(all.complete);
  EXPECT_EQ(all.entries, 20);
  EXPECT_EQ(all.usage.inodes_used, 21);

  const std::string deep = dir_.Sub("deep");
  testing::WriteDataFile(deep + "/1/2/3/4/f", 10);
  limits = DirWalkLimits{};
  limits.max_depth = 2;
  m = MeasureDirectoryBounded(deep, limits);
  EXPECT_FALSE(m.complete);
  EXPECT_EQ(m.usage.inodes_used, 4) << "deep, 1, 2 and 3 (seen, not entered)";
}

TEST_F(MeasureDirectoryTest, ByChildSplitsTheTotal) {
  testing::WriteDataFile(vol() + "/app/0.log", 64 * 1024);
  testing::WriteDataFile(vol() + "/side/0.log", 8 * 1024);
  testing::WriteDataFile(vol() + "/side/1.log", 8 * 1024);
  std::map<std::string, DirUsage> by_child;
  DirMeasurement m = MeasureDirectoryBounded(vol(), DirWalkLimits{}, &by_child);
  ASSERT_EQ(by_child.size(), 2u);
  EXPECT_EQ(by_child["app"].inodes_used, 2);
  EXPECT_EQ(by_child["app"].used_bytes, Blocks(vol() + "/app") + Blocks(vol() + "/app/0.log"));
  EXPECT_EQ(by_child["side"].inodes_used, 3);
  EXPECT_EQ(m.usage.inodes_used, 1 + 2 + 3);
  EXPECT_EQ(m.usage.used_bytes,
            Blocks(vol()) + by_child["app"].used_bytes + by_child["side"].used_bytes);
}

}  // namespace
}  // namespace nodelet::stats
