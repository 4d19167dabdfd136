// fleet-e2e: nodelets taking their pods from a real 3-member etcd cluster and writing statuses
// and Nodes back (docs/fleet.md). Each node has its own private containerd, directories and
// cgroup root; the cluster, the nodes and their pods are removed at the end, also on failure.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "lib/etcd/etcd_client.h"
#include "lib/etcd/fleet_keys.h"
#include "tests/testing/containerd.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/harness.h"
#include "tests/testing/nodelet_fixture.h"
#include "tests/testing/tcp_proxy.h"

namespace nodelet::testing {
namespace {

using namespace std::chrono_literals;
using etcd::FleetKeys;

// One node: its containerd, its nodelet, its directories under the test's.
struct FleetNode {
  std::string name;
  std::string dir;
  std::unique_ptr<ContainerdInstance> containerd;
  std::unique_ptr<Subprocess> nodelet;
  std::unique_ptr<NotifyListener> notify;
  int starts = 0;
  // Its way to each member: cut to take this node alone away from etcd.
  std::vector<std::unique_ptr<TcpProxy>> proxies;
  bool tls = false;

  std::string Endpoints() const {
    std::string out;
    for (const auto& p : proxies) {
      out += (out.empty() ? "" : ",") + std::string(tls ? "https" : "http") +
             "://127.0.0.1:" + std::to_string(p->port());
    }
    return out;
  }
  void CutOff() {
    for (auto& p : proxies) p->Cut();
  }
  void Reconnect() {
    for (auto& p : proxies) p->Restore();
  }

  // The ids of the running containers of pod `pod_name` (its name as the node runs it).
  std::vector<std::string> Running(const std::string& pod_name) const {
    ::runtime::v1::ContainerFilter f;
    (*f.mutable_label_selector())["io.kubernetes.pod.name"] = pod_name;
    std::vector<std::string> out;
    auto list = containerd->cri().ListContainers(f);
    if (!list.ok()) return out;
    for (const auto& c : *list) {
      if (c.state() == ::runtime::v1::CONTAINER_RUNNING) out.push_back(c.id());
    }
    return out;
  }
};

class FleetE2eTest : public ::testing::Test {
 protected:
  // The cluster's options (FleetAuthE2eTest: TLS with client certificates).
  virtual EtcdClusterOptions ClusterOptions() const { return {}; }
  void SetUp() override {
    cluster_ = std::make_unique<EtcdCluster>(ClusterOptions());
    ASSERT_TRUE(cluster_->Start().ok()) << cluster_->Logs();
    auto root = etcd::Client::Connect(*cluster_->ClientOptionsFor(), RealClock::Get());
    ASSERT_TRUE(root.ok()) << root.status().ToString();
    etcd_ = std::move(*root);
  }
  void TearDown() override {
    for (auto& n : nodes_) StopNodelet(*n);
    if (HasFailure()) {
      for (auto& n : nodes_) {
        std::cerr << "---- " << n->name << "\n";
        for (const auto& f : {"nodelet.log", "log/statusd.log", "log/podworkerd.log"}) {
          std::string text = ReadTextFile(n->dir + "/" + f);
          std::cerr << "-- " << f << "\n"
                    << (text.size() > 4000 ? text.substr(text.size() - 4000) : text);
        }
      }
      if (cluster_) std::cerr << cluster_->Logs(2048);
    }
    for (auto& n : nodes_) {
      if (n->containerd) {
        EXPECT_TRUE(n->containerd->Stop().ok());
      }
    }
    for (const auto& m : MountsUnder(dir_.path())) umount2(m.c_str(), MNT_DETACH);
    for (const auto& left : RemoveCgroupTree(TestCgroupRoot(dir_.path()))) {
      ADD_FAILURE() << "cgroup left: " << left;
    }
  }

  FleetNode& AddNode(const std::string& name) {
    auto n = std::make_unique<FleetNode>();
    n->name = name;
    n->dir = dir_.Sub(name);
    std::filesystem::create_directories(n->dir + "/log");
    ContainerdOptions opts;
    opts.dir = n->dir + "/c";
    opts.image_tarballs = DefaultImageTarballs(ImagesDir());
    auto c = ContainerdInstance::Start(opts);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    if (c.ok()) n->containerd = std::move(*c);
    n->tls = ClusterOptions().tls;
    for (const auto& e : cluster_->endpoints()) {
      n->proxies.push_back(std::make_unique<TcpProxy>(std::stoi(e.substr(e.rfind(':') + 1))));
      EXPECT_TRUE(n->proxies.back()->ok());
    }
    nodes_.push_back(std::move(n));
    return *nodes_.back();
  }

