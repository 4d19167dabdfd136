// The pod's DNS, hostname, /etc/hosts and port mappings as the kubelet makes them (pod_dns.h,
// cri_configs.h MakeSandboxNetwork and MakeSandboxConfig).
#include "svc-podworkerd/pod_dns.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "lib/pod/defaults.h"
#include "lib/pod/manifest_parser.h"
#include "svc-podworkerd/cri_configs.h"

namespace nodelet::podworkerd {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

namespace v1 = cri::v1;

pod::Pod ParseDnsPod(const std::string& spec) {
  std::string yaml =
      "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: ns, uid: "
      "0b6d3f2a-9c1e-4f7b-8a2d-1e5c9f0a3b7d}\nspec:\n" +
      spec + "  containers:\n  - name: app\n    image: busybox\n";
  auto r = pod::DecodeManifest(yaml, "dns.yaml");
  EXPECT_TRUE(r.errors.empty()) << (r.errors.empty() ? "" : r.errors[0].message);
  pod::Pod pod = r.pods.at(0).pod;
  pod::ApplyPodDefaults(pod);
  return pod;
}

// A temporary directory, removed at the end.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/pod-dns-test-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string Write(const std::string& name, const std::string& content) const {
    std::ofstream(path_ + "/" + name) << content;
    return path_ + "/" + name;
  }

 private:
  std::string path_;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const DnsSettings kHost = {
    {"192.168.1.1", "192.168.1.2"}, {"corp.example", "example"}, {"timeout:2", "rotate"}};

NodeDnsSettings Cluster() {
  NodeDnsSettings s;
  s.cluster_dns = {"10.96.0.10"};
  s.cluster_domain = "cluster.local";
  return s;
}

TEST(ResolvConfTest, ParsedAsTheKubeletDoes) {
  auto r = ParseResolvConf(
      "# comment\n"
      "nameserver 10.0.0.1\n"
      "  nameserver   10.0.0.2 # trailing\n"
      "search first.example\n"
      "domain ignored.example\n"
      "search a.example. . b.example\n"
      "options ndots:2 timeout:1\n"
      "options ndots:3 edns0\n"
      "sortlist 10.0.0.0/8\n");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_THAT(r->servers, ElementsAre("10.0.0.1", "10.0.0.2"));
  EXPECT_THAT(r->searches, ElementsAre("a.example", "b.example"));
  EXPECT_THAT(r->options, ElementsAre("ndots:3", "timeout:1", "edns0"));
  EXPECT_FALSE(ParseResolvConf("nameserver\n").ok());
}

TEST(ResolvConfTest, ReadFromAFileOrNone) {
  TempDir dir;
  auto r = ReadResolvConf(dir.Write("resolv.conf", "nameserver 9.9.9.9\nsearch x.example\n"));
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->servers, ElementsAre("9.9.9.9"));
  auto none = ReadResolvConf("");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, DnsSettings{});
  EXPECT_FALSE(ReadResolvConf(dir.path() + "/missing").ok());
  EXPECT_FALSE(ReadResolvConf(dir.Write("bad.conf", "nameserver\n")).ok());
}

TEST(PodDnsTest, ClusterFirstUsesTheClusterDns) {
  PodDns d = ComposePodDns(ParseDnsPod(""), Cluster(), kHost);
  EXPECT_THAT(d.config.servers, ElementsAre("10.96.0.10"));
  EXPECT_THAT(d.config.searches, ElementsAre("ns.svc.cluster.local", "svc.cluster.local",
                                             "cluster.local", "corp.example", "example"));
  EXPECT_THAT(d.config.options, ElementsAre("ndots:5"));
  EXPECT_THAT(d.events, IsEmpty());
}

TEST(PodDnsTest, ClusterFirstWithoutClusterDnsFallsBackToDefault) {
  PodDns d = ComposePodDns(ParseDnsPod(""), NodeDnsSettings{}, kHost);
  EXPECT_EQ(d.config, kHost);
  ASSERT_EQ(d.events.size(), 1u);
  EXPECT_EQ(d.events[0].type, "Warning");
  EXPECT_EQ(d.events[0].reason, "MissingClusterDNS");
  EXPECT_EQ(d.events[0].message,
            "pod: \"web_ns(0b6d3f2a-9c1e-4f7b-8a2d-1e5c9f0a3b7d)\". nodelet does not have "
            "ClusterDNS IP configured and cannot create Pod using \"ClusterFirst\" policy. "
            "Falling back to \"Default\" policy.");
}

