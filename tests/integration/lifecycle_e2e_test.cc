// A pod's end of life through the real `nodelet` on a private containerd: what happens between
// the deletion of its manifest and the moment nothing of it is left.
//
// - A pod's volumes outlive its containers: an emptyDir (on disk and on a tmpfs) stays in place
//   for the whole grace period, and goes (directory and mounts) only after the containers have
//   stopped; also when volumed, podworkerd or the supervisor is SIGKILLed meanwhile.
// - A deleted pod's status is kept while it terminates and dropped once it has stopped (its
//   events stay); an admission-rejected pod keeps its Failed status while its manifest exists.
// - Removals wait for every pod source: a URL answering 503 across a restart of nodelet leaves
//   its pod's container and volumes alone.
// - Lifecycle hooks: postStart runs after the start (a failing one kills the container, which is
//   restarted), preStop runs before SIGTERM, also when podworkerd is SIGKILLed in the middle of
//   the hook (the new podworkerd reads the hook stamped on the container and runs it again).
// - The environment: fieldRef, resourceFieldRef, configMapKeyRef/secretKeyRef from the
//   manifest's own ConfigMap and Secret, envFrom with a prefix, $(VAR) expansion; a missing
//   ConfigMap is CreateContainerConfigError. runtimeClassName is the CRI runtime handler.
// - Probes over HTTPS (no certificate check) and gRPC (grpc.health.v1) decide readiness.
// - Termination messages: the terminationMessagePath file, or the log's end on failure.
// - Admission in creation order; finished pods do not count against maxPods.
// - No head-of-line blocking: a hanging image pull delays no other pod's kill or start.
//
// The pods' containers trap SIGTERM and, in the handler, check their emptyDir files over a few
// seconds, writing what they find into a hostPath directory the test reads.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "lib/common/node_ip.h"
#include "lib/status/status_client.h"
#include "tests/testing/containerd.h"
#include "tests/testing/harness.h"
#include "tests/testing/httplib_listen.h"
#include "tests/testing/leak_check.h"
#include "tests/testing/loopback_server.h"
#include "tests/testing/nodelet_fixture.h"

