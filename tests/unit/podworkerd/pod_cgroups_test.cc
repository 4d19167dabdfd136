// Pod cgroups on a stand-in cgroup v1 tree (plain directories, one per controller): names by QoS
// class, the kubelet's pod-level limits, the files written, removal and the listing the sweep
// uses. resources-e2e checks the same on the real /sys/fs/cgroup.
#include "svc-podworkerd/pod_cgroups.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lib/pod/defaults.h"
#include "lib/pod/manifest_parser.h"
#include "lib/service/cgroup_flags.h"

namespace nodelet::podworkerd {
namespace {

pod::Pod PodOf(const std::string& containers) {
  auto r = pod::DecodeManifest(
      "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default, uid: u-1}\nspec:\n" +
          containers,
      "p.yaml");
  EXPECT_TRUE(r.errors.empty());
  if (r.pods.empty()) return pod::Pod{};
  pod::Pod pod = r.pods[0].pod;
  pod::ApplyPodDefaults(pod);
  return pod;
}

std::string One(const std::string& resources) {
  return "  containers:\n  - name: a\n    image: busybox\n    resources: " + resources + "\n";
}

class PodCgroupsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/nodelet-pod-cgroups.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    fs_ = tmpl;
    for (const char* c : {"cpu", "memory", "pids", "blkio"}) {
      std::filesystem::create_directories(fs_ + "/" + c);
    }
    config_.enabled = true;
    config_.root = "/test-root";
    config_.fs_root = fs_;
  }
  void TearDown() override { std::filesystem::remove_all(fs_); }
  std::string Read(const std::string& path) {
    std::ifstream in(fs_ + path);
    std::string s;
    std::getline(in, s);
    return s;
  }

  std::string fs_;
  PodCgroupConfig config_;
};

TEST_F(PodCgroupsTest, TheNameFollowsTheQosClass) {
  EXPECT_EQ(*PodCgroupName(config_, PodOf(One("{limits: {cpu: 1, memory: 1Gi}}"))),
            "/test-root/kubepods/podu-1");
  EXPECT_EQ(*PodCgroupName(config_, PodOf(One("{requests: {cpu: 1}}"))),
            "/test-root/kubepods/burstable/podu-1");
  PodCgroupConfig at_root = config_;
  at_root.root = "/";
  EXPECT_EQ(*PodCgroupName(at_root, PodOf(One("{}"))), "/kubepods/besteffort/podu-1");
  pod::Pod hostile = PodOf(One("{}"));
  hostile.metadata.uid = "../../escape";
  EXPECT_FALSE(PodCgroupName(config_, hostile).ok());
  EXPECT_FALSE(RemovePodCgroup(config_, "../x").ok());
}

TEST_F(PodCgroupsTest, LimitsAreTheKubeletsResourceConfigForPod) {
  PodCgroupLimits g = PodLimits(PodOf(One("{limits: {cpu: 500m, memory: 64Mi}}")));
  EXPECT_EQ(g.cpu_shares, 512);
  EXPECT_EQ(g.cpu_quota_us, 50000);
  EXPECT_EQ(g.memory_bytes, int64_t{64} << 20);

  // Burstable with requests only: shares, no quota, no memory limit.
  PodCgroupLimits b = PodLimits(PodOf(One("{requests: {cpu: 250m, memory: 32Mi}}")));
  EXPECT_EQ(b.cpu_shares, 256);
  EXPECT_FALSE(b.cpu_quota_us.has_value());
  EXPECT_FALSE(b.memory_bytes.has_value());

  // Burstable where every container declares both limits: quota and memory too, summed.
  PodCgroupLimits both = PodLimits(PodOf(
      "  containers:\n  - name: a\n    image: busybox\n    resources: {requests: {cpu: 100m}, "
      "limits: {cpu: 200m, memory: 10Mi}}\n  - name: b\n    image: busybox\n    resources: "
      "{limits: {cpu: 300m, memory: 20Mi}}\n"));
  EXPECT_EQ(both.cpu_shares, (100 + 300) * 1024 / 1000);
  EXPECT_EQ(both.cpu_quota_us, 50000);
  EXPECT_EQ(both.memory_bytes, int64_t{30} << 20);

  // One container without a memory limit: no pod memory limit.
  PodCgroupLimits partial = PodLimits(PodOf(
      "  containers:\n  - name: a\n    image: busybox\n    resources: {limits: {cpu: 1, "
      "memory: 10Mi}}\n  - name: b\n    image: busybox\n    resources: {limits: {cpu: 1}}\n"));
  EXPECT_TRUE(partial.cpu_quota_us.has_value());
  EXPECT_FALSE(partial.memory_bytes.has_value());

  // An init container larger than the containers' sum sets the pod's value.
  PodCgroupLimits init = PodLimits(
      PodOf(One("{limits: {cpu: 100m, memory: 10Mi}}") +
            "  initContainers:\n  - name: i\n    image: busybox\n    resources: {limits: {cpu: 2, "
            "memory: 1Gi}}\n"));
  EXPECT_EQ(init.cpu_quota_us, 200000);
  EXPECT_EQ(init.memory_bytes, int64_t{1} << 30);

  // BestEffort: the minimum shares and nothing else.
  PodCgroupLimits be = PodLimits(PodOf(One("{}")));
  EXPECT_EQ(be.cpu_shares, 2);
  EXPECT_FALSE(be.cpu_quota_us.has_value());
  EXPECT_FALSE(be.memory_bytes.has_value());
}