  // Starts the node's nodelet on the cluster and waits for READY=1.
  bool StartNodelet(FleetNode& n, std::vector<std::string> extra = {}) {
    ++n.starts;
    n.notify = std::make_unique<NotifyListener>(n.dir + "/notify-" + std::to_string(n.starts));
    std::vector<std::string> argv = {BinDir() + "/nodelet",
                                     "--root-dir",
                                     n.dir + "/root",
                                     "--run-dir",
                                     n.dir + "/run",
                                     "--log-dir",
                                     n.dir + "/log",
                                     "--runtime-endpoint",
                                     n.containerd->endpoint(),
                                     "--node-name",
                                     n.name,
                                     "--cgroup-root",
                                     TestCgroupRoot(dir_.path()) + "/" + n.name,
                                     "--http-address",
                                     "127.0.0.1:0",
                                     "--etcd-endpoints",
                                     n.Endpoints(),
                                     "--node-lease-duration-seconds",
                                     "4"};
    // The test's members speak plain text unless the cluster runs TLS.
    if (!n.tls) argv.push_back("--etcd-allow-insecure");
    argv.insert(argv.end(), extra.begin(), extra.end());
    n.nodelet = std::make_unique<Subprocess>(
        argv, std::map<std::string, std::string>{{"NOTIFY_SOCKET", n.notify->path()}},
        n.dir + (n.starts == 1 ? "/nodelet.log" : "/nodelet-" + std::to_string(n.starts) + ".log"));
    return n.notify->WaitFor("READY=1", 30s).has_value();
  }
  void StopNodelet(FleetNode& n) {
    if (!n.nodelet || !n.nodelet->running()) return;
    n.nodelet->Signal(SIGTERM);
    n.nodelet->Wait(20s);
  }

  void PutPod(const std::string& node, const std::string& name, const std::string& command) {
    auto put = etcd_->Put(keys_.Pod(node, "default", name), BusyboxPodYaml(name, command));
    ASSERT_TRUE(put.ok()) << put.status().ToString();
  }
  // The status NODE wrote for default/NAME, or null.
  nlohmann::json StatusOf(const std::string& node, const std::string& name) {
    auto got = etcd_->Get(keys_.Status(node, "default", name));
    if (!got.ok() || got->kvs.empty()) return nullptr;
    auto doc = nlohmann::json::parse(got->kvs[0].value, nullptr, false);
    return doc.is_discarded() ? nlohmann::json(nullptr) : doc;
  }
  std::string PhaseOf(const std::string& node, const std::string& name) {
    auto s = StatusOf(node, name);
    if (!s.is_object() || !s.contains("status")) return "";
    return s["status"].value("phase", "");
  }
  // `nodeletctl fleet ARGS...` on the cluster: its output, or "" when it failed.
  std::string Fleet(std::vector<std::string> args) {
    std::vector<std::string> argv = {BinDir() + "/nodeletctl", "fleet", "--etcd-endpoints",
                                     cluster_->endpoints_string(), "--etcd-allow-insecure"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = RunCommand(argv, 15s);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.exit_code == 0 ? r.output : "";
  }
  bool NodeKeyExists(const std::string& node) {
    auto got = etcd_->Get(keys_.Node(node));
    return got.ok() && !got->kvs.empty();
  }
  // Polls `pred` (etcd and containerd have no notification the test could wait on here) every
  // 200 ms until it holds or `timeout` passes.
  static bool Eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
    auto end = std::chrono::steady_clock::now() + timeout;
    while (!pred()) {
      if (std::chrono::steady_clock::now() >= end) return false;
      std::this_thread::sleep_for(200ms);  // a poll round, bounded by the deadline above
    }
    return true;
  }

