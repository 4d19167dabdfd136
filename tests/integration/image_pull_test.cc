// Image pulls from a real registry through the real `nodelet`: Debian's docker-registry on
// loopback (tests/testing/registry.h) holds the project's busybox image, pushed with skopeo,
// and the private containerd reaches it over plain HTTP (a certs.d hosts.toml). Pulls are
// counted in the registry's own access log and timed from containerd's own log, so neither
// account comes from the code under test. Pull settings go through the YAML config's
// `podworkerd:` section.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <time.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "lib/common/base64.h"
#include "lib/etcd/etcd_client.h"
#include "lib/etcd/fleet_keys.h"
#include "tests/testing/containerd.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/harness.h"
#include "tests/testing/nodelet_fixture.h"
#include "tests/testing/registry.h"

namespace nodelet::testing {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kServe[] = "trap 'exit 0' TERM; while true; do sleep 0.2; done";
constexpr char kRepo[] = "nodelet/busybox";
constexpr char kTag[] = "1.0";

std::string PodYaml(const std::string& name, const std::string& image, const std::string& policy,
                    const std::string& command) {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
         "\nspec:\n  hostNetwork: true\n  restartPolicy: Always\n"
         "  terminationGracePeriodSeconds: 5\n  containers:\n  - name: app\n    image: " +
         image + "\n    imagePullPolicy: " + policy + "\n    command: [\"sh\", \"-c\", \"" +
         command + "\"]\n";
}

// Unix time (seconds, with fractions) of a containerd log line's `time="...Z"` field; NAN when
// it has none.
double LogLineTime(const std::string& line) {
  auto at = line.find("time=\"");
  if (at == std::string::npos) return NAN;
  std::string ts = line.substr(at + 6, line.find('"', at + 6) - at - 6);
  tm t{};
  const char* rest = strptime(ts.c_str(), "%Y-%m-%dT%H:%M:%S", &t);
  if (rest == nullptr) return NAN;
  double frac = 0;
  if (*rest == '.') frac = std::strtod(rest, nullptr);
  return static_cast<double>(timegm(&t)) + frac;
}

class ImagePullTest : public NodeletTest {
 protected:
  void SetUp() override {
    RegistryOptions options;
    options.dir = dir_.Sub("registry");
    auto r = RegistryInstance::Start(options);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    registry_ = std::move(*r);
    Status pushed = registry_->Push(ImagesDir() + "/busybox.tar", std::string(kRepo) + ":" + kTag);
    ASSERT_TRUE(pushed.ok()) << pushed.ToString();
    baseline_ = registry_->ManifestRequests(kRepo, kTag);
    ASSERT_TRUE(WritePlainHttpHostConfig(dir_.Sub("certs.d"), registry_->host()).ok());
    NodeletTest::SetUp();
  }
  void ConfigureContainerd(ContainerdOptions& options) override {
    options.registry_config_path = dir_.Sub("certs.d");
  }
  void TearDown() override {
    NodeletTest::TearDown();
    if (registry_) {
      EXPECT_TRUE(registry_->Stop().ok());
    }
  }

  std::string Image() const { return registry_->host() + "/" + kRepo + ":" + kTag; }
  // Manifest requests for the image since the push: one per pull containerd made.
  int Pulls() const { return registry_->ManifestRequests(kRepo, kTag) - baseline_; }

  // Starts nodelet with `podworkerd_yaml` as the config file's `podworkerd:` section.
  void StartWithPodworkerdConfig(const std::string& podworkerd_yaml) {
    std::ofstream(dir_.Sub("nodelet.yaml")) << "podworkerd:\n" << podworkerd_yaml;
    StartNodelet({"--config", dir_.Sub("nodelet.yaml")});
  }

