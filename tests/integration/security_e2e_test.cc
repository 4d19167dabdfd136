// securityContext through the real `nodelet` on a private containerd, seen from inside the
// containers: each container writes what it sees (/proc/self/status, id, its root filesystem,
// /proc/1/cmdline, /proc/sys) into a hostPath directory the test reads.
//
// - Capabilities (drop ALL, add back by name with or without CAP_), no_new_privs, seccomp
//   (RuntimeDefault, Unconfined, and a Localhost profile from ROOT-DIR/seccomp that makes mkdir
//   fail with EPERM), runAsUser/runAsGroup/fsGroup/supplementalGroups, a read-only root.
// - hostPID, shareProcessNamespace and hostIPC; sysctls, safe and --allowed-unsafe-sysctls.
// - Refusals that say why and disturb nothing else: runAsNonRoot against a root image
//   (CreateContainerConfigError), a sysctl outside the allowed set (SysctlForbidden), an
//   AppArmor profile on a kernel without AppArmor.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "lib/status/status_client.h"
#include "tests/testing/containerd.h"
#include "tests/testing/harness.h"
#include "tests/testing/leak_check.h"
#include "tests/testing/nodelet_fixture.h"

namespace nodelet::testing {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

// What every reporting container runs: SCRIPT's output into /results/NAME, atomically (a
// temporary file, then rename), then exit.
std::string Reporter(const std::string& name, const std::string& script, const std::string& extra,
                     const std::string& image = "nodelet.local/busybox:1.0") {
  return "  - name: " + name + "\n    image: " + image +
         "\n    imagePullPolicy: Never\n"
         "    command: [\"sh\", \"-c\", \"{ " +
         script + "; } > /results/" + name + ".tmp 2>&1; mv /results/" + name + ".tmp /results/" +
         name + "\"]\n    volumeMounts: [{name: results, mountPath: /results}]\n" + extra;
}

constexpr char kStatusLines[] =
    "grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; echo uid $(id -u); echo "
    "groups $(id -G)";

class SecurityE2eTest : public NodeletTest {
 protected:
  void SetUp() override {
    NodeletTest::SetUp();
    std::filesystem::create_directories(results_dir());
    chmod(results_dir().c_str(), 0777);
  }
  void TearDown() override {
    if (HasFailure()) {
      for (const auto& e : std::filesystem::directory_iterator(results_dir())) {
        std::cerr << "---- " << e.path().filename().string() << "\n"
                  << ReadTextFile(e.path().string()) << "\n";
      }
    }
    NodeletTest::TearDown();  // prints the service logs of a failed test
    // The pods' tmpfs volumes (a Memory emptyDir, a Secret) stay mounted when nodelet stops, as
    // a node's pods outlive it: unmounted here, deepest first, so the temporary directory goes.
    for (const auto& m : MountsUnder(dir_.path())) umount2(m.c_str(), MNT_DETACH);
  }