TEST(PodDnsTest, HostNetworkAndPolicies) {
  // ClusterFirst with the node's network is Default, without an event.
  PodDns host_net = ComposePodDns(ParseDnsPod("  hostNetwork: true\n"), Cluster(), kHost);
  EXPECT_EQ(host_net.config, kHost);
  EXPECT_THAT(host_net.events, IsEmpty());
  PodDns with_host_net = ComposePodDns(
      ParseDnsPod("  hostNetwork: true\n  dnsPolicy: ClusterFirstWithHostNet\n"), Cluster(), kHost);
  EXPECT_THAT(with_host_net.config.servers, ElementsAre("10.96.0.10"));
  PodDns def = ComposePodDns(ParseDnsPod("  dnsPolicy: Default\n"), Cluster(), kHost);
  EXPECT_EQ(def.config, kHost);
  PodDns none = ComposePodDns(
      ParseDnsPod("  dnsPolicy: None\n  dnsConfig: {nameservers: [1.1.1.1], searches: [a.example],"
                  " options: [{name: ndots, value: \"1\"}]}\n"),
      Cluster(), kHost);
  EXPECT_EQ(none.config, (DnsSettings{{"1.1.1.1"}, {"a.example"}, {"ndots:1"}}));
  // No resolver config: the local machine's server and no search.
  NodeDnsSettings no_resolv;
  no_resolv.resolv_conf = "";
  PodDns local = ComposePodDns(ParseDnsPod("  dnsPolicy: Default\n"), no_resolv, DnsSettings{});
  EXPECT_EQ(local.config, (DnsSettings{{"127.0.0.1"}, {"."}, {}}));
  // No cluster domain: the host's searches only.
  NodeDnsSettings no_domain = Cluster();
  no_domain.cluster_domain = "";
  EXPECT_THAT(ComposePodDns(ParseDnsPod(""), no_domain, kHost).config.searches,
              ElementsAre("corp.example", "example"));
}

TEST(PodDnsTest, DnsConfigIsMergedIn) {
  PodDns d = ComposePodDns(
      ParseDnsPod("  dnsConfig:\n    nameservers: [10.96.0.10, 8.8.8.8]\n"
                  "    searches: [example, extra.example]\n"
                  "    options: [{name: ndots, value: \"2\"}, {name: edns0}, {name: single-request,"
                  " value: \"\"}]\n"),
      Cluster(), kHost);
  EXPECT_THAT(d.config.servers, ElementsAre("10.96.0.10", "8.8.8.8"));
  EXPECT_THAT(d.config.searches,
              ElementsAre("ns.svc.cluster.local", "svc.cluster.local", "cluster.local",
                          "corp.example", "example", "extra.example"));
  EXPECT_THAT(d.config.options, ElementsAre("ndots:2", "edns0", "single-request"));
  EXPECT_THAT(d.events, IsEmpty());
}

TEST(PodDnsTest, LimitsTrimWithAnEvent) {
  DnsSettings host;
  host.servers = {"10.0.0.1", "10.0.0.2", "10.0.0.3"};
  for (int i = 0; i < 40; ++i) host.searches.push_back("s" + std::to_string(i) + ".example");
  PodDns d =
      ComposePodDns(ParseDnsPod("  dnsPolicy: Default\n  dnsConfig: {nameservers: [10.0.0.4]}\n"),
                    Cluster(), host);
  EXPECT_THAT(d.config.servers, ElementsAre("10.0.0.1", "10.0.0.2", "10.0.0.3"));
  EXPECT_EQ(d.config.searches.size(), 32u);
  ASSERT_EQ(d.events.size(), 2u);
  EXPECT_EQ(d.events[0].reason, "DNSConfigForming");
  EXPECT_EQ(d.events[0].message,
            "Nameserver limits were exceeded, some nameservers have been omitted, the applied "
            "nameserver line is: 10.0.0.1 10.0.0.2 10.0.0.3");
  EXPECT_THAT(d.events[1].message,
              ::testing::StartsWith("Search Line limits were exceeded, some search paths have "
                                    "been omitted, the applied search line is: s0.example s1."));
  // Over 2048 characters: names are cut from the end until the line fits; names over 253
  // characters are left out.
  DnsSettings wide;
  for (int i = 0; i < 10; ++i) wide.searches.push_back(std::string(250, 'a' + i));
  wide.searches.push_back(std::string(254, 'z'));
  PodDns w = ComposePodDns(ParseDnsPod("  dnsPolicy: Default\n"), Cluster(), wide);
  EXPECT_EQ(w.config.searches.size(), 8u);  // 8 * 251 - 1 = 2007
  ASSERT_EQ(w.events.size(), 1u);
}

