// FleetE2eTest, the fixture of the fleet-e2e suite (fleet_e2e_test.cc, fleet_churn_e2e_test.cc):
// a real 3-member etcd cluster and nodes added on demand, each with its own private containerd,
// its nodelet taking its pods from the cluster, its directories and cgroup root, and a TcpProxy
// per member (cut to take the node alone away from etcd); the cluster, the nodes and their pods
// are removed at the end, also on failure.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "lib/etcd/etcd_client.h"
#include "lib/etcd/fleet_keys.h"
#include "tests/testing/containerd.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/harness.h"
#include "tests/testing/leak_check.h"
#include "tests/testing/nodelet_fixture.h"
#include "tests/testing/tcp_proxy.h"

namespace nodelet::testing {

// The fixture's timeouts are written with these, as the tests' are.
using namespace std::chrono_literals;

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
  etcd::FleetKeys keys_;
  std::vector<std::unique_ptr<FleetNode>> nodes_;
};

}  // namespace nodelet::testing