  TempDir dir_;
  std::unique_ptr<EtcdCluster> cluster_;
  std::unique_ptr<etcd::Client> etcd_;
  FleetKeys keys_;
  std::vector<std::unique_ptr<FleetNode>> nodes_;
};

// Pods written for one node run there only; pods for all run everywhere; a pod moved between
// nodes stops on one and starts on the other; statuses and Nodes come back, and go with their
// pods.
// The real nodelet refuses a plain-text etcd endpoint at start, naming the endpoint and the
// flag that allows it, before it starts anything (no etcd is needed to see it).
TEST(FleetPlainTextTest, NodeletRefusesAnHttpEndpointAtStart) {
  TempDir dir;
  auto r =
      RunCommand({BinDir() + "/nodelet", "--root-dir", dir.Sub("root"), "--run-dir", dir.Sub("run"),
                  "--log-dir", dir.Sub("log"), "--etcd-endpoints", "http://127.0.0.1:1"},
                 15s);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("http://127.0.0.1:1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--etcd-allow-insecure"), std::string::npos) << r.output;
  auto ctl = RunCommand(
      {BinDir() + "/nodeletctl", "fleet", "--etcd-endpoints", "http://127.0.0.1:1", "nodes"}, 15s);
  EXPECT_NE(ctl.exit_code, 0) << ctl.output;
  EXPECT_NE(ctl.output.find("--etcd-allow-insecure"), std::string::npos) << ctl.output;
}

TEST_F(FleetE2eTest, PodsRunWhereTheirKeysSayAndStatusesAndNodesComeBack) {
  for (const char* name : {"node-a", "node-b", "node-c"}) AddNode(name);
  for (auto& n : nodes_) ASSERT_TRUE(StartNodelet(*n)) << n->name;
  PutPod("node-a", "web", kSleepUntilTerm);
  PutPod("_all", "agent", kSleepUntilTerm);

  for (const char* node : {"node-a", "node-b", "node-c"}) {
    EXPECT_TRUE(Eventually([&] { return PhaseOf(node, "agent") == "Running"; }, 60s)) << node;
    EXPECT_TRUE(Eventually([&] { return NodeKeyExists(node); }, 30s)) << node;
  }
  ASSERT_TRUE(Eventually([&] { return PhaseOf("node-a", "web") == "Running"; }, 60s));
  EXPECT_EQ(nodes_[0]->Running("web").size(), 1u);

  // A value larger than a manifest may be is refused with its key; the node's pods go on.
  ASSERT_TRUE(
      etcd_->Put(keys_.Pod("node-a", "default", "huge"), std::string(1100 * 1024, '#')).ok());
  CommandResult manifests;
  EXPECT_TRUE(Eventually(
      [&] {
        manifests = RunCommand(
            {BinDir() + "/nodeletctl", "--run-dir", nodes_[0]->dir + "/run", "manifests"}, 10s);
        return manifests.output.find("more than a manifest's") != std::string::npos;
      },
      30s))
      << manifests.output;
  EXPECT_EQ(manifests.exit_code, 1) << "a manifest rejected";
  EXPECT_NE(manifests.output.find("/nodelet/v1/pods/node-a/default/huge"), std::string::npos);
  ASSERT_TRUE(etcd_->Delete(keys_.Pod("node-a", "default", "huge")).ok());
  EXPECT_EQ(PhaseOf("node-a", "web"), "Running");
  EXPECT_TRUE(nodes_[1]->Running("web").empty());
  EXPECT_TRUE(StatusOf("node-b", "web").is_null());
  auto web = StatusOf("node-a", "web");
  EXPECT_EQ(web["metadata"].value("name", ""), "web") << "an etcd pod keeps its name";
  EXPECT_FALSE(web["metadata"].value("resourceVersion", "").empty());

  // Moved to node-b: the delete and the put in one go, as an operator's move.
  ASSERT_TRUE(etcd_->Delete(keys_.Pod("node-a", "default", "web")).ok());
  PutPod("node-b", "web", kSleepUntilTerm);
  EXPECT_TRUE(Eventually([&] { return PhaseOf("node-b", "web") == "Running"; }, 60s));
  EXPECT_TRUE(Eventually([&] { return StatusOf("node-a", "web").is_null(); }, 60s))
      << "the status goes with the pod";
  EXPECT_TRUE(Eventually([&] { return nodes_[0]->Running("web").empty(); }, 30s));

  // nodeletctl fleet: the nodes, the pods by node, and a pod applied to node-c from a file
  // with its ConfigMap, whose edit reaches the pod's volume.
  std::string nodes;
  EXPECT_TRUE(Eventually(
      [&] {
        nodes = Fleet({"nodes"});  // Ready once every service runs (the next node status)
        return nodes.find("node-a   Ready") != std::string::npos &&
               nodes.find("node-c   Ready") != std::string::npos;
      },
      30s))
      << nodes;
  const std::string pods = Fleet({"pods", "--node", "node-b"});
  EXPECT_NE(pods.find("node-b   default     web"), std::string::npos) << pods;
  EXPECT_EQ(pods.find("node-a"), std::string::npos) << "only node-b's: " << pods;
  const std::string file = dir_.Sub("conf.yaml");
  auto write_conf = [&](const std::string& mode) {
    WriteTextFile(file,
                  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: conf\ndata:\n"
                  "  MODE: " +
                      mode + "\n---\n" +
                      BusyboxPodYaml("reader", kSleepUntilTerm,
                                     "  volumes:\n  - name: conf\n    configMap:\n"
                                     "      name: conf\n",
                                     "    volumeMounts:\n    - name: conf\n"
                                     "      mountPath: /etc/conf\n"));
  };
  write_conf("first");
  EXPECT_NE(Fleet({"apply", "-f", file, "--node", "node-c"}).find("written"), std::string::npos);
  ASSERT_TRUE(Eventually([&] { return PhaseOf("node-c", "reader") == "Running"; }, 60s));
  const std::string uid = StatusOf("node-c", "reader")["metadata"].value("uid", "");
  const std::string mode_file =
      nodes_[2]->dir + "/root/pods/" + uid + "/volumes/kubernetes.io~configmap/conf/MODE";
  EXPECT_EQ(ReadTextFile(mode_file), "first");
  write_conf("second");
  Fleet({"apply", "-f", file, "--node", "node-c"});
  EXPECT_TRUE(Eventually([&] { return ReadTextFile(mode_file) == "second"; }, 60s))
      << "a ConfigMap edit in etcd reaches the volume";
  EXPECT_NE(Fleet({"delete", "pod", "default/reader", "--node", "node-c"}).find("deleted"),
            std::string::npos);
  EXPECT_TRUE(Eventually([&] { return StatusOf("node-c", "reader").is_null(); }, 60s));

  // Gone from all nodes.
  ASSERT_TRUE(etcd_->Delete(keys_.Pod("_all", "default", "agent")).ok());
  for (const char* node : {"node-a", "node-b", "node-c"}) {
    EXPECT_TRUE(Eventually([&] { return StatusOf(node, "agent").is_null(); }, 60s)) << node;
  }
  for (auto& n : nodes_) EXPECT_TRUE(n->Running("agent").empty()) << n->name;
}

// A node cut off from etcd while it changes and compacts past the node's revision: nothing
// is killed meanwhile, and once it is back the node lists again and applies what changed,
// without starting again the pods that did not change. Then the whole cluster is away for 30 s
// and the node restarted meanwhile: it runs what it ran (the source's cache), kills nothing,
// and picks up the changes once etcd is back.
TEST_F(FleetE2eTest, CutOffThenCompactedThenEtcdAwayKillsNothingAndCatchesUp) {
  FleetNode& a = AddNode("node-a");
  // A status left from a pod this node's statusd does not hold: pruned at its first full pass.
  ASSERT_TRUE(etcd_
                  ->Put(keys_.Status("node-a", "default", "ghost"),
                        R"({"metadata":{"name":"ghost","uid":"gone","resourceVersion":"3"}})")
                  .ok());
  ASSERT_TRUE(StartNodelet(a));
  PutPod("node-a", "keep", kSleepUntilTerm);
  PutPod("node-a", "drop", kSleepUntilTerm);
  ASSERT_TRUE(Eventually([&] { return PhaseOf("node-a", "keep") == "Running"; }, 60s));
  ASSERT_TRUE(Eventually([&] { return PhaseOf("node-a", "drop") == "Running"; }, 60s));
  const auto keep_before = a.Running("keep");
  ASSERT_EQ(keep_before.size(), 1u);
  EXPECT_TRUE(Eventually([&] { return StatusOf("node-a", "ghost").is_null(); }, 30s));

  // Cut off; etcd moves on without the node, and compacts past its revision.
  a.CutOff();
  ASSERT_TRUE(etcd_->Delete(keys_.Pod("node-a", "default", "drop")).ok());
  PutPod("node-a", "new", kSleepUntilTerm);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(etcd_->Put(keys_.prefix + "/scratch", std::to_string(i)).ok());
  }
  auto rev = etcd_->Get(keys_.prefix + "/scratch");
  ASSERT_TRUE(rev.ok());
  ASSERT_TRUE(etcd_->Compact(rev->revision).ok());
  std::this_thread::sleep_for(3s);  // a steady state to sample: nothing to wait on
  EXPECT_EQ(a.Running("drop").size(), 1u) << "nothing is killed while the node is cut off";
  EXPECT_TRUE(a.Running("new").empty());

