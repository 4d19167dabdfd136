// nodelet-podworkerd against a private containerd, with the real plegd and statusd: the test
// plays the supervisor's part of the work channel (DesiredPods over podwork.fbs) and reads the
// results from statusd and from CRI. Pods run busybox with the host network.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

#include "lib/cri/grpc_cri_client.h"
#include "lib/ipc/codec.h"
#include "lib/ipc/endpoints.h"
#include "lib/ipc/sockets.h"
#include "lib/pod/pod_flatbuffers.h"
#include "lib/pod/static_pod.h"
#include "lib/status/status_client.h"
#include "podwork_generated.h"
#include "tests/testing/containerd.h"
#include "tests/testing/harness.h"
#include "tests/testing/service_node.h"

namespace nodelet::testing {
namespace {

namespace v1 = ::runtime::v1;
using namespace std::chrono_literals;
using status::PodPhase;
using status::PodStatusRecord;

pod::Pod MakePod(const std::string& yaml, const std::string& file = "/manifests/test.yaml") {
  return MakeStaticPod(yaml, file);
}

std::string PodYaml(const std::string& name, const std::string& restart_policy,
                    const std::string& command, const std::string& init_command = "",
                    int grace = 5) {
  std::string y = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
                  "\nspec:\n  hostNetwork: true\n  restartPolicy: " + restart_policy +
                  "\n  terminationGracePeriodSeconds: " + std::to_string(grace) + "\n";
  if (!init_command.empty()) {
    y += "  initContainers:\n  - name: init\n    image: nodelet.local/busybox:1.0\n"
         "    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"" +
         init_command + "\"]\n";
  }
  y += "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
       "    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"" +
       command + "\"]\n";
  return y;
}

// A command that runs until SIGTERM and then exits 0 at once (busybox sh as PID 1 would
// otherwise ignore SIGTERM).
constexpr char kServe[] = "trap 'exit 0' TERM; while true; do sleep 0.2; done";

// The shared node (tests/testing/service_node.h) and what these tests read from CRI.
class Node : public ServiceNode {
 public:
  using ServiceNode::ServiceNode;
  // SIGKILL, then a new podworkerd at once.
  void KillPodworkerd() {
    ServiceNode::KillPodworkerd();
    RestartPodworkerd();
  }

  // Running containers of a pod, by CRI.
  std::set<std::string> RunningContainers(const std::string& uid) {
    v1::ContainerFilter f;
    (*f.mutable_label_selector())["io.kubernetes.pod.uid"] = uid;
    auto list = containerd().cri().ListContainers(f);
    std::set<std::string> ids;
    if (!list.ok()) return ids;
    for (const auto& c : *list) {
      if (c.state() == v1::CONTAINER_RUNNING) ids.insert(c.id());
    }
    return ids;
  }
  size_t Sandboxes(const std::string& uid) {
    v1::PodSandboxFilter f;
    (*f.mutable_label_selector())["io.kubernetes.pod.uid"] = uid;
    auto list = containerd().cri().ListPodSandbox(f);
    return list.ok() ? list->size() : 0;
  }
  // The services' logs, for a failed test's output.
  std::string Logs() const {
    std::string out;
    for (const auto& entry : std::filesystem::directory_iterator(dir().path())) {
      if (entry.path().extension() != ".log") continue;
      std::ifstream in(entry.path());
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (text.size() > 4000) text = "..." + text.substr(text.size() - 4000);
      out += "---- " + entry.path().filename().string() + "\n" + text;
    }
    return out;
  }
};

bool IsRunning(const PodStatusRecord& r) {
  return r.status.phase == PodPhase::kRunning && !r.status.container_statuses.empty() &&
         r.status.container_statuses[0].state.running.has_value();
}

class PodworkerdTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(node_.Start()); }
  void TearDown() override {
    if (HasFailure()) std::cerr << node_.Logs();
  }
  TempDir dir_;
  Node node_{dir_};
};

