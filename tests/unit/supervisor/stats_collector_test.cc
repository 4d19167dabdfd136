// StatsCollector on a stand-in node: a cgroup v1 tree with a pod cgroup and its containers'
// cgroups, /proc's meminfo and stat, ROOT/pods/UID (emptyDir volumes, etc-hosts) and
// LOG-DIR/pods/NS_NAME_UID; the pods from plegd's records; the walks' caps and their cache.
#include "supervisor/stats_collector.h"

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "lib/cri/runtime_service.h"
#include "pleg_generated.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_cri_runtime.h"
#include "tests/testing/harness.h"

namespace nodelet::supervisor {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr int64_t kMiB = 1 << 20;
constexpr char kUid[] = "0c4f8d5e-1111-4222-8333-944455556666";
constexpr char kAppId[] = "a1b2c3d4e5f6";
constexpr char kSideId[] = "f6e5d4c3b2a1";

// What `du` would say of `path`: the blocks of every inode under it.
stats::DirUsage Du(const std::string& path) {
  stats::DirUsage u;
  auto add = [&](const fs::path& p) {
    struct stat st {};
    if (lstat(p.c_str(), &st) != 0) return;
    u.used_bytes += static_cast<int64_t>(st.st_blocks) * 512;
    u.inodes_used += 1;
  };
  add(path);
  if (!fs::is_directory(fs::symlink_status(path))) return u;
  for (const auto& e : fs::recursive_directory_iterator(path)) add(e.path());
  return u;
}

ipc::pleg::PodRecordT Record(const std::string& uid, const std::string& name) {
  ipc::pleg::PodRecordT r;
  r.uid = uid;
  r.name = name;
  r.namespace_ = "default";
  auto sb = std::make_unique<ipc::pleg::SandboxRecordT>();
  sb->id = "sb-" + name;
  sb->state = ipc::pleg::SandboxState::Ready;
  sb->created_at_ns = 1700000100LL * 1000000000;
  r.sandboxes.push_back(std::move(sb));
  return r;
}

void AddContainer(ipc::pleg::PodRecordT& r, const std::string& name, const std::string& id,
                  ipc::pleg::ContainerState state, int64_t started_s) {
  auto c = std::make_unique<ipc::pleg::ContainerRecordT>();
  c->name = name;
  c->id = id;
  c->state = state;
  c->started_at_ns = started_s * 1000000000;
  r.containers.push_back(std::move(c));
}

TEST(PodRefsFromPlegTest, NodeletsRunningPodsWithTheirRunningContainers) {
  std::map<std::string, ipc::pleg::PodRecordT> records;
  auto web = Record("u-web", "web-node1");
  AddContainer(web, "app", "c-app", ipc::pleg::ContainerState::Running, 1700000200);
  AddContainer(web, "app", "c-app-old", ipc::pleg::ContainerState::Exited, 1700000150);
  AddContainer(web, "init", "c-init", ipc::pleg::ContainerState::Exited, 1700000120);
  records["u-web"] = std::move(web);
  auto foreign = Record("u-foreign", "theirs");
  foreign.foreign = true;
  records["u-foreign"] = std::move(foreign);
  auto removed = Record("u-removed", "gone");
  removed.removed = true;
  records["u-removed"] = std::move(removed);
  auto stopped = Record("u-stopped", "stopped-node1");
  stopped.sandboxes[0]->state = ipc::pleg::SandboxState::NotReady;
  records["u-stopped"] = std::move(stopped);

  auto refs = PodRefsFromPleg(records);
  ASSERT_EQ(refs.size(), 1u);
  EXPECT_EQ(refs[0].uid, "u-web");
  EXPECT_EQ(refs[0].name, "web-node1");
  EXPECT_EQ(refs[0].namespace_name, "default");
  EXPECT_EQ(refs[0].start_time_unix_s, 1700000100);
  ASSERT_EQ(refs[0].containers.size(), 1u);
  EXPECT_EQ(refs[0].containers[0].id, "c-app");
  EXPECT_EQ(refs[0].containers[0].start_time_unix_s, 1700000200);
}

class StatsCollectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    opts_.node_name = "node1";
    opts_.root_dir = dir_.Sub("root");
    opts_.log_dir = dir_.Sub("log");
    opts_.cgroup_root = "/nodelet-test/t";
    opts_.cgroup_fs_root = dir_.Sub("cgroup");
    opts_.proc = dir_.Sub("proc");
    const std::string cg = dir_.Sub("cgroup");
    testing::WriteTextFile(cg + "/cpuacct/cpuacct.usage", "5000000000\n");
    testing::WriteTextFile(cg + "/memory/memory.usage_in_bytes", std::to_string(900 * kMiB));
    testing::WriteTextFile(cg + "/memory/memory.stat",
                           "total_inactive_file " + std::to_string(100 * kMiB));
    testing::WriteTextFile(opts_.proc + "/meminfo", "MemTotal: 2097152 kB\nMemFree: 1048576 kB\n");
    pod_cg_ = opts_.cgroup_root + "/kubepods/burstable/pod" + kUid;
    Counters(pod_cg_, 3000000000, 80 * kMiB, 10 * kMiB);
    Counters(pod_cg_ + "/" + kAppId, 2000000000, 50 * kMiB, 5 * kMiB);
    Counters(pod_cg_ + "/" + kSideId, 900000000, 20 * kMiB, 1 * kMiB);
    fs::create_directories(opts_.root_dir + "/pods");