  // The pod's `app` container status from `nodeletctl pods -o json` (null when absent).
  nlohmann::json AppStatus(const std::string& pod) {
    auto r = RunCommand(
        {BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "pods", "-o", "json"}, 5s);
    last_ = r.output;
    auto j = nlohmann::json::parse(r.output, nullptr, false);
    if (j.is_discarded() || !j.contains("items")) return nullptr;
    for (const auto& p : j["items"]) {
      if (p["metadata"].value("name", "") != pod) continue;
      for (const auto& c : p["status"].value("containerStatuses", nlohmann::json::array())) {
        if (c.value("name", "") == "app") return c;
      }
    }
    return nullptr;
  }
  static std::string WaitingReason(const nlohmann::json& c) {
    if (c.is_null() || !c.contains("state") || !c["state"].contains("waiting")) return "";
    return c["state"]["waiting"].value("reason", "");
  }
  // Polls the pod's container status until `pred` holds (each round waits for the supervisor's
  // next notify datagram or 200 ms).
  bool WaitApp(const std::string& pod, const std::function<bool(const nlohmann::json&)>& pred,
               std::chrono::milliseconds timeout) {
    auto end = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (pred(AppStatus(pod))) return true;
      if (std::chrono::steady_clock::now() >= end) return false;
      notify_->Receive(200ms);
    }
  }
  std::string Events(const std::string& pod) {
    return RunCommand({BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "events", pod}, 5s)
        .output;
  }
  // When containerd logged a failed PullImage of the image (Unix seconds), in order.
  std::vector<double> FailedPullTimes() const {
    std::ifstream in(containerd_->dir() + "/containerd.log");
    const std::string needle = "PullImage \\\"" + Image() + "\\\" failed";
    std::vector<double> times;
    for (std::string line; std::getline(in, line);) {
      if (line.find(needle) != std::string::npos) times.push_back(LogLineTime(line));
    }
    return times;
  }

  std::unique_ptr<RegistryInstance> registry_;
  int baseline_ = 0;
  std::string last_;
};

bool Running(const nlohmann::json& c) {
  return !c.is_null() && c.contains("state") && c["state"].contains("running");
}

TEST_F(ImagePullTest, IfNotPresentPullsOnceAcrossRestarts) {
  StartWithPodworkerdConfig("  crashloop-initial: 500ms\n  crashloop-max: 1s\n");
  Write("once.yaml", PodYaml("once", Image(), "IfNotPresent", "sleep 0.3; exit 1"));
  ASSERT_TRUE(WaitApp(
      "once-node1",
      [](const nlohmann::json& c) { return !c.is_null() && c.value("restartCount", 0) >= 2; }, 60s))
      << last_;
  EXPECT_EQ(Pulls(), 1) << "three starts, one pull";
  std::string events = Events("once-node1");
  EXPECT_THAT(events, HasSubstr("Pulling image \"" + Image() + "\""));
  EXPECT_THAT(events, HasSubstr("Successfully pulled image \"" + Image() + "\" in "));
  EXPECT_THAT(events, HasSubstr("Container image \"" + Image() + "\" already present on machine"));
}

TEST_F(ImagePullTest, AlwaysPullsAtEveryStart) {
  // Also parallel pulls, set from the YAML config (a wrong parse would refuse to start).
  StartWithPodworkerdConfig(
      "  crashloop-initial: 500ms\n  crashloop-max: 1s\n  serialize-image-pulls: false\n"
      "  max-parallel-image-pulls: 2\n");
  Write("always.yaml", PodYaml("always", Image(), "Always", "sleep 0.3; exit 1"));
  nlohmann::json status;
  ASSERT_TRUE(WaitApp(
      "always-node1",
      [&](const nlohmann::json& c) {
        status = c;
        return !c.is_null() && c.value("restartCount", 0) >= 2;
      },
      60s))
      << last_;
  const int starts = status.value("restartCount", 0) + 1;
  const int pulls = Pulls();
  // One pull per start (one more when the next start began after the status was read).
  EXPECT_GE(pulls, starts);
  EXPECT_LE(pulls, starts + 1);
}

TEST_F(ImagePullTest, NeverWithAnAbsentImageIsErrImageNeverPull) {
  StartWithPodworkerdConfig("  resync-period: 1s\n");
  Write("never.yaml", PodYaml("never", Image(), "Never", kServe));
  nlohmann::json status;
  ASSERT_TRUE(WaitApp(
      "never-node1",
      [&](const nlohmann::json& c) {
        status = c;
        return WaitingReason(c) == "ErrImageNeverPull";
      },
      30s))
      << last_;
  EXPECT_EQ(status["state"]["waiting"].value("message", ""),
            "Container image \"" + Image() + "\" is not present with pull policy of Never");
  EXPECT_EQ(Pulls(), 0);
  EXPECT_THAT(Events("never-node1"), HasSubstr("ErrImageNeverPull"));
}