TEST_F(PodCgroupsTest, EnsureMakesTheCgroupAndWritesTheLimits) {
  const std::string name = "/test-root/kubepods/burstable/podu-1";
  PodCgroupLimits limits;
  limits.cpu_shares = 300;
  limits.cpu_quota_us = 20000;
  ASSERT_TRUE(EnsurePodCgroup(config_, name, limits).ok());
  EXPECT_EQ(Read("/cpu" + name + "/cpu.shares"), "300");
  EXPECT_EQ(Read("/cpu" + name + "/cpu.cfs_quota_us"), "20000");
  EXPECT_EQ(Read("/cpu" + name + "/cpu.cfs_period_us"), "100000");
  EXPECT_EQ(Read("/memory" + name + "/memory.limit_in_bytes"), "-1");
  EXPECT_TRUE(std::filesystem::is_directory(fs_ + "/pids" + name));
  EXPECT_EQ(PodCgroupUids(config_), (std::set<std::string>{"u-1"}));
}

TEST_F(PodCgroupsTest, RemovalTakesThePodCgroupAndWhatIsLeftInside) {
  // As runc leaves them: the pod's cgroup in every hierarchy, an emptied container cgroup inside.
  for (const char* c : {"cpu", "memory", "pids", "blkio"}) {
    std::filesystem::create_directories(fs_ + "/" + c +
                                        "/test-root/kubepods/besteffort/podu-2/ctr");
    std::filesystem::create_directories(fs_ + "/" + c + "/test-root/kubepods/podu-3");
  }
  EXPECT_EQ(PodCgroupUids(config_), (std::set<std::string>{"u-2", "u-3"}));
  ASSERT_TRUE(RemovePodCgroup(config_, "u-2").ok());
  EXPECT_EQ(PodCgroupUids(config_), (std::set<std::string>{"u-3"}));
  EXPECT_TRUE(std::filesystem::is_directory(fs_ + "/blkio/test-root/kubepods/besteffort"));
  EXPECT_TRUE(RemovePodCgroup(config_, "no-such").ok());
  // Something that cannot be removed (here a file, as a process would keep a real cgroup) is
  // named in the error.
  std::ofstream(fs_ + "/memory/test-root/kubepods/podu-3/busy") << "x";
  Status s = RemovePodCgroup(config_, "u-3");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/memory/test-root/kubepods/podu-3"), std::string::npos)
      << s.message();
}

TEST_F(PodCgroupsTest, QosCgroupsGetTheBurstablePodsCpuRequestsAndBestEffortTheMinimum) {
  const pod::Pod burstable_a = PodOf(One("{requests: {cpu: 250m}}"));
  const pod::Pod burstable_b = PodOf(One("{requests: {cpu: 500m, memory: 1Gi}}"));
  const pod::Pod guaranteed = PodOf(One("{limits: {cpu: 1, memory: 1Gi}}"));
  const pod::Pod besteffort = PodOf(One("{}"));
  const int64_t sum = BurstableCpuRequests({&burstable_a, &burstable_b, &guaranteed, &besteffort});
  EXPECT_EQ(sum, 750);
  ASSERT_TRUE(EnsureQosCgroups(config_, sum).ok());
  EXPECT_EQ(Read("/cpu/test-root/kubepods/burstable/cpu.shares"),
            std::to_string(750 * 1024 / 1000));
  EXPECT_EQ(Read("/cpu/test-root/kubepods/burstable/cpu.cfs_quota_us"), "-1");
  EXPECT_EQ(Read("/memory/test-root/kubepods/burstable/memory.limit_in_bytes"), "-1");
  EXPECT_EQ(Read("/cpu/test-root/kubepods/besteffort/cpu.shares"), "2");
  // No Burstable pod: the minimum, as the kubelet's MilliCPUToShares(0).
  ASSERT_TRUE(EnsureQosCgroups(config_, 0).ok());
  EXPECT_EQ(Read("/cpu/test-root/kubepods/burstable/cpu.shares"), "2");
}

