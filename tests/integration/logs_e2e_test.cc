// Container logs end to end through the real `nodelet` on a private containerd:
// - `nodeletctl logs -f` and /containerLogs?follow=true end when the container ends, with
//   every line it wrote; --timestamps, --tail, tailLines, limitBytes;
// - --previous after a restart, and kubectl's errors (no previous instance, unknown pod or
//   container) with exit code 4 or HTTP 404/400; --all-containers in the pod's order;
// - /containerLogs is not served without --enable-debugging-handlers.
// (Following across a rotation is in tests/unit/logs/cri_log_test.cc.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <regex>
#include <string>
#include <thread>

#include "tests/testing/harness.h"
#include "tests/testing/nodelet_fixture.h"

namespace nodelet::testing {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

// Prints three lines, waits 4 s, prints one more and exits 0; never restarted.
constexpr char kCountPod[] = R"(apiVersion: v1
kind: Pod
metadata:
  name: count
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: nodelet.local/busybox:1.0
    imagePullPolicy: Never
    command: ["sh", "-c", "echo line 1; echo line 2; echo line 3; sleep 4; echo after"]
)";

// An init container, a container that runs, and one that exits once and then runs (instance
// N prints "instance N": the count is kept in an emptyDir).
constexpr char kMultiPod[] = R"(apiVersion: v1
kind: Pod
metadata:
  name: multi
spec:
  restartPolicy: Always
  terminationGracePeriodSeconds: 2
  volumes:
  - name: d
    emptyDir: {}
  initContainers:
  - name: init
    image: nodelet.local/busybox:1.0
    imagePullPolicy: Never
    command: ["sh", "-c", "echo from init"]
  containers:
  - name: a
    image: nodelet.local/busybox:1.0
    imagePullPolicy: Never
    command: ["sh", "-c", "echo a1; echo a2; trap 'exit 0' TERM; while true; do sleep 0.2; done"]
  - name: b
    image: nodelet.local/busybox:1.0
    imagePullPolicy: Never
    volumeMounts:
    - name: d
      mountPath: /d
    command: ["sh", "-c", "n=$(cat /d/n 2>/dev/null || echo 0); echo instance $n; echo $((n+1)) > /d/n; if [ $n -ge 1 ]; then trap 'exit 0' TERM; while true; do sleep 0.2; done; fi; sleep 1; exit 1"]
)";

// Writes 40,000 bytes without a newline, then runs: the runtime logs them as 16 KiB partial
// (P) pieces, and the line never ends while the container runs.
constexpr char kPartialPod[] = R"(apiVersion: v1
kind: Pod
metadata:
  name: partial
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: nodelet.local/busybox:1.0
    imagePullPolicy: Never
    command: ["sh", "-c", "head -c 40000 /dev/zero | tr '\\0' a; trap 'exit 0' TERM; while true; do sleep 0.2; done"]
)";

class LogsE2eTest : public NodeletTest {
 protected:
  CommandResult Ctl(std::vector<std::string> args, std::chrono::milliseconds timeout = 10s) {
    std::vector<std::string> argv = {BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"),
                                     "logs"};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, timeout);
  }
  // The container's status in `nodeletctl pods -o json` (null when absent).
  nlohmann::json ContainerStatus(const std::string& pod, const std::string& container) {
    auto p = CtlPod(pod);
    if (p.is_null()) return nullptr;
    for (const char* list : {"initContainerStatuses", "containerStatuses"}) {
      if (!p["status"].contains(list)) continue;
      for (const auto& c : p["status"][list]) {
        if (c.value("name", "") == container) return c;
      }
    }
    return nullptr;
  }
  bool WaitRunning(const std::string& pod, const std::string& container, int restarts,
                   std::chrono::milliseconds timeout) {
    return WaitFor(
        [&] {
          auto c = ContainerStatus(pod, container);
          return !c.is_null() && c["state"].contains("running") &&
                 c.value("restartCount", -1) == restarts;
        },
        timeout);
  }
  httplib::Result Get(const std::string& path) {
    httplib::Client http("127.0.0.1", port_);
    http.set_connection_timeout(2s);
    http.set_read_timeout(20s);
    return http.Get(path);
  }
  int port_ = FreeLoopbackPort();
};

