// Pod networking end to end through the real `nodelet` on a private containerd with its own
// CNI pod network (a bridge and a /24 of 198.18.0.0/15, tests/testing/pod_network.h):
// - two pods reach each other by the IPs their status reports, and a hostPort answers on the
//   host; a removed pod's IP goes back to the IPAM pool;
// - /etc/resolv.conf, /etc/hosts and the hostname inside the containers follow dnsPolicy,
//   dnsConfig, --cluster-dns/--cluster-domain/--resolv-conf, hostname/subdomain, hostAliases;
// - while the runtime's network is not ready, host-network pods run, pod-network pods wait
//   with NetworkNotReady and the node is not Ready; all recover when the network comes back;
// - a CNI configuration that cannot set a sandbox up shows the CNI error in the pod's status
//   and events, and the sandbox is retried until the configuration is fixed.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "lib/common/node_ip.h"
#include "tests/testing/containerd.h"
#include "tests/testing/harness.h"
#include "tests/testing/http_get.h"
#include "tests/testing/leak_check.h"
#include "tests/testing/nodelet_fixture.h"

namespace nodelet::testing {
namespace {

namespace v1 = ::runtime::v1;
using namespace std::chrono_literals;
using ::testing::HasSubstr;

// True when `ip` is inside `cidr` (IPv4).
bool InSubnet(const std::string& ip, const std::string& cidr) {
  auto slash = cidr.find('/');
  in_addr a{}, net{};
  if (slash == std::string::npos || inet_pton(AF_INET, ip.c_str(), &a) != 1 ||
      inet_pton(AF_INET, cidr.substr(0, slash).c_str(), &net) != 1) {
    return false;
  }
  const int bits = std::stoi(cidr.substr(slash + 1));
  const uint32_t mask = bits == 0 ? 0 : ~uint32_t{0} << (32 - bits);
  return (ntohl(a.s_addr) & mask) == (ntohl(net.s_addr) & mask);
}

class NetworkE2eTest : public NodeletTest {
 protected:
  nlohmann::json WaitPod(const std::string& name,
                         const std::function<bool(const nlohmann::json&)>& pred,
                         std::chrono::milliseconds timeout) {
    nlohmann::json pod;
    WaitFor(
        [&] {
          pod = CtlPod(name);
          return !pod.is_null() && pred(pod);
        },
        timeout);
    return pod;
  }
  static bool Running(const nlohmann::json& p) {
    return p["status"].value("phase", "") == "Running";
  }
  // `sh -c script` in the running app container of the static pod `pod` (POD-node1): exit
  // code, stdout and stderr.
  std::pair<int, std::string> Exec(const std::string& pod, const std::string& script) {
    std::string id = RunningContainer(pod + "-node1");
    if (id.empty()) return {-1, "no running container of " + pod};
    auto r = containerd_->cri().ExecSync(id, {"sh", "-c", script}, 10);
    if (!r.ok()) return {-1, r.status().ToString()};
    return {r->exit_code(), r->stdout() + r->stderr()};
  }
  std::string Events(const std::string& pod) {
    return RunCommand(
               {BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "events", pod + "-node1"},
               5s)
        .output;
  }
  nlohmann::json NodeReady() {
    auto r =
        RunCommand({BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "node", "--json"}, 5s);
    auto j = nlohmann::json::parse(r.output, nullptr, false);
    if (j.is_discarded()) return nullptr;
    for (const auto& c : j["status"]["conditions"]) {
      if (c.value("type", "") == "Ready") return c;
    }
    return nullptr;
  }
  // Waits until the runtime reports NetworkReady == `ready` (containerd re-reads its CNI
  // configuration directory when it changes).
  bool WaitNetworkReady(bool ready, std::chrono::milliseconds timeout) {
    return WaitFor(
        [&] {
          auto st = containerd_->cri().RuntimeStatus(false);
          return st.ok() && cri::NetworkError(*st).empty() == ready;
        },
        timeout);
  }
  std::string ConfFile() const { return containerd_->cni_conf_dir() + "/10-nodelet.conflist"; }
  void WriteConf(const std::string& text) {
    const std::string tmp = containerd_->cni_conf_dir() + "/.conf.tmp";
    std::ofstream(tmp) << text;
    std::filesystem::rename(tmp, ConfFile());
  }
};

// Two pods on the pod network: each has an IP of the instance's subnet in its status (podIP,
// podIPs) and the node's address as hostIP; the client reaches the server's httpd at the
// server's IP; the server's hostPort answers on the host (the bridge's address). After both
// are removed, no IP stays allocated.
TEST_F(NetworkE2eTest, PodsReachEachOtherByIpAndAHostPortAnswersOnTheHost) {
  const int host_port = FreeLoopbackPort();
  Write("server.yaml", BusyboxPodYaml("server",
                                      "mkdir -p /www; echo hello-from-server > /www/index.html; "
                                      "exec httpd -f -p 8080 -h /www",
                                      "",
                                      "    ports:\n    - {containerPort: 8080, hostPort: " +
                                          std::to_string(host_port) + "}\n"));
  Write("client.yaml", BusyboxPodYaml("client", kSleepUntilTerm));
  StartNodelet();
  auto server = WaitPod("server-node1", Running, 60s);
  auto client = WaitPod("client-node1", Running, 60s);
  ASSERT_TRUE(Running(server)) << server.dump(2);
  ASSERT_TRUE(Running(client)) << client.dump(2);
  const std::string server_ip = server["status"].value("podIP", "");
  const std::string client_ip = client["status"].value("podIP", "");
  EXPECT_TRUE(InSubnet(server_ip, containerd_->pod_subnet())) << server.dump(2);
  EXPECT_TRUE(InSubnet(client_ip, containerd_->pod_subnet())) << client.dump(2);
  EXPECT_NE(server_ip, client_ip);
  ASSERT_TRUE(server["status"]["podIPs"].is_array() && !server["status"]["podIPs"].empty());
  EXPECT_EQ(server["status"]["podIPs"][0].value("ip", ""), server_ip);
  EXPECT_EQ(server["status"].value("hostIP", ""), NodeIP("").value());
  // The container sees the address its status reports.
  auto [rc, addrs] = Exec("client", "ip -4 -o addr show dev eth0");
  EXPECT_EQ(rc, 0) << addrs;
  EXPECT_THAT(addrs, HasSubstr(client_ip + "/"));

  // httpd listens a moment after the container started; nothing tells the host when, so the
  // request is retried within a deadline.
  std::string got;
  WaitFor(
      [&] {
        // busybox-static's wget crashes in the image (static glibc), so the request is nc's.
        got = Exec("client",
                   "printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' | nc -w 2 " + server_ip + " 8080")
                  .second;
        return got.find("hello-from-server") != std::string::npos;
      },
      20s);
  EXPECT_THAT(got, HasSubstr("hello-from-server"))
      << Exec("client", "ip addr; ip route; ping -c 1 -W 1 " + server_ip).second;
  WaitFor(
      [&] {
        got = HttpGetOnce(containerd_->gateway_ip(), host_port, "/index.html");
        return got.find("hello-from-server") != std::string::npos;
      },
      20s);
  EXPECT_THAT(got, HasSubstr("hello-from-server"))
      << "the hostPort did not answer on the host; the NAT rules:\n"
      << RunCommand({"iptables-save", "-t", "nat"}, 5s).output;

  EXPECT_THAT(AllocatedPodIps(containerd_->ipam_data_dir(), containerd_->network_name()),
              ::testing::UnorderedElementsAre(server_ip, client_ip));
  std::filesystem::remove(manifests() + "/server.yaml");
  std::filesystem::remove(manifests() + "/client.yaml");
  EXPECT_TRUE(WaitFor(
      [&] {
        return AllocatedPodIps(containerd_->ipam_data_dir(), containerd_->network_name()).empty();
      },
      30s))
      << "a removed pod's IP stayed allocated";
}

// resolv.conf, hosts and hostname inside the containers, per policy.
TEST_F(NetworkE2eTest, ResolvConfHostsAndHostnameFollowTheSpec) {
  const std::string resolv = dir_.Sub("resolv.conf");
  std::ofstream(resolv) << "# the node's resolver\nnameserver 198.19.255.99\nsearch host.test\n";
  Write("cluster.yaml",
        BusyboxPodYaml(
            "cluster", kSleepUntilTerm,
            "  hostname: web\n  subdomain: sub\n"
            "  hostAliases:\n  - ip: 198.19.255.10\n    hostnames: [alias.one, alias.two]\n"
            "  dnsConfig:\n    nameservers: [198.19.255.54]\n    searches: [extra.test]\n"
            "    options:\n    - {name: ndots, value: \"2\"}\n    - {name: edns0}\n"));
  Write("none.yaml",
        BusyboxPodYaml("none", kSleepUntilTerm,
                       "  hostNetwork: true\n  dnsPolicy: None\n"
                       "  hostAliases:\n  - ip: 198.19.255.11\n    hostnames: [on.host]\n"
                       "  dnsConfig:\n    nameservers: [198.19.255.55]\n"
                       "    searches: [only.test]\n"));
  Write("default.yaml", BusyboxPodYaml("default", kSleepUntilTerm, "  dnsPolicy: Default\n"));
  StartNodelet({"--cluster-dns", "198.19.255.53", "--cluster-domain", "cluster.test",
                "--resolv-conf", resolv});
  auto cluster = WaitPod("cluster-node1", Running, 60s);
  ASSERT_TRUE(Running(cluster)) << cluster.dump(2);
  ASSERT_TRUE(Running(WaitPod("none-node1", Running, 60s)));
  ASSERT_TRUE(Running(WaitPod("default-node1", Running, 60s)));
  const std::string ip = cluster["status"].value("podIP", "");

  // ClusterFirst: the cluster's nameserver, then the pod's; the cluster's searches, the node's,
  // then the pod's; ndots from the pod overriding the cluster's 5.
  auto [rc, conf] = Exec("cluster", "cat /etc/resolv.conf");
  ASSERT_EQ(rc, 0) << conf;
  EXPECT_THAT(conf, HasSubstr("nameserver 198.19.255.53\nnameserver 198.19.255.54\n"));
  EXPECT_THAT(conf, HasSubstr("search default.svc.cluster.test svc.cluster.test cluster.test "
                              "host.test extra.test\n"));
  EXPECT_THAT(conf, HasSubstr("options ndots:2 edns0\n"));
  EXPECT_THAT(conf, ::testing::Not(HasSubstr("198.19.255.99")));
  auto [hrc, hosts] = Exec("cluster", "cat /etc/hosts; echo; echo $HOSTNAME; hostname");
  ASSERT_EQ(hrc, 0) << hosts;
  EXPECT_THAT(hosts, HasSubstr("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"));
  EXPECT_THAT(hosts, HasSubstr(ip + "\tweb.sub.default.svc.cluster.test\tweb\n"));
  EXPECT_THAT(hosts, HasSubstr("# Entries added by HostAliases.\n198.19.255.10\talias.one\talias."
                               "two\n"));
  EXPECT_THAT(hosts, ::testing::EndsWith("\nweb\n"));
  // containerd's $HOSTNAME comes from the sandbox config a container is created with.
  EXPECT_THAT(hosts, ::testing::EndsWith("\nweb\nweb\n"));

  // None on the host network: exactly the pod's; the node's hosts file and the alias.
  auto [nrc, none] = Exec("none", "cat /etc/resolv.conf; cat /etc/hosts");
  ASSERT_EQ(nrc, 0) << none;
  EXPECT_THAT(none, HasSubstr("nameserver 198.19.255.55\n"));
  EXPECT_THAT(none, HasSubstr("search only.test\n"));
  EXPECT_THAT(none, ::testing::Not(HasSubstr("198.19.255.53")));
  EXPECT_THAT(none, HasSubstr("# Kubernetes-managed hosts file (host network).\n" +
                              ReadTextFile("/etc/hosts")));
  EXPECT_THAT(none, HasSubstr("198.19.255.11\ton.host\n"));

  // Default: the node's resolver (--resolv-conf) and no cluster entries.
  auto [drc, def] = Exec("default", "cat /etc/resolv.conf; hostname");
  ASSERT_EQ(drc, 0) << def;
  EXPECT_THAT(def, HasSubstr("nameserver 198.19.255.99\n"));
  EXPECT_THAT(def, HasSubstr("search host.test\n"));
  EXPECT_THAT(def, ::testing::Not(HasSubstr("cluster.test")));
  EXPECT_THAT(def, ::testing::EndsWith("\ndefault-node1\n"));  // the pod's name
}

// No CNI configuration: NetworkReady is false. The host-network pod runs, the pod-network pod
// waits with NetworkNotReady (status and event), the node says why it is not Ready. With the
// configuration back, the waiting pod runs and the node is Ready.
TEST_F(NetworkE2eTest, WithoutTheNetworkOnlyHostNetworkPodsRunAndTheNodeSaysWhy) {
  const std::string conf = ReadTextFile(ConfFile());
  ASSERT_FALSE(conf.empty());
  std::filesystem::remove(ConfFile());
  ASSERT_TRUE(WaitNetworkReady(false, 20s)) << "containerd kept its CNI configuration";
  Write("host.yaml", BusyboxPodYaml("host", kSleepUntilTerm, "  hostNetwork: true\n"));
  Write("net.yaml", BusyboxPodYaml("net", kSleepUntilTerm));
  StartNodelet();
  ASSERT_TRUE(Running(WaitPod("host-node1", Running, 60s)));
  auto net = WaitPod(
      "net-node1",
      [](const nlohmann::json& p) { return p["status"].value("reason", "") == "NetworkNotReady"; },
      30s);
  EXPECT_EQ(net["status"].value("reason", ""), "NetworkNotReady") << net.dump(2);
  EXPECT_THAT(net["status"].value("message", ""), HasSubstr("NetworkReady=false"));
  EXPECT_EQ(net["status"].value("phase", ""), "Pending");
  EXPECT_TRUE(RunningContainer("net-node1").empty());
  EXPECT_THAT(Events("net"), HasSubstr("NetworkNotReady"));
  nlohmann::json ready;
  WaitFor(
      [&] {
        ready = NodeReady();
        return !ready.is_null() && ready.value("status", "") == "False";
      },
      20s);
  EXPECT_EQ(ready.value("status", ""), "False") << ready.dump(2);
  EXPECT_THAT(ready.value("message", ""), HasSubstr("network not ready")) << ready.dump(2);

  WriteConf(conf);
  ASSERT_TRUE(WaitNetworkReady(true, 20s));
  net = WaitPod("net-node1", Running, 60s);
  EXPECT_TRUE(Running(net)) << "the waiting pod was not synced once the network was back: "
                            << net.dump(2);
  EXPECT_TRUE(InSubnet(net["status"].value("podIP", ""), containerd_->pod_subnet()));
  WaitFor(
      [&] {
        ready = NodeReady();
        return !ready.is_null() && ready.value("status", "") == "True";
      },
      20s);
  EXPECT_EQ(ready.value("status", ""), "True") << ready.dump(2);
}

// A configuration whose plugin does not exist: containerd loads it (NetworkReady is true) but
// every sandbox set-up fails. The pod shows the CNI error in its status and events and keeps
// being retried; once the configuration is fixed it runs.
TEST_F(NetworkE2eTest, ACniErrorIsShownAndTheSandboxRetriedUntilTheConfigIsFixed) {
  const std::string conf = ReadTextFile(ConfFile());
  auto broken = nlohmann::json::parse(conf);
  broken["plugins"][0]["type"] = "nodelet-no-such-plugin";
  WriteConf(broken.dump());
  // containerd's verbose status shows the configuration it loaded.
  ASSERT_TRUE(WaitFor(
      [&] {
        auto st = containerd_->cri().RuntimeStatus(true);
        if (!st.ok()) return false;
        for (const auto& [k, v] : st->info()) {
          if (v.find("nodelet-no-such-plugin") != std::string::npos) return true;
        }
        return false;
      },
      20s))
      << "containerd did not load the broken configuration";
  Write("net.yaml", BusyboxPodYaml("net", kSleepUntilTerm));
  StartNodelet();
  auto net = WaitPod(
      "net-node1",
      [](const nlohmann::json& p) {
        return p["status"].value("message", "").find("nodelet-no-such-plugin") != std::string::npos;
      },
      40s);
  EXPECT_EQ(net["status"].value("reason", ""), "CreatePodSandboxError") << net.dump(2);
  EXPECT_THAT(net["status"].value("message", ""), HasSubstr("nodelet-no-such-plugin"));
  const std::string events = Events("net");
  EXPECT_THAT(events, HasSubstr("FailedCreatePodSandBox"));
  EXPECT_THAT(events, HasSubstr("nodelet-no-such-plugin"));

  WriteConf(conf);
  net = WaitPod("net-node1", Running, 60s);
  EXPECT_TRUE(Running(net)) << "the sandbox was not retried after the fix: " << net.dump(2);
  EXPECT_TRUE(InSubnet(net["status"].value("podIP", ""), containerd_->pod_subnet()));
}

}  // namespace
}  // namespace nodelet::testing