    PodRef pod;
    pod.uid = kUid;
    pod.name = "web-node1";
    pod.namespace_name = "default";
    pod.start_time_unix_s = 1700000100;
    pod.containers = {{"app", kAppId, 1700000200}, {"side", kSideId, 1700000300}};
    pods_ = {pod};
  }
  void TearDown() override {
    if (!mounted_.empty()) umount2(mounted_.c_str(), MNT_DETACH);
  }
  // A v1 cgroup's cpuacct and memory counters.
  void Counters(const std::string& cg, uint64_t cpu_ns, int64_t usage, int64_t inactive_file) {
    const std::string root = dir_.Sub("cgroup");
    testing::WriteTextFile(root + "/cpuacct" + cg + "/cpuacct.usage", std::to_string(cpu_ns));
    testing::WriteTextFile(root + "/memory" + cg + "/memory.usage_in_bytes", std::to_string(usage));
    testing::WriteTextFile(root + "/memory" + cg + "/memory.stat",
                           "total_rss " + std::to_string(usage / 2) + "\ntotal_inactive_file " +
                               std::to_string(inactive_file) +
                               "\ntotal_pgfault 11\ntotal_pgmajfault 1\n");
  }
  std::string PodDir() const { return opts_.root_dir + "/pods/" + kUid; }
  std::string EmptyDir(const std::string& name) const {
    return PodDir() + "/volumes/kubernetes.io~empty-dir/" + name;
  }
  std::string LogDir() const {
    return opts_.log_dir + "/pods/default_web-node1_" + std::string(kUid);
  }

  testing::TempDir dir_;
  testing::FakeClock clock_;
  StatsCollectorOptions opts_;
  std::string pod_cg_;
  std::vector<PodRef> pods_;
  std::string mounted_;
};