TEST_F(LogsE2eTest, FollowEndsWithTheContainerAndTheHttpRouteServesLogs) {
  Write("count.yaml", kCountPod);
  Write("multi.yaml", kMultiPod);
  StartNodelet(
      {"--http-address", "127.0.0.1:" + std::to_string(port_), "--enable-debugging-handlers"});
  ASSERT_TRUE(WaitRunning("count-node1", "main", 0, 30s));
  const std::string ns = CtlPod("count-node1")["metadata"].value("namespace", "");
  ASSERT_FALSE(ns.empty());

  // Both follows start while the container runs, and end soon after it exits (4 s).
  const auto start = std::chrono::steady_clock::now();
  CommandResult followed;
  std::thread ctl([&] { followed = Ctl({"count-node1", "-f"}, 20s); });
  auto streamed = Get("/containerLogs/" + ns + "/count-node1/main?follow=true");
  ctl.join();
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(followed.exit_code, 0) << followed.output;
  EXPECT_FALSE(followed.timed_out);
  EXPECT_EQ(followed.output, "line 1\nline 2\nline 3\nafter\n");
  ASSERT_TRUE(streamed);
  EXPECT_EQ(streamed->status, 200);
  EXPECT_EQ(streamed->body, "line 1\nline 2\nline 3\nafter\n");
  EXPECT_LT(took, 15s);
  // Once ended, -f prints what is there and returns.
  EXPECT_EQ(Ctl({"count-node1", "-f"}).output, "line 1\nline 2\nline 3\nafter\n");

  // --timestamps, --tail, --since; tailLines, timestamps, limitBytes.
  auto stamped = Ctl({"count-node1", "--timestamps", "--tail", "2"});
  EXPECT_EQ(stamped.exit_code, 0) << stamped.output;
  EXPECT_TRUE(std::regex_match(
      stamped.output,
      std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z line 3\n\S+Z after\n)")))
      << stamped.output;
  EXPECT_EQ(Ctl({"count-node1", "--since", "1h"}).output, "line 1\nline 2\nline 3\nafter\n");
  EXPECT_EQ(Ctl({"count-node1", "--since", "bad"}).exit_code, 2);
  auto tail = Get("/containerLogs/" + ns + "/count-node1/main?tailLines=1");
  ASSERT_TRUE(tail);
  EXPECT_EQ(tail->body, "after\n");
  auto limited = Get("/containerLogs/" + ns + "/count-node1/main?limitBytes=8&timestamps=false");
  ASSERT_TRUE(limited);
  EXPECT_EQ(limited->body, "line 1\nl");
  auto ts = Get("/containerLogs/" + ns + "/count-node1/main?timestamps=true&tailLines=1");
  ASSERT_TRUE(ts);
  EXPECT_TRUE(std::regex_match(ts->body, std::regex(R"(\S+Z after\n)"))) << ts->body;

  // Bad requests: kubectl's words, exit 4; HTTP 404 and 400.
  auto none = Ctl({"nosuch"});
  EXPECT_EQ(none.exit_code, 4);
  EXPECT_THAT(none.output, HasSubstr("pods \"nosuch\" not found"));
  auto no_container = Ctl({"count-node1", "-c", "nosuch"});
  EXPECT_EQ(no_container.exit_code, 4);
  EXPECT_THAT(no_container.output, HasSubstr("container nosuch is not valid for pod count-node1"));
  auto no_previous = Ctl({"count-node1", "--previous"});
  EXPECT_EQ(no_previous.exit_code, 4);
  EXPECT_THAT(no_previous.output,
              HasSubstr("previous terminated container \"main\" in pod \"count-node1\" not found"));
  auto status = [&](const std::string& path) {
    auto r = Get(path);
    return r ? r->status : -1;
  };
  EXPECT_EQ(status("/containerLogs/" + ns + "/nosuch/main"), 404);
  EXPECT_EQ(status("/containerLogs/" + ns + "/count-node1/nosuch"), 404);
  EXPECT_EQ(status("/containerLogs/" + ns + "/count-node1/main?previous=true"), 400);
  EXPECT_EQ(status("/containerLogs/" + ns + "/count-node1/main?tailLines=x"), 400);
  EXPECT_EQ(status("/containerLogs/" + ns + "/..%2F..%2Fetc/main"), 400);
  EXPECT_EQ(status("/containerLogs/" + ns + "/../main"), 400);
  EXPECT_EQ(status("/containerLogs/" + ns + "/count-node1"), 404);

  // --previous after a restart; the current instance; every container in the pod's order.
  ASSERT_TRUE(WaitRunning("multi-node1", "b", 1, 40s)) << CtlPod("multi-node1").dump();
  EXPECT_EQ(Ctl({"multi-node1", "-c", "b"}).output, "instance 1\n");
  auto previous = Ctl({"multi-node1", "-c", "b", "--previous"});
  EXPECT_EQ(previous.exit_code, 0) << previous.output;
  EXPECT_EQ(previous.output, "instance 0\n");
  auto previous_http = Get("/containerLogs/" + ns + "/multi-node1/b?previous=1");
  ASSERT_TRUE(previous_http);
  EXPECT_EQ(previous_http->body, "instance 0\n");
  EXPECT_EQ(Ctl({"multi-node1", "-c", "a", "-p"}).exit_code, 4);
  EXPECT_EQ(Ctl({"multi-node1", "--all-containers"}).output, "from init\na1\na2\ninstance 1\n");
  auto which = Ctl({"multi-node1"});
  EXPECT_EQ(which.exit_code, 4);
  EXPECT_THAT(which.output, HasSubstr("a container name must be specified for pod multi-node1, "
                                      "choose one of: [init a b]"));
}

// Following passes a line on as its pieces come, as the kubelet does: what a container printed
// without a newline shows while it runs, through `nodeletctl logs -f` and /containerLogs.
TEST_F(LogsE2eTest, FollowShowsPartialOutputOfALineThatDoesNotEnd) {
  Write("partial.yaml", kPartialPod);
  StartNodelet(
      {"--http-address", "127.0.0.1:" + std::to_string(port_), "--enable-debugging-handlers"});
  ASSERT_TRUE(WaitRunning("partial-node1", "main", 0, 30s));
  const std::string ns = CtlPod("partial-node1")["metadata"].value("namespace", "");
  ASSERT_FALSE(ns.empty());
  constexpr size_t kPiece = 16 * 1024;  // what containerd writes at a time of a long line
  const std::string out_path = dir_.Sub("follow.out");
  {
    Subprocess follow(
        {BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "logs", "partial-node1", "-f"}, {},
        out_path);
    std::string seen;
    EXPECT_TRUE(WaitFor(
        [&] {
          seen = ReadTextFile(out_path);
          return seen.size() >= kPiece;
        },
        20s))
        << "logs -f showed " << seen.size() << " bytes of the partial line";
    EXPECT_EQ(seen.find_first_not_of('a'), std::string::npos) << seen.substr(0, 200);
    EXPECT_TRUE(ProcessAlive(follow.pid())) << "the follow goes on while the container runs";
  }  // the follower is ended by its pid here
  std::string body;
  httplib::Client http("127.0.0.1", port_);
  http.set_connection_timeout(2s);
  http.set_read_timeout(20s);
  const auto start = std::chrono::steady_clock::now();
  (void)http.Get("/containerLogs/" + ns + "/partial-node1/main?follow=true",
                 [&](const char* data, size_t n) {
                   body.append(data, n);
                   return body.size() < kPiece;  // enough: stop reading
                 });
  EXPECT_GE(body.size(), kPiece);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 15s);
  EXPECT_EQ(body.find_first_not_of('a'), std::string::npos) << body.substr(0, 200);
}

TEST_F(LogsE2eTest, ContainerLogsIsOffByDefault) {
  StartNodelet({"--http-address", "127.0.0.1:" + std::to_string(port_)});
  auto r = Get("/containerLogs/default/any/app");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  auto healthz = Get("/healthz");
  ASSERT_TRUE(healthz);
  EXPECT_NE(healthz->status, 404);
}

}  // namespace
}  // namespace nodelet::testing