TEST_F(PodworkerdTest, RunsEditsRestartsAndStopsAPod) {
  pod::Pod web = MakePod(PodYaml("web", "Always", kServe));
  node_.SendDesired({web});
  const std::string uid = web.metadata.uid;
  ASSERT_TRUE(node_.WaitStatus(uid, IsRunning, 30s)) << node_.Last();
  auto running = node_.RunningContainers(uid);
  ASSERT_EQ(running.size(), 1u);

  // Edit the command: the container is restarted, restartCount 1, same pod.
  pod::Pod edited = MakePod(PodYaml("web", "Always", std::string(kServe) + " # v2"));
  ASSERT_EQ(edited.metadata.uid, uid);
  node_.SendDesired({edited});
  auto restarted = node_.WaitStatus(
      uid,
      [](const PodStatusRecord& r) {
        return IsRunning(r) && r.status.container_statuses[0].restart_count == 1;
      },
      30s);
  ASSERT_TRUE(restarted) << node_.Last();
  auto now_running = node_.RunningContainers(uid);
  ASSERT_EQ(now_running.size(), 1u);
  EXPECT_NE(*now_running.begin(), *running.begin());

  // Removed: SIGTERM (the trap exits 0 at once, well within the 5 s grace), sandbox removed.
  node_.SendDesired({});
  auto end = std::chrono::steady_clock::now() + 20s;
  while (node_.Sandboxes(uid) != 0 && std::chrono::steady_clock::now() < end) {
    node_.WaitStatus(
        uid, [](const PodStatusRecord&) { return false; }, 200ms);
  }
  EXPECT_EQ(node_.Sandboxes(uid), 0u);
  EXPECT_TRUE(node_.RunningContainers(uid).empty());
}

TEST_F(PodworkerdTest, RestartPoliciesAndCrashLoopBackOff) {
  pod::Pod always = MakePod(PodYaml("crasher", "Always", "exit 1"), "/m/a.yaml");
  pod::Pod onfailure = MakePod(PodYaml("oneshot", "OnFailure", "exit 0"), "/m/b.yaml");
  pod::Pod never = MakePod(PodYaml("failer", "Never", "exit 1"), "/m/c.yaml");
  node_.SendDesired({always, onfailure, never});

  auto succeeded = node_.WaitStatus(
      onfailure.metadata.uid,
      [](const PodStatusRecord& r) { return r.status.phase == PodPhase::kSucceeded; }, 30s);
  EXPECT_TRUE(succeeded) << node_.Last();
  auto failed = node_.WaitStatus(
      never.metadata.uid,
      [](const PodStatusRecord& r) { return r.status.phase == PodPhase::kFailed; }, 30s);
  ASSERT_TRUE(failed) << node_.Last();
  EXPECT_EQ(failed->status.container_statuses[0].state.terminated->exit_code, 1);
  EXPECT_EQ(failed->status.container_statuses[0].restart_count, 0);

  auto looping = node_.WaitStatus(
      always.metadata.uid,
      [](const PodStatusRecord& r) {
        if (r.status.container_statuses.empty()) return false;
        const auto& c = r.status.container_statuses[0];
        return c.restart_count >= 2 && c.state.waiting &&
               c.state.waiting->reason == "CrashLoopBackOff";
      },
      40s);
  ASSERT_TRUE(looping) << node_.Last();
  EXPECT_EQ(looping->status.phase, PodPhase::kRunning);  // Always: it will be restarted
  EXPECT_EQ(looping->status.container_statuses[0].last_state.terminated->exit_code, 1);
}