TEST_F(ImagePullTest, RegistryDownBacksOffWithGrowingDelaysAndRecovers) {
  ASSERT_TRUE(registry_->Stop().ok());
  StartWithPodworkerdConfig("  image-pull-backoff-initial: 1s\n  image-pull-backoff-max: 4s\n");
  Write("down.yaml", PodYaml("down", Image(), "IfNotPresent", kServe));

  // The container waits in ErrImagePull after each failed pull and in ImagePullBackOff
  // between them; containerd logs four failed pulls (delays 1 s, 2 s, 4 s between them).
  std::set<std::string> reasons;
  std::vector<double> failed;
  ASSERT_TRUE(WaitApp(
      "down-node1",
      [&](const nlohmann::json& c) {
        reasons.insert(WaitingReason(c));
        failed = FailedPullTimes();
        return failed.size() >= 4 && reasons.count("ErrImagePull") &&
               reasons.count("ImagePullBackOff");
      },
      40s))
      << last_ << " failed pulls: " << failed.size();
  EXPECT_EQ(Pulls(), 0);
  std::vector<double> delays;
  for (size_t i = 1; i < failed.size(); ++i) delays.push_back(failed[i] - failed[i - 1]);
  std::string shown;
  for (double d : delays) shown += std::to_string(d) + "s ";
  std::cout << "delays between failed pulls: " << shown << "\n";
  EXPECT_GE(delays[0], 0.9) << shown;
  EXPECT_GT(delays[1], delays[0] * 1.5) << shown;
  EXPECT_GT(delays[2], delays[1] * 1.5) << shown;

  // The registry is back on the same port: the next pull after the back-off works.
  ASSERT_TRUE(registry_->Restart().ok());
  ASSERT_TRUE(WaitApp("down-node1", Running, 30s)) << last_;
  EXPECT_EQ(Pulls(), 1);
  std::string events = Events("down-node1");
  EXPECT_THAT(events, HasSubstr("Failed to pull image \"" + Image() + "\""));
  EXPECT_THAT(events, HasSubstr("Back-off pulling image \"" + Image() + "\""));
  EXPECT_THAT(events, HasSubstr("Successfully pulled image \"" + Image() + "\""));
}

}  // namespace
// A registry that wants a password: the pull is refused (ErrImagePull) until the node has
// credentials for it in ROOT-DIR/config.json, which is read again at the next pull; then the
// pod runs. The registry's own log has the user the pull came as.
TEST_F(ImagePullTest, ARegistryWithAuthIsPulledWithTheNodesDockerConfigCredentials) {
  RegistryOptions options;
  options.dir = dir_.Sub("auth-registry");
  options.user = "puller";
  options.password = "s3cret:with:colons";
  auto locked = RegistryInstance::Start(options);
  ASSERT_TRUE(locked.ok()) << locked.status().ToString();
  ASSERT_TRUE((*locked)->Push(ImagesDir() + "/busybox.tar", "locked/busybox:1").ok());
  ASSERT_TRUE(WritePlainHttpHostConfig(dir_.Sub("certs.d"), (*locked)->host()).ok());
  const std::string image = (*locked)->host() + "/locked/busybox:1";

  StartWithPodworkerdConfig("  image-pull-backoff-initial: 1s\n  image-pull-backoff-max: 2s\n");
  Write("locked.yaml", PodYaml("locked", image, "IfNotPresent", kServe));
  ASSERT_TRUE(WaitApp(
      "locked-node1",
      [](const nlohmann::json& c) {
        return WaitingReason(c) == "ErrImagePull" || WaitingReason(c) == "ImagePullBackOff";
      },
      30s))
      << last_;

  // The operator gives the node its credentials (the kubelet's file, in nodelet's root dir).
  std::ofstream(dir_.Sub("root") + "/config.json")
      << R"({"auths": {")" << (*locked)->host()
      << R"(": {"username": "puller", "password": "s3cret:with:colons"}}})";
  ASSERT_TRUE(WaitApp("locked-node1", Running, 30s)) << last_;
  std::ifstream log(options.dir + "/registry-1.log");
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("auth.user.name=puller")) << "the pull came as the node's user";
  EXPECT_TRUE((*locked)->Stop().ok());
}