  a.Reconnect();
  EXPECT_TRUE(Eventually([&] { return PhaseOf("node-a", "new") == "Running"; }, 60s));
  EXPECT_TRUE(Eventually([&] { return a.Running("drop").empty(); }, 60s));
  EXPECT_TRUE(Eventually([&] { return StatusOf("node-a", "drop").is_null(); }, 60s));
  EXPECT_EQ(a.Running("keep"), keep_before) << "listed again, not started again";

  // The whole cluster away for 12 s, the node restarted meanwhile.
  ASSERT_TRUE(cluster_->StopAll().ok());
  StopNodelet(a);
  ASSERT_TRUE(StartNodelet(a)) << "a node starts while etcd is away";
  std::this_thread::sleep_for(12s);  // etcd away three lease durations: a steady state to sample
  EXPECT_EQ(a.Running("keep"), keep_before) << "the cache keeps it: not restarted, not killed";
  EXPECT_EQ(a.Running("new").size(), 1u);

  ASSERT_TRUE(cluster_->StartAll().ok()) << cluster_->Logs();
  ASSERT_TRUE(
      Eventually([&] { return etcd_->Delete(keys_.Pod("node-a", "default", "new")).ok(); }, 30s));
  EXPECT_TRUE(Eventually([&] { return a.Running("new").empty(); }, 60s));
  EXPECT_EQ(a.Running("keep"), keep_before);
}

