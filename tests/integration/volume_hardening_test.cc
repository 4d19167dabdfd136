// Volume hardening: what a container can do to its own volumes, end to end through the real
// `nodelet` on a private containerd. configMap, secret and downwardAPI mounts are read-only
// whatever the manifest says; a container that tries to point `..data` at a host directory
// fails, the next ConfigMap update still arrives, and the host directory is still there; a
// subPath through a link that stays in the volume works, one through a link out of it is
// refused with CreateContainerConfigError naming the subPath; and the staging mounts go with
// the pod.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mount.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "svc-volumed/volume_manager.h"
#include "tests/testing/containerd.h"
#include "tests/testing/harness.h"
#include "tests/testing/nodelet_fixture.h"

namespace nodelet::testing {
namespace {

namespace v1 = ::runtime::v1;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using ::testing::HasSubstr;

constexpr char kServeUntilTerm[] = "trap 'exit 0' TERM; while true; do sleep 0.2; done";

std::string SettingsAndCredsYaml(const std::string& greeting) {
  return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  greeting: " +
         greeting +
         "\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\ndata:\n"
         "  password: c2VjcmV0\n";
}

class VolumeHardeningTest : public NodeletTest {
 protected:
  void TearDown() override {
    // A test that failed half-way still removes its pods through nodelet first.
    if (nodelet_ && !volumed::MountsUnder(dir_.Sub("root")).empty()) {
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(manifests(), ec)) fs::remove(e.path(), ec);
      WaitFor([&] { return volumed::MountsUnder(dir_.Sub("root")).empty(); }, 30s);
    }
    NodeletTest::TearDown();
    auto left = volumed::MountsUnder(dir_.path());
    EXPECT_TRUE(left.empty()) << "a mount was left: " << (left.empty() ? "" : left.front());
    for (const auto& m : left) umount2(m.c_str(), MNT_DETACH);
  }
  // Runs `sh -c script` in the container; exit code and stdout, then stderr.
  std::pair<int, std::string> Exec(const std::string& id, const std::string& script) {
    auto r = containerd_->cri().ExecSync(id, {"sh", "-c", script}, 10);
    if (!r.ok()) return {-1, r.status().ToString()};
    return {r->exit_code(), r->stdout() + r->stderr()};
  }
  // Removes the manifest of `pod` and waits until its directory and every mount in it are gone.
  void RemovePod(const std::string& file, const std::string& pod) {
    auto uid = PodJson(pod)["metadata"].value("uid", "");
    ASSERT_FALSE(uid.empty());
    const std::string pod_dir = dir_.Sub("root") + "/pods/" + uid;
    fs::remove(manifests() + "/" + file);
    EXPECT_TRUE(
        WaitFor([&] { return volumed::MountsUnder(pod_dir).empty() && !fs::exists(pod_dir); }, 30s))
        << "the pod's mounts, staging mounts included, must go with it";
  }
  // The waiting state {reason, message} of `container` in the pod's status.
  std::pair<std::string, std::string> Waiting(const std::string& pod,
                                              const std::string& container) {
    auto p = PodJson(pod);
    if (!p.contains("status") || !p["status"].contains("containerStatuses")) return {};
    for (const auto& c : p["status"]["containerStatuses"]) {
      if (c.value("name", "") != container || !c.contains("state") ||
          !c["state"].contains("waiting"))
        continue;
      return {c["state"]["waiting"].value("reason", ""),
              c["state"]["waiting"].value("message", "")};
    }
    return {};
  }
};

TEST_F(VolumeHardeningTest, NodeletWrittenVolumesAreReadOnlyAndTamperingReachesNoHostDirectory) {
  if (geteuid() != 0) GTEST_SKIP() << "mounts need root";
  // The host directory the container aims at, with a file in it.
  const std::string victim = dir_.Sub("victim");
  fs::create_directories(victim);
  std::ofstream(victim + "/keep") << "keep";
  Write("settings.yaml", SettingsAndCredsYaml("hello"));
  Write("ro.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: ro\n  labels:\n    tier: web\nspec:\n"
        "  hostNetwork: true\n  terminationGracePeriodSeconds: 2\n  volumes:\n"
        "  - name: config\n    configMap:\n      name: settings\n"
        "  - name: secret\n    secret:\n      secretName: creds\n"
        "  - name: info\n    downwardAPI:\n      items:\n      - path: labels\n        fieldRef:\n"
        "          fieldPath: metadata.labels\n"
        "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
        "    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"" +
            std::string(kServeUntilTerm) +
            "\"]\n"
            "    volumeMounts:\n"  // no readOnly anywhere
            "    - {name: config, mountPath: /config}\n"
            "    - {name: secret, mountPath: /secret}\n"
            "    - {name: info, mountPath: /info}\n");
  StartNodelet();
  std::string id;
  ASSERT_TRUE(WaitFor([&] { return !(id = RunningContainer("ro-node1")).empty(); }, 40s))
      << PodJson("ro-node1").dump(2);
  ASSERT_EQ(Exec(id, "cat /config/greeting").second, "hello");

  for (const char* mnt : {"/config", "/secret", "/info"}) {
    auto [code, out] = Exec(id, std::string("echo x > ") + mnt + "/new");
    EXPECT_NE(code, 0) << mnt;
    EXPECT_THAT(out, HasSubstr("Read-only file system")) << mnt;
    EXPECT_THAT(Exec(id, std::string("grep ' ") + mnt + " ' /proc/mounts").second,
                HasSubstr(" ro,"))
        << mnt;
  }
  // The attack of CVE-2017-1002102: ..data pointed at a host directory (relative, far enough up
  // to reach / from any volume directory), and the payload removed.
  const std::string up = "../../../../../../../../../../../../../../../..";
  auto [code, out] = Exec(id, "ln -sfn " + up + victim +
                                  " /config/..data; rm -rf /config/..data_*; "
                                  "mv /config/..data /config/x");
  EXPECT_NE(code, 0);
  EXPECT_THAT(out, HasSubstr("Read-only file system"));

  // The next update arrives in the running container, and the host directory is untouched.
  Write("settings.yaml", SettingsAndCredsYaml("bonjour"));
  EXPECT_TRUE(WaitFor([&] { return Exec(id, "cat /config/greeting").second == "bonjour"; }, 20s))
      << Exec(id, "ls -la /config").second;
  EXPECT_EQ(RunningContainer("ro-node1"), id);
  EXPECT_TRUE(fs::is_regular_file(victim + "/keep"));
  std::ifstream in(victim + "/keep");
  std::string keep((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(keep, "keep");
  RemovePod("ro.yaml", "ro-node1");
}

TEST_F(VolumeHardeningTest, SubPathThroughALinkInsideWorksOneOutIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "mounts need root";
  // An init container prepares the volume: a directory, a link to it, a link to the host's /
  // (absolute: it means / to whoever resolves it on the host) and a relative one far up.
  const std::string marker = dir_.Sub("host-marker");
  fs::create_directories(marker);
  std::ofstream(marker + "/secret") << "host";
  Write("sp.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: sp\nspec:\n  hostNetwork: true\n"
        "  terminationGracePeriodSeconds: 2\n  volumes:\n  - name: data\n    emptyDir: {}\n"
        "  initContainers:\n  - name: prep\n    image: nodelet.local/busybox:1.0\n"
        "    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"mkdir -p /data/real && "
        "echo inside > /data/real/f && ln -s real /data/good && ln -s " +
            marker + " /data/abs && ln -s ../../../../../../../../../../../../.." + marker +
            " /data/rel\"]\n"
            "    volumeMounts:\n    - {name: data, mountPath: /data}\n"
            "  containers:\n"
            "  - name: good\n    image: nodelet.local/busybox:1.0\n    imagePullPolicy: Never\n"
            "    command: [\"sh\", \"-c\", \"" +
            std::string(kServeUntilTerm) +
            "\"]\n"
            "    volumeMounts:\n    - {name: data, mountPath: /sub, subPath: good}\n"
            "  - name: evil\n    image: nodelet.local/busybox:1.0\n    imagePullPolicy: Never\n"
            "    command: [\"sh\", \"-c\", \"" +
            std::string(kServeUntilTerm) +
            "\"]\n"
            "    volumeMounts:\n    - {name: data, mountPath: /sub, subPath: abs}\n"
            "  - name: evil2\n    image: nodelet.local/busybox:1.0\n    imagePullPolicy: Never\n"
            "    command: [\"sh\", \"-c\", \"" +
            std::string(kServeUntilTerm) +
            "\"]\n"
            "    volumeMounts:\n    - {name: data, mountPath: /sub, subPath: rel/x}\n");
  StartNodelet();
  std::string id;
  ASSERT_TRUE(WaitFor([&] { return !(id = RunningContainer("sp-node1", "good")).empty(); }, 40s))
      << PodJson("sp-node1").dump(2);
  EXPECT_EQ(Exec(id, "cat /sub/f").second, "inside\n");
  for (const auto& [name, sub] : {std::pair{"evil", "abs"}, std::pair{"evil2", "rel/x"}}) {
    std::pair<std::string, std::string> w;
    EXPECT_TRUE(WaitFor(
        [&, name = name] {
          return (w = Waiting("sp-node1", name)).first == "CreateContainerConfigError";
        },
        20s))
        << name << ": " << PodJson("sp-node1").dump(2);
    EXPECT_THAT(w.second, HasSubstr(std::string("subPath \"") + sub + "\"")) << name;
    EXPECT_THAT(w.second, HasSubstr("resolves outside its volume")) << name;
    EXPECT_TRUE(RunningContainer("sp-node1", name).empty()) << name;
  }
  EXPECT_FALSE(fs::exists(marker + "/x")) << "nothing may be created outside the volume";
  // The staging mount is nodelet's; it goes with the pod.
  auto uid = PodJson("sp-node1")["metadata"].value("uid", "");
  ASSERT_FALSE(uid.empty());
  EXPECT_EQ(volumed::MountsUnder(dir_.Sub("root") + "/pods/" + uid + "/volume-subpaths").size(), 1u)
      << "one staging mount, for the subPath that was allowed";
  RemovePod("sp.yaml", "sp-node1");
}

// A container nests 400 directories in its emptyDir (deeper than any fixed limit of a
// recursive removal): the pod's directory still goes with the pod, within a deadline.
TEST_F(VolumeHardeningTest, ADeepTreeInAnEmptyDirGoesWithThePod) {
  if (geteuid() != 0) GTEST_SKIP() << "mounts need root";
  Write("deep.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: deep\nspec:\n  hostNetwork: true\n"
        "  terminationGracePeriodSeconds: 1\n  volumes:\n  - name: data\n    emptyDir: {}\n"
        "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
        "    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"cd /data && i=0 && "
        "while [ $i -lt 400 ]; do mkdir d && cd d && echo $i > f && i=$((i+1)); done && "
        "touch /data/ready && " +
            std::string(kServeUntilTerm) +
            "\"]\n"
            "    volumeMounts:\n    - {name: data, mountPath: /data}\n");
  StartNodelet();
  auto uid = [&] {
    auto p = PodJson("deep-node1");
    return p.is_object() && p.contains("metadata") ? p["metadata"].value("uid", "") : "";
  };
  std::string pod_dir;
  ASSERT_TRUE(WaitFor(
      [&] {
        if (uid().empty()) return false;
        pod_dir = dir_.Sub("root") + "/pods/" + uid();
        return fs::exists(pod_dir + "/volumes/kubernetes.io~empty-dir/data/ready");
      },
      60s))
      << PodJson("deep-node1").dump(2);
  RemovePod("deep.yaml", "deep-node1");
  EXPECT_FALSE(fs::exists(pod_dir)) << "the pod directory outlived the pod";
}

}  // namespace
}  // namespace nodelet::testing