TEST_F(ImagePullTest, APodsImagePullSecretsFromItsSourceAreTriedBeforeTheNodes) {
  RegistryOptions options;
  options.dir = dir_.Sub("team-registry");
  options.user = "team";
  options.password = "team-pass";
  auto locked = RegistryInstance::Start(options);
  ASSERT_TRUE(locked.ok()) << locked.status().ToString();
  ASSERT_TRUE((*locked)->Push(ImagesDir() + "/busybox.tar", "team/busybox:1").ok());
  ASSERT_TRUE(WritePlainHttpHostConfig(dir_.Sub("certs.d"), (*locked)->host()).ok());
  const std::string image = (*locked)->host() + "/team/busybox:1";
  // The node's own credentials for that registry are wrong: only a pod's Secret can pull.
  std::ofstream(dir_.Sub("root") + "/config.json")
      << R"({"auths": {")" << (*locked)->host()
      << R"(": {"username": "team", "password": "not-the-password"}}})";
  auto secret = [&](const std::string& name) {
    return "apiVersion: v1\nkind: Secret\nmetadata:\n  name: " + name +
           "\ntype: kubernetes.io/dockerconfigjson\ndata:\n  .dockerconfigjson: " +
           EncodeBase64(R"({"auths": {")" + (*locked)->host() + R"(": {"auth": ")" +
                        EncodeBase64("team:team-pass") + R"("}}})") +
           "\n";
  };
  auto pull_secrets = [](const std::string& name) {
    return "  imagePullSecrets:\n  - name: not-there\n  - name: " + name + "\n";
  };

  // A fleet's etcd carries a Secret and a pod that names it (the etcd source reads and watches
  // the Secrets its pods name); the manifest directory another Secret beside a pod, and a pod
  // without one.
  EtcdClusterOptions etcd_options;
  etcd_options.members = 1;
  EtcdCluster cluster(etcd_options);
  ASSERT_TRUE(cluster.Start().ok()) << cluster.Logs();
  auto etcd = etcd::Client::Connect(*cluster.ClientOptionsFor(), RealClock::Get());
  ASSERT_TRUE(etcd.ok()) << etcd.status().ToString();
  const etcd::FleetKeys keys;
  ASSERT_TRUE(
      (*etcd)
          ->Put(keys.Config("Secret", "default", "fleet-registry"), secret("fleet-registry"))
          .ok());
  ASSERT_TRUE(
      (*etcd)
          ->Put(keys.Pod("node1", "default", "from-etcd"),
                PodYaml("from-etcd", image, "Always", kServe) + pull_secrets("fleet-registry"))
          .ok());
  Write("team.yaml", secret("team-registry") + "---\n" +
                         PodYaml("with-secret", image, "Always", kServe) +
                         pull_secrets("team-registry") + "---\n" +
                         PodYaml("without-secret", image, "Always", kServe));
  std::ofstream(dir_.Sub("nodelet.yaml"))
      << "podworkerd:\n  image-pull-backoff-initial: 1s\n  image-pull-backoff-max: 2s\n";
  StartNodelet({"--config", dir_.Sub("nodelet.yaml"), "--etcd-endpoints",
                cluster.endpoints_string(), "--etcd-allow-insecure"});

  ASSERT_TRUE(WaitApp("with-secret-node1", Running, 30s)) << last_;
  ASSERT_TRUE(WaitApp("from-etcd", Running, 30s)) << last_;
  // The pod without the Secret pulls with the node's credentials alone, and is refused.
  ASSERT_TRUE(WaitApp(
      "without-secret-node1",
      [](const nlohmann::json& c) {
        return WaitingReason(c) == "ErrImagePull" || WaitingReason(c) == "ImagePullBackOff";
      },
      30s))
      << last_;
  std::ifstream log(options.dir + "/registry-1.log");
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("auth.user.name=team")) << "the pull came as the Secret's user";
  for (const char* pod : {"with-secret-node1", "from-etcd"}) {
    EXPECT_THAT(Events(pod), HasSubstr("Unable to retrieve some image pull secrets (not-there); "
                                       "attempting to pull the image may not succeed."))
        << pod;
  }
  EXPECT_THAT(Events("without-secret-node1"), Not(HasSubstr("image pull secrets")));
  EXPECT_TRUE((*locked)->Stop().ok());
}

}  // namespace nodelet::testing