// A finished pod (OnFailure, exit 0) is kept, terminated, while desired; once it is no longer
// desired its sandbox and containers are removed (found by the chaos soak: the terminated worker
// ignored the kill, so the pod stayed until podworkerd restarted).
TEST_F(PodworkerdTest, FinishedPodIsRemovedWhenNoLongerDesired) {
  pod::Pod done = MakePod(PodYaml("done", "OnFailure", "exit 0"));
  const std::string uid = done.metadata.uid;
  node_.SendDesired({done});
  ASSERT_TRUE(node_.WaitStatus(
      uid, [](const PodStatusRecord& r) { return r.status.phase == PodPhase::kSucceeded; }, 30s))
      << node_.Last();
  // Terminated: its sandbox is stopped, the pod is kept.
  auto sandbox_ready = [&] {
    v1::PodSandboxFilter f;
    (*f.mutable_label_selector())["io.kubernetes.pod.uid"] = uid;
    auto list = node_.containerd().cri().ListPodSandbox(f);
    return list.ok() && !list->empty() && (*list)[0].state() == v1::SANDBOX_READY;
  };
  auto end = std::chrono::steady_clock::now() + 20s;
  while (sandbox_ready() && std::chrono::steady_clock::now() < end) {
    node_.WaitStatus(
        uid, [](const PodStatusRecord&) { return false; }, 200ms);
  }
  ASSERT_FALSE(sandbox_ready());
  ASSERT_EQ(node_.Sandboxes(uid), 1u);

  node_.SendDesired({});
  end = std::chrono::steady_clock::now() + 20s;
  while (node_.Sandboxes(uid) != 0 && std::chrono::steady_clock::now() < end) {
    node_.WaitStatus(
        uid, [](const PodStatusRecord&) { return false; }, 200ms);
  }
  EXPECT_EQ(node_.Sandboxes(uid), 0u) << "a finished pod that is no longer desired must be removed";
}

TEST_F(PodworkerdTest, MissingImageWithPullNeverIsErrImageNeverPull) {
  std::string yaml = PodYaml("noimage", "Always", kServe);
  yaml.replace(yaml.rfind("nodelet.local/busybox:1.0"), 25, "nodelet.local/absent:1.0");
  pod::Pod p = MakePod(yaml);
  node_.SendDesired({p});
  auto waiting = node_.WaitStatus(
      p.metadata.uid,
      [](const PodStatusRecord& r) {
        return !r.status.container_statuses.empty() &&
               r.status.container_statuses[0].state.waiting &&
               r.status.container_statuses[0].state.waiting->reason == "ErrImageNeverPull";
      },
      30s);
  ASSERT_TRUE(waiting) << node_.Last();
  EXPECT_EQ(waiting->status.phase, PodPhase::kPending);
  EXPECT_THAT(waiting->status.container_statuses[0].state.waiting->message,
              ::testing::HasSubstr("nodelet.local/absent:1.0"));
}

TEST_F(PodworkerdTest, FailingInitContainerBlocksAppContainers) {
  pod::Pod p = MakePod(PodYaml("initfail", "Never", kServe, "exit 3"));
  node_.SendDesired({p});
  auto failed = node_.WaitStatus(
      p.metadata.uid, [](const PodStatusRecord& r) { return r.status.phase == PodPhase::kFailed; },
      30s);
  ASSERT_TRUE(failed) << node_.Last();
  ASSERT_EQ(failed->status.init_container_statuses.size(), 1u);
  EXPECT_EQ(failed->status.init_container_statuses[0].state.terminated->exit_code, 3);
  // The app container never ran.
  EXPECT_FALSE(failed->status.container_statuses[0].state.running.has_value());
  EXPECT_FALSE(failed->status.container_statuses[0].state.terminated.has_value());
  EXPECT_TRUE(node_.RunningContainers(p.metadata.uid).empty());
}