  std::string results_dir() const { return dir_.Sub("results"); }
  std::string Result(const std::string& name) const {
    return ReadTextFile(results_dir() + "/" + name);
  }
  // Waits for every named result file.
  bool WaitForResults(const std::vector<std::string>& names, std::chrono::milliseconds timeout) {
    return WaitFor(
        [&] {
          for (const auto& n : names) {
            if (!std::filesystem::exists(results_dir() + "/" + n)) return false;
          }
          return true;
        },
        timeout);
  }
  // A pod on the host's network with the results hostPath, restartPolicy Never.
  std::string PodYaml(const std::string& name, const std::string& spec_extra,
                      const std::string& containers, const std::string& metadata_extra = "") {
    return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name + "\n" + metadata_extra +
           "spec:\n  hostNetwork: true\n  restartPolicy: Never\n"
           "  terminationGracePeriodSeconds: 2\n" +
           spec_extra + "  volumes:\n  - name: results\n    hostPath: {path: " + results_dir() +
           "}\n  containers:\n" + containers;
  }
  std::string Phase(const std::string& pod) {
    auto p = CtlPod(pod);
    return p.is_null() ? std::string()
                       : p["status"].value("phase", "") + "/" + p["status"].value("reason", "");
  }
  // The container's waiting state as "REASON: MESSAGE" ("" when not waiting).
  std::string Waiting(const std::string& pod, const std::string& container) {
    auto p = CtlPod(pod);
    if (p.is_null() || !p["status"].contains("containerStatuses")) return "";
    for (const auto& c : p["status"]["containerStatuses"]) {
      if (c.value("name", "") == container && c.contains("state") &&
          c["state"].contains("waiting")) {
        return c["state"]["waiting"].value("reason", "") + ": " +
               c["state"]["waiting"].value("message", "");
      }
    }
    return "";
  }
  std::vector<std::string> EventLines(const std::string& uid) {
    ipc::Context ctx;
    status::StatusClient statusd(ctx, dir_.Sub("run"));
    EXPECT_TRUE(statusd.Connect().ok());
    auto events = statusd.ListEvents(uid);
    std::vector<std::string> lines;
    if (!events.ok()) return lines;
    for (const auto& e : *events) lines.push_back(e.reason + ": " + e.message);
    return lines;
  }
};

// Capabilities, seccomp, no_new_privs, users and groups and a read-only root, from
// /proc/self/status and id inside the containers; a Localhost profile that denies mkdir.
TEST_F(SecurityE2eTest, CapabilitiesSeccompUsersAndReadOnlyRootFromInside) {
  std::filesystem::create_directories(dir_.Sub("root") + "/seccomp/profiles");
  std::ofstream(dir_.Sub("root") + "/seccomp/profiles/deny-mkdir.json")
      << R"({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["mkdir", "mkdirat"],)"
      << R"( "action": "SCMP_ACT_ERRNO", "errnoRet": 1}]})";
  const std::string root = "    securityContext: {runAsUser: 0";
  Write("ids.yaml",
        PodYaml("ids",
                "  securityContext:\n    runAsUser: 1000\n    runAsGroup: 3000\n"
                "    fsGroup: 2000\n    supplementalGroups: [4000]\n"
                "    seccompProfile: {type: RuntimeDefault}\n",
                Reporter("dropall", kStatusLines, root + ", capabilities: {drop: [ALL]}}\n") +
                    Reporter("addback", kStatusLines,
                             root + ", capabilities: {drop: [all], add: [CAP_NET_BIND_SERVICE, "
                                    "chown]}}\n") +
                    Reporter("user",
                             std::string(kStatusLines) +
                                 "; if touch /probe; then echo rootfs writable; else echo rootfs "
                                 "read-only; fi",
                             "    securityContext: {allowPrivilegeEscalation: false, "
                             "readOnlyRootFilesystem: true}\n") +
                    Reporter("unconfined", kStatusLines,
                             root + ", seccompProfile: {type: Unconfined}}\n") +
                    Reporter("denied", "mkdir /tmp/made; echo rc $?",
                             root + ", seccompProfile: {type: Localhost, localhostProfile: "
                                    "profiles/deny-mkdir.json}}\n") +
                    Reporter("allowed", "mkdir /tmp/made; echo rc $?", root + "}\n")));
  StartNodelet();
  ASSERT_TRUE(
      WaitForResults({"dropall", "addback", "user", "unconfined", "denied", "allowed"}, 60s))
      << CtlPod("ids-node1").dump(2);

  const std::string dropall = Result("dropall");
  EXPECT_THAT(dropall, HasSubstr("CapEff:\t0000000000000000"));
  EXPECT_THAT(dropall, HasSubstr("CapBnd:\t0000000000000000"));
  EXPECT_THAT(dropall, HasSubstr("uid 0"));
  EXPECT_THAT(dropall, HasSubstr("Seccomp:\t2")) << "the pod's RuntimeDefault applies";
  // CHOWN is bit 0, NET_BIND_SERVICE bit 10.
  EXPECT_THAT(Result("addback"), HasSubstr("CapEff:\t0000000000000401"));
  EXPECT_THAT(Result("addback"), HasSubstr("CapBnd:\t0000000000000401"));

  const std::string user = Result("user");
  EXPECT_THAT(user, HasSubstr("uid 1000"));
  EXPECT_THAT(user, HasSubstr("NoNewPrivs:\t1"));
  EXPECT_THAT(user, HasSubstr("CapEff:\t0000000000000000")) << "a non-root user has none";
  EXPECT_THAT(user, HasSubstr("rootfs read-only"));
  // The primary group, then fsGroup and supplementalGroups.
  std::string groups = user.substr(user.find("groups "));
  groups = groups.substr(0, groups.find('\n'));
  EXPECT_THAT(groups, HasSubstr("groups 3000")) << groups;
  EXPECT_THAT(groups, HasSubstr("2000")) << groups;
  EXPECT_THAT(groups, HasSubstr("4000")) << groups;

  EXPECT_THAT(Result("unconfined"), HasSubstr("Seccomp:\t0"));
  EXPECT_THAT(Result("unconfined"), HasSubstr("CapEff:\t00000000a80425fb"))
      << "the runtime's default set without a capabilities field";
  EXPECT_THAT(Result("denied"), HasSubstr("Operation not permitted"));
  EXPECT_THAT(Result("denied"), HasSubstr("rc 1"));
  EXPECT_THAT(Result("allowed"), HasSubstr("rc 0"));
}

// hostPID shows the node's init as PID 1; shareProcessNamespace the pod's pause; otherwise the
// container's own command. hostIPC shares the node's IPC namespace. Sysctls from the safe set
// and from --allowed-unsafe-sysctls are set in the pod's namespaces.
TEST_F(SecurityE2eTest, HostNamespacesSharedPidsAndSysctls) {
  const std::string pid1 = "tr '\\\\000' ' ' < /proc/1/cmdline; echo; readlink /proc/self/ns/ipc";
  Write("hostpid.yaml",
        PodYaml("hostpid", "  hostPID: true\n  hostIPC: true\n", Reporter("onhost", pid1, "")));
  Write("shared.yaml",
        PodYaml("shared", "  shareProcessNamespace: true\n", Reporter("shared", pid1, "")));
  Write("private.yaml", PodYaml("private", "", Reporter("solo", pid1, "")));
  Write("sysctls.yaml",
        PodYaml("sysctls",
                "  securityContext:\n    sysctls:\n"
                "    - {name: kernel.shm_rmid_forced, value: '1'}\n"
                "    - {name: kernel/msgmax, value: '12345'}\n",
                Reporter("sysctl", "cat /proc/sys/kernel/shm_rmid_forced /proc/sys/kernel/msgmax",
                         "")));
  StartNodelet({"--allowed-unsafe-sysctls", "kernel.msg*"});
  ASSERT_TRUE(WaitForResults({"onhost", "shared", "solo", "sysctl"}, 60s));

  std::string host_init = ReadTextFile("/proc/1/cmdline");
  std::replace(host_init.begin(), host_init.end(), '\0', ' ');
  char host_ipc[128] = {};
  ASSERT_GT(readlink("/proc/self/ns/ipc", host_ipc, sizeof host_ipc - 1), 0);

  EXPECT_EQ(Result("onhost"), host_init + "\n" + host_ipc + "\n");
  EXPECT_THAT(Result("shared"), ::testing::StartsWith("/pause"));
  EXPECT_THAT(Result("shared"), ::testing::Not(HasSubstr(host_ipc)));
  EXPECT_THAT(Result("solo"), HasSubstr("sh -c"));
  EXPECT_THAT(Result("solo"), ::testing::Not(HasSubstr(host_ipc)));
  EXPECT_EQ(Result("sysctl"), "1\n12345\n");
  EXPECT_NE(ReadTextFile("/proc/sys/kernel/msgmax"), "12345\n") << "the node's value is its own";
}

// Pods refused for their securityContext say why, in their status and as an event, and
// nothing else on the node is disturbed: runAsNonRoot with a root image is the container's
// CreateContainerConfigError (retried, as the kubelet does), a sysctl outside the allowed set
// fails the pod at admission (SysctlForbidden), and so does an AppArmor profile on a kernel
// without AppArmor.
TEST_F(SecurityE2eTest, RefusedPodsSayWhyAndDisturbNothingElse) {
  const std::string sleeper = "trap 'exit 0' TERM; while true; do sleep 0.2; done";
  auto running = [&](const std::string& name, const std::string& spec_extra,
                     const std::string& container_extra, const std::string& meta = "") {
    return PodYaml(name, spec_extra,
                   "  - name: app\n    image: nodelet.local/busybox:1.0\n"
                   "    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"" +
                       sleeper + "\"]\n" + container_extra,
                   meta);
  };
  Write("nonroot.yaml", running("nonroot", "  securityContext: {runAsNonRoot: true}\n", ""));
  Write("nonroot-ok.yaml",
        running("nonroot-ok", "  securityContext: {runAsNonRoot: true, runAsUser: 1000}\n", ""));
  Write("unsafe.yaml",
        running("unsafe", "  securityContext: {sysctls: [{name: kernel.sem, value: '1 2 3 4'}]}\n",
                ""));
  Write("armored.yaml",
        running("armored", "", "    securityContext: {appArmorProfile: {type: RuntimeDefault}}\n"));
  Write("annotated.yaml",
        running("annotated", "", "",
                "  annotations: {container.apparmor.security.beta.kubernetes.io/app: "
                "unconfined}\n"));
  StartNodelet({"--allowed-unsafe-sysctls", "kernel.msg*"});

  EXPECT_TRUE(WaitFor([&] { return !RunningContainer("nonroot-ok-node1").empty(); }, 40s))
      << CtlPod("nonroot-ok-node1").dump(2);
  EXPECT_TRUE(WaitFor([&] { return !RunningContainer("annotated-node1").empty(); }, 40s))
      << "an unconfined AppArmor annotation needs no AppArmor: "
      << CtlPod("annotated-node1").dump(2);

  ASSERT_TRUE(WaitFor(
      [&] { return Waiting("nonroot-node1", "app").rfind("CreateContainerConfigError", 0) == 0; },
      40s))
      << CtlPod("nonroot-node1").dump(2);
  EXPECT_THAT(Waiting("nonroot-node1", "app"),
              HasSubstr("container has runAsNonRoot and image will run as root"));
  EXPECT_EQ(RunningContainer("nonroot-node1"), "");
  const std::string uid = PodJson("nonroot-node1")["metadata"].value("uid", "");
  EXPECT_TRUE(WaitFor(
      [&] {
        auto lines = EventLines(uid);
        return std::any_of(lines.begin(), lines.end(), [](const std::string& l) {
          return l.find("Failed: Error: container has runAsNonRoot and image will run as root") ==
                 0;
        });
      },
      20s));

  EXPECT_TRUE(WaitFor([&] { return Phase("unsafe-node1") == "Failed/SysctlForbidden"; }, 30s))
      << Phase("unsafe-node1");
  EXPECT_THAT(CtlPod("unsafe-node1")["status"].value("message", ""),
              HasSubstr("forbidden sysctl: \"kernel.sem\" not allowlisted"));
  const std::string unsafe_uid = PodJson("unsafe-node1")["metadata"].value("uid", "");
  EXPECT_TRUE(WaitFor(
      [&] {
        auto lines = EventLines(unsafe_uid);
        return std::find(lines.begin(), lines.end(),
                         "SysctlForbidden: forbidden sysctl: \"kernel.sem\" not allowlisted") !=
               lines.end();
      },
      20s));
  const bool apparmor = ReadTextFile("/sys/module/apparmor/parameters/enabled").rfind("Y", 0) == 0;
  if (apparmor) {
    EXPECT_TRUE(WaitFor([&] { return !RunningContainer("armored-node1").empty(); }, 40s));
  } else {
    EXPECT_TRUE(WaitFor([&] { return Phase("armored-node1") == "Failed/AppArmor"; }, 30s))
        << Phase("armored-node1");
    EXPECT_THAT(CtlPod("armored-node1")["status"].value("message", ""),
                HasSubstr("AppArmor is not enabled on the host"));
  }
  // The others kept running throughout.
  EXPECT_NE(RunningContainer("nonroot-ok-node1"), "");
  EXPECT_NE(RunningContainer("annotated-node1"), "");
}

// fsGroup from inside a container running as another user: the emptyDirs (disk and Memory)
// are in the group with set-group-ID, so what the container makes there is too; Secret and
// ConfigMap files are in the group and readable by it whatever their mode (a 0400 Secret key
// reads as 0440), the Secret on a tmpfs.
TEST_F(SecurityE2eTest, VolumesBelongToTheFsGroup) {
  Write("owned.yaml",
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: token\nstringData:\n  t: s3cret\n"
        "---\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  level: debug\n"
        "---\n" +
            PodYaml("owned",
                    "  securityContext: {runAsUser: 1000, runAsGroup: 3000, fsGroup: 2000}\n",
                    Reporter("owner",
                             "stat -c '%a %g %n' /scratch /mem; touch /scratch/made /mem/made; "
                             "stat -c '%a %g %n' /scratch/made /mem/made; "
                             "stat -L -c '%a %g %n' /secret/t /config/level; cat /secret/t; "
                             "echo; grep -c ' /secret tmpfs ' /proc/mounts",
                             "    volumeMounts:\n    - {name: results, mountPath: /results}\n"
                             "    - {name: scratch, mountPath: /scratch}\n"
                             "    - {name: mem, mountPath: /mem}\n"
                             "    - {name: secret, mountPath: /secret}\n"
                             "    - {name: config, mountPath: /config}\n")));
  // The Reporter's own volumeMounts line is replaced by the fuller one above.
  std::string yaml = ReadTextFile(manifests() + "/owned.yaml");
  const std::string single = "    volumeMounts: [{name: results, mountPath: /results}]\n";
  yaml.erase(yaml.find(single), single.size());
  yaml.replace(yaml.find("  volumes:\n"), std::string("  volumes:\n").size(),
               "  volumes:\n  - {name: scratch, emptyDir: {}}\n"
               "  - {name: mem, emptyDir: {medium: Memory}}\n"
               "  - {name: secret, secret: {secretName: token, defaultMode: 0400}}\n"
               "  - {name: config, configMap: {name: settings}}\n");
  Write("owned.yaml", yaml);
  StartNodelet();
  ASSERT_TRUE(WaitForResults({"owner"}, 60s)) << CtlPod("owned-node1").dump(2);
  const std::string out = Result("owner");
  EXPECT_THAT(out, HasSubstr("2777 2000 /scratch\n"));
  EXPECT_THAT(out, HasSubstr("2777 2000 /mem\n"));
  EXPECT_THAT(out, HasSubstr(" 2000 /scratch/made\n")) << "set-group-ID passes the group on";
  EXPECT_THAT(out, HasSubstr(" 2000 /mem/made\n"));
  EXPECT_THAT(out, HasSubstr("440 2000 /secret/t\n"));
  EXPECT_THAT(out, HasSubstr("644 2000 /config/level\n"));
  EXPECT_THAT(out, HasSubstr("s3cret\n1\n")) << "readable through the group; on a tmpfs";
}

}  // namespace
}  // namespace nodelet::testing
