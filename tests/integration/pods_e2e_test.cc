// Pods end to end through the real `nodelet` (supervisor, plegd, statusd, volumed, podworkerd)
// on a private containerd: manifests dropped into the manifest directory run, an edit restarts
// the changed container, a removed file stops its pod, bad manifests are rejected without
// stopping the others, admission refuses what does not fit, and kill -9 of every service
// restarts no container.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "lib/status/status_client.h"
#include "tests/testing/containerd.h"
#include "tests/testing/harness.h"
#include "tests/testing/nodelet_fixture.h"

namespace nodelet::testing {
namespace {

namespace v1 = ::runtime::v1;
using namespace std::chrono_literals;
using ::testing::HasSubstr;

std::string PodYaml(const std::string& name, const std::string& command,
                    const std::string& extra = "") {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
         "\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 5\n"
         "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
         "    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"" +
         command + "\"]\n" + extra;
}

constexpr char kServe[] = "trap 'exit 0' TERM; while true; do sleep 0.2; done";

class PodsE2eTest : public NodeletTest {
 protected:
  // `nodeletctl pods -o json` (a v1 PodList), parsed: name -> pod object.
  std::map<std::string, nlohmann::json> Pods() {
    auto r = RunCommand(
        {BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "pods", "-o", "json"}, 5s);
    std::map<std::string, nlohmann::json> out;
    auto j = nlohmann::json::parse(r.output, nullptr, false);
    if (j.is_discarded()) return out;
    if (!j.contains("items")) return out;
    for (const auto& p : j["items"]) out[p["metadata"].value("name", "")] = p;
    last_ = r.output;
    return out;
  }
  // Waits until `pred` holds for the pod list (each round waits for the supervisor's next
  // status datagram or 200 ms, whichever comes first).
  bool WaitPods(const std::function<bool(std::map<std::string, nlohmann::json>&)>& pred,
                std::chrono::milliseconds timeout) {
    auto end = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      auto pods = Pods();
      if (pred(pods)) return true;
      if (std::chrono::steady_clock::now() >= end) return false;
      notify_->Receive(200ms);
    }
  }
  static std::string Phase(std::map<std::string, nlohmann::json>& pods, const std::string& name) {
    auto it = pods.find(name);
    return it == pods.end() ? "" : it->second["status"].value("phase", "");
  }
  std::set<std::string> RunningContainerIds() {
    auto list = containerd_->cri().ListContainers(v1::ContainerFilter());
    std::set<std::string> ids;
    if (!list.ok()) return ids;
    for (const auto& c : *list) {
      if (c.state() == v1::CONTAINER_RUNNING) ids.insert(c.id());
    }
    return ids;
  }

  std::string last_;
};

TEST_F(PodsE2eTest, ManifestRunsIsEditedAndRemovedBadOnesRejected) {
  Write("good.yaml", PodYaml("good", std::string("echo hello-from-good; ") + kServe));
  Write("broken-yaml.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: [oops\n");
  Write("dup.yaml",
        PodYaml("dup", kServe) + "  - name: app\n    image: nodelet.local/busybox:1.0\n");
  Write("badqty.yaml",
        PodYaml("badqty", kServe, "    resources:\n      requests:\n        cpu: 12xyz\n"));
  Write("badname.yaml", PodYaml("Bad_Name", kServe));
  {
    std::ofstream big(manifests() + "/big.yaml");
    big << std::string(10 * 1024 * 1024, 'x');
  }
  {
    std::ofstream bin(manifests() + "/binary.yaml", std::ios::binary);
    for (int i = 0; i < 4096; ++i) bin.put(static_cast<char>(i * 7 % 256));
  }
  StartNodelet();
  ASSERT_TRUE(WaitPods([](auto& p) { return Phase(p, "good-node1") == "Running"; }, 30s)) << last_;

  // Each bad manifest is named in the log with its reason; none of them became a pod.
  std::ifstream in(dir_.Sub("nodelet.log"));
  std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const char* file :
       {"broken-yaml.yaml", "dup.yaml", "badqty.yaml", "badname.yaml", "big.yaml", "binary.yaml"}) {
    EXPECT_THAT(log, HasSubstr(manifests() + "/" + file)) << file << " must be reported";
  }
  EXPECT_THAT(log, HasSubstr("12xyz"));
  EXPECT_EQ(Pods().size(), 1u) << last_;

