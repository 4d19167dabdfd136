// fleet-e2e: nodelets taking their pods from a real 3-member etcd cluster and writing statuses
// and Nodes back (docs/fleet.md); the fixture is in fleet_e2e_fixture.h. Pods run where their
// keys say, a node cut off from etcd or a cluster away kills nothing and catches up, a killed
// leader restarts nothing, a stopped node's lease expires, and with etcd's authentication a
// node's role reaches nothing of another node. The churn over three nodes is in
// fleet_churn_e2e_test.cc.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "lib/etcd/etcd_client.h"
#include "tests/integration/fleet_e2e_fixture.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/harness.h"
#include "tests/testing/nodelet_fixture.h"

namespace nodelet::testing {
namespace {

using namespace std::chrono_literals;

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

// Pods written for one node run there only; pods for all run everywhere; a pod moved between
// nodes stops on one and starts on the other; statuses and Nodes come back, and go with their
// pods.
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