// The leader killed while pods come and go: nothing restarts, and the statuses catch up after
// the election. A stopped node's lease expires and its Node key goes.
TEST_F(FleetE2eTest, LeaderKilledDuringChurnAndAStoppedNodesLeaseExpires) {
  FleetNode& a = AddNode("node-a");
  FleetNode& b = AddNode("node-b");
  ASSERT_TRUE(StartNodelet(a));
  ASSERT_TRUE(StartNodelet(b));
  PutPod("node-a", "steady", kSleepUntilTerm);
  ASSERT_TRUE(Eventually([&] { return PhaseOf("node-a", "steady") == "Running"; }, 60s));
  const auto steady = a.Running("steady");

  auto leader = cluster_->Leader();
  ASSERT_TRUE(leader.ok());
  for (int i = 0; i < 6; ++i) {
    if (i == 2) {
      ASSERT_TRUE(cluster_->Kill(*leader).ok());
    }
    // Writes fail while there is no leader: the test retries them as an operator would.
    ASSERT_TRUE(Eventually(
        [&] {
          return etcd_
              ->Put(keys_.Pod("node-a", "default", "churn-" + std::to_string(i)),
                    BusyboxPodYaml("churn-" + std::to_string(i), kSleepUntilTerm))
              .ok();
        },
        30s));
  }
  for (int i = 0; i < 6; ++i) {
    EXPECT_TRUE(Eventually(
        [&] { return PhaseOf("node-a", "churn-" + std::to_string(i)) == "Running"; }, 90s))
        << i;
  }
  EXPECT_EQ(a.Running("steady"), steady) << "nothing restarts";

  ASSERT_TRUE(Eventually([&] { return NodeKeyExists("node-b"); }, 30s));
  StopNodelet(b);
  EXPECT_TRUE(Eventually([&] { return !NodeKeyExists("node-b"); }, 20s))
      << "a 4 s lease, not renewed";
  const std::string nodes = Fleet({"nodes"});
  EXPECT_NE(nodes.find("node-b   NotReady"), std::string::npos) << nodes;
  EXPECT_TRUE(NodeKeyExists("node-a"));
}

// A pod of the churn test: host network (no IP to hand out 45 times), a shell that sleeps
// until SIGTERM without waking; `gen` is in its command (an edit there replaces the container),
// `label` in its labels (an edit there must not).
std::string ChurnPodYaml(const std::string& name, int gen, int label) {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name + "\n  labels: {churn: \"" +
         std::to_string(label) +
         "\"}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 2\n"
         "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
         "    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; echo " +
         std::to_string(gen) + "; sleep 3600 & wait\"]\n";
}