  // Its container log, through nodeletctl (Running comes as soon as the container has started:
  // its first line may still be on its way to the log file).
  CommandResult logs;
  WaitFor(
      [&] {
        logs = RunCommand(
            {BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "logs", "good-node1"}, 5s);
        return logs.exit_code == 0 && !logs.output.empty();
      },
      10s);
  EXPECT_EQ(logs.exit_code, 0) << logs.output;
  EXPECT_EQ(logs.output, "hello-from-good\n");
  EXPECT_EQ(RunCommand({BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "logs",
                        "good-node1", "-c", "nosuch"},
                       5s)
                .exit_code,
            4);
  EXPECT_EQ(
      RunCommand({BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "logs", "nosuch"}, 5s)
          .exit_code,
      4);

  // Edit the command: the container restarts in place (restartCount 1).
  auto before = RunningContainerIds();
  Write("good.yaml", PodYaml("good", std::string(kServe) + " # edited"));
  ASSERT_TRUE(WaitPods(
      [](auto& p) {
        auto it = p.find("good-node1");
        if (it == p.end() || it->second["status"].value("phase", "") != "Running") return false;
        for (const auto& c : it->second["status"]["containerStatuses"]) {
          if (c.value("restartCount", 0) == 1 && c["state"].contains("running")) return true;
        }
        return false;
      },
      30s))
      << last_;
  EXPECT_NE(RunningContainerIds(), before);

  // Remove the file: the pod stops (SIGTERM) and its sandbox goes away.
  std::filesystem::remove(manifests() + "/good.yaml");
  auto end = std::chrono::steady_clock::now() + 30s;
  while (!RunningContainerIds().empty() && std::chrono::steady_clock::now() < end) {
    notify_->Receive(200ms);
  }
  EXPECT_TRUE(RunningContainerIds().empty());
}

TEST_F(PodsE2eTest, AdmissionRefusesWhatDoesNotFit) {
  Write("a.yaml", PodYaml("first", kServe));
  Write("b.yaml", PodYaml("second", kServe));
  Write("c.yaml",
        PodYaml("hungry", kServe, "    resources:\n      requests:\n        cpu: \"100000\"\n"));
  StartNodelet({"--max-pods", "2"});
  ASSERT_TRUE(WaitPods(
      [](auto& p) {
        int running = 0, out_of = 0;
        for (auto& [name, pod] : p) {
          if (pod["status"].value("phase", "") == "Running") ++running;
          std::string reason = pod["status"].value("reason", "");
          if (pod["status"].value("phase", "") == "Failed" && reason.rfind("OutOf", 0) == 0)
            ++out_of;
        }
        return running == 2 && out_of == 1;
      },
      30s))
      << last_;
}

