// A pod's end of life through the real `nodelet` on a private containerd: what happens between
// the deletion of its manifest and the moment nothing of it is left (the fixture and the pods'
// SIGTERM handler are in lifecycle_e2e_fixture.h; what happens to a pod's containers while it
// runs is in lifecycle_container_e2e_test.cc).
//
// - A pod's volumes outlive its containers: an emptyDir (on disk and on a tmpfs) stays in place
//   for the whole grace period, and goes (directory and mounts) only after the containers have
//   stopped; also when volumed, podworkerd or the supervisor is SIGKILLed meanwhile.
// - A deleted pod's status is kept while it terminates and dropped once it has stopped (its
//   events stay); an admission-rejected pod keeps its Failed status while its manifest exists.
// - Past activeDeadlineSeconds a pod is Failed (DeadlineExceeded) and its container stopped.
// - Removals wait for every pod source: a URL answering 503 across a restart of nodelet leaves
//   its pod's container and volumes alone.
// - Admission in creation order; finished pods do not count against maxPods.
// - No head-of-line blocking: a hanging image pull delays no other pod's kill or start.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/integration/lifecycle_e2e_fixture.h"
#include "tests/testing/harness.h"
#include "tests/testing/leak_check.h"
#include "tests/testing/loopback_server.h"

namespace nodelet::testing {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

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