namespace nodelet::testing {
namespace {

namespace v1 = ::runtime::v1;
using namespace std::chrono_literals;
using ::testing::HasSubstr;

// The container of every pod here. It writes a marker into each emptyDir (`scratch` on disk,
// `mem` on a tmpfs), installs its SIGTERM handler and says "running". On SIGTERM it ignores
// further SIGTERMs, says "started", checks both markers CHECKS times half a second apart
// ("scratch ok" / "scratch missing", the same for mem), says "done" and exits 0. A container
// SIGKILLed before the end of its handler has no "done" line.
std::string GracefulScript(int checks) {
  return "      echo kept > /scratch/marker\n"
         "      echo kept > /mem/marker\n"
         "      check() {\n"
         "        if [ \"$(cat /$1/marker 2>/dev/null)\" = kept ]; then echo \"$1 ok\";\n"
         "        else echo \"$1 missing\"; fi\n"
         "      }\n"
         "      on_term() {\n"
         "        trap '' TERM\n"
         "        echo started >> /results/out\n"
         "        i=0\n"
         "        while [ $i -lt " +
         std::to_string(checks) +
         " ]; do\n"
         "          check scratch >> /results/out\n"
         "          check mem >> /results/out\n"
         "          sleep 0.5\n"
         "          i=$((i+1))\n"
         "        done\n"
         "        echo done >> /results/out\n"
         "        exit 0\n"
         "      }\n"
         "      trap on_term TERM\n"
         "      echo running >> /results/out\n"
         "      while true; do sleep 0.2; done\n";
}

// A pod with a 10 s grace period, the two emptyDirs and the results directory (hostPath).
std::string GracefulPodYaml(const std::string& name, const std::string& results_dir, int checks) {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
         "\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 10\n"
         "  volumes:\n"
         "  - name: scratch\n    emptyDir: {}\n"
         "  - name: mem\n    emptyDir:\n      medium: Memory\n      sizeLimit: 8Mi\n"
         "  - name: results\n    hostPath:\n      path: " +
         results_dir +
         "\n      type: DirectoryOrCreate\n"
         "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
         "    imagePullPolicy: Never\n"
         "    command:\n    - sh\n    - -c\n    - |\n" +
         GracefulScript(checks) +
         "    volumeMounts:\n"
         "    - {name: scratch, mountPath: /scratch}\n"
         "    - {name: mem, mountPath: /mem}\n"
         "    - {name: results, mountPath: /results}\n";
}

// A pod whose container writes a marker into both emptyDirs and then keeps running.
std::string KeeperPodYaml(const std::string& name) {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
         "\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 2\n"
         "  volumes:\n"
         "  - name: scratch\n    emptyDir: {}\n"
         "  - name: mem\n    emptyDir:\n      medium: Memory\n      sizeLimit: 8Mi\n"
         "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
         "    imagePullPolicy: Never\n"
         "    command: [\"sh\", \"-c\", \"echo kept > /scratch/marker; echo kept > /mem/marker; "
         "trap 'exit 0' TERM; while true; do sleep 0.2; done\"]\n"
         "    volumeMounts:\n"
         "    - {name: scratch, mountPath: /scratch}\n"
         "    - {name: mem, mountPath: /mem}\n";
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

size_t CountLines(const std::vector<std::string>& lines, const std::string& what) {
  return static_cast<size_t>(std::count(lines.begin(), lines.end(), what));
}

class LifecycleE2eTest : public NodeletTest {
 protected:
  void SetUp() override {
    NodeletTest::SetUp();
    std::filesystem::create_directories(results_dir());
    chmod(results_dir().c_str(), 0777);
    http_port_ = FreeLoopbackPort();
  }
  void TearDown() override {
    if (HasFailure()) {
      std::cerr << "---- results/out\n" << ReadTextFile(results_file()) << "\n";
    }
    NodeletTest::TearDown();
    // Whatever a failed test left mounted (a tmpfs emptyDir of a pod it never removed) goes
    // here, deepest first, so that the temporary directory can be removed.
    for (const auto& m : MountsUnder(dir_.path())) umount2(m.c_str(), MNT_DETACH);
  }

  std::string results_dir() const { return dir_.Sub("results"); }
  std::string results_file() const { return results_dir() + "/out"; }
  std::vector<std::string> Results() const { return Lines(ReadTextFile(results_file())); }
  bool ResultsHave(const std::string& line) const { return CountLines(Results(), line) > 0; }

  // nodelet's flags in every test: its HTTP endpoint on a port of its own.
  std::vector<std::string> Flags(std::vector<std::string> more = {}) const {
    std::vector<std::string> f = {"--http-address", "127.0.0.1:" + std::to_string(http_port_)};
    f.insert(f.end(), more.begin(), more.end());
    return f;
  }

  std::string PodDir(const std::string& uid) const { return dir_.Sub("root") + "/pods/" + uid; }
  std::string EmptyDir(const std::string& uid, const std::string& volume) const {
    return PodDir(uid) + "/volumes/kubernetes.io~empty-dir/" + volume;
  }
  // The pod's uid; waits up to 10 s for `nodeletctl pod` to answer ("" when it never does).
  std::string Uid(const std::string& pod) {
    std::string uid;
    WaitFor(
        [&] {
          const nlohmann::json j = PodJson(pod);
          if (j.is_object() && j.contains("metadata") && j["metadata"].is_object()) {
            uid = j["metadata"].value("uid", "");
          }
          return !uid.empty();
        },
        std::chrono::seconds(10));
    return uid;
  }

  // What is wrong, seen from the host, with the pod's two emptyDirs ("" when nothing): the
  // markers must be there, and the Memory one must still be a mount.
  std::string HostVolumesProblem(const std::string& uid) {
    std::string problem;
    for (const char* v : {"scratch", "mem"}) {
      const std::string marker = EmptyDir(uid, v) + "/marker";
      if (ReadTextFile(marker) != "kept\n") problem += marker + " is gone; ";
    }
    const auto mounts = MountsUnder(PodDir(uid));
    if (std::find(mounts.begin(), mounts.end(), EmptyDir(uid, "mem")) == mounts.end()) {
      problem += EmptyDir(uid, "mem") + " is not mounted; ";
    }
    return problem;
  }

  // Pod names listed by `nodeletctl pods -o json` (statusd).
  std::vector<std::string> CtlPodNames() {
    auto r = RunCommand(
        {BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "pods", "-o", "json"}, 5s);
    return NamesOf(r.output);
  }
  // Pod names listed by the HTTP endpoint's /pods.
  std::vector<std::string> HttpPodNames() {
    httplib::Client http("127.0.0.1", http_port_);
    http.set_connection_timeout(2s);
    http.set_read_timeout(5s);
    auto r = http.Get("/pods");
    return r && r->status == 200 ? NamesOf(r->body) : std::vector<std::string>{"(unavailable)"};
  }
  static std::vector<std::string> NamesOf(const std::string& pod_list) {
    std::vector<std::string> names;
    auto j = nlohmann::json::parse(pod_list, nullptr, false);
    if (j.is_discarded() || !j.contains("items")) return {"(no pod list)"};
    for (const auto& p : j["items"]) names.push_back(p["metadata"].value("name", ""));
    return names;
  }
  static bool Has(const std::vector<std::string>& names, const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  }
  static std::string Join(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
    return "[" + s + "]";
  }

  // The pod's events from statusd (a test failure when they cannot be read).
  std::vector<status::PodEvent> Events(const std::string& uid) {
    ipc::Context ctx;
    status::StatusClient statusd(ctx, dir_.Sub("run"));
    EXPECT_TRUE(statusd.Connect().ok());
    auto events = statusd.ListEvents(uid);
    EXPECT_TRUE(events.ok()) << events.status().ToString();
    return events.ok() ? *events : std::vector<status::PodEvent>{};
  }
  // "REASON: MESSAGE" of each of the pod's events.
  std::vector<std::string> EventLines(const std::string& uid) {
    std::vector<std::string> lines;
    for (const auto& e : Events(uid)) lines.push_back(e.reason + ": " + e.message);
    return lines;
  }
  // The container's restartCount in the pod's status; -1 while it has none.
  int RestartCount(const std::string& pod, const std::string& container) {
    auto p = CtlPod(pod);
    if (p.is_null() || !p["status"].contains("containerStatuses")) return -1;
    for (const auto& c : p["status"]["containerStatuses"]) {
      if (c.value("name", "") == container) return c.value("restartCount", -1);
    }
    return -1;
  }

  // Starts nodelet with `graceful.yaml` (CHECKS checks in the handler) and waits until its
  // container runs with its handler installed; returns the pod's uid.
  std::string StartGracefulPod(int checks, std::vector<std::string> extra_flags = {}) {
    Write("graceful.yaml", GracefulPodYaml("graceful", results_dir(), checks));
    StartNodelet(Flags(std::move(extra_flags)));
    if (HasFatalFailure()) return "";
    EXPECT_TRUE(WaitFor(
        [&] { return !RunningContainer("graceful-node1").empty() && ResultsHave("running"); }, 40s))
        << PodJson("graceful-node1").dump(2);
    std::string uid = Uid("graceful-node1");
    EXPECT_FALSE(uid.empty());
    EXPECT_EQ(HostVolumesProblem(uid), "") << "the volumes must be set up before the test goes on";
    return uid;
  }

  // Deletes `graceful.yaml` and waits for the handler's "started".
  void DeleteGracefulPodAndWaitForHandler() {
    std::filesystem::remove(manifests() + "/graceful.yaml");
    ASSERT_TRUE(WaitFor([&] { return ResultsHave("started"); }, 20s))
        << "the container never got its SIGTERM: " << ReadTextFile(results_file());
  }

  // The handler's verdicts: every check found both markers, at least `min_checks` rounds ran.
  void ExpectHandlerSawVolumes(size_t min_checks) {
    const auto lines = Results();
    const std::string all = ReadTextFile(results_file());
    EXPECT_EQ(CountLines(lines, "scratch missing"), 0u)
        << "the emptyDir on disk vanished during the grace period:\n"
        << all;
    EXPECT_EQ(CountLines(lines, "mem missing"), 0u)
        << "the Memory emptyDir vanished during the grace period:\n"
        << all;
    EXPECT_GE(CountLines(lines, "scratch ok"), min_checks) << all;
    EXPECT_GE(CountLines(lines, "mem ok"), min_checks) << all;
  }

  // Waits until the pod has stopped (no running container and the handler's "done", or just no
  // running container when `need_done` is false), then until its directory is gone and nothing
  // is mounted under it, within `cleanup_timeout`.
  void ExpectStoppedAndCleanedUp(const std::string& uid, bool need_done,
                                 std::chrono::milliseconds cleanup_timeout) {
    EXPECT_TRUE(WaitFor(
        [&] {
          return RunningContainer("graceful-node1").empty() && (!need_done || ResultsHave("done"));
        },
        30s))
        << "the container must exit by itself within its grace period (a final \"done\" line):\n"
        << ReadTextFile(results_file());
    const std::string pod_dir = PodDir(uid);
    EXPECT_TRUE(
        WaitFor([&] { return MountsUnder(pod_dir).empty() && !std::filesystem::exists(pod_dir); },
                cleanup_timeout))
        << "left after the pod stopped: mounts " << Join(MountsUnder(pod_dir)) << ", directory "
        << (std::filesystem::exists(pod_dir) ? "present" : "gone");
  }

  int http_port_ = 0;
};

// Termination order: the emptyDirs (on disk and Memory) stay, with their content and mount, for
// the whole grace period; the container is given that period (it exits by itself); once it has
// stopped, the pod's directory goes and nothing stays mounted under it.
TEST_F(LifecycleE2eTest, EmptyDirOutlivesTheGracePeriodThenGoes) {
  if (geteuid() != 0) GTEST_SKIP() << "mounts need root";
  const std::string uid = StartGracefulPod(6);
  ASSERT_FALSE(HasFailure());
  DeleteGracefulPodAndWaitForHandler();
  // A second round of checks means the handler has run for half a second: by then a tear-down
  // that does not wait for the containers would have happened.
  ASSERT_TRUE(WaitFor(
      [&] { return CountLines(Results(), "mem ok") + CountLines(Results(), "mem missing") >= 2; },
      10s));
  const std::string problem = HostVolumesProblem(uid);
  ASSERT_FALSE(ResultsHave("done")) << "the handler cannot be over yet";
  EXPECT_EQ(problem, "") << "seen from the host while the container is still in its grace period";
  ExpectStoppedAndCleanedUp(uid, /*need_done=*/true, 15s);
  ExpectHandlerSawVolumes(6);
}

// The same with kill -9 of one process right after the handler started: the restarted
// processes neither take the volumes away while the container still runs nor leak a mount or
// the pod directory afterwards.
class LifecycleKillTest : public LifecycleE2eTest,
                          public ::testing::WithParamInterface<std::string> {};

TEST_P(LifecycleKillTest, EmptyDirSurvivesKillNineDuringTermination) {
  if (geteuid() != 0) GTEST_SKIP() << "mounts need root";
  const std::string victim = GetParam();
  // A longer handler (6 s) so that the checks go on after the victim is back.
  const std::vector<std::string> flags = {"--restart-intensity", "100"};
  const std::string uid = StartGracefulPod(12, flags);
  ASSERT_FALSE(HasFailure());
  const pid_t service = victim == "supervisor" ? 0 : ServicePid(victim);
  if (victim != "supervisor") {
    ASSERT_GT(service, 0) << victim;
  }
  DeleteGracefulPodAndWaitForHandler();
  if (victim == "supervisor") {
    // Its services go with it (PR_SET_PDEATHSIG); the container keeps running its handler.
    ASSERT_TRUE(KillSupervisorAndServices());
    StartNodelet(Flags(flags));
  } else {
    ASSERT_EQ(kill(service, SIGKILL), 0);
    ASSERT_TRUE(WaitProcessGone(service, 10s));
    ASSERT_TRUE(notify_->WaitFor("STATUS=4/4 services running", 20s)) << victim;
  }
  // Seen from the host, if the handler is still running after the check (it may be over by
  // now), the volumes must still be there.
  const std::string problem = HostVolumesProblem(uid);
  if (!ResultsHave("done") && !RunningContainer("graceful-node1").empty()) {
    EXPECT_EQ(problem, "") << "seen from the host during the grace period, after kill -9 of "
                           << victim;
  }
  ExpectStoppedAndCleanedUp(uid, /*need_done=*/false, 30s);
  ExpectHandlerSawVolumes(1);
  EXPECT_TRUE(ResultsHave("done")) << "the container was killed before the end of its handler:\n"
                                   << ReadTextFile(results_file());
}

INSTANTIATE_TEST_SUITE_P(Victims, LifecycleKillTest,
                         ::testing::Values("volumed", "podworkerd", "supervisor"),
                         [](const auto& info) { return info.param; });

// Statuses of deleted pods: listed (nodeletctl and /pods) while the pod terminates, gone from
// both once it has stopped, its events kept. An admission-rejected pod keeps its Failed status
// while its manifest exists (also after housekeeping dropped the other pod's status) and loses
// it once its manifest is removed.
TEST_F(LifecycleE2eTest, DeletedPodsStatusGoesOnceStoppedRejectedPodsWithTheirManifest) {
  if (geteuid() != 0) GTEST_SKIP() << "mounts need root";
  Write("hungry.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: hungry\nspec:\n  hostNetwork: true\n"
        "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
        "    imagePullPolicy: Never\n    command: [\"sleep\", \"3600\"]\n"
        "    resources:\n      requests:\n        cpu: \"100000\"\n");
  const std::string uid = StartGracefulPod(6);
  ASSERT_FALSE(HasFailure());
  auto rejected = [&] {
    auto p = CtlPod("hungry-node1");
    return !p.is_null() && p["status"].value("phase", "") == "Failed" &&
           p["status"].value("reason", "") == "OutOfcpu";
  };
  ASSERT_TRUE(WaitFor(rejected, 20s)) << CtlPod("hungry-node1").dump(2);

  DeleteGracefulPodAndWaitForHandler();
  EXPECT_TRUE(Has(CtlPodNames(), "graceful-node1"))
      << "a terminating pod must still be listed: " << Join(CtlPodNames());
  EXPECT_TRUE(Has(HttpPodNames(), "graceful-node1"))
      << "a terminating pod must still be on /pods: " << Join(HttpPodNames());

  ASSERT_TRUE(WaitFor([&] { return RunningContainer("graceful-node1").empty(); }, 30s));
  EXPECT_TRUE(WaitFor(
      [&] {
        return !Has(CtlPodNames(), "graceful-node1") && !Has(HttpPodNames(), "graceful-node1");
      },
      20s))
      << "a stopped, deleted pod must no longer be listed: nodeletctl " << Join(CtlPodNames())
      << ", /pods " << Join(HttpPodNames());
  {
    std::vector<std::string> reasons;
    for (const auto& e : Events(uid)) reasons.push_back(e.reason);
    EXPECT_TRUE(Has(reasons, "Started"))
        << "the deleted pod's events must be kept: " << Join(reasons);
  }
  auto all_events =
      RunCommand({BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "events"}, 5s);
  EXPECT_THAT(all_events.output, HasSubstr("pod/graceful-node1"));

  // Housekeeping has run (the other status went): the rejected pod's status is still there.
  EXPECT_TRUE(rejected()) << "the rejected pod must keep its status while its manifest exists: "
                          << CtlPod("hungry-node1").dump(2);
  std::filesystem::remove(manifests() + "/hungry.yaml");
  EXPECT_TRUE(WaitFor(
      [&] { return !Has(CtlPodNames(), "hungry-node1") && !Has(HttpPodNames(), "hungry-node1"); },
      20s))
      << "the rejected pod's status must go with its manifest: nodeletctl " << Join(CtlPodNames())
      << ", /pods " << Join(HttpPodNames());
}

// A startup probe that never passes fails the container as the kubelet does: the container is
// killed and restarted (restartPolicy Always), its restartCount grows, and "Startup probe
// failed" is a Warning event; the liveness probe behind it never runs.
TEST_F(LifecycleE2eTest, AFailingStartupProbeRestartsTheContainer) {
  Write("slow.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: slow\nspec:\n  hostNetwork: true\n"
        "  terminationGracePeriodSeconds: 2\n"
        "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
        "    imagePullPolicy: Never\n"
        "    command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; while true; do sleep 0.2; done\"]\n"
        "    startupProbe:\n      exec:\n        command: [\"false\"]\n"
        "      periodSeconds: 1\n      failureThreshold: 2\n"
        "    livenessProbe:\n      exec:\n        command: [\"sh\", \"-c\", \"echo x >> "
        "/tmp/live\"]\n"
        "      periodSeconds: 1\n");
  StartNodelet(Flags());
  auto restarts = [&] { return RestartCount("slow-node1", "app"); };
  // The first instance fails its probe after about 2 s; the crash-loop back-off (10 s) then
  // delays the next start.
  EXPECT_TRUE(WaitFor([&] { return restarts() >= 1; }, 40s))
      << "the container must be restarted: " << CtlPod("slow-node1").dump(2);
  const std::vector<std::string> messages = EventLines(Uid("slow-node1"));
  EXPECT_TRUE(Has(messages, "Unhealthy: Startup probe failed")) << Join(messages);
  EXPECT_TRUE(Has(messages, "Killing: Container app failed startup probe, will be restarted"))
      << Join(messages);
  for (const auto& m : messages) EXPECT_EQ(m.find("Liveness"), std::string::npos) << m;
}

// activeDeadlineSeconds as the kubelet: past it the pod is Failed with reason DeadlineExceeded,
// its container stopped (and not restarted, restartPolicy Always notwithstanding), a Warning
// event says so; the manifest is still there, so the pod and its status stay.
TEST_F(LifecycleE2eTest, ActiveDeadlineFailsThePod) {
  Write("deadline.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: deadline\nspec:\n  hostNetwork: true\n"
        "  activeDeadlineSeconds: 3\n  terminationGracePeriodSeconds: 2\n"
        "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
        "    imagePullPolicy: Never\n"
        "    command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; while true; do sleep 0.2; done\"]\n");
  StartNodelet(Flags());
  auto failed = [&] {
    auto p = CtlPod("deadline-node1");
    return !p.is_null() && p["status"].value("phase", "") == "Failed" &&
           p["status"].value("reason", "") == "DeadlineExceeded";
  };
  EXPECT_TRUE(WaitFor(failed, 20s)) << CtlPod("deadline-node1").dump(2);
  EXPECT_TRUE(WaitFor([&] { return RunningContainer("deadline-node1").empty(); }, 10s))
      << "the container must be stopped";
  std::vector<std::string> reasons;
  for (const auto& e : Events(Uid("deadline-node1"))) reasons.push_back(e.reason);
  EXPECT_TRUE(Has(reasons, "DeadlineExceeded")) << Join(reasons);
  EXPECT_TRUE(failed()) << "a pod past its deadline stays Failed: "
                        << CtlPod("deadline-node1").dump(2);
}

// Hooks around a container: postStart runs once it started; on deletion preStop runs before the
// SIGTERM. podworkerd is SIGKILLed while the hook runs: the new podworkerd finds the pod
// undesired, reads the hook from the container's annotation and runs it (again) before it sends
// SIGTERM, all inside the grace period.
TEST_F(LifecycleE2eTest, HooksRunAroundTheContainerAlsoAcrossAPodworkerdRestart) {
  Write("hooked.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: hooked\nspec:\n  hostNetwork: true\n"
        "  terminationGracePeriodSeconds: 20\n"
        "  volumes:\n  - name: results\n    hostPath:\n      path: " +
            results_dir() +
            "\n"
            "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
            "    imagePullPolicy: Never\n"
            "    command: [\"sh\", \"-c\", \"trap 'echo term >> /results/out; exit 0' TERM; "
            "echo running >> /results/out; while true; do sleep 0.2; done\"]\n"
            "    lifecycle:\n"
            "      postStart:\n        exec:\n          command: [\"sh\", \"-c\", \"echo "
            "poststart >> /results/out\"]\n"
            "      preStop:\n        exec:\n          command: [\"sh\", \"-c\", \"echo prestop "
            ">> /results/out; sleep 3\"]\n"
            "    volumeMounts:\n    - {name: results, mountPath: /results}\n");
  StartNodelet(Flags({"--restart-intensity", "100"}));
  ASSERT_TRUE(WaitFor([&] { return ResultsHave("poststart") && ResultsHave("running"); }, 40s))
      << ReadTextFile(results_file());
  std::filesystem::remove(manifests() + "/hooked.yaml");
  ASSERT_TRUE(WaitFor([&] { return ResultsHave("prestop"); }, 20s))
      << "the preStop hook never ran: " << ReadTextFile(results_file());
  EXPECT_FALSE(ResultsHave("term")) << "SIGTERM must wait for the preStop hook";
  const pid_t podworkerd = ServicePid("podworkerd");
  ASSERT_GT(podworkerd, 0);
  ASSERT_EQ(kill(podworkerd, SIGKILL), 0);
  ASSERT_TRUE(WaitProcessGone(podworkerd, 10s));
  ASSERT_TRUE(WaitFor([&] { return ResultsHave("term"); }, 40s))
      << "the container never got its SIGTERM: " << ReadTextFile(results_file());
  EXPECT_TRUE(WaitFor([&] { return RunningContainer("hooked-node1").empty(); }, 20s));
  const auto lines = Results();
  // The last preStop run comes before the SIGTERM, and the container was not stopped before.
  auto last_prestop = std::find(lines.rbegin(), lines.rend(), "prestop");
  auto term = std::find(lines.begin(), lines.end(), "term");
  ASSERT_NE(last_prestop, lines.rend());
  EXPECT_LT(std::distance(lines.begin(), last_prestop.base()) - 1,
            std::distance(lines.begin(), term))
      << ReadTextFile(results_file());
  EXPECT_EQ(CountLines(lines, "term"), 1u) << ReadTextFile(results_file());
  EXPECT_GE(CountLines(lines, "prestop"), 2u)
      << "the new podworkerd must run the preStop hook of the container it stops: "
      << ReadTextFile(results_file());
}

// preStop hooks of the other two kinds: httpGet (to a server the test runs on loopback, which a
// hostNetwork pod reaches at its IP, 127.0.0.1) is called before the container's SIGTERM; sleep
// holds the SIGTERM back for its seconds.
TEST_F(LifecycleE2eTest, HttpGetAndSleepPreStopHooksComeBeforeTheSigterm) {
  httplib::Server server;
  std::mutex mu;
  std::vector<std::string> hits;
  server.Get("/stop", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu);
    hits.push_back(req.get_header_value("X-Reason") + " with web term " +
                   (ResultsHave("web term") ? "seen" : "not seen"));
    res.set_content("bye", "text/plain");
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread thread = nodelet::testing::ListenInThread(server);
  struct Stop {
    std::function<void()> f;
    ~Stop() { f(); }
  } stop{[&] {
    server.stop();
    if (thread.joinable()) thread.join();
  }};
  auto container = [&](const std::string& name, const std::string& hook) {
    return "  - name: " + name +
           "\n    image: nodelet.local/busybox:1.0\n    imagePullPolicy: Never\n"
           "    command: [\"sh\", \"-c\", \"trap 'echo " +
           name + " term >> /results/out; exit 0' TERM; echo " + name +
           " running >> /results/out; while true; do sleep 0.2; done\"]\n"
           "    lifecycle:\n      preStop:\n" +
           hook + "    volumeMounts:\n    - {name: results, mountPath: /results}\n";
  };
  Write("hooks2.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: hooks2\nspec:\n  hostNetwork: true\n"
        "  terminationGracePeriodSeconds: 15\n"
        "  volumes:\n  - name: results\n    hostPath:\n      path: " +
            results_dir() + "\n  containers:\n" +
            container("web", "        httpGet:\n          port: " + std::to_string(port) +
                                 "\n          path: /stop\n          httpHeaders:\n"
                                 "          - {name: X-Reason, value: deleted}\n") +
            container("nap", "        sleep:\n          seconds: 3\n"));
  StartNodelet(Flags());
  ASSERT_TRUE(
      WaitFor([&] { return ResultsHave("web running") && ResultsHave("nap running"); }, 40s))
      << ReadTextFile(results_file());
  const auto deleted = std::chrono::steady_clock::now();
  std::filesystem::remove(manifests() + "/hooks2.yaml");
  ASSERT_TRUE(WaitFor([&] { return ResultsHave("nap term"); }, 30s))
      << ReadTextFile(results_file());
  EXPECT_GE(std::chrono::steady_clock::now() - deleted, 3s)
      << "the sleep hook must hold the SIGTERM back for its 3 seconds";
  EXPECT_TRUE(WaitFor([&] { return ResultsHave("web term"); }, 10s));
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(hits, std::vector<std::string>{"deleted with web term not seen"})
      << "the httpGet hook must be called once, before the SIGTERM, with its headers";
}

// A postStart hook that fails: the container is killed (FailedPostStartHook) and restarted as
// its restartPolicy says.
TEST_F(LifecycleE2eTest, AFailingPostStartHookKillsAndRestartsTheContainer) {
  Write("poststart.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: poststart\nspec:\n  hostNetwork: true\n"
        "  terminationGracePeriodSeconds: 2\n"
        "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
        "    imagePullPolicy: Never\n"
        "    command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; while true; do sleep 0.2; done\"]\n"
        "    lifecycle:\n      postStart:\n        exec:\n"
        "          command: [\"sh\", \"-c\", \"echo no; exit 3\"]\n");
  StartNodelet(Flags());
  auto restarts = [&] { return RestartCount("poststart-node1", "app"); };
  EXPECT_TRUE(WaitFor([&] { return restarts() >= 1; }, 40s))
      << "the container must be restarted: " << CtlPod("poststart-node1").dump(2);
  const std::vector<std::string> messages = EventLines(Uid("poststart-node1"));
  bool failed_hook = false;
  for (const auto& m : messages) {
    failed_hook = failed_hook || m.rfind("FailedPostStartHook: command 'sh' exited with 3", 0) == 0;
  }
  EXPECT_TRUE(failed_hook) << Join(messages);
}

// The environment as the kubelet builds it, read from inside the container.
TEST_F(LifecycleE2eTest, EnvironmentFromFieldsResourcesConfigMapsSecretsAndReferences) {
  Write("env.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n"
        "data:\n  level: debug\n  color: blue\n  bad-key: x\n"
        "---\n"
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: token\n"
        "stringData:\n  t: s3cret\n"
        "---\n"
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: env\n  labels: {app: web}\n"
        "spec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 2\n"
        "  serviceAccountName: builder\n"
        "  volumes:\n  - name: results\n    hostPath:\n      path: " +
            results_dir() +
            "\n"
            "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
            "    imagePullPolicy: Never\n"
            "    resources:\n      limits: {memory: 64Mi}\n"
            "    envFrom:\n    - prefix: CFG_\n      configMapRef: {name: settings}\n"
            "    - secretRef: {name: missing, optional: true}\n"
            "    env:\n"
            "    - {name: POD, valueFrom: {fieldRef: {fieldPath: metadata.name}}}\n"
            "    - {name: NS, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}\n"
            "    - {name: UID, valueFrom: {fieldRef: {fieldPath: metadata.uid}}}\n"
            "    - {name: APP, valueFrom: {fieldRef: {fieldPath: \"metadata.labels['app']\"}}}\n"
            "    - {name: NODE, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}\n"
            "    - {name: SA, valueFrom: {fieldRef: {fieldPath: spec.serviceAccountName}}}\n"
            "    - {name: HOST_IP, valueFrom: {fieldRef: {fieldPath: status.hostIP}}}\n"
            "    - {name: MEM_MI, valueFrom: {resourceFieldRef: {resource: limits.memory, "
            "divisor: 1Mi}}}\n"
            "    - {name: LEVEL, valueFrom: {configMapKeyRef: {name: settings, key: level}}}\n"
            "    - {name: NONE, valueFrom: {configMapKeyRef: {name: settings, key: nope, "
            "optional: true}}}\n"
            "    - {name: TOKEN, valueFrom: {secretKeyRef: {name: token, key: t}}}\n"
            "    - {name: GREETING, value: \"$(POD) in $(NS) at $(LEVEL), $$(POD) $(UNKNOWN)\"}\n"
            // The environment PID 1 got (a shell would not pass on names such as CFG_bad-key).
            "    command: [\"sh\", \"-c\", \"tr '\\\\0' '\\\\n' < /proc/1/environ > "
            "/results/env.tmp; mv /results/env.tmp "
            "/results/env; echo '$(GREETING)' > /results/args; sleep 3600\"]\n"
            "    volumeMounts:\n    - {name: results, mountPath: /results}\n"
            "---\n"
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: noconfig\nspec:\n  hostNetwork: true\n"
            "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
            "    imagePullPolicy: Never\n    command: [\"sleep\", \"3600\"]\n"
            "    env:\n    - {name: X, valueFrom: {configMapKeyRef: {name: absent, key: k}}}\n");
  StartNodelet(Flags());
  ASSERT_TRUE(WaitFor([&] { return !ReadTextFile(results_dir() + "/env").empty(); }, 40s))
      << CtlPod("env-node1").dump(2);
  std::map<std::string, std::string> env;
  for (const auto& line : Lines(ReadTextFile(results_dir() + "/env"))) {
    auto eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  const std::string uid = Uid("env-node1");
  EXPECT_EQ(env["POD"], "env-node1");
  EXPECT_EQ(env["NS"], "default");
  EXPECT_EQ(env["UID"], uid);
  EXPECT_EQ(env["APP"], "web");
  EXPECT_EQ(env["NODE"], "node1");
  EXPECT_EQ(env["SA"], "builder");
  EXPECT_EQ(env["HOST_IP"], NodeIP("").value());  // the node's address, as /node says
  EXPECT_EQ(env["MEM_MI"], "64");
  EXPECT_EQ(env["LEVEL"], "debug");
  EXPECT_EQ(env["TOKEN"], "s3cret");
  EXPECT_EQ(env["CFG_level"], "debug");
  EXPECT_EQ(env["CFG_color"], "blue");
  EXPECT_EQ(env.count("CFG_bad-key"), 1u) << "'-' is valid in a variable name";
  EXPECT_EQ(env.count("NONE"), 0u) << "an optional missing key leaves the variable out";
  EXPECT_EQ(env["GREETING"], "env-node1 in default at debug, $(POD) $(UNKNOWN)");
  EXPECT_EQ(ReadTextFile(results_dir() + "/args"),
            "env-node1 in default at debug, $(POD) $(UNKNOWN)\n");
  auto waiting = [&] {
    auto p = CtlPod("noconfig-node1");
    if (p.is_null() || !p["status"].contains("containerStatuses")) return std::string();
    for (const auto& c : p["status"]["containerStatuses"]) {
      if (c.contains("state") && c["state"].contains("waiting")) {
        return c["state"]["waiting"].value("reason", "") + ": " +
               c["state"]["waiting"].value("message", "");
      }
    }
    return std::string();
  };
  EXPECT_TRUE(WaitFor(
      [&] { return waiting() == "CreateContainerConfigError: configmap \"absent\" not found"; },
      20s))
      << waiting();
}

// runtimeClassName names the CRI runtime handler: "runc" (the private containerd's) runs the
// pod; a handler the runtime does not have fails the sandbox, and the status says why. Fields
// nodelet ignores (schedulerName) are named in an IgnoredFields Warning event; dnsPolicy is
// honoured now (docs/network.md), so it is not among them.
TEST_F(LifecycleE2eTest, RuntimeClassNameIsTheRuntimeHandler) {
  for (const char* name : {"known", "unknown"}) {
    Write(std::string(name) + ".yaml",
          "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + std::string(name) +
              "\nspec:\n  hostNetwork: true\n  dnsPolicy: ClusterFirst\n"
              "  schedulerName: my-scheduler\n  runtimeClassName: " +
              (std::string(name) == "known" ? "runc" : "no-such-handler") +
              "\n  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
              "    imagePullPolicy: Never\n    command: [\"sleep\", \"3600\"]\n");
  }
  StartNodelet(Flags());
  EXPECT_TRUE(WaitFor([&] { return !RunningContainer("known-node1").empty(); }, 40s))
      << CtlPod("known-node1").dump(2);
  EXPECT_TRUE(WaitFor(
      [&] {
        auto p = CtlPod("unknown-node1");
        return !p.is_null() && p["status"].value("reason", "") == "CreatePodSandboxError" &&
               p["status"].value("message", "").find("no-such-handler") != std::string::npos;
      },
      30s))
      << CtlPod("unknown-node1").dump(2);
  // The fields nodelet ignores are named in a Warning event, not dropped without a word.
  std::string ignored;
  for (const auto& e : Events(Uid("known-node1"))) {
    if (e.reason == "IgnoredFields" && e.type == "Warning") ignored = e.message;
  }
  EXPECT_THAT(ignored, HasSubstr("known.yaml: nodelet ignores spec.schedulerName"));
  EXPECT_THAT(ignored, ::testing::Not(HasSubstr("dnsPolicy")));
}

// Readiness probes over HTTPS and gRPC. The pod is on the node's network, so its IP is
// 127.0.0.1 and its probes reach servers the test runs on loopback: a TLS server with a
// self-signed certificate (the prober does not check it, as the kubelet's) and a gRPC server
// with gRPC's health service. Each container is ready while its server says so, and not ready
// once the gRPC service turns NOT_SERVING.
TEST_F(LifecycleE2eTest, ReadinessOverHttpsAndGrpc) {
  const std::string certs = dir_.Sub("certs");
  std::filesystem::create_directories(certs);
  ASSERT_EQ(RunCommand({"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                        "-days", "1", "-subj", "/CN=localhost", "-keyout", certs + "/key.pem",
                        "-out", certs + "/cert.pem"},
                       30s)
                .exit_code,
            0);
  httplib::SSLServer https((certs + "/cert.pem").c_str(), (certs + "/key.pem").c_str());
  ASSERT_TRUE(https.is_valid());
  https.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok", "text/plain");
  });
  const int https_port = https.bind_to_any_port("127.0.0.1");
  ASSERT_GT(https_port, 0);
  std::thread https_thread = nodelet::testing::ListenInThread(https);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::CallbackGenericService generic;
  grpc::ServerBuilder builder;
  int grpc_port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &grpc_port);
  builder.RegisterCallbackGenericService(&generic);
  std::unique_ptr<grpc::Server> grpc_server = builder.BuildAndStart();
  ASSERT_NE(grpc_server, nullptr);
  grpc_server->GetHealthCheckService()->SetServingStatus("orders", true);
  struct Stop {
    std::function<void()> f;
    ~Stop() { f(); }
  } stop{[&] {
    https.stop();
    if (https_thread.joinable()) https_thread.join();
    grpc_server->Shutdown(std::chrono::system_clock::now() + 2s);
  }};

