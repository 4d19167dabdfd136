// Orphaned containerd shims (svc-podworkerd/orphan_shims.h): finding shims in a /proc-like tree,
// the sweep's evidence rules with fakes for CRI and containerd, and EndShimTree on real processes
// (a tree of this test's own children standing in for a shim and what runs below it).
#include "svc-podworkerd/orphan_shims.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>

namespace nodelet::podworkerd {
namespace {

class FakeProc {
 public:
  FakeProc() {
    char tmpl[] = "/tmp/orphan-shims.XXXXXX";
    EXPECT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  ~FakeProc() { std::filesystem::remove_all(root_); }
  void Add(int pid, const std::vector<std::string>& argv, uint64_t start_time = 1234) {
    const std::string dir = root_ + "/" + std::to_string(pid);
    ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
    std::string raw;
    for (const auto& a : argv) raw += a + std::string(1, '\0');
    std::ofstream(dir + "/cmdline") << raw;
    // The kernel's comm: the executable's base name, at most 15 bytes.
    const std::string exe = argv.empty() ? "" : argv[0].substr(argv[0].rfind('/') + 1);
    std::ofstream(dir + "/comm") << exe.substr(0, 15) << "\n";
    // Fields 3..22 after "(comm)"; a comm with a space and a parenthesis, as comm may be.
    std::ofstream(dir + "/stat") << pid << " (a b) c) S 1 " << pid
                                 << " 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 " << start_time << " 0 0\n";
  }
  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

std::vector<std::string> Shim(const std::string& id, const std::string& address,
                              const std::string& ns = "k8s.io") {
  return {"/usr/bin/containerd-shim-runc-v2", "-namespace", ns, "-id", id, "-address", address};
}

// A shim is found by its comm and argv (containerd-shim*, -id, -address) with its namespace and
// start time; a shim of another containerd, and any other process, are not.
TEST(OrphanShimsTest, ShimsAreFoundByTheirContainerdSocket) {
  FakeProc proc;
  const std::string id(64, 'd');
  proc.Add(100, Shim(id, "/run/a/containerd.sock"), 777);
  proc.Add(101, Shim(id, "/run/b/containerd.sock"));
  proc.Add(102, Shim(std::string(64, 'e'), "/run/a/containerd.sock", "moby"));
  proc.Add(103, {"/bin/sh", "-id", id, "-address", "/run/a/containerd.sock"});
  // A process that rewrote its argv to look like a shim: its comm is still its own.
  proc.Add(104, Shim(id, "/run/a/containerd.sock"));
  std::ofstream(proc.root() + "/104/comm") << "sleep\n";
  ASSERT_EQ(mkdir((proc.root() + "/self").c_str(), 0755), 0);
  auto shims = ListShims("/run/a/containerd.sock", proc.root());
  ASSERT_EQ(shims.size(), 2u);
  std::map<int, ShimProcess> by_pid;
  for (const auto& s : shims) by_pid[s.pid] = s;
  EXPECT_EQ(by_pid[100].id, id);
  EXPECT_EQ(by_pid[100].ns, "k8s.io");
  EXPECT_EQ(by_pid[100].start_time, 777u);
  EXPECT_EQ(by_pid[102].ns, "moby");
  EXPECT_EQ(OrphanShimPids(id, "/run/a/containerd.sock", proc.root()), std::vector<int>{100});
  EXPECT_TRUE(OrphanShimPids("", "/run/a/containerd.sock", proc.root()).empty());
  EXPECT_TRUE(ListShims("", proc.root()).empty());
}

// The world a sweep sees, changed by the test between sweeps.
struct World {
  std::vector<ShimProcess> shims;
  std::set<std::string> cri;
  Status cri_error = Status::Ok();
  std::set<std::string> records;
  std::set<std::string> record_errors;
  std::vector<int> ended;
  std::set<int> refuse_end;

  OrphanSweepDeps Deps() {
    return {[this] { return shims; },
            [this]() -> Result<std::set<std::string>> {
              if (!cri_error.ok()) return cri_error;
              return cri;
            },
            [this](const std::string& id) -> Result<bool> {
              if (record_errors.count(id)) return Unavailable("containerd away");
              return records.count(id) > 0;
            },
            [this](const ShimProcess& s) {
              if (refuse_end.count(s.pid)) return Internal("cannot");
              ended.push_back(s.pid);
              return Status::Ok();
            }};
  }
};

ShimProcess Proc(int pid, const std::string& id, uint64_t start = 1,
                 const std::string& ns = "k8s.io") {
  return {pid, id, ns, start};
}

// Known to CRI, or with a containerd record (a RunPodSandbox in flight, or a listing that is
// partial after a restart), or of another namespace: never ended, however often seen.
TEST(OrphanShimsTest, KnownShimsAreNeverEnded) {
  World w;
  w.shims = {Proc(10, "listed"), Proc(11, "in-flight"), Proc(12, "other-ns", 1, "moby"),
             Proc(13, "record-error")};
  w.cri = {"listed"};
  w.records = {"in-flight"};
  w.record_errors = {"record-error"};
  OrphanShimSweeper sweeper("k8s.io", w.Deps());
  for (int i = 0; i < 3; ++i) {
    auto r = sweeper.Sweep(i == 2);
    EXPECT_TRUE(r.ended.empty());
    EXPECT_EQ(r.suspects, 0);
  }
  EXPECT_TRUE(w.ended.empty());
}

// An orphan is ended at its second sighting (same pid, id and start time), not the first.
TEST(OrphanShimsTest, AnOrphanIsEndedAtItsSecondSighting) {
  World w;
  w.shims = {Proc(20, "gone"), Proc(21, "listed")};
  w.cri = {"listed"};
  OrphanShimSweeper sweeper("k8s.io", w.Deps());
  auto first = sweeper.Sweep();
  EXPECT_TRUE(first.ended.empty());
  EXPECT_EQ(first.suspects, 1);
  auto second = sweeper.Sweep();
  ASSERT_EQ(second.ended.size(), 1u);
  EXPECT_EQ(second.ended[0].pid, 20);
  EXPECT_EQ(w.ended, std::vector<int>{20});
}

// A shim that exits between sweeps, or whose pid now belongs to another process (another start
// time), starts over; one that CRI lists by the second sweep (its RunPodSandbox finished) too.
TEST(OrphanShimsTest, AChangedProcessOrAListedIdStartsOver) {
  World w;
  w.shims = {Proc(30, "a", 1), Proc(31, "b", 1)};
  OrphanShimSweeper sweeper("k8s.io", w.Deps());
  EXPECT_EQ(sweeper.Sweep().suspects, 2);
  w.shims = {Proc(30, "a", 2), Proc(31, "b", 1)};  // pid 30 reused
  w.cri = {"b"};
  auto r = sweeper.Sweep();
  EXPECT_TRUE(r.ended.empty());
  EXPECT_EQ(r.suspects, 1);
  w.shims = {};
  EXPECT_EQ(sweeper.Sweep().suspects, 0);
  w.shims = {Proc(30, "a", 2)};
  EXPECT_TRUE(sweeper.Sweep().ended.empty());  // seen before, but the list was empty between
  EXPECT_TRUE(w.ended.empty());
}

// Without CRI's whole listing nothing is decided, and the suspects are kept for the next sweep.
TEST(OrphanShimsTest, NothingIsDecidedWithoutCri) {
  World w;
  w.shims = {Proc(40, "gone")};
  OrphanShimSweeper sweeper("k8s.io", w.Deps());
  EXPECT_EQ(sweeper.Sweep().suspects, 1);
  w.cri_error = Unavailable("containerd restarting");
  auto r = sweeper.Sweep();
  EXPECT_FALSE(r.error.ok());
  EXPECT_TRUE(r.ended.empty());
  w.cri_error = Status::Ok();
  EXPECT_EQ(sweeper.Sweep().ended.size(), 1u);
}

// The final sweep (podworkerd stopping) ends orphans at their first sighting; a shim that cannot
// be ended is reported and tried again.
TEST(OrphanShimsTest, TheFinalSweepEndsAtOnceAndFailuresAreRetried) {
  World w;
  w.shims = {Proc(50, "gone"), Proc(51, "stuck")};
  w.refuse_end = {51};
  OrphanShimSweeper sweeper("k8s.io", w.Deps());
  auto r = sweeper.Sweep(true);
  ASSERT_EQ(r.ended.size(), 1u);
  EXPECT_EQ(r.ended[0].pid, 50);
  ASSERT_EQ(r.failed.size(), 1u);
  EXPECT_EQ(r.failed[0].first.pid, 51);
  w.refuse_end.clear();
  w.shims = {Proc(51, "stuck")};
  EXPECT_EQ(sweeper.Sweep().ended.size(), 1u);
}

// EndShimTree on real processes: a stand-in "shim" (this test's child, its own process group)
// with a child and a grandchild below it. All three are gone afterwards; a process outside the
// tree is not touched; a stale start time ends nothing.
TEST(OrphanShimsTest, EndShimTreeEndsTheShimAndEverythingBelowIt) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t shim = fork();
  ASSERT_GE(shim, 0);
  if (shim == 0) {
    setpgid(0, 0);
    // The stand-in shim: a child that itself has a child; all wait forever (until killed).
    if (fork() == 0) {
      if (fork() == 0) {
        pid_t me = getpid();
        if (write(ready[1], &me, sizeof me) != sizeof me) _exit(1);
        for (;;) pause();
      }
      pid_t me = getpid();
      if (write(ready[1], &me, sizeof me) != sizeof me) _exit(1);
      for (;;) pause();
    }
    for (;;) pause();
  }
  close(ready[1]);
  // The child and the grandchild, each once it runs (the pipe's writes of a pid are atomic).
  std::vector<pid_t> below(2);
  ASSERT_EQ(read(ready[0], &below[0], sizeof(pid_t)), static_cast<ssize_t>(sizeof(pid_t)));
  ASSERT_EQ(read(ready[0], &below[1], sizeof(pid_t)), static_cast<ssize_t>(sizeof(pid_t)));
  close(ready[0]);
  pid_t outside = fork();
  ASSERT_GE(outside, 0);
  if (outside == 0) {
    for (;;) pause();
  }
  // The shim's start time, as ListShims would have read it.
  std::ifstream stat("/proc/" + std::to_string(shim) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  std::istringstream rest(text.substr(text.rfind(')') + 1));
  std::vector<std::string> f{std::istream_iterator<std::string>(rest), {}};
  ASSERT_GE(f.size(), 20u);
  const uint64_t start = std::stoull(f[19]);
  ShimProcess stale{shim, "x", "k8s.io", start + 1};
  EXPECT_TRUE(EndShimTree(RealClock::Get(), stale, std::chrono::seconds(5)).ok());
  EXPECT_EQ(kill(shim, 0), 0) << "a stale start time ended the process";

  // A cgroup tree standing in for /sys/fs/cgroup: the task's own cgroup, left empty in two
  // hierarchies by a cancelled start (nothing was ever in it), and a busy neighbour.
  char tmpl[] = "/tmp/orphan-shims-cgroups.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string cgroups = tmpl;
  for (const char* h : {"/cpu", "/memory"}) {
    std::filesystem::create_directories(cgroups + h + "/k8s.io/x");
    std::filesystem::create_directories(cgroups + h + "/k8s.io/other/busy");
  }
  ShimProcess real{shim, "x", "k8s.io", start};
  Status s = EndShimTree(RealClock::Get(), real, std::chrono::seconds(10), "/proc", cgroups);
  for (const char* h : {"/cpu", "/memory"}) {
    EXPECT_FALSE(std::filesystem::exists(cgroups + h + "/k8s.io/x"))
        << "the task's empty cgroup was left in " << h;
    EXPECT_TRUE(std::filesystem::exists(cgroups + h + "/k8s.io/other/busy"));
  }
  std::filesystem::remove_all(cgroups);
  EXPECT_TRUE(s.ok()) << s.ToString();
  int status = 0;
  ASSERT_EQ(waitpid(shim, &status, 0), shim);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  // Both were killed: gone, or a zombie until init reaps them.
  for (pid_t p : below) {
    std::ifstream s2("/proc/" + std::to_string(p) + "/stat");
    std::string t((std::istreambuf_iterator<char>(s2)), std::istreambuf_iterator<char>());
    if (t.empty()) continue;
    EXPECT_NE(t.find(") Z"), std::string::npos) << "process " << p << " below the shim still runs";
  }
  EXPECT_EQ(kill(outside, 0), 0) << "a process outside the tree was killed";
  kill(outside, SIGKILL);
  waitpid(outside, nullptr, 0);
}

}  // namespace
}  // namespace nodelet::podworkerd