// containerd down while a pod is added: its sync fails and is retried with backoff (100 ms
// doubling to 5 s), so the pod runs once containerd is back. podworkerd's periodic resync is
// set to 10 minutes here, so only the backoff can be what retries it.
TEST_F(PodsE2eTest, RuntimeDownSyncBacksOffAndRecovers) {
  std::ofstream(dir_.Sub("config.yaml"))
      << "supervisor:\n  services:\n    podworkerd:\n      args: [\"--resync-period\", \"10m\"]\n";
  Write("early.yaml", PodYaml("early", kServe));
  StartNodelet({"--config", dir_.Sub("config.yaml")});
  // READY=1 means every service runs, not that podworkerd holds plegd's first relist yet: a
  // runtime that goes before that leaves podworkerd with no view at all, and then nothing is
  // synced (as the kubelet skips syncs while its runtime is down). A pod that runs shows that
  // podworkerd has the view (its health alone once passed before it had, on CI).
  ASSERT_TRUE(WaitServiceHealthy("podworkerd", 20s)) << "podworkerd never had plegd's pod cache";
  ASSERT_TRUE(WaitPods([](auto& p) { return Phase(p, "early-node1") == "Running"; }, 30s)) << last_;
  ContainerdOptions opts;
  opts.dir = dir_.Sub("ctrd");
  opts.image_tarballs = DefaultImageTarballs(ImagesDir());
  Status stopped = containerd_->Stop();
  ASSERT_TRUE(stopped.ok()) << stopped.ToString();
  containerd_.reset();
  Write("late.yaml", PodYaml("late", kServe));
  ASSERT_TRUE(WaitPods(
      [](auto& p) {
        auto it = p.find("late-node1");
        return it != p.end() &&
               it->second["status"].value("message", "").find("sandbox") != std::string::npos;
      },
      20s))
      << last_;
  auto c = ContainerdInstance::Start(opts);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  containerd_ = std::move(*c);
  EXPECT_TRUE(WaitPods([](auto& p) { return Phase(p, "late-node1") == "Running"; }, 60s))
      << "the failed sync must be retried by its backoff: " << last_;
}