  auto container = [](const std::string& name, const std::string& probe) {
    return "  - name: " + name +
           "\n    image: nodelet.local/busybox:1.0\n    imagePullPolicy: Never\n"
           "    command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; while true; do sleep 0.2; "
           "done\"]\n"
           "    readinessProbe:\n" +
           probe + "      periodSeconds: 1\n      failureThreshold: 1\n";
  };
  Write("probed.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: probed\nspec:\n  hostNetwork: true\n"
        "  terminationGracePeriodSeconds: 2\n  containers:\n" +
            container("tls",
                      "      httpGet:\n        scheme: HTTPS\n        path: /healthz\n"
                      "        port: " +
                          std::to_string(https_port) + "\n") +
            container("rpc", "      grpc:\n        port: " + std::to_string(grpc_port) +
                                 "\n        service: orders\n"));
  StartNodelet(Flags());
  auto ready = [&](const std::string& name) {
    auto p = CtlPod("probed-node1");
    if (p.is_null() || !p["status"].contains("containerStatuses")) return false;
    for (const auto& c : p["status"]["containerStatuses"]) {
      if (c.value("name", "") == name) return c.value("ready", false);
    }
    return false;
  };
  EXPECT_TRUE(WaitFor([&] { return ready("tls") && ready("rpc"); }, 40s))
      << CtlPod("probed-node1").dump(2);
  grpc_server->GetHealthCheckService()->SetServingStatus("orders", false);
  EXPECT_TRUE(WaitFor([&] { return !ready("rpc"); }, 20s)) << CtlPod("probed-node1").dump(2);
  EXPECT_TRUE(ready("tls"));
}

// Termination messages as the kubelet reports them: what the container wrote to its
// terminationMessagePath (the last 4 KiB of it), or with FallbackToLogsOnError and nothing
// written, the end of its log when it failed.
TEST_F(LifecycleE2eTest, TerminationMessagesFromTheFileOrTheLog) {
  auto container = [](const std::string& name, const std::string& script,
                      const std::string& extra) {
    return "  - name: " + name +
           "\n    image: nodelet.local/busybox:1.0\n    imagePullPolicy: Never\n"
           "    command: [\"sh\", \"-c\", \"" +
           script + "\"]\n" + extra;
  };
  Write("last-words.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: last-words\nspec:\n  hostNetwork: true\n"
        "  restartPolicy: Never\n  containers:\n" +
            container("file", "echo goodbye > /dev/termination-log; exit 1", "") +
            container("custom", "echo custom > /tmp/why; exit 0",
                      "    terminationMessagePath: /tmp/why\n") +
            container("big", "head -c 5000 /dev/zero | tr -c b a > /dev/termination-log; exit 0",
                      "") +
            container("logs", "echo first; echo last words; exit 2",
                      "    terminationMessagePolicy: FallbackToLogsOnError\n") +
            container("quiet", "echo not used; exit 0",
                      "    terminationMessagePolicy: FallbackToLogsOnError\n"));
  StartNodelet(Flags());
  auto messages = [&] {
    std::map<std::string, std::string> out;
    auto p = CtlPod("last-words-node1");
    if (p.is_null() || !p["status"].contains("containerStatuses")) return out;
    for (const auto& c : p["status"]["containerStatuses"]) {
      if (c.contains("state") && c["state"].contains("terminated")) {
        out[c.value("name", "")] = c["state"]["terminated"].value("message", "");
      }
    }
    return out;
  };
  ASSERT_TRUE(WaitFor([&] { return messages().size() == 5; }, 40s))
      << CtlPod("last-words-node1").dump(2);
  auto m = messages();
  EXPECT_EQ(m["file"], "goodbye\n");
  EXPECT_EQ(m["custom"], "custom\n");
  // 4 KiB of the file, then the pod's 12 KiB split among its five containers.
  EXPECT_EQ(m["big"], std::string(12 * 1024 / 5, 'a'));
  EXPECT_EQ(m["logs"], "first\nlast words\n");
  EXPECT_EQ(m["quiet"], "") << "the logs are read only for a failed container";
}

// Admission as the kubelet: new pods in the order they were created, and pods in a terminal
// phase do not count. With --max-pods 2: `done` (created first, exits at once), `zeta` and
// `alpha` arrive together; by creation time `done` and `zeta` are admitted and `alpha` (first
// by name) is refused OutOfpods. Once `done` has Succeeded, a new pod fits although two pods are
// still admitted.
TEST_F(LifecycleE2eTest, AdmissionInCreationOrderAndFinishedPodsDoNotCount) {
  auto pod = [](const std::string& name, const std::string& created, const std::string& cmd,
                const std::string& policy) {
    return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name + "\n  creationTimestamp: \"" +
           created + "\"\nspec:\n  hostNetwork: true\n  restartPolicy: " + policy +
           "\n  terminationGracePeriodSeconds: 2\n"
           "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
           "    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"" +
           cmd + "\"]\n";
  };
  const std::string sleeper = "trap 'exit 0' TERM; while true; do sleep 0.2; done";
  Write("done.yaml", pod("done", "2019-01-01T00:00:00Z", "exit 0", "Never"));
  Write("zeta.yaml", pod("zeta", "2020-01-01T00:00:00Z", sleeper, "Always"));
  Write("alpha.yaml", pod("alpha", "2021-01-01T00:00:00Z", sleeper, "Always"));
  StartNodelet(Flags({"--max-pods", "2"}));
  auto phase = [&](const std::string& name) {
    auto p = CtlPod(name + "-node1");
    return p.is_null() ? std::string()
                       : p["status"].value("phase", "") + "/" + p["status"].value("reason", "");
  };
  EXPECT_TRUE(WaitFor([&] { return phase("alpha") == "Failed/OutOfpods"; }, 30s)) << phase("alpha");
  EXPECT_TRUE(WaitFor([&] { return !RunningContainer("zeta-node1").empty(); }, 40s))
      << phase("zeta");
  ASSERT_TRUE(WaitFor([&] { return phase("done") == "Succeeded/"; }, 40s)) << phase("done");
  Write("late.yaml", pod("late", "2022-01-01T00:00:00Z", sleeper, "Always"));
  EXPECT_TRUE(WaitFor([&] { return !RunningContainer("late-node1").empty(); }, 40s))
      << "a Succeeded pod must not count against maxPods: " << phase("late");
  EXPECT_EQ(phase("alpha"), "Failed/OutOfpods") << "a refused pod stays refused";
}

// No head-of-line blocking: a pod whose image pull hangs (a "registry" on loopback that accepts
// connections and never answers) delays neither the deletion of another pod, which stops within
// its grace period, nor the start of a new one.
TEST_F(LifecycleE2eTest, AHangingPullDelaysNoOtherPod) {
  // The kernel completes the connections (backlog); nothing ever reads or answers them.
  int silent = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(silent, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(silent, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(getsockname(silent, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ASSERT_EQ(listen(silent, 64), 0);
  struct CloseFd {
    int fd;
    ~CloseFd() { close(fd); }
  } close_silent{silent};
  const std::string image = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port)) + "/never:1";

  auto pod = [&](const std::string& name, const std::string& image_ref, const std::string& policy) {
    return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
           "\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 10\n"
           "  volumes:\n  - name: results\n    hostPath:\n      path: " +
           results_dir() + "\n  containers:\n  - name: app\n    image: " + image_ref +
           "\n    imagePullPolicy: " + policy + "\n    command: [\"sh\", \"-c\", \"trap 'echo " +
           name + " term >> /results/out; exit 0' TERM; echo " + name +
           " running >> /results/out; while true; do sleep 0.2; done\"]\n"
           "    volumeMounts:\n    - {name: results, mountPath: /results}\n";
  };
  Write("victim.yaml", pod("victim", "nodelet.local/busybox:1.0", "Never"));
  StartNodelet(Flags());
  ASSERT_TRUE(WaitFor([&] { return ResultsHave("victim running"); }, 40s));
  Write("stuck.yaml", pod("stuck", image, "Always"));
  // containerd is pulling once a connection waits in the silent listener's backlog.
  pollfd pending{silent, POLLIN, 0};
  ASSERT_EQ(poll(&pending, 1, 30000), 1) << "containerd never tried the silent registry";

  const auto deleted = std::chrono::steady_clock::now();
  std::filesystem::remove(manifests() + "/victim.yaml");
  Write("fresh.yaml", pod("fresh", "nodelet.local/busybox:1.0", "Never"));
  EXPECT_TRUE(WaitFor([&] { return ResultsHave("victim term"); }, 10s))
      << "the deleted pod must get its SIGTERM while the other pull hangs";
  EXPECT_TRUE(WaitFor([&] { return RunningContainer("victim-node1").empty(); }, 12s));
  EXPECT_LT(std::chrono::steady_clock::now() - deleted, 12s);
  EXPECT_TRUE(WaitFor([&] { return ResultsHave("fresh running"); }, 20s))
      << "a new pod must start while the other pull hangs";
  EXPECT_TRUE(RunningContainer("stuck-node1").empty()) << "the pull cannot have succeeded";
  // While it hangs the pod is Pending with its container waiting in ContainerCreating (a status
  // sent when the pull began, not at the end of the sync).
  auto stuck = RunCommand(
      {BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "pod", "stuck-node1", "-o", "json"},
      5s);
  auto stuck_pod = nlohmann::json::parse(stuck.output, nullptr, false);
  ASSERT_TRUE(stuck_pod.is_object()) << stuck.output;
  EXPECT_EQ(stuck_pod["status"].value("phase", ""), "Pending") << stuck.output;
  const auto& waiting = stuck_pod["status"]["containerStatuses"][0]["state"]["waiting"];
  EXPECT_EQ(waiting.value("reason", ""), "ContainerCreating") << stuck.output;
  // The pull is visible while it hangs: its Pulling event is recorded when it starts.
  auto events = RunCommand({BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "events"}, 5s);
  EXPECT_THAT(events.output, HasSubstr("Pulling image \"" + image + "\"")) << events.output;

  // A pull has no deadline, and the deletion of its pod cancels it: the pod is gone within
  // seconds, where the pull alone would never end.
  std::filesystem::remove(manifests() + "/stuck.yaml");
  EXPECT_TRUE(WaitFor([&] { return CtlPod("stuck-node1").is_null(); }, 20s))
      << "the deleted pod's pull must be cancelled";
}

// Removals wait for every source: with a manifest directory and a manifest URL, a restart of
// nodelet (kill -9 of the supervisor, its services with it) while the URL answers 503 leaves the
// URL's pod alone: the same container, its emptyDir files in place, the same mounts under its
// pod directory; and again once the URL answers normally.
TEST_F(LifecycleE2eTest, UrlPodKeepsContainerAndVolumesWhileItsSourceIsDown) {
  if (geteuid() != 0) GTEST_SKIP() << "mounts need root";
  std::mutex mu;
  bool up = true;
  const std::string body = KeeperPodYaml("fromurl");
  LoopbackServer server([&](int fd, const std::string&) {
    bool ok;
    {
      std::lock_guard<std::mutex> lock(mu);
      ok = up;
    }
    if (ok) {
      SendAll(fd, "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" +
                      body);
    } else {
      SendAll(fd, "HTTP/1.1 503 Unavailable\r\nContent-Length: 0\r\n\r\n");
    }
  });
  auto set_up = [&](bool v) {
    std::lock_guard<std::mutex> lock(mu);
    up = v;
  };
  Write("local.yaml", KeeperPodYaml("local"));
  const std::vector<std::string> flags =
      Flags({"--manifest-url", "http://127.0.0.1:" + std::to_string(server.port()) + "/pods",
             "--http-check-frequency", "1s"});
  StartNodelet(flags);
  std::string id;
  ASSERT_TRUE(WaitFor(
      [&] {
        id = RunningContainer("fromurl-node1");
        return !id.empty() && !RunningContainer("local-node1").empty();
      },
      40s))
      << PodJson("fromurl-node1").dump(2);
  const std::string uid = Uid("fromurl-node1");
  ASSERT_FALSE(uid.empty());
  ASSERT_TRUE(
      WaitFor([&] { return ReadTextFile(EmptyDir(uid, "mem") + "/marker") == "kept\n"; }, 10s));
  ASSERT_EQ(HostVolumesProblem(uid), "");
  const auto mounts_before = MountsUnder(PodDir(uid));

  auto metrics = [&] {
    httplib::Client http("127.0.0.1", http_port_);
    http.set_connection_timeout(2s);
    http.set_read_timeout(5s);
    auto r = http.Get("/metrics");
    return r ? r->body : std::string();
  };
  auto failed_reads = [&] {
    const std::string key =
        "nodelet_pod_source_failures_total{source=\"http\",reason=\"http_status\"} ";
    const std::string text = metrics();
    auto at = text.find(key);
    return at == std::string::npos ? 0L : std::atol(text.c_str() + at + key.size());
  };
  auto same = [&](const std::string& when) {
    EXPECT_EQ(RunningContainer("fromurl-node1"), id)
        << "the URL's container was restarted " << when;
    EXPECT_EQ(HostVolumesProblem(uid), "") << when;
    EXPECT_EQ(MountsUnder(PodDir(uid)), mounts_before) << when;
  };

  set_up(false);
  ASSERT_TRUE(KillSupervisorAndServices());
  StartNodelet(flags);
  // Four failed reads a second apart: two of volumed's 2 s sweeps and podworkerd's resends have
  // had their chance to remove the pod.
  EXPECT_TRUE(WaitFor([&] { return failed_reads() >= 4; }, 20s)) << metrics();
  same("while the URL answers 503 after a restart");

  set_up(true);
  const size_t requests = server.requests().size();
  EXPECT_TRUE(WaitFor([&] { return server.requests().size() >= requests + 3; }, 20s));
  EXPECT_TRUE(WaitFor([&] { return !CtlPod("fromurl-node1").is_null(); }, 10s));
  same("once the URL answers again");
  server.Stop();
}

}  // namespace
}  // namespace nodelet::testing