TEST_F(StatsCollectorTest, NodeAndPodAndContainerCountersFromTheirCgroups) {
  StatsCollector collector(clock_, opts_);
  collector.SetPods(pods_);
  NodeStats s = collector.Sample();
  EXPECT_EQ(s.node_name, "node1");
  EXPECT_EQ(s.time_unix_ms, clock_.WallNanos() / 1000000);
  ASSERT_TRUE(s.cpu.has_value());
  EXPECT_EQ(s.cpu->usage_core_nanoseconds, 5000000000u);
  ASSERT_TRUE(s.memory.has_value());
  EXPECT_EQ(s.memory->capacity_bytes, 2048 * kMiB);
  EXPECT_EQ(s.memory->working_set_bytes, 800 * kMiB);
  EXPECT_EQ(s.memory->available_bytes, 1248 * kMiB);
  ASSERT_TRUE(s.nodefs.has_value());
  EXPECT_GT(s.nodefs->capacity_bytes, 0);
  EXPECT_FALSE(s.imagefs.has_value()) << "no image service";

  ASSERT_EQ(s.pods.size(), 1u);
  const PodStats& p = s.pods[0];
  EXPECT_EQ(p.uid, kUid);
  EXPECT_EQ(p.name, "web-node1");
  EXPECT_EQ(p.start_time_unix_s, 1700000100);
  ASSERT_TRUE(p.cpu.has_value());
  EXPECT_EQ(p.cpu->usage_core_nanoseconds, 3000000000u);
  ASSERT_TRUE(p.memory.has_value());
  EXPECT_EQ(p.memory->working_set_bytes, 70 * kMiB);
  EXPECT_EQ(p.memory->rss_bytes, 40 * kMiB);
  ASSERT_EQ(p.containers.size(), 2u);
  EXPECT_EQ(p.containers[0].name, "app");
  EXPECT_EQ(p.containers[0].start_time_unix_s, 1700000200);
  ASSERT_TRUE(p.containers[0].cpu.has_value());
  EXPECT_EQ(p.containers[0].cpu->usage_core_nanoseconds, 2000000000u);
  EXPECT_EQ(p.containers[0].memory->working_set_bytes, 45 * kMiB);
  EXPECT_EQ(p.containers[1].memory->working_set_bytes, 19 * kMiB);
}

// With the systemd driver the pod's cgroup is its slice and each container's a scope in it,
// containerd's "cri-containerd-<id>.scope" (lib/service/cgroup_names.h).
TEST_F(StatsCollectorTest, TheSystemdDriversSlicesAndScopes) {
  opts_.cgroup_root = "/";
  opts_.cgroup_systemd = true;
  std::string uid = kUid;
  std::replace(uid.begin(), uid.end(), '-', '_');
  const std::string slice =
      "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uid + ".slice";
  Counters(slice, 7000000000, 60 * kMiB, 0);
  Counters(slice + "/cri-containerd-" + kAppId + ".scope", 4000000000, 30 * kMiB, 0);
  StatsCollector collector(clock_, opts_);
  collector.SetPods(pods_);
  NodeStats s = collector.Sample();
  ASSERT_EQ(s.pods.size(), 1u);
  const PodStats& p = s.pods[0];
  ASSERT_TRUE(p.cpu.has_value());
  EXPECT_EQ(p.cpu->usage_core_nanoseconds, 7000000000u);
  ASSERT_EQ(p.containers.size(), 2u);
  ASSERT_TRUE(p.containers[0].cpu.has_value());
  EXPECT_EQ(p.containers[0].cpu->usage_core_nanoseconds, 4000000000u);
  EXPECT_EQ(p.containers[0].memory->working_set_bytes, 30 * kMiB);
  EXPECT_FALSE(p.containers[1].cpu.has_value()) << "no scope of that container";
}

TEST_F(StatsCollectorTest, PodsWithoutACgroupHaveNoCountersButStillTheirFiles) {
  pods_[0].uid = "0c4f8d5e-0000-4222-8333-944455556666";    // no cgroup of that uid
  pods_[0].containers[0].id = "../" + std::string(kAppId);  // nor a container id like this
  StatsCollector collector(clock_, opts_);
  collector.SetPods(pods_);
  NodeStats s = collector.Sample();
  ASSERT_EQ(s.pods.size(), 1u);
  EXPECT_FALSE(s.pods[0].cpu.has_value());
  EXPECT_FALSE(s.pods[0].memory.has_value());
  EXPECT_FALSE(s.pods[0].containers[0].cpu.has_value());
  EXPECT_FALSE(s.pods[0].containers[0].memory.has_value());

  // A container id that is not one cgroup component is never read, even in the right pod.
  pods_[0].uid = kUid;
  collector.SetPods(pods_);
  s = collector.Sample();
  ASSERT_TRUE(s.pods[0].memory.has_value());
  EXPECT_FALSE(s.pods[0].containers[0].memory.has_value());
  EXPECT_TRUE(s.pods[0].containers[1].memory.has_value());
}