// Readiness stays true across `nodeletctl restart podworkerd` and a restart of the supervisor:
// podworkerd carries each container's readiness over from statusd instead of starting unready.
TEST_F(PodsE2eTest, ReadinessSurvivesPodworkerdAndSupervisorRestarts) {
  Write("ready.yaml", PodYaml("ready", kServe,
                              "    readinessProbe:\n      exec:\n        command: [\"true\"]\n"
                              "      initialDelaySeconds: 3\n      periodSeconds: 5\n"));
  StartNodelet();
  auto ready = [](auto& p) {
    auto it = p.find("ready-node1");
    if (it == p.end()) return false;
    for (const auto& c : it->second["status"]["containerStatuses"]) {
      if (c.value("ready", false)) return true;
    }
    return false;
  };
  ASSERT_TRUE(WaitPods(ready, 30s)) << last_;
  auto unready_seen = [&](std::chrono::milliseconds window) {
    // Every status change is watched for `window`: none may say unready.
    bool flipped = false;
    WaitPods(
        [&](auto& p) {
          flipped = flipped || !ready(p);
          return flipped;
        },
        window);
    return flipped;
  };
  auto r = RunCommand(
      {BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "restart", "podworkerd"}, 10s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(unready_seen(4s)) << "readiness flipped across a podworkerd restart: " << last_;

  nodelet_->Signal(SIGTERM);
  ASSERT_TRUE(nodelet_->Wait(20s).has_value());
  StartNodelet();
  EXPECT_FALSE(unready_seen(4s)) << "readiness flipped across a supervisor restart: " << last_;
}

// `nodeletctl node` and /node: the v1 Node with capacity, allocatable (minus reservations),
// versions and images; Ready turns False with the runtime's reason when containerd stops, and
// True again when it is back.
TEST_F(PodsE2eTest, NodeStatusFollowsTheRuntime) {
  StartNodelet({"--system-reserved", "cpu=500m,memory=128Mi", "--max-pods", "50"});
  auto node = [&] {
    auto r =
        RunCommand({BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "node", "--json"}, 5s);
    last_ = r.output;
    auto j = nlohmann::json::parse(r.output, nullptr, false);
    return j.is_discarded() ? nlohmann::json() : j;
  };
  auto ready = [&](const nlohmann::json& n) -> std::string {
    if (!n.contains("status")) return "";
    for (const auto& c : n["status"]["conditions"]) {
      if (c.value("type", "") == "Ready")
        return c.value("status", "") + ": " + c.value("message", "");
    }
    return "";
  };
  auto wait_ready = [&](const std::string& prefix, std::chrono::milliseconds timeout) {
    auto end = std::chrono::steady_clock::now() + timeout;
    while (ready(node()).rfind(prefix, 0) != 0) {
      if (std::chrono::steady_clock::now() > end) return false;
      notify_->Receive(500ms);
    }
    return true;
  };
  ASSERT_TRUE(wait_ready("True", 20s)) << last_;
  auto n = node();
  EXPECT_EQ(n["metadata"].value("name", ""), "node1");
  EXPECT_EQ(n["status"]["capacity"].value("pods", ""), "50");
  EXPECT_THAT(n["status"]["nodeInfo"].value("containerRuntimeVersion", ""),
              HasSubstr("containerd://"));
  EXPECT_GE(n["status"]["images"].size(), 2u) << "pause and busybox";
  // Allocatable = capacity - reservation (cpu in millicores when not whole).
  const std::string cap_cpu = n["status"]["capacity"].value("cpu", "");
  const std::string alloc_cpu = n["status"]["allocatable"].value("cpu", "");
  EXPECT_EQ(alloc_cpu, std::to_string(std::stoi(cap_cpu) * 1000 - 500) + "m");
  auto human = RunCommand({BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "node"}, 5s);
  EXPECT_EQ(human.exit_code, 0);
  EXPECT_THAT(human.output, HasSubstr("KubeletReady"));

  ContainerdOptions opts;
  opts.dir = dir_.Sub("ctrd");
  opts.image_tarballs = DefaultImageTarballs(ImagesDir());
  ASSERT_TRUE(containerd_->Stop().ok());
  containerd_.reset();
  ASSERT_TRUE(wait_ready("False", 15s)) << last_;
  EXPECT_THAT(ready(node()), HasSubstr("container runtime is down"));
  // The same node status reaches statusd (the StatusSink path), durable and versioned.
  ipc::Context ctx;
  status::StatusClient statusd(ctx, dir_.Sub("run"));
  ASSERT_TRUE(statusd.Connect().ok());
  uint64_t down_version = 0;
  auto stored_ready = [&]() -> std::string {
    auto r = statusd.GetNodeStatus();
    if (!r.ok()) return r.status().ToString();
    auto j = nlohmann::json::parse(r->node_json, nullptr, false);
    down_version = r->version;
    return j.is_discarded() ? "" : ready(j);
  };
  auto wait_stored = [&](const std::string& prefix, std::chrono::milliseconds timeout) {
    auto end = std::chrono::steady_clock::now() + timeout;
    while (stored_ready().rfind(prefix, 0) != 0) {
      if (std::chrono::steady_clock::now() > end) return false;
      notify_->Receive(500ms);
    }
    return true;
  };
  ASSERT_TRUE(wait_stored("False", 15s)) << stored_ready();
  EXPECT_GE(down_version, 1u);
  auto c = ContainerdInstance::Start(opts);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  containerd_ = std::move(*c);
  EXPECT_TRUE(wait_ready("True", 20s)) << last_;
  const uint64_t before = down_version;
  EXPECT_TRUE(wait_stored("True", 20s)) << stored_ready();
  EXPECT_GT(down_version, before);
}

// A crash-looping pod's events: BackOff appears once with a growing count (not as duplicate
// lines), in `nodeletctl events POD` and at the bottom of `nodeletctl pod NAME`.
TEST_F(PodsE2eTest, CrashLoopEventsAreDeduplicatedWithCounts) {
  std::ofstream(dir_.Sub("config.yaml"))
      << "supervisor:\n  services:\n    podworkerd:\n      args: [\"--crashloop-initial\", "
         "\"500ms\", \"--crashloop-max\", \"1s\"]\n";
  Write("crash.yaml", PodYaml("crash", "exit 1"));
  StartNodelet({"--config", dir_.Sub("config.yaml")});
  auto events = [&] {
    return RunCommand(
        {BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "events", "crash-node1"}, 5s);
  };
  std::string out;
  auto end = std::chrono::steady_clock::now() + 40s;
  for (;;) {
    out = events().output;
    if (out.find("BackOff") != std::string::npos && out.find("(x3)") != std::string::npos) break;
    if (std::chrono::steady_clock::now() > end) break;
    notify_->Receive(500ms);
  }
  EXPECT_THAT(out, HasSubstr("Started"));
  EXPECT_THAT(out, HasSubstr("Created"));
  size_t backoff_lines = 0;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);)
    backoff_lines += line.find("BackOff") != std::string::npos;
  EXPECT_EQ(backoff_lines, 1u) << out;
  EXPECT_THAT(out, ::testing::ContainsRegex("\\(x[3-9]")) << out;
  auto pod = RunCommand(
      {BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "pod", "crash-node1"}, 5s);
  EXPECT_THAT(pod.output, HasSubstr("Events:"));
  EXPECT_THAT(pod.output, HasSubstr("BackOff"));
}