// 45 pods across the three nodes (what more pods cost is measured by `./dev bench`, not here),
// then rounds of churn written in bursts (adds, deletes, moves between nodes, edits that replace a
// container and label edits that must not), each round with one of the soak's faults (the etcd
// leader killed, a node's podworkerd and statusd SIGKILLed, a node's nodelet restarted while its
// pods change); checked as the chaos soak checks a node (docs/chaos.md): every desired pod runs on
// its node exactly once with the right container, nothing undesired runs anywhere, no container
// that should have kept running was replaced, and no status's version ever went backwards
// (statusd's version, the status's resourceVersion, sampled all along); the pods' cgroups and
// mounts go with the test (TearDown).
TEST_F(FleetE2eTest, PodsAcrossThreeNodesWithChurnKeepTheSoaksPromises) {
  const std::vector<std::string> names = {"node-a", "node-b", "node-c"};
  for (const auto& n : names) AddNode(n);
  for (auto& n : nodes_) ASSERT_TRUE(StartNodelet(*n));

  struct Desired {
    std::string node;
    int gen = 0;
    int label = 0;
  };
  std::map<std::string, Desired> desired;  // pod name -> where and what
  int next_pod = 0;
  auto put = [&](const std::string& name) {
    const Desired& d = desired[name];
    return etcd_->Put(keys_.Pod(d.node, "default", name), ChurnPodYaml(name, d.gen, d.label)).ok();
  };
  for (; next_pod < 45; ++next_pod) {
    const std::string name = "p" + std::to_string(next_pod);
    desired[name] = {names[next_pod % 3], 0, 0};
    ASSERT_TRUE(put(name)) << name;
  }

  // The status sampler: every status key, its pod's UID and version, read all along.
  std::atomic<bool> stop_sampling{false};
  std::atomic<int> samples{0};
  std::mutex violations_mu;
  std::vector<std::string> violations;
  std::thread sampler([&] {
    std::map<std::string, std::pair<std::string, int64_t>> last;  // key -> (uid, version)
    while (!stop_sampling.load()) {
      auto all = etcd_->GetPrefix(keys_.Statuses());
      if (all.ok()) {
        ++samples;
        for (const auto& kv : all->kvs) {
          auto doc = nlohmann::json::parse(kv.value, nullptr, false);
          if (!doc.is_object() || !doc.contains("metadata")) continue;
          const std::string uid = doc["metadata"].value("uid", "");
          const int64_t version =
              std::stoll(doc["metadata"].value("resourceVersion", std::string("0")));
          auto it = last.find(kv.key);
          if (it != last.end() && it->second.first == uid && version < it->second.second) {
            std::lock_guard<std::mutex> lock(violations_mu);
            violations.push_back(kv.key + ": version " + std::to_string(version) + " after " +
                                 std::to_string(it->second.second));
          }
          last[kv.key] = {uid, version};
        }
      }
      std::this_thread::sleep_for(300ms);  // the sampling pace, not a wait for an event
    }
  });
  // Stops and joins the sampler on every way out of the test: a failed ASSERT returns early, and
  // a joinable thread's destructor would abort the whole suite (and skip every clean-up).
  struct SamplerStop {
    std::atomic<bool>& stop;
    std::thread& thread;
    ~SamplerStop() {
      stop = true;
      if (thread.joinable()) thread.join();
    }
  } sampler_stop{stop_sampling, sampler};

  // The running containers of each pod on each node, from the runtimes (CRI labels).
  auto running = [&] {
    std::map<std::string, std::map<std::string, std::vector<std::string>>> out;  // node->pod->ids
    for (const auto& n : nodes_) {
      auto list = n->containerd->cri().ListContainers({});
      if (!list.ok()) continue;
      for (const auto& c : *list) {
        if (c.state() != ::runtime::v1::CONTAINER_RUNNING) continue;
        auto pod = c.labels().find("io.kubernetes.pod.name");
        if (pod != c.labels().end()) out[n->name][pod->second].push_back(c.id());
      }
    }
    return out;
  };
  // Converged: each desired pod runs once on its node with a Running status there, and nothing
  // else runs anywhere; `why` says what is not yet so.
  std::string why;
  auto converged = [&](std::map<std::string, std::map<std::string, std::vector<std::string>>>* r) {
    *r = running();
    for (const auto& [name, d] : desired) {
      auto& on = (*r)[d.node];
      if (on[name].size() != 1) {
        why = name + " has " + std::to_string(on[name].size()) + " running containers on " + d.node;
        return false;
      }
    }
    for (const auto& [node, pods] : *r) {
      for (const auto& [name, ids] : pods) {
        if (ids.empty()) continue;
        auto it = desired.find(name);
        if (it == desired.end() || it->second.node != node) {
          why = name + " still runs on " + node;
          return false;
        }
      }
    }
    auto statuses = etcd_->GetPrefix(keys_.Statuses());
    if (!statuses.ok()) {
      why = statuses.status().ToString();
      return false;
    }
    std::map<std::string, std::string> phase;  // status key -> phase
    for (const auto& kv : statuses->kvs) {
      auto doc = nlohmann::json::parse(kv.value, nullptr, false);
      phase[kv.key] = doc.is_object() && doc.contains("status") ? doc["status"].value("phase", "")
                                                                : std::string("?");
    }
    for (const auto& [name, d] : desired) {
      const std::string key = keys_.Status(d.node, "default", name);
      if (phase[key] != "Running") {
        why = key + " is \"" + phase[key] + "\"";
        return false;
      }
    }
    for (const auto& [key, p] : phase) {
      const std::string name = key.substr(key.rfind('/') + 1);
      const std::string node =
          key.substr(keys_.Statuses().size(),
                     key.find('/', keys_.Statuses().size()) - keys_.Statuses().size());
      auto it = desired.find(name);
      if ((it == desired.end() || it->second.node != node) && !p.empty()) {
        why = "status " + key + " of a pod not desired there";
        return false;
      }
    }
    return true;
  };

  std::map<std::string, std::map<std::string, std::vector<std::string>>> before;
  ASSERT_TRUE(Eventually([&] { return converged(&before); }, 300s)) << why;

  std::mt19937 rng(20261127);
  auto pick = [&](std::set<std::string>& taken) {
    for (;;) {
      auto it = desired.begin();
      std::advance(it, std::uniform_int_distribution<size_t>(0, desired.size() - 1)(rng));
      if (taken.insert(it->first).second) return it->first;
    }
  };
  std::set<std::string> replaced;  // their container must have changed (edited, moved, new)
  int adds = 0, deletes = 0, moves = 0, edits = 0, relabels = 0;
  // The soak's faults, one per round: an etcd member (the leader) killed; node-b's podworkerd
  // and statusd SIGKILLed (its supervisor starts them again); node-c's nodelet SIGTERMed with
  // its services and started again (its pods keep running, as the kubelet's do).
  // The service's pid once it runs: on a loaded machine (the suites run side by side, under
  // ASan) it may be between a restart and its READY when asked.
  auto service_pid = [&](FleetNode& n, const std::string& service) {
    pid_t pid = 0;
    Eventually(
        [&] {
          auto r = RunCommand(
              {BinDir() + "/nodeletctl", "--run-dir", n.dir + "/run", "pid", service}, 10s);
          pid = r.exit_code == 0 ? static_cast<pid_t>(std::atoi(r.output.c_str())) : 0;
          return pid > 0;
        },
        60s);
    return pid;
  };
  for (int round = 0; round < 3; ++round) {
    if (round == 0) {
      auto leader = cluster_->Leader();
      ASSERT_TRUE(leader.ok());
      ASSERT_TRUE(cluster_->Kill(*leader).ok());
    } else if (round == 1) {
      for (const char* service : {"podworkerd", "statusd"}) {
        const pid_t pid = service_pid(*nodes_[1], service);
        ASSERT_GT(pid, 0) << service;
        ASSERT_EQ(kill(pid, SIGKILL), 0) << service;
      }
    } else {
      StopNodelet(*nodes_[2]);
    }
    std::set<std::string> taken;
    std::vector<std::pair<std::string, std::string>> writes;  // key -> value ("" deletes)
    for (int i = 0; i < 4; ++i) {
      const std::string name = pick(taken);
      writes.push_back({keys_.Pod(desired[name].node, "default", name), ""});
      desired.erase(name);
      replaced.erase(name);
      ++deletes;
    }
    for (int i = 0; i < 3; ++i) {
      const std::string name = pick(taken);
      Desired& d = desired[name];
      writes.push_back({keys_.Pod(d.node, "default", name), ""});
      d.node = names[(std::find(names.begin(), names.end(), d.node) - names.begin() + 1) % 3];
      writes.push_back({keys_.Pod(d.node, "default", name), ChurnPodYaml(name, d.gen, d.label)});
      replaced.insert(name);
      ++moves;
    }
    for (int i = 0; i < 3; ++i) {
      const std::string name = pick(taken);
      Desired& d = desired[name];
      ++d.gen;
      writes.push_back({keys_.Pod(d.node, "default", name), ChurnPodYaml(name, d.gen, d.label)});
      replaced.insert(name);
      ++edits;
    }
    for (int i = 0; i < 3; ++i) {
      const std::string name = pick(taken);
      Desired& d = desired[name];
      ++d.label;
      writes.push_back({keys_.Pod(d.node, "default", name), ChurnPodYaml(name, d.gen, d.label)});
      ++relabels;
    }
    for (int i = 0; i < 4; ++i, ++next_pod) {
      const std::string name = "p" + std::to_string(next_pod);
      desired[name] = {names[next_pod % 3], 0, 0};
      writes.push_back({keys_.Pod(desired[name].node, "default", name), ChurnPodYaml(name, 0, 0)});
      replaced.insert(name);
      ++adds;
    }
    // As an operator's script would: each write retried while the cluster elects a leader.
    for (const auto& [key, value] : writes) {
      ASSERT_TRUE(Eventually(
          [&, &key = key, &value = value] {
            return value.empty() ? etcd_->Delete(key).ok() : etcd_->Put(key, value).ok();
          },
          30s))
          << key;
    }
    if (round == 2) {
      ASSERT_TRUE(StartNodelet(*nodes_[2]));
    }
    // A round's burst lands while the previous one may still be settling: no wait between.
  }

  std::map<std::string, std::map<std::string, std::vector<std::string>>> after;
  EXPECT_TRUE(Eventually([&] { return converged(&after); }, 300s)) << why;
  stop_sampling = true;
  sampler.join();

  // No container that should have kept running was replaced; every replaced one was.
  int kept = 0;
  for (const auto& [name, d] : desired) {
    auto was = before[d.node].find(name);
    const bool existed = was != before[d.node].end() && !was->second.empty();
    if (replaced.count(name) == 0) {
      ASSERT_TRUE(existed) << name;
      EXPECT_EQ(after[d.node][name], was->second) << name << " was restarted";
      ++kept;
    } else if (existed) {
      EXPECT_NE(after[d.node][name], was->second) << name << " was not replaced";
    }
  }
  EXPECT_GE(kept, 10);  // the check above was not vacuous
  EXPECT_GT(samples.load(), 10);
  {
    std::lock_guard<std::mutex> lock(violations_mu);
    EXPECT_TRUE(violations.empty()) << violations.size() << " status versions went backwards, "
                                    << "first: " << violations.front();
  }
  std::cerr << "[fleet churn] " << desired.size() << " pods desired at the end; " << adds
            << " adds, " << deletes << " deletes, " << moves << " moves, " << edits
            << " container edits, " << relabels << " label edits; " << kept << " containers kept; "
            << samples.load() << " status samples\n";
}

}  // namespace
}  // namespace nodelet::testing