TEST(PodHostnameTest, TheKubeletsRules) {
  auto plain = GeneratePodHostnameAndDomain(ParseDnsPod(""), "cluster.local");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->hostname, "web");
  EXPECT_EQ(plain->domain, "");
  EXPECT_EQ(*KernelHostname(*plain, true), "web");
  auto named = GeneratePodHostnameAndDomain(
      ParseDnsPod("  hostname: db-0\n  subdomain: db\n  setHostnameAsFQDN: true\n"),
      "cluster.local");
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(named->hostname, "db-0");
  EXPECT_EQ(named->domain, "db.ns.svc.cluster.local");
  EXPECT_EQ(*KernelHostname(*named, std::nullopt), "db-0");
  EXPECT_EQ(*KernelHostname(*named, true), "db-0.db.ns.svc.cluster.local");
  // A long name is cut to 63 characters, without a trailing '-' or '.'.
  pod::Pod long_name = ParseDnsPod("");
  long_name.metadata.name = std::string(62, 'a') + "-b" + std::string(10, 'c');
  EXPECT_EQ(GeneratePodHostnameAndDomain(long_name, "")->hostname, std::string(62, 'a'));
  // An FQDN over 64 characters is refused with the kubelet's message; 64 is fine.
  PodHostname at_limit{std::string(40, 'h'), "db.ns.svc.cluster.local"};
  EXPECT_EQ(KernelHostname(at_limit, true)->size(), 64u);
  PodHostname big{std::string(41, 'h'), "db.ns.svc.cluster.local"};
  auto refused = KernelHostname(big, true);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(),
              ::testing::HasSubstr("is too long (64 characters is the max, 65 characters "
                                   "requested)"));
}

TEST(EtcHostsTest, ManagedContent) {
  EXPECT_EQ(ManagedHostsFileContent({"10.1.0.5", "fd00::5"}, {"db-0", "db.ns.svc.cluster.local"},
                                    {{"10.0.0.1", {"a.example", "b"}}, {"10.0.0.2", {"c"}}}),
            "# Kubernetes-managed hosts file.\n"
            "127.0.0.1\tlocalhost\n"
            "::1\tlocalhost ip6-localhost ip6-loopback\n"
            "fe00::0\tip6-localnet\n"
            "fe00::0\tip6-mcastprefix\n"
            "fe00::1\tip6-allnodes\n"
            "fe00::2\tip6-allrouters\n"
            "10.1.0.5\tdb-0.db.ns.svc.cluster.local\tdb-0\n"
            "fd00::5\tdb-0.db.ns.svc.cluster.local\tdb-0\n"
            "\n"
            "# Entries added by HostAliases.\n"
            "10.0.0.1\ta.example\tb\n"
            "10.0.0.2\tc\n");
  EXPECT_THAT(ManagedHostsFileContent({"10.1.0.5"}, {"web", ""}, {}),
              ::testing::EndsWith("fe00::2\tip6-allrouters\n10.1.0.5\tweb\n"));
  EXPECT_EQ(HostNetworkHostsFileContent("127.0.0.1 localhost\n", {{"10.0.0.1", {"a"}}}),
            "# Kubernetes-managed hosts file (host network).\n"
            "127.0.0.1 localhost\n"
            "\n"
            "# Entries added by HostAliases.\n"
            "10.0.0.1\ta\n");
}

TEST(EtcHostsTest, MountedUnlessTheContainerMountsItsOwn) {
  pod::Container c;
  EXPECT_TRUE(ShouldMountHostsFile(c));
  c.volume_mounts.push_back({"v", "/etc/hosts-not", false, ""});
  EXPECT_TRUE(ShouldMountHostsFile(c));
  c.volume_mounts.push_back({"v", "/etc/hosts", false, ""});
  EXPECT_FALSE(ShouldMountHostsFile(c));
}