// 30 pods in one directory all reach Running; then kill -9 of each service in turn, and of the
// supervisor itself (its services die with it), restarts or duplicates no container.
TEST_F(PodsE2eTest, ThirtyPodsRunAndKillNineOfAnyProcessRestartsNoContainer) {
  constexpr int kPods = 30;
  for (int i = 0; i < kPods; ++i) {
    Write("p" + std::to_string(i) + ".yaml", PodYaml("p" + std::to_string(i), kServe));
  }
  StartNodelet({"--restart-intensity", "100"});
  auto all_running = [&](auto& p) {
    int running = 0;
    for (auto& [_, pod] : p) running += pod["status"].value("phase", "") == "Running";
    return running == kPods;
  };
  ASSERT_TRUE(WaitPods(all_running, 90s)) << last_;
  const auto before = RunningContainerIds();
  ASSERT_EQ(before.size(), static_cast<size_t>(kPods));

  auto pid_of = [&](const std::string& service) {
    auto r =
        RunCommand({BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "pid", service}, 5s);
    return static_cast<pid_t>(std::atoi(r.output.c_str()));
  };
  for (const char* service : {"plegd", "statusd", "podworkerd", "volumed"}) {
    pid_t pid = pid_of(service);
    ASSERT_GT(pid, 0) << service;
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    ASSERT_TRUE(WaitProcessGone(pid, 10s));
    ASSERT_TRUE(notify_->WaitFor("STATUS=4/4 services running", 20s)) << service;
  }
  ASSERT_TRUE(WaitPods(all_running, 30s)) << last_;
  EXPECT_EQ(RunningContainerIds(), before) << "no container may be restarted or duplicated";

  // The supervisor itself: its services go with it (PR_SET_PDEATHSIG); containers stay.
  std::vector<pid_t> services;
  for (const char* service : {"plegd", "statusd", "podworkerd", "volumed"}) {
    services.push_back(pid_of(service));
  }
  nodelet_->Signal(SIGKILL);
  ASSERT_TRUE(nodelet_->Wait(10s).has_value());
  for (pid_t pid : services) EXPECT_TRUE(WaitProcessGone(pid, 10s)) << pid;
  EXPECT_EQ(RunningContainerIds(), before) << "containers outlive every nodelet process";
  StartNodelet({"--restart-intensity", "100"});
  ASSERT_TRUE(WaitPods(all_running, 60s)) << last_;
  EXPECT_EQ(RunningContainerIds(), before) << "a restarted nodelet must adopt, not re-create";
  for (auto& [name, pod] : Pods()) {
    for (const auto& cs : pod["status"]["containerStatuses"]) {
      EXPECT_EQ(cs.value("restartCount", -1), 0) << name;
    }
  }
}

}  // namespace
}  // namespace nodelet::testing