TEST(CgroupRootTest, OnlyAbsolutePlainPaths) {
  EXPECT_TRUE(ValidateCgroupRoot("/").ok());
  EXPECT_TRUE(ValidateCgroupRoot("/nodelet-test/x.y_z").ok());
  for (const char* bad : {"", "relative", "/a/", "/a/../b", "/a//b", "/a/b c", "/./a"}) {
    EXPECT_FALSE(ValidateCgroupRoot(bad).ok()) << bad;
  }
}

TEST(KubepodsTest, LimitsOfTheAllocatable) {
  pod::NodeResourceList capacity{4000, int64_t{8} << 30, 0};
  auto system = pod::ParseReservation("cpu=500m,memory=1Gi");
  auto kube = pod::ParseReservation("memory=512Mi");
  ASSERT_TRUE(system.ok());
  ASSERT_TRUE(kube.ok());
  pod::NodeResourceList alloc = pod::AllocatableFrom(capacity, *system, *kube, {});
  EXPECT_EQ(alloc.cpu_milli, 3500);
  EXPECT_EQ(alloc.memory_bytes, (int64_t{8} << 30) - (int64_t{1536} << 20));
  PodCgroupLimits limits = KubepodsLimits(alloc);
  EXPECT_EQ(limits.cpu_shares, 3500 * 1024 / 1000);
  EXPECT_FALSE(limits.cpu_quota_us.has_value());
  EXPECT_EQ(limits.memory_bytes, alloc.memory_bytes);
  // More reserved than there is: nothing, never negative.
  auto huge = pod::ParseReservation("cpu=100,memory=1Ti");
  ASSERT_TRUE(huge.ok());
  EXPECT_EQ(pod::AllocatableFrom(capacity, *huge, {}, {}).memory_bytes, 0);
  EXPECT_FALSE(pod::ParseReservation("memory=-1Gi").ok());
  EXPECT_FALSE(pod::ParseReservation("gpu=1").ok());
  PodCgroupConfig config;
  config.root = "/a/b";
  EXPECT_EQ(KubepodsName(config), "/a/b/kubepods");
}

// The systemd driver's calls, recorded; the stand-in tree plays systemd's part of making and
// removing the directories.
class FakeSlices : public SliceManager {
 public:
  explicit FakeSlices(std::string fs) : fs_(std::move(fs)) {}
  Status Ensure(const std::string& unit, const std::string&, const SliceLimits& limits) override {
    ensured[unit] = limits;
    return ensure_error.empty() ? Status::Ok() : Unavailable(ensure_error);
  }
  Status Stop(const std::string& unit) override {
    stopped.push_back(unit);
    // systemd removes the cgroup it made (the memory hierarchy's here), not runc's others.
    for (const auto& e : std::filesystem::recursive_directory_iterator(fs_ + "/memory")) {
      if (e.path().filename() == unit) {
        std::filesystem::remove_all(e.path());
        break;
      }
    }
    return Status::Ok();
  }
  std::map<std::string, SliceLimits> ensured;
  std::vector<std::string> stopped;
  std::string ensure_error;

 private:
  std::string fs_;
};

class SystemdDriverTest : public PodCgroupsTest {
 protected:
  void SetUp() override {
    PodCgroupsTest::SetUp();
    slices_ = std::make_shared<FakeSlices>(fs_);
    config_.root = "/";
    config_.systemd = true;
    config_.slices = slices_;
  }
  std::shared_ptr<FakeSlices> slices_;
};