TEST_F(PodworkerdTest, OrphansWithNodeletLabelsAreKilledOthersLeftAlone) {
  auto& cri = node_.containerd().cri();
  auto sandbox = [&](const std::string& name, bool managed) {
    v1::PodSandboxConfig c;
    c.mutable_metadata()->set_name(name);
    c.mutable_metadata()->set_uid("uid-" + name);
    c.mutable_metadata()->set_namespace_("default");
    c.set_log_directory(dir_.Sub("podlogs/" + name));
    if (managed) {
      (*c.mutable_labels())["nodelet.io/managed"] = "true";
      (*c.mutable_labels())["io.kubernetes.pod.uid"] = "uid-" + name;
    }
    c.mutable_linux()->mutable_security_context()->mutable_namespace_options()->set_network(
        v1::NODE);
    auto id = cri.RunPodSandbox(c, "");
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return id.ok() ? *id : "";
  };
  std::string orphan = sandbox("orphan", true);
  std::string stranger = sandbox("stranger", false);
  // Not ready sources: nothing is killed yet.
  node_.SendDesired({}, /*sources_ready=*/false);
  // Sources ready (sent until plegd's replica in podworkerd has seen the orphan).
  auto end = std::chrono::steady_clock::now() + 20s;
  while (node_.Sandboxes("uid-orphan") != 0 && std::chrono::steady_clock::now() < end) {
    node_.SendDesired({}, true);
    node_.WaitStatus(
        "none", [](const PodStatusRecord&) { return false; }, 300ms);
  }
  EXPECT_EQ(node_.Sandboxes("uid-orphan"), 0u) << "the orphan must be removed";
  auto st = cri.PodSandboxStatus(stranger, false);
  ASSERT_TRUE(st.ok()) << "a pod without nodelet's labels must be left alone";
  EXPECT_EQ(st->status().state(), v1::SANDBOX_READY);
}

TEST_F(PodworkerdTest, KillNineOfPodworkerdRestartsNothing) {
  std::vector<pod::Pod> pods;
  for (int i = 0; i < 5; ++i) {
    pods.push_back(MakePod(PodYaml("keep" + std::to_string(i), "Always", kServe),
                           "/m/" + std::to_string(i) + ".yaml"));
  }
  node_.SendDesired(pods);
  std::map<std::string, std::set<std::string>> before;
  for (const auto& p : pods) {
    ASSERT_TRUE(node_.WaitStatus(p.metadata.uid, IsRunning, 30s)) << node_.Last();
    before[p.metadata.uid] = node_.RunningContainers(p.metadata.uid);
  }
  node_.KillPodworkerd();
  node_.SendDesired(pods);
  // Let the new podworkerd sync every pod at least once (its resync period is 2 s).
  node_.WaitStatus(
      "none", [](const PodStatusRecord&) { return false; }, 3s);
  for (const auto& p : pods) {
    EXPECT_EQ(node_.RunningContainers(p.metadata.uid), before[p.metadata.uid]) << p.metadata.name;
    auto r = node_.WaitStatus(p.metadata.uid, IsRunning, 5s);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status.container_statuses[0].restart_count, 0);
  }
}

const status::ContainerStatus* App(const PodStatusRecord& r) {
  return r.status.container_statuses.empty() ? nullptr : &r.status.container_statuses[0];
}

bool ConditionTrue(const PodStatusRecord& r, const std::string& type) {
  const auto* c = r.status.FindCondition(type);
  return c != nullptr && c->status == status::ConditionStatus::kTrue;
}