TEST(EtcHostsTest, WrittenAtomicallyWithoutFollowingLinks) {
  TempDir root;
  const std::string uid = "0b6d3f2a-9c1e-4f7b-8a2d-1e5c9f0a3b7d";
  ::umask(077);
  auto path = WriteEtcHostsFile(root.path(), uid, "first\n");
  ::umask(022);
  ASSERT_TRUE(path.ok()) << path.status().message();
  EXPECT_EQ(*path, root.path() + "/pods/" + uid + "/etc-hosts");
  EXPECT_EQ(ReadAll(*path), "first\n");
  struct stat st {};
  ASSERT_EQ(stat(path->c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  // A link planted at etc-hosts is replaced, its target untouched.
  const std::string victim = root.Write("victim", "keep\n");
  ASSERT_EQ(unlink(path->c_str()), 0);
  ASSERT_EQ(symlink(victim.c_str(), path->c_str()), 0);
  ASSERT_TRUE(WriteEtcHostsFile(root.path(), uid, "second\n").ok());
  EXPECT_EQ(ReadAll(victim), "keep\n");
  struct stat lst {};
  ASSERT_EQ(lstat(path->c_str(), &lst), 0);
  EXPECT_TRUE(S_ISREG(lst.st_mode));
  EXPECT_EQ(ReadAll(*path), "second\n");
  // A pod directory that is a link leading out is refused; so is a uid that is not one name.
  TempDir elsewhere;
  const std::string other = "1b6d3f2a-9c1e-4f7b-8a2d-1e5c9f0a3b7d";
  ASSERT_EQ(symlink(elsewhere.path().c_str(), (root.path() + "/pods/" + other).c_str()), 0);
  EXPECT_FALSE(WriteEtcHostsFile(root.path(), other, "x\n").ok());
  EXPECT_FALSE(std::filesystem::exists(elsewhere.path() + "/etc-hosts"));
  EXPECT_FALSE(WriteEtcHostsFile(root.path(), "../x", "x\n").ok());
}

TEST(SandboxConfigTest, HostnameDnsAndPortMappings) {
  TempDir dir;
  NodeDnsSettings settings = Cluster();
  settings.resolv_conf = dir.Write("resolv.conf", "nameserver 192.168.1.1\nsearch corp.example\n");
  pod::Pod pod = ParseDnsPod(
      "  hostname: db-0\n  subdomain: db\n  setHostnameAsFQDN: true\n"
      "  dnsConfig: {options: [{name: edns0}]}\n");
  pod.spec.containers[0].ports = {
      {"", 80, "TCP", 8080, "127.0.0.1"}, {"", 53, "UDP", 5353, ""}, {"", 9000, "SCTP", 0, ""}};
  std::vector<DnsEvent> events;
  auto network = MakeSandboxNetwork(pod, settings, &events);
  ASSERT_TRUE(network.ok()) << network.status().message();
  v1::PodSandboxConfig config = MakeSandboxConfig(pod, 0, dir.path(), &*network);
  EXPECT_EQ(config.hostname(), "db-0.db.ns.svc.cluster.local");
  EXPECT_THAT(config.dns_config().servers(), ElementsAre("10.96.0.10"));
  EXPECT_THAT(
      config.dns_config().searches(),
      ElementsAre("ns.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"));
  EXPECT_THAT(config.dns_config().options(), ElementsAre("ndots:5", "edns0"));
  ASSERT_EQ(config.port_mappings_size(), 2);
  EXPECT_EQ(config.port_mappings(0).protocol(), v1::TCP);
  EXPECT_EQ(config.port_mappings(0).container_port(), 80);
  EXPECT_EQ(config.port_mappings(0).host_port(), 8080);
  EXPECT_EQ(config.port_mappings(0).host_ip(), "127.0.0.1");
  EXPECT_EQ(config.port_mappings(1).protocol(), v1::UDP);
  EXPECT_EQ(config.port_mappings(1).host_ip(), "");
  EXPECT_THAT(events, IsEmpty());

  // The node's network: no hostname, no port mappings, the host's DNS.
  pod::Pod host = ParseDnsPod("  hostNetwork: true\n");
  host.spec.containers[0].ports = {{"", 80, "TCP", 80, ""}};
  auto host_network = MakeSandboxNetwork(host, settings, &events);
  ASSERT_TRUE(host_network.ok());
  v1::PodSandboxConfig host_config = MakeSandboxConfig(host, 0, dir.path(), &*host_network);
  EXPECT_EQ(host_config.hostname(), "");
  EXPECT_EQ(host_config.port_mappings_size(), 0);
  EXPECT_THAT(host_config.dns_config().servers(), ElementsAre("192.168.1.1"));

  // An FQDN too long and an unreadable resolv.conf fail the sandbox.
  pod::Pod fqdn = ParseDnsPod("  hostname: " + std::string(50, 'h') +
                              "\n  subdomain: db\n  setHostnameAsFQDN: true\n");
  EXPECT_FALSE(MakeSandboxNetwork(fqdn, settings, &events).ok());
  settings.resolv_conf = dir.path() + "/missing";
  EXPECT_FALSE(MakeSandboxNetwork(pod, settings, &events).ok());

  // ClusterFirst without --cluster-dns: the event comes out.
  NodeDnsSettings bare;
  bare.resolv_conf = "";
  std::vector<DnsEvent> fallback;
  ASSERT_TRUE(MakeSandboxNetwork(ParseDnsPod(""), bare, &fallback).ok());
  ASSERT_EQ(fallback.size(), 1u);
  EXPECT_EQ(fallback[0].reason, "MissingClusterDNS");
}

}  // namespace
}  // namespace nodelet::podworkerd