TEST_F(StatsCollectorTest, EphemeralStorageIsLogsAndDiskVolumesAndEtcHosts) {
  testing::WriteDataFile(LogDir() + "/app/0.log", 64 * 1024);
  testing::WriteDataFile(LogDir() + "/app/0.log.20240501-120000.gz", 8 * 1024);
  testing::WriteDataFile(LogDir() + "/side/0.log", 16 * 1024);
  testing::WriteDataFile(EmptyDir("scratch") + "/data", 256 * 1024);
  testing::WriteDataFile(EmptyDir("scratch") + "/sub/more", 32 * 1024);
  testing::WriteDataFile(EmptyDir("cache") + "/x", 4096);
  testing::WriteTextFile(PodDir() + "/etc-hosts", "127.0.0.1 localhost\n");
  // A big tree outside the pod that a volume's symlink, and a symlink planted in place of a
  // volume, point at: never followed, never charged.
  testing::WriteDataFile(dir_.Sub("outside/big"), 2 * kMiB);
  fs::create_directory_symlink(dir_.Sub("outside"), EmptyDir("scratch") + "/escape");
  fs::create_directory_symlink(dir_.Sub("outside"), EmptyDir("planted"));
  // A medium Memory emptyDir is a tmpfs mounted there: the pod's memory, not its disk.
  fs::create_directories(EmptyDir("shm"));
  const bool mounted = mount("tmpfs", EmptyDir("shm").c_str(), "tmpfs", 0, "size=4m") == 0;
  if (mounted) {
    mounted_ = EmptyDir("shm");
    testing::WriteDataFile(EmptyDir("shm") + "/in-memory", 1 * kMiB);
  }

  StatsCollector collector(clock_, opts_);
  collector.SetPods(pods_);
  NodeStats s = collector.Sample();
  ASSERT_EQ(s.pods.size(), 1u);
  const PodStats& p = s.pods[0];
  ASSERT_EQ(p.volumes.size(), mounted ? 2u : 3u);
  EXPECT_EQ(p.volumes[0].name, "cache");
  EXPECT_EQ(p.volumes[1].name, "scratch");
  if (!mounted) {
    EXPECT_EQ(p.volumes[2].name, "shm") << "(no tmpfs mounted here: a plain dir)";
  }
  const auto scratch = Du(EmptyDir("scratch"));  // the recursive iterator does not follow links
  EXPECT_EQ(p.volumes[1].used.used_bytes, scratch.used_bytes);
  EXPECT_EQ(p.volumes[1].used.inodes_used, scratch.inodes_used);
  EXPECT_LT(p.volumes[1].used.used_bytes, 2 * kMiB);

  ASSERT_TRUE(p.containers[0].logs.has_value());
  EXPECT_EQ(p.containers[0].logs->used_bytes, Du(LogDir() + "/app").used_bytes);
  EXPECT_EQ(p.containers[0].logs->inodes_used, 3);
  EXPECT_EQ(p.containers[1].logs->used_bytes, Du(LogDir() + "/side").used_bytes);

  stats::DirUsage expected = Du(LogDir());
  for (const auto& v : p.volumes) {
    expected.used_bytes += v.used.used_bytes;
    expected.inodes_used += v.used.inodes_used;
  }
  expected.used_bytes += Du(PodDir() + "/etc-hosts").used_bytes;
  expected.inodes_used += 1;
  EXPECT_EQ(p.ephemeral_storage.used_bytes, expected.used_bytes);
  EXPECT_EQ(p.ephemeral_storage.inodes_used, expected.inodes_used);
  EXPECT_GE(p.ephemeral_storage.used_bytes, (64 + 8 + 16 + 256 + 32 + 4) * 1024);
  EXPECT_EQ(collector.truncated_walks(), 0u);
}