// Readiness by httpGet against busybox httpd on a loopback port: unready until the page exists,
// ready once it does, unready again when it goes (thresholds 1).
TEST_F(PodworkerdTest, HttpGetReadinessFollowsThePage) {
  const int port = FreeLoopbackPort();
  std::string yaml =
      PodYaml("webready", "Always",
              "mkdir -p /www; exec httpd -f -p 127.0.0.1:" + std::to_string(port) + " -h /www");
  yaml += "    readinessProbe:\n      httpGet:\n        path: /ok.html\n        port: " +
          std::to_string(port) + "\n      periodSeconds: 1\n      failureThreshold: 1\n";
  pod::Pod p = MakePod(yaml);
  node_.SendDesired({p});
  const std::string uid = p.metadata.uid;
  auto unready = node_.WaitStatus(
      uid,
      [](const PodStatusRecord& r) {
        return IsRunning(r) && !App(r)->ready && !ConditionTrue(r, "Ready");
      },
      30s);
  ASSERT_TRUE(unready) << node_.Last();
  // The page appears: ready.
  std::string id = *node_.RunningContainers(uid).begin();
  auto exec = node_.containerd().cri().ExecSync(id, {"sh", "-c", "echo ok > /www/ok.html"}, 5);
  ASSERT_TRUE(exec.ok());
  ASSERT_TRUE(node_.WaitStatus(
      uid,
      [](const PodStatusRecord& r) {
        return App(r) && App(r)->ready && ConditionTrue(r, "Ready") &&
               ConditionTrue(r, "ContainersReady");
      },
      20s))
      << node_.Last();
  // It goes away: unready again, and the container is not restarted (readiness only).
  ASSERT_TRUE(node_.containerd().cri().ExecSync(id, {"rm", "/www/ok.html"}, 5).ok());
  ASSERT_TRUE(node_.WaitStatus(
      uid,
      [](const PodStatusRecord& r) {
        return App(r) && !App(r)->ready && !ConditionTrue(r, "Ready");
      },
      20s))
      << node_.Last();
  EXPECT_EQ(node_.RunningContainers(uid), std::set<std::string>{id});
}

// Liveness by exec: the probe file disappears → after failureThreshold failures the container
// is killed and restarted (restartCount 1).
TEST_F(PodworkerdTest, ExecLivenessFailureRestartsTheContainer) {
  std::string yaml = PodYaml("alive", "Always", std::string("touch /tmp/healthy; ") + kServe);
  yaml +=
      "    livenessProbe:\n      exec:\n        command: [\"cat\", \"/tmp/healthy\"]\n"
      "      periodSeconds: 1\n      failureThreshold: 2\n";
  pod::Pod p = MakePod(yaml);
  node_.SendDesired({p});
  const std::string uid = p.metadata.uid;
  ASSERT_TRUE(node_.WaitStatus(uid, IsRunning, 30s)) << node_.Last();
  std::string id = *node_.RunningContainers(uid).begin();
  // Healthy for a while: two probe periods pass with no restart.
  EXPECT_FALSE(node_.WaitStatus(
      uid, [](const PodStatusRecord& r) { return App(r) && App(r)->restart_count > 0; }, 2500ms));
  ASSERT_TRUE(node_.containerd().cri().ExecSync(id, {"rm", "/tmp/healthy"}, 5).ok());
  auto restarted = node_.WaitStatus(
      uid, [](const PodStatusRecord& r) { return IsRunning(r) && App(r)->restart_count == 1; },
      30s);
  ASSERT_TRUE(restarted) << node_.Last();
  EXPECT_NE(*node_.RunningContainers(uid).begin(), id);
}

// A startup probe (tcpSocket on a port nothing listens on until /tmp/go exists) holds the
// liveness probe back: the container is not killed while starting, and becomes ready only once
// started.
TEST_F(PodworkerdTest, StartupProbeGatesLivenessAndReadiness) {
  const int port = FreeLoopbackPort();
  std::string yaml =
      PodYaml("slow", "Always",
              "while [ ! -e /tmp/go ]; do sleep 0.2; done; exec httpd -f -p 127.0.0.1:" +
                  std::to_string(port));
  yaml += "    startupProbe:\n      tcpSocket:\n        port: " + std::to_string(port) +
          "\n      periodSeconds: 1\n      failureThreshold: 60\n"
          "    livenessProbe:\n      tcpSocket:\n        port: " +
          std::to_string(port) + "\n      periodSeconds: 1\n      failureThreshold: 1\n";
  pod::Pod p = MakePod(yaml);
  node_.SendDesired({p});
  const std::string uid = p.metadata.uid;
  ASSERT_TRUE(node_.WaitStatus(uid, IsRunning, 30s)) << node_.Last();
  std::string id = *node_.RunningContainers(uid).begin();
  // Not started: not ready, and liveness (which would fail at once) is not run.
  EXPECT_FALSE(node_.WaitStatus(
      uid,
      [](const PodStatusRecord& r) {
        return App(r) && (App(r)->ready || App(r)->restart_count > 0);
      },
      3s))
      << node_.Last();
  ASSERT_TRUE(node_.containerd().cri().ExecSync(id, {"touch", "/tmp/go"}, 5).ok());
  ASSERT_TRUE(node_.WaitStatus(
      uid, [](const PodStatusRecord& r) { return App(r) && App(r)->ready; }, 20s))
      << node_.Last();
  EXPECT_EQ(node_.RunningContainers(uid), std::set<std::string>{id});
}