namespace nodelet::testing {
namespace {

// With etcd's authentication on and client certificates, the role docs/fleet.md gives a node
// lets it run its pods (list and watch them, read the ConfigMap it was given, write its
// statuses and its Node on its lease), and nothing of another node's.
class FleetAuthE2eTest : public FleetE2eTest {
 protected:
  EtcdClusterOptions ClusterOptions() const override {
    EtcdClusterOptions o;
    o.tls = true;
    return o;
  }
  std::unique_ptr<etcd::Client> As(const std::string& cn) {
    auto o = cluster_->ClientOptionsFor(cn);
    EXPECT_TRUE(o.ok()) << o.status().ToString();
    if (!o.ok()) return nullptr;
    auto c = etcd::Client::Connect(*o, RealClock::Get());
    return c.ok() ? std::move(*c) : nullptr;
  }
};

TEST_F(FleetAuthE2eTest, ANodesRoleRunsItsPodsAndReachesNothingOfAnotherNode) {
  using etcd::Permission;
  using etcd::PrefixRangeEnd;
  auto grant = [&](const std::string& role, const std::string& key, bool prefix, Permission p) {
    Status s = etcd_->GrantPermission(role, key, prefix ? PrefixRangeEnd(key) : "", p);
    ASSERT_TRUE(s.ok()) << s.ToString();
  };
  ASSERT_TRUE(etcd_->AddUser("root", "").ok());
  ASSERT_TRUE(etcd_->AddRole("root").ok());
  ASSERT_TRUE(etcd_->GrantRole("root", "root").ok());
  for (const std::string n : {"node-a", "node-b"}) {
    ASSERT_TRUE(etcd_->AddRole(n).ok());
    grant(n, keys_.NodePods(n), true, Permission::kRead);
    grant(n, keys_.AllPods(), true, Permission::kRead);
    grant(n, keys_.StatusOfNode(n), true, Permission::kReadWrite);
    grant(n, keys_.Node(n), false, Permission::kReadWrite);
    grant(n, keys_.Registration(n), false, Permission::kReadWrite);
    ASSERT_TRUE(etcd_->AddUser(n, "").ok());
    ASSERT_TRUE(etcd_->GrantRole(n, n).ok());
  }
  grant("node-a", keys_.Config("ConfigMap", "default", "settings"), false, Permission::kRead);
  ASSERT_TRUE(etcd_
                  ->Put(keys_.Config("ConfigMap", "default", "settings"),
                        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n"
                        "data:\n  MODE: fast\n")
                  .ok());
  ASSERT_TRUE(etcd_
                  ->Put(keys_.Config("ConfigMap", "default", "other"),
                        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: other\n")
                  .ok());
  ASSERT_TRUE(
      etcd_
          ->Put(keys_.Pod("node-b", "default", "theirs"), BusyboxPodYaml("theirs", kSleepUntilTerm))
          .ok());
  Status enabled = etcd_->EnableAuth();
  ASSERT_TRUE(enabled.ok()) << enabled.ToString();

  FleetNode& a = AddNode("node-a");
  auto cert = cluster_->ClientCert("node-a");
  ASSERT_TRUE(cert.ok()) << cert.status().ToString();
  ASSERT_TRUE(StartNodelet(a, {"--etcd-cafile", cluster_->ca_file(), "--etcd-certfile",
                               cert->cert_file, "--etcd-keyfile", cert->key_file}));
  ASSERT_TRUE(
      etcd_
          ->Put(keys_.Pod("node-a", "default", "web"),
                BusyboxPodYaml("web", kSleepUntilTerm, "",
                               "    envFrom:\n    - configMapRef:\n        name: settings\n"))
          .ok());
  EXPECT_TRUE(Eventually([&] { return PhaseOf("node-a", "web") == "Running"; }, 60s))
      << "its pods, the ConfigMap it was given, its status";
  EXPECT_TRUE(Eventually([&] { return NodeKeyExists("node-a"); }, 30s)) << "its Node on its lease";

  auto node = As("node-a");
  ASSERT_NE(node, nullptr);
  auto own = node->GetPrefix(keys_.NodePods("node-a"));
  EXPECT_TRUE(own.ok()) << own.status().ToString();
  auto theirs = node->GetPrefix(keys_.NodePods("node-b"));
  EXPECT_EQ(theirs.status().code(), StatusCode::kPermissionDenied) << theirs.status().ToString();
  auto status_b = node->Put(keys_.Status("node-b", "default", "theirs"), "{}");
  EXPECT_EQ(status_b.status().code(), StatusCode::kPermissionDenied);
  auto node_b = node->Put(keys_.Node("node-b"), "{}");
  EXPECT_EQ(node_b.status().code(), StatusCode::kPermissionDenied);
  auto pods_a = node->Put(keys_.Pod("node-a", "default", "sneaky"), "{}");
  EXPECT_EQ(pods_a.status().code(), StatusCode::kPermissionDenied) << "its pods: read only";
  auto other = node->Get(keys_.Config("ConfigMap", "default", "other"));
  EXPECT_EQ(other.status().code(), StatusCode::kPermissionDenied) << "a ConfigMap not given";
}

}  // namespace
}  // namespace nodelet::testing