TEST_F(StatsCollectorTest, WalksAreReusedUntilTheirPeriodHasPassed) {
  testing::WriteDataFile(EmptyDir("scratch") + "/a", 64 * 1024);
  StatsCollector collector(clock_, opts_);
  collector.SetPods(pods_);
  const int64_t first = collector.Sample().pods[0].volumes.at(0).used.used_bytes;
  testing::WriteDataFile(EmptyDir("scratch") + "/b", 512 * 1024);
  EXPECT_EQ(collector.Sample().pods[0].volumes.at(0).used.used_bytes, first) << "cached";
  clock_.Advance(opts_.walk_period);
  const int64_t second = collector.Sample().pods[0].volumes.at(0).used.used_bytes;
  EXPECT_GE(second, first + 512 * 1024);
  EXPECT_EQ(second, Du(EmptyDir("scratch")).used_bytes);
}

TEST_F(StatsCollectorTest, AWalkStopsAtItsCapAndASampleAtItsBudget) {
  for (int i = 0; i < 30; ++i)
    testing::WriteDataFile(EmptyDir("many") + "/f" + std::to_string(i), 10);
  opts_.max_walk_entries = 10;
  {
    StatsCollector collector(clock_, opts_);
    collector.SetPods(pods_);
    NodeStats s = collector.Sample();
    ASSERT_EQ(s.pods[0].volumes.size(), 1u);
    EXPECT_EQ(s.pods[0].volumes[0].used.inodes_used, 11) << "the volume and the first 10 entries";
    EXPECT_EQ(collector.truncated_walks(), 1u);
  }

  // A budget that the first walk (the pod's logs: app and its 5 files) spends: the others wait
  // for the next sample, which walks them, and not the logs again (their figure is fresh).
  opts_.max_walk_entries = 1000;
  opts_.max_sample_entries = 5;
  for (int i = 0; i < 5; ++i)
    testing::WriteDataFile(LogDir() + "/app/" + std::to_string(i) + ".log", 4096);
  StatsCollector collector(clock_, opts_);
  collector.SetPods(pods_);
  NodeStats s = collector.Sample();
  ASSERT_TRUE(s.pods[0].containers[0].logs.has_value());
  EXPECT_EQ(s.pods[0].containers[0].logs->inodes_used, 6);
  EXPECT_TRUE(s.pods[0].volumes.empty()) << "not walked yet";
  EXPECT_EQ(collector.deferred_walks(), 2u) << "the volume and etc-hosts";
  s = collector.Sample();
  ASSERT_EQ(s.pods[0].volumes.size(), 1u);
  EXPECT_EQ(s.pods[0].volumes[0].used.inodes_used, 31);
  EXPECT_TRUE(s.pods[0].containers[0].logs.has_value()) << "its earlier figure";
}

TEST_F(StatsCollectorTest, ImageFsFromTheRuntimesImageFsInfo) {
  testing::FakeCriRuntime runtime;
  runtime.SetImageFsMountpoint(dir_.Sub("images"));
  fs::create_directories(dir_.Sub("images"));
  StatsCollector collector(clock_, opts_, &runtime);
  NodeStats s = collector.Sample();
  ASSERT_TRUE(s.imagefs.has_value());
  auto fs_stats = stats::StatFilesystem(dir_.Sub("images"));
  ASSERT_TRUE(fs_stats.ok());
  EXPECT_EQ(s.imagefs->capacity_bytes, fs_stats->capacity_bytes);
  EXPECT_EQ(s.imagefs->used_bytes, 0) << "the images' bytes (none here), as the kubelet reports";

  runtime.SetImageFsMountpoint(dir_.Sub("no-such-dir"));
  EXPECT_TRUE(collector.Sample().imagefs.has_value()) << "the runtime's answer is kept a while";
  clock_.Advance(opts_.walk_period);
  EXPECT_FALSE(collector.Sample().imagefs.has_value()) << "a mountpoint that is not there";
}

