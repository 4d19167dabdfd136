// Volumes end to end through the real `nodelet` on a private containerd, with real mounts:
// emptyDir (disk and Memory), hostPath, downwardAPI, configMap and secret volumes seen from
// inside the container (ExecSync), a read-only mount, a ConfigMap update reaching the running
// container, a failing hostPath that holds the pod with a clear reason until it is fixed, and a
// removed pod leaving no mount and no directory behind.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "svc-volumed/volume_manager.h"
#include "tests/testing/containerd.h"
#include "tests/testing/harness.h"
#include "tests/testing/nodelet_fixture.h"

namespace nodelet::testing {
namespace {

namespace v1 = ::runtime::v1;
using namespace std::chrono_literals;
using ::testing::HasSubstr;

constexpr char kServe[] = "trap 'exit 0' TERM; while true; do sleep 0.2; done";

std::string ConfigMapYaml(const std::string& greeting) {
  return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  greeting: " +
         greeting + "\n  mode: fast\n";
}

std::string VolumesPodYaml(const std::string& host_dir) {
  return std::string(
             "apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\ndata:\n"
             "  password: c2VjcmV0\n---\n"
             "apiVersion: v1\nkind: Pod\nmetadata:\n  name: vols\n  labels:\n    tier: web\n"
             "spec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 2\n  volumes:\n"
             "  - name: scratch\n    emptyDir: {}\n"
             "  - name: mem\n    emptyDir:\n      medium: Memory\n      sizeLimit: 16Mi\n"
             "  - name: host\n    hostPath:\n      path: ") +
         host_dir +
         "\n      type: DirectoryOrCreate\n"
         "  - name: info\n    downwardAPI:\n      items:\n      - path: name\n        fieldRef:\n"
         "          fieldPath: metadata.name\n      - path: labels\n        fieldRef:\n"
         "          fieldPath: metadata.labels\n"
         "  - name: config\n    configMap:\n      name: settings\n"
         "  - name: secret\n    secret:\n      secretName: creds\n"
         "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
         "    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"" +
         kServe +
         "\"]\n"
         "    volumeMounts:\n"
         "    - {name: scratch, mountPath: /scratch}\n"
         "    - {name: mem, mountPath: /mem}\n"
         "    - {name: host, mountPath: /host, readOnly: true}\n"
         "    - {name: info, mountPath: /info}\n"
         "    - {name: config, mountPath: /config}\n"
         "    - {name: secret, mountPath: /secret}\n";
}

class VolumesTest : public NodeletTest {
 protected:
  void TearDown() override {
    NodeletTest::TearDown();
    // Nothing of ours may stay mounted.
    EXPECT_TRUE(volumed::MountsUnder(dir_.path()).empty());
  }
  // Runs `sh -c script` in the container; returns exit code and stdout.
  std::pair<int, std::string> Exec(const std::string& id, const std::string& script) {
    auto r = containerd_->cri().ExecSync(id, {"sh", "-c", script}, 10);
    if (!r.ok()) return {-1, r.status().ToString()};
    return {r->exit_code(), r->stdout()};
  }
};

TEST_F(VolumesTest, EveryPluginSeenFromTheContainerUpdatedAndCleanedUp) {
  if (geteuid() != 0) GTEST_SKIP() << "mounts need root";
  const std::string host_dir = dir_.Sub("hostdata");
  Write("settings.yaml", ConfigMapYaml("hello"));
  Write("vols.yaml", VolumesPodYaml(host_dir));
  StartNodelet();
  std::string id;
  ASSERT_TRUE(WaitFor([&] { return !(id = RunningContainer("vols-node1")).empty(); }, 40s))
      << PodJson("vols-node1").dump(2);

  EXPECT_EQ(Exec(id, "cat /config/greeting").second, "hello");
  EXPECT_EQ(Exec(id, "cat /secret/password").second, "secret");
  EXPECT_EQ(Exec(id, "cat /info/name").second, "vols-node1");
  EXPECT_THAT(Exec(id, "cat /info/labels").second, HasSubstr("tier=\"web\""));
  EXPECT_EQ(Exec(id, "echo x > /scratch/f && cat /scratch/f").second, "x\n");
  EXPECT_THAT(Exec(id, "grep ' /mem ' /proc/mounts").second, HasSubstr("tmpfs"));
  EXPECT_THAT(Exec(id, "grep ' /secret ' /proc/mounts").second, HasSubstr("tmpfs"));
  EXPECT_NE(Exec(id, "touch /host/x").first, 0) << "a readOnly mount must be read-only";
  EXPECT_TRUE(std::filesystem::is_directory(host_dir)) << "DirectoryOrCreate creates it";
  auto ctl = RunCommand(
      {BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "volumes", "vols-node1", "--json"},
      5s);
  ASSERT_EQ(ctl.exit_code, 0) << ctl.output;
  auto vols = nlohmann::json::parse(ctl.output, nullptr, false);
  ASSERT_TRUE(vols.is_array()) << ctl.output;
  EXPECT_EQ(vols.size(), 6u);
  for (const auto& v : vols) EXPECT_EQ(v.value("state", ""), "mounted") << v.dump();

  // A changed ConfigMap reaches the running container (atomic ..data swap), no restart.
  Write("settings.yaml", ConfigMapYaml("bonjour"));
  EXPECT_TRUE(WaitFor([&] { return Exec(id, "cat /config/greeting").second == "bonjour"; }, 20s));
  EXPECT_EQ(RunningContainer("vols-node1"), id);

  // Removed: every mount under the pod's directory is gone, and the directory too.
  auto uid = PodJson("vols-node1")["metadata"].value("uid", "");
  ASSERT_FALSE(uid.empty());
  const std::string pod_dir = dir_.Sub("root") + "/pods/" + uid;
  ASSERT_FALSE(volumed::MountsUnder(pod_dir).empty());
  std::filesystem::remove(manifests() + "/vols.yaml");
  EXPECT_TRUE(WaitFor(
      [&] { return volumed::MountsUnder(pod_dir).empty() && !std::filesystem::exists(pod_dir); },
      30s));
}

TEST_F(VolumesTest, FailingHostPathHoldsThePodWithAReasonUntilFixed) {
  if (geteuid() != 0) GTEST_SKIP() << "mounts need root";
  const std::string missing = dir_.Sub("not-yet");
  Write("waiter.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: waiter\nspec:\n  hostNetwork: true\n"
        "  terminationGracePeriodSeconds: 2\n  volumes:\n  - name: data\n    hostPath:\n"
        "      path: " +
            missing +
            "\n      type: Directory\n"
            "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
            "    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"" +
            std::string(kServe) +
            "\"]\n"
            "    volumeMounts:\n    - {name: data, mountPath: /data}\n");
  StartNodelet();
  std::string message;
  ASSERT_TRUE(WaitFor(
      [&] {
        auto p = PodJson("waiter-node1");
        if (!p.contains("status") || !p["status"].contains("containerStatuses")) return false;
        for (const auto& c : p["status"]["containerStatuses"]) {
          if (c.contains("state") && c["state"].contains("waiting")) {
            message = c["state"]["waiting"].value("message", "");
          }
        }
        return message.find("not a directory") != std::string::npos;
      },
      30s))
      << PodJson("waiter-node1").dump(2);
  EXPECT_THAT(message, HasSubstr(missing));
  EXPECT_TRUE(RunningContainer("waiter-node1").empty());
  auto ctl = RunCommand(
      {BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "volumes", "waiter-node1"}, 5s);
  EXPECT_EQ(ctl.exit_code, 0) << ctl.output;
  EXPECT_THAT(ctl.output, HasSubstr("failing"));
  EXPECT_THAT(ctl.output, HasSubstr("not a directory"));

  std::filesystem::create_directories(missing);
  EXPECT_TRUE(WaitFor([&] { return !RunningContainer("waiter-node1").empty(); }, 30s))
      << "the pod must start once the directory exists (volumed retries with backoff)";

  // A pod stuck on a missing ConfigMap is deleted at once: nothing waits for its mount.
  Write("stuck.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: stuck\nspec:\n  hostNetwork: true\n"
        "  volumes:\n  - name: cfg\n    configMap:\n      name: nowhere\n"
        "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
        "    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"" +
            std::string(kServe) +
            "\"]\n"
            "    volumeMounts:\n    - {name: cfg, mountPath: /cfg}\n");
  auto volumes_of = [&](const std::string& pod) {
    return RunCommand({BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "volumes", pod}, 5s);
  };
  ASSERT_TRUE(WaitFor(
      [&] {
        return volumes_of("stuck-node1").output.find("configmap \"nowhere\" not found") !=
               std::string::npos;
      },
      20s))
      << volumes_of("stuck-node1").output;
  std::filesystem::remove(manifests() + "/stuck.yaml");
  EXPECT_TRUE(WaitFor([&] { return volumes_of("stuck-node1").exit_code == 4; }, 10s))
      << "the deleted pod must be gone from volumed";
  EXPECT_FALSE(RunningContainer("waiter-node1").empty()) << "the other pod is untouched";
}

// kill -9 of volumed again and again while pods with tmpfs volumes come up: no volume is
// mounted twice, none leaks, every pod runs.
TEST_F(VolumesTest, KillNineOfVolumedWhileMountingNeverDoubleMounts) {
  if (geteuid() != 0) GTEST_SKIP() << "mounts need root";
  constexpr int kPods = 5;
  for (int i = 0; i < kPods; ++i) {
    std::string name = "m" + std::to_string(i);
    Write(
        name + ".yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
            "\nspec:\n  hostNetwork: true\n"
            "  terminationGracePeriodSeconds: 2\n  volumes:\n  - name: a\n    emptyDir:\n"
            "      medium: Memory\n  - name: b\n    emptyDir:\n      medium: Memory\n"
            "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
            "    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"" +
            std::string(kServe) +
            "\"]\n"
            "    volumeMounts:\n    - {name: a, mountPath: /a}\n    - {name: b, mountPath: /b}\n");
  }
  // 20 kills in a row: no FATAL, and quick restarts.
  StartNodelet({"--restart-intensity", "1000", "--backoff-max", "200ms"});
  auto pid_of_volumed = [&] {
    auto r =
        RunCommand({BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "pid", "volumed"}, 5s);
    return static_cast<pid_t>(std::atoi(r.output.c_str()));
  };
  for (int i = 0; i < 20; ++i) {
    pid_t pid = pid_of_volumed();
    ASSERT_GT(pid, 0);
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    ASSERT_TRUE(WaitProcessGone(pid, 10s));
    ASSERT_TRUE(notify_->WaitFor("STATUS=4/4 services running", 20s)) << "kill " << i;
  }
  EXPECT_TRUE(WaitFor(
      [&] {
        for (int i = 0; i < kPods; ++i) {
          if (RunningContainer("m" + std::to_string(i) + "-node1").empty()) return false;
        }
        return true;
      },
      60s));
  // Exactly one mount per tmpfs volume.
  auto mounts = volumed::MountsUnder(dir_.Sub("root"));
  std::map<std::string, int> count;
  for (const auto& m : mounts) ++count[m];
  EXPECT_EQ(count.size(), static_cast<size_t>(2 * kPods));
  for (const auto& [m, n] : count) EXPECT_EQ(n, 1) << m << " is mounted " << n << " times";
  for (int i = 0; i < kPods; ++i)
    std::filesystem::remove(manifests() + "/m" + std::to_string(i) + ".yaml");
  EXPECT_TRUE(WaitFor([&] { return volumed::MountsUnder(dir_.Sub("root")).empty(); }, 30s))
      << "removed pods must leave no mount";
}

}  // namespace
}  // namespace nodelet::testing
