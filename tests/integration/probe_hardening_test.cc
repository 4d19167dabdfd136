// Hardening of probes and sources, end to end through the real `nodelet` on a private containerd,
// with every hostile server in this process on loopback:
// - four pods whose liveness endpoints accept and never answer are restarted at their
//   timeoutSeconds; a fifth whose endpoint streams 256 MiB leaves podworkerd's peak RSS within
//   64 MiB of where it was; beside all five, a healthy pod's readiness flips within 2 periods;
// - a manifest URL that goes down, or serves 2 MB of junk, keeps its pod running with the same
//   container, also across a restart of nodelet made while it is down.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/containerd.h"
#include "tests/testing/harness.h"
#include "tests/testing/loopback_server.h"
#include "tests/testing/nodelet_fixture.h"

namespace nodelet::testing {
namespace {

namespace v1 = ::runtime::v1;
using namespace std::chrono_literals;
using Steady = std::chrono::steady_clock;
using ::testing::HasSubstr;

constexpr char kServe[] = "trap 'exit 0' TERM; while true; do sleep 0.2; done";

long PeakRssKiB(pid_t pid) {
  std::istringstream in(ReadTextFile("/proc/" + std::to_string(pid) + "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return -1;
}

std::string ProbedPod(const std::string& name, const std::string& probe) {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
         "\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n"
         "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
         "    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"" +
         std::string(kServe) + "\"]\n" + probe;
}

class ProbeHardeningTest : public NodeletTest {
 protected:
  static int RestartCount(const nlohmann::json& pod) {
    if (!pod.contains("status") || !pod["status"].contains("containerStatuses")) return -1;
    for (const auto& c : pod["status"]["containerStatuses"]) return c.value("restartCount", 0);
    return -1;
  }
  static bool Ready(const nlohmann::json& pod) {
    if (!pod.contains("status") || !pod["status"].contains("containerStatuses")) return false;
    for (const auto& c : pod["status"]["containerStatuses"]) return c.value("ready", false);
    return false;
  }
};

TEST_F(ProbeHardeningTest, HangingAndStreamingEndpointsHoldBackNoOtherProbe) {
  std::atomic<bool> healthy{false};
  std::atomic<uint64_t> streamed{0};
  LoopbackServer server([&](int fd, const std::string& request) {
    const std::string path = RequestPath(request);
    if (path == "/hang") {
      server.Pause(120s);  // accept, read, never answer
    } else if (path == "/stream") {
      if (!SendAll(fd, "HTTP/1.1 200 OK\r\nContent-Length: 268435456\r\n\r\n")) return;
      const std::string chunk(64 * 1024, 's');
      while (!server.stopping() && streamed < (256u << 20) && SendAll(fd, chunk))
        streamed += chunk.size();
    } else if (path == "/ready") {
      SendAll(fd, healthy ? "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
                          : "HTTP/1.1 503 Unavailable\r\nContent-Length: 0\r\n\r\n");
    }
  });
  const std::string port = std::to_string(server.port());
  auto probe = [&](const std::string& kind, const std::string& path, int period) {
    return "    " + kind + ":\n      httpGet:\n        host: 127.0.0.1\n        path: " + path +
           "\n        port: " + port +
           "\n      timeoutSeconds: 1\n      periodSeconds: " + std::to_string(period) +
           "\n      failureThreshold: 1\n";
  };
  StartNodelet();
  const pid_t podworkerd = ServicePid("podworkerd");
  ASSERT_GT(podworkerd, 0);
  const long rss_before = PeakRssKiB(podworkerd);
  for (int i = 0; i < 4; ++i) {
    Write("hang" + std::to_string(i) + ".yaml",
          ProbedPod("hang" + std::to_string(i), probe("livenessProbe", "/hang", 2)));
  }
  Write("stream.yaml", ProbedPod("stream", probe("livenessProbe", "/stream", 1)));
  Write("healthy.yaml", ProbedPod("healthy", probe("readinessProbe", "/ready", 2)));

  // Every hanging liveness probe fails at its 1 s deadline: each container is restarted.
  EXPECT_TRUE(WaitFor(
      [&] {
        for (int i = 0; i < 4; ++i) {
          if (RestartCount(PodJson("hang" + std::to_string(i) + "-node1")) < 1) return false;
        }
        return true;
      },
      60s))
      << PodJson("hang0-node1").dump(2);

  // The healthy pod: unready while its endpoint says 503, ready within 2 periods (4 s, plus a
  // second for the status to reach nodeletctl) of saying 200, with the five others still going.
  ASSERT_TRUE(WaitFor([&] { return !RunningContainer("healthy-node1").empty(); }, 30s));
  EXPECT_FALSE(Ready(PodJson("healthy-node1")));
  healthy = true;
  const auto flipped_at = Steady::now();
  ASSERT_TRUE(WaitFor([&] { return Ready(PodJson("healthy-node1")); }, 20s));
  EXPECT_LT(Steady::now() - flipped_at, 5s) << "readiness must flip within 2 periods";

  // The streaming endpoint was read by at least one probe and cost podworkerd no more than
  // 64 MiB of peak memory (the probe reads 10 KiB of it).
  ASSERT_TRUE(WaitFor([&] { return streamed > 0; }, 20s));
  EXPECT_EQ(RestartCount(PodJson("stream-node1")), 0) << "a 200 with a long body is a success";
  const long rss_after = PeakRssKiB(podworkerd);
  ASSERT_GT(rss_before, 0);
  EXPECT_LT(rss_after - rss_before, 64 * 1024)
      << "peak RSS grew by " << (rss_after - rss_before) << " KiB";
  EXPECT_EQ(ServicePid("podworkerd"), podworkerd);

  for (const char* f :
       {"hang0.yaml", "hang1.yaml", "hang2.yaml", "hang3.yaml", "stream.yaml", "healthy.yaml"}) {
    std::filesystem::remove(manifests() + "/" + f);
  }
  EXPECT_TRUE(WaitFor(
      [&] {
        auto list = containerd_->cri().ListContainers(v1::ContainerFilter());
        if (!list.ok()) return false;
        for (const auto& c : *list) {
          if (c.state() == v1::CONTAINER_RUNNING) return false;
        }
        return true;
      },
      60s));
  server.Stop();
}

// The URL's pod stays, with the same container, while the URL is down, while it serves 2 MB of
// junk, and across a restart of nodelet made while it is down; the failure is on /metrics.
TEST_F(ProbeHardeningTest, ManifestUrlThatFailsKeepsItsPods) {
  std::mutex mu;
  std::string mode =
      "good";  // good, down (503), junk (2 MB of '#'), garbage (YAML that does not parse)
  const std::string good = ProbedPod("fromurl", "");
  LoopbackServer server([&](int fd, const std::string&) {
    std::string m;
    {
      std::lock_guard<std::mutex> lock(mu);
      m = mode;
    }
    if (m == "good") {
      SendAll(fd, "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(good.size()) + "\r\n\r\n" +
                      good);
    } else if (m == "garbage") {
      const std::string bad = "apiVersion: v1\nkind: Pod\nmetadata: {name: [oops\n";
      SendAll(fd, "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(bad.size()) + "\r\n\r\n" +
                      bad);
    } else if (m == "junk") {
      const std::string junk(2 * 1000 * 1000, '#');
      SendAll(fd, "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(junk.size()) + "\r\n\r\n" +
                      junk);
    } else {
      SendAll(fd, "HTTP/1.1 503 Unavailable\r\nContent-Length: 0\r\n\r\n");
    }
  });
  auto set = [&](const std::string& m) {
    std::lock_guard<std::mutex> lock(mu);
    mode = m;
  };
  const int http_port = FreeLoopbackPort();
  // The URL is read every second here (the kubelet's default is 20 s).
  const std::vector<std::string> args = {
      "--manifest-url",         "http://127.0.0.1:" + std::to_string(server.port()) + "/pods",
      "--http-check-frequency", "1s",
      "--http-address",         "127.0.0.1:" + std::to_string(http_port)};
  StartNodelet(args);
  std::string id;
  ASSERT_TRUE(WaitFor([&] { return !(id = RunningContainer("fromurl-node1")).empty(); }, 40s));

  auto metrics = [&] {
    httplib::Client http("127.0.0.1", http_port);
    http.set_connection_timeout(2s);
    http.set_read_timeout(5s);
    auto r = http.Get("/metrics");
    return r ? r->body : std::string();
  };
  // How many reads of the URL failed for `reason` (0 when the series is absent).
  auto failures = [&](const std::string& reason) {
    const std::string key =
        "nodelet_pod_source_failures_total{source=\"http\",reason=\"" + reason + "\"} ";
    const std::string text = metrics();
    auto at = text.find(key);
    return at == std::string::npos ? 0L : std::atol(text.c_str() + at + key.size());
  };
  // Three failed reads, each a second apart: time enough for any removal to have happened.
  auto failed = [&](const std::string& reason) { return failures(reason) >= 3; };
  for (const auto& mode_reason : {std::pair{"down", "http_status"}, std::pair{"junk", "too_large"},
                                  std::pair{"garbage", "parse"}}) {
    // Named, not a structured binding: clang 14 refuses a lambda that captures one.
    const char* m = mode_reason.first;
    const char* reason = mode_reason.second;
    set(m);
    // The failure shows on /metrics; the pod is untouched.
    EXPECT_TRUE(WaitFor([&] { return failed(reason); }, 20s)) << m << ":\n" << metrics();
    EXPECT_EQ(RunningContainer("fromurl-node1"), id) << m;
  }
  // Restart nodelet while the URL is down: the pod is not removed, its container is the same.
  set("down");
  nodelet_->Signal(SIGTERM);
  ASSERT_TRUE(nodelet_->Wait(30s).has_value());
  StartNodelet(args);
  EXPECT_TRUE(WaitFor([&] { return failed("http_status"); }, 20s));
  EXPECT_EQ(RunningContainer("fromurl-node1"), id)
      << "the pod must survive a restart while its URL is down";
  set("good");
  // Back: the same container, nothing restarted.
  EXPECT_TRUE(WaitFor([&] { return !PodJson("fromurl-node1").is_null(); }, 20s));
  EXPECT_EQ(RunningContainer("fromurl-node1"), id);
  server.Stop();
}

}  // namespace
}  // namespace nodelet::testing