TEST_F(StatsCollectorTest, WritableLayersFromTheRuntimeCountInThePodsEphemeralStorage) {
  testing::FakeCriRuntime runtime;
  runtime.SetImageFsMountpoint(dir_.Sub("root"));  // the same filesystem as nodefs
  fs::create_directories(dir_.Sub("root"));
  runtime.SetWritableLayer(kAppId, 3 * kMiB, 12);
  runtime.SetWritableLayer("someone-elses", 50 * kMiB, 1);
  StatsCollector collector(clock_, opts_, &runtime, &runtime);
  collector.SetPods(pods_);
  NodeStats s = collector.Sample();
  EXPECT_FALSE(s.dedicated_image_fs);
  ASSERT_EQ(s.pods.size(), 1u);
  const PodStats& p = s.pods[0];
  ASSERT_TRUE(p.containers[0].rootfs.has_value());
  EXPECT_EQ(p.containers[0].rootfs->used_bytes, 3 * kMiB);
  EXPECT_EQ(p.containers[0].rootfs->inodes_used, 12);
  EXPECT_FALSE(p.containers[1].rootfs.has_value()) << "not reported for the side container";
  EXPECT_EQ(p.ephemeral_storage.used_bytes, 3 * kMiB) << "no logs, volumes or etc-hosts here";
  EXPECT_EQ(p.ephemeral_storage.inodes_used, 12);

  // Kept for the walk period (containerd measures every 10 s itself), then asked again.
  runtime.SetWritableLayer(kAppId, 5 * kMiB, 12);
  EXPECT_EQ(collector.Sample().pods[0].containers[0].rootfs->used_bytes, 3 * kMiB);
  clock_.Advance(opts_.walk_period);
  EXPECT_EQ(collector.Sample().pods[0].containers[0].rootfs->used_bytes, 5 * kMiB);
}

// The disk figures eviction ranks by (stats_collector.h, PodDiskUseFor), from a sample's pod:
// a writable layer of 300 bytes and 3 inodes, logs and volumes making up the rest.
TEST(PodDiskUseTest, ADedicatedImageFilesystemSplitsThePodsUseByFilesystem) {
  PodStats pod;
  ContainerStats c;
  c.rootfs = stats::DirUsage{300, 3};
  c.logs = stats::DirUsage{100, 1};
  pod.containers.push_back(c);
  pod.ephemeral_storage = stats::DirUsage{1000, 10};
  using pod::EvictionSignal;
  for (auto signal : {EvictionSignal::kNodeFsAvailable, EvictionSignal::kImageFsAvailable,
                      EvictionSignal::kImageFsInodesFree}) {
    // One filesystem: every signal counts all of it.
    EXPECT_EQ(PodDiskUseFor(signal, false, pod).used_bytes, 1000);
  }
  EXPECT_EQ(PodDiskUseFor(EvictionSignal::kNodeFsAvailable, true, pod).used_bytes, 700);
  EXPECT_EQ(PodDiskUseFor(EvictionSignal::kNodeFsInodesFree, true, pod).inodes_used, 7);
  EXPECT_EQ(PodDiskUseFor(EvictionSignal::kImageFsAvailable, true, pod).used_bytes, 300);
  EXPECT_EQ(PodDiskUseFor(EvictionSignal::kImageFsInodesFree, true, pod).inodes_used, 3);
  // A layer measured after the total (figures of different moments): never below zero.
  pod.ephemeral_storage = stats::DirUsage{200, 2};
  EXPECT_EQ(PodDiskUseFor(EvictionSignal::kNodeFsAvailable, true, pod).used_bytes, 0);
}

}  // namespace
}  // namespace nodelet::supervisor
