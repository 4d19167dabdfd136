// LifecycleE2eTest, the fixture of the lifecycle-e2e suite (lifecycle_e2e_test.cc and
// lifecycle_container_e2e_test.cc): `nodelet` on a private containerd (NodeletTest) with its
// HTTP endpoint on a port of its own and a results directory its pods write into, and what the
// tests read back: a pod's uid, its emptyDirs seen from the host, the pods nodeletctl and /pods
// list, a pod's events and restart counts.
//
// The pods' containers trap SIGTERM and, in the handler, check their emptyDir files over a few
// seconds, writing what they find into a hostPath directory the test reads.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "lib/status/status_client.h"
#include "tests/testing/harness.h"
#include "tests/testing/leak_check.h"
#include "tests/testing/nodelet_fixture.h"

namespace nodelet::testing {

// The fixture's waits are written with these, as the tests' are.
using namespace std::chrono_literals;

// The container of every pod here. It writes a marker into each emptyDir (`scratch` on disk,
// `mem` on a tmpfs), installs its SIGTERM handler and says "running". On SIGTERM it ignores
// further SIGTERMs, says "started", checks both markers CHECKS times half a second apart
// ("scratch ok" / "scratch missing", the same for mem), says "done" and exits 0. A container
// SIGKILLed before the end of its handler has no "done" line.
inline std::string GracefulScript(int checks) {
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
inline std::string GracefulPodYaml(const std::string& name, const std::string& results_dir,
                                   int checks) {
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
inline std::string KeeperPodYaml(const std::string& name) {
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

inline std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

inline size_t CountLines(const std::vector<std::string>& lines, const std::string& what) {
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

}  // namespace nodelet::testing