TEST_F(SystemdDriverTest, NamesAreTheKubeletsSlices) {
  // The UID's dashes become underscores: '-' separates a slice's ancestors.
  EXPECT_EQ(*PodCgroupName(config_, PodOf(One("{limits: {cpu: 1, memory: 1Gi}}"))),
            "/kubepods.slice/kubepods-podu_1.slice");
  EXPECT_EQ(*PodCgroupName(config_, PodOf(One("{requests: {cpu: 1}}"))),
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podu_1.slice");
  EXPECT_EQ(KubepodsName(config_), "/kubepods.slice");
  config_.root = "/system.slice/system-node.slice";
  EXPECT_EQ(*PodCgroupName(config_, PodOf(One("{}"))),
            "/system.slice/system-node.slice/system-node-kubepods.slice/"
            "system-node-kubepods-besteffort.slice/system-node-kubepods-besteffort-podu_1.slice");
  EXPECT_EQ(PodCgroupKey(config_, "a-b-c"), "a_b_c");
  config_.systemd = false;
  EXPECT_EQ(PodCgroupKey(config_, "a-b-c"), "a-b-c");
}

TEST_F(SystemdDriverTest, EnsureGivesSystemdTheLimits) {
  const pod::Pod pod = PodOf(One("{limits: {cpu: 250m, memory: 64Mi}}"));
  auto name = PodCgroupName(config_, pod);
  ASSERT_TRUE(name.ok());
  ASSERT_TRUE(EnsurePodCgroup(config_, *name, PodLimits(pod)).ok());
  ASSERT_EQ(slices_->ensured.count("kubepods-podu_1.slice"), 1u);
  const SliceLimits& got = slices_->ensured["kubepods-podu_1.slice"];
  EXPECT_EQ(got.cpu_shares, 256u);
  // 25 ms of every 100 ms: 250 ms per second, which systemd writes back as a 25000 µs quota.
  EXPECT_EQ(got.cpu_quota_per_sec_usec, 250000u);
  EXPECT_EQ(got.memory_bytes, uint64_t{64} << 20);
  EXPECT_FALSE(got.cgroup_v2);  // the stand-in tree is not a cgroup2 mount
  // Nothing written by nodelet itself: systemd owns the files.
  EXPECT_FALSE(std::filesystem::exists(fs_ + "/cpu/kubepods.slice"));

  ASSERT_TRUE(EnsureQosCgroups(config_, 100).ok());
  EXPECT_EQ(slices_->ensured["kubepods-burstable.slice"].cpu_shares, 102u);
  EXPECT_FALSE(slices_->ensured["kubepods-burstable.slice"].cpu_quota_per_sec_usec.has_value());
  EXPECT_FALSE(slices_->ensured["kubepods-burstable.slice"].memory_bytes.has_value());
  EXPECT_EQ(slices_->ensured["kubepods-besteffort.slice"].cpu_shares, 2u);

  slices_->ensure_error = "systemd is gone";
  Status s = EnsurePodCgroup(config_, *name, PodLimits(pod));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("systemd is gone"), std::string::npos);
  config_.slices = nullptr;
  EXPECT_FALSE(EnsurePodCgroup(config_, *name, PodLimits(pod)).ok());
}

TEST_F(SystemdDriverTest, RemovalStopsTheSliceThenTakesWhatRuncLeft) {
  const std::string pod_path =
      "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podu_2.slice";
  for (const char* c : {"cpu", "memory", "pids", "blkio"}) {
    std::filesystem::create_directories(fs_ + "/" + c + pod_path + "/cri-containerd-abc.scope");
    std::filesystem::create_directories(fs_ + "/" + c + "/kubepods.slice/kubepods-podu_3.slice");
  }
  // Not a pod slice: the QoS slices and a name with a dash where the UID should be.
  std::filesystem::create_directories(fs_ + "/memory/kubepods.slice/kubepods-pod-x.slice");
  EXPECT_EQ(PodCgroupUids(config_), (std::set<std::string>{"u_2", "u_3"}));
  // Either form of the UID names the same slice.
  ASSERT_TRUE(RemovePodCgroup(config_, "u-2").ok());
  EXPECT_NE(std::find(slices_->stopped.begin(), slices_->stopped.end(),
                      "kubepods-burstable-podu_2.slice"),
            slices_->stopped.end());
  for (const char* c : {"cpu", "memory", "pids", "blkio"}) {
    EXPECT_FALSE(std::filesystem::exists(fs_ + "/" + c + pod_path)) << c;
  }
  EXPECT_TRUE(
      std::filesystem::is_directory(fs_ + "/blkio/kubepods.slice/kubepods-burstable.slice"));
  ASSERT_TRUE(RemovePodCgroup(config_, "u_3").ok());
  EXPECT_EQ(PodCgroupUids(config_), std::set<std::string>{});
}

TEST(CgroupRootTest, SystemdRootsAreSlicePaths) {
  CgroupName name;
  EXPECT_EQ(ParseCgroupRoot("/", true, &name), "");
  EXPECT_TRUE(name.empty());
  EXPECT_EQ(ParseCgroupRoot("/a.slice/a-b.slice", true, &name), "");
  EXPECT_EQ(name, (CgroupName{"a", "b"}));
  for (const char* bad : {"/a", "/a/b", "/a.slice/b.slice", "/a-b.slice", "/.slice", "/a.slice/"}) {
    EXPECT_NE(ParseCgroupRoot(bad, true, nullptr), "") << bad;
  }
  CgroupFlags flags;
  flags.driver = "systemd";
  flags.root = "/nodelet-test/x";
  EXPECT_NE(CgroupFlagsProblem(flags).find("--cgroup-root"), std::string::npos);
  flags.driver = "cgroupfs";
  EXPECT_EQ(CgroupFlagsProblem(flags), "");
}

}  // namespace
}  // namespace nodelet::podworkerd
