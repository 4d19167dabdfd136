// NodeletTest: a gtest fixture with a private containerd (started in SetUp, stopped in
// TearDown), a manifest directory, and `nodelet` started on demand with its own directories and
// a NOTIFY_SOCKET the test reads. Shared by the end-to-end tests; header-only (link the
// containerd harness).
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/containerd.h"
#include "tests/testing/harness.h"
#include "tests/testing/leak_check.h"

namespace nodelet::testing {

// A busybox pod (the test image, never pulled) running `sh -c command` in container `app`;
// `spec_extra` goes under spec, `container_extra` under the container (YAML, indented).
inline std::string BusyboxPodYaml(const std::string& name, const std::string& command,
                                  const std::string& spec_extra = "",
                                  const std::string& container_extra = "") {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
         "\nspec:\n  terminationGracePeriodSeconds: 2\n" + spec_extra +
         "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
         "    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"" +
         command + "\"]\n" + container_extra;
}

// A command that runs until SIGTERM, then exits 0.
inline constexpr char kSleepUntilTerm[] = "trap 'exit 0' TERM; while true; do sleep 0.2; done";

class NodeletTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ContainerdOptions opts;
    opts.dir = dir_.Sub("ctrd");
    opts.image_tarballs = DefaultImageTarballs(ImagesDir());
    ConfigureContainerd(opts);
    auto c = ContainerdInstance::Start(opts);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    containerd_ = std::move(*c);
    std::filesystem::create_directories(manifests());
    std::filesystem::create_directories(dir_.Sub("log"));
  }
  void TearDown() override {
    if (nodelet_) {
      nodelet_->Signal(SIGTERM);
      nodelet_->Wait(std::chrono::seconds(20));
    }
    if (HasFailure()) {
      std::ifstream in(dir_.Sub("nodelet.log"));
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      std::cerr << "---- nodelet.log (tail)\n"
                << (text.size() > 6000 ? text.substr(text.size() - 6000) : text);
      PrintServiceLogs();
    }
    if (containerd_) {
      EXPECT_TRUE(containerd_->Stop().ok());
    }
    // Volumes of the pods still there when nodelet stopped (volumed keeps a running pod's
    // volumes across a stop, as the kubelet does): a medium Memory emptyDir is a tmpfs under
    // the test's directory, and a test may mount its own (a small nodefs).
    for (const auto& m : MountsUnder(dir_.path())) umount2(m.c_str(), MNT_DETACH);
    // The pods' cgroups under this test's own --cgroup-root (nodelet's pods outlive it).
    for (const auto& left : RemoveCgroupTree(TestCgroupRoot(dir_.path()))) {
      ADD_FAILURE() << "cgroup left: " << left;
    }
  }
  // A fixture's changes to its containerd before start (a registry config path, extra images,
  // a small root filesystem).
  virtual void ConfigureContainerd(ContainerdOptions&) {}
  std::string manifests() const { return dir_.Sub("manifests"); }
  // Writes a manifest atomically (a hidden temporary file, then rename).
  void Write(const std::string& file, const std::string& content) {
    std::string tmp = manifests() + "/." + file + ".tmp";
    std::ofstream(tmp) << content;
    std::filesystem::rename(tmp, manifests() + "/" + file);
  }
  // Starts nodelet on the private containerd and the manifest directory (node "node1", 100 ms
  // relist) and waits for READY=1. Each start gets its own notify socket and log file.
  void StartNodelet(std::vector<std::string> extra = {}) {
    notify_.reset();
    ++starts_;
    notify_ =
        std::make_unique<NotifyListener>(dir_.Sub("notify-" + std::to_string(starts_) + ".sock"));
    std::vector<std::string> argv = {BinDir() + "/nodelet",
                                     "--root-dir",
                                     dir_.Sub("root"),
                                     "--run-dir",
                                     dir_.Sub("run"),
                                     "--log-dir",
                                     dir_.Sub("log"),
                                     "--runtime-endpoint",
                                     containerd_->endpoint(),
                                     "--relist-period",
                                     "100ms",
                                     "--pod-manifest-path",
                                     manifests(),
                                     "--node-name",
                                     "node1",
                                     "--cgroup-root",
                                     TestCgroupRoot(dir_.path())};
    argv.insert(argv.end(), extra.begin(), extra.end());
    nodelet_ = std::make_unique<Subprocess>(
        argv, std::map<std::string, std::string>{{"NOTIFY_SOCKET", notify_->path()}},
        dir_.Sub(starts_ == 1 ? "nodelet.log" : "nodelet-" + std::to_string(starts_) + ".log"));
    ASSERT_TRUE(notify_->WaitFor("READY=1", std::chrono::seconds(30)).has_value());
  }

  // The pod as `nodeletctl pod NAME -o json` prints it (null when unknown).
  nlohmann::json PodJson(const std::string& name) {
    auto r = RunCommand(
        {BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "pod", name, "-o", "json"},
        std::chrono::seconds(5));
    auto j = nlohmann::json::parse(r.output, nullptr, false);
    return j.is_discarded() ? nlohmann::json() : j;
  }
  // The pod's status as the JSON object `nodeletctl pods -o json` lists (null when absent).
  nlohmann::json CtlPod(const std::string& name) {
    auto r =
        RunCommand({BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "pods", "-o", "json"},
                   std::chrono::seconds(5));
    auto j = nlohmann::json::parse(r.output, nullptr, false);
    if (j.is_discarded() || !j.contains("items")) return nullptr;
    for (const auto& p : j["items"]) {
      if (p["metadata"].value("name", "") == name) return p;
    }
    return nullptr;
  }
  // Waits until `pred` holds; each round waits for nodelet's next notify datagram or 200 ms
  // (only the 200 ms before nodelet is started: there is no notify socket yet).
  bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
    auto end = std::chrono::steady_clock::now() + timeout;
    while (!pred()) {
      if (std::chrono::steady_clock::now() >= end) return false;
      if (notify_) {
        notify_->Receive(std::chrono::milliseconds(200));
      } else {
        // A poll round, bounded by the deadline above.
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
    }
    return true;
  }
  // The id of a running container of the pod (of `container` when given), or "".
  std::string RunningContainer(const std::string& pod_name, const std::string& container = "") {
    ::runtime::v1::ContainerFilter f;
    (*f.mutable_label_selector())["io.kubernetes.pod.name"] = pod_name;
    if (!container.empty())
      (*f.mutable_label_selector())["io.kubernetes.container.name"] = container;
    auto list = containerd_->cri().ListContainers(f);
    if (!list.ok()) return "";
    for (const auto& c : *list) {
      if (c.state() == ::runtime::v1::CONTAINER_RUNNING) return c.id();
    }
    return "";
  }
  // A service's pid as `nodeletctl pid SERVICE` prints it; 0 when it cannot.
  pid_t ServicePid(const std::string& service) {
    auto r = RunCommand({BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "pid", service},
                        std::chrono::seconds(5));
    return r.exit_code == 0 ? static_cast<pid_t>(std::atoi(r.output.c_str())) : 0;
  }

  // SIGKILLs the supervisor and waits until it and its four services are gone (they go with it,
  // PR_SET_PDEATHSIG); true when all are.
  bool KillSupervisorAndServices() {
    std::vector<pid_t> services;
    for (const char* s : {"plegd", "statusd", "podworkerd", "volumed"}) {
      services.push_back(ServicePid(s));
    }
    nodelet_->Signal(SIGKILL);
    if (!nodelet_->Wait(std::chrono::seconds(10)).has_value()) return false;
    bool gone = true;
    for (pid_t pid : services) gone = WaitProcessGone(pid, std::chrono::seconds(10)) && gone;
    return gone;
  }
  // On a failed test: the tail of every service's log in the log directory.
  void PrintServiceLogs() {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir_.Sub("log"), ec)) {
      if (e.path().extension() != ".log") continue;
      std::ifstream in(e.path());
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      std::cerr << "---- " << e.path().filename() << "\n"
                << (text.size() > 3000 ? text.substr(text.size() - 3000) : text);
    }
  }

  // Waits until `nodeletctl status --json` reports `service` healthy ("ok"; podworkerd is
  // degraded until it holds plegd's first relist).
  bool WaitServiceHealthy(const std::string& service, std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    do {
      auto r = RunCommand(
          {BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "status", "--json", service},
          std::chrono::seconds(5));
      if (r.exit_code == 0) {
        auto j = nlohmann::json::parse(r.output, nullptr, false);
        if (j.is_array() && j.size() == 1 && j[0].value("health", "") == "ok") return true;
      }
      // Polling a CLI, bounded by the deadline; the heartbeat that carries health is 2 s.
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    } while (std::chrono::steady_clock::now() < end);
    return false;
  }

  TempDir dir_;
  std::unique_ptr<ContainerdInstance> containerd_;
  std::unique_ptr<NotifyListener> notify_;
  std::unique_ptr<Subprocess> nodelet_;
  int starts_ = 0;
};

}  // namespace nodelet::testing