// Readiness survives a podworkerd restart: it never reports the container unready meanwhile.
TEST_F(PodworkerdTest, ReadinessSurvivesPodworkerdRestart) {
  std::string yaml = PodYaml("steady", "Always", kServe);
  yaml +=
      "    readinessProbe:\n      exec:\n        command: [\"true\"]\n"
      "      initialDelaySeconds: 5\n      periodSeconds: 10\n";
  pod::Pod p = MakePod(yaml);
  node_.SendDesired({p});
  const std::string uid = p.metadata.uid;
  auto ready = node_.WaitStatus(
      uid, [](const PodStatusRecord& r) { return App(r) && App(r)->ready; }, 30s);
  ASSERT_TRUE(ready) << node_.Last();
  const uint64_t version = ready->version;
  node_.KillPodworkerd();
  node_.SendDesired({p});
  // The new podworkerd waits 5 s (initialDelaySeconds) before its first probe: a status it
  // sends meanwhile must still say ready.
  EXPECT_FALSE(node_.WaitStatus(
      uid,
      [&](const PodStatusRecord& r) { return r.version > version && App(r) && !App(r)->ready; },
      4s))
      << "readiness flipped to false across the restart: " << node_.Last();
}

// A container that exceeds its memory limit is OOM-killed by the kernel: the runtime reports
// it and the status says OOMKilled (exit 137).
TEST_F(PodworkerdTest, MemoryLimitExceededIsOOMKilled) {
  std::string yaml = PodYaml("hog", "Never", "head -c 200m /dev/zero | tail");
  yaml += "    resources:\n      limits:\n        memory: 32Mi\n";
  pod::Pod p = MakePod(yaml);
  node_.SendDesired({p});
  auto done = node_.WaitStatus(
      p.metadata.uid,
      [](const PodStatusRecord& r) { return App(r) && App(r)->state.terminated.has_value(); }, 60s);
  ASSERT_TRUE(done) << node_.Last();
  EXPECT_EQ(App(*done)->state.terminated->reason, "OOMKilled") << node_.Last();
  EXPECT_EQ(App(*done)->state.terminated->exit_code, 137);
  EXPECT_EQ(done->status.phase, PodPhase::kFailed);
}

// Dead containers are garbage-collected: a crash-looping container keeps at most one dead
// instance besides the current one, while restartCount keeps counting.
TEST_F(PodworkerdTest, DeadContainersAreGarbageCollected) {
  pod::Pod p = MakePod(PodYaml("gc", "Always", "exit 1"));
  node_.SendDesired({p});
  const std::string uid = p.metadata.uid;
  ASSERT_TRUE(node_.WaitStatus(
      uid, [](const PodStatusRecord& r) { return App(r) && App(r)->restart_count >= 3; }, 60s))
      << node_.Last();
  v1::ContainerFilter f;
  (*f.mutable_label_selector())["io.kubernetes.pod.uid"] = uid;
  size_t count = 0;
  auto end = std::chrono::steady_clock::now() + 10s;
  do {
    auto list = node_.containerd().cri().ListContainers(f);
    ASSERT_TRUE(list.ok());
    count = list->size();
  } while (count > 2 && std::chrono::steady_clock::now() < end &&
           !node_.WaitStatus(
               uid, [](const PodStatusRecord&) { return false; }, 300ms));
  EXPECT_LE(count, 2u) << "the current instance and at most one dead one";
}

}  // namespace
}  // namespace nodelet::testing
