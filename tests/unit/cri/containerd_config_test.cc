// MakeContainerdConfig: the private containerd's config is containerd's default with exactly
// the settings that keep it private and working in this VM changed, and a default config that
// lacks one of them is refused by name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/testing/containerd.h"
#include "tests/testing/pod_network.h"

namespace nodelet::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// An excerpt of `containerd config default` (containerd 1.6), with its layout.
constexpr char kDefaultConfig[] = R"(disabled_plugins = []
root = "/var/lib/containerd"
state = "/run/containerd"
version = 2

[debug]
  address = ""

[grpc]
  address = "/run/containerd/containerd.sock"
  max_recv_message_size = 16777216

[plugins]

  [plugins."io.containerd.grpc.v1.cri"]
    enable_tls_streaming = false
    netns_mounts_under_state_dir = false
    restrict_oom_score_adj = false
    sandbox_image = "registry.k8s.io/pause:3.6"
    stats_collect_period = 10
    stream_server_address = ""
    stream_server_port = "10010"

    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/opt/cni/bin"
      conf_dir = "/etc/cni/net.d"
      conf_template = ""
      ip_pref = ""
      max_conf_num = 1

    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          BinaryName = ""
          Root = ""
          SystemdCgroup = false

    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = ""

[ttrpc]
  address = ""
)";

TEST(MakeContainerdConfig, MovesEverythingUnderTheDirAndSetsTheCriOptions) {
  auto config = MakeContainerdConfig(kDefaultConfig, "/tmp/x", "nodelet.local/pause:1.0");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_THAT(*config, HasSubstr("\nroot = \"/tmp/x/root\"\n"));
  EXPECT_THAT(*config, HasSubstr("\nstate = \"/tmp/x/state\"\n"));
  EXPECT_THAT(*config, HasSubstr("[grpc]\n  address = \"/tmp/x/containerd.sock\"\n"));
  EXPECT_THAT(*config, HasSubstr("    sandbox_image = \"nodelet.local/pause:1.0\"\n"));
  EXPECT_THAT(*config, HasSubstr("    restrict_oom_score_adj = true\n"));
  EXPECT_THAT(*config, HasSubstr("    stats_collect_period = 1\n"));
  EXPECT_THAT(*config, HasSubstr("    netns_mounts_under_state_dir = true\n"));
  EXPECT_THAT(*config, HasSubstr("          Root = \"/tmp/x/state/runc\"\n"));
  // The streaming server (exec, attach, port-forward) on loopback, a free port, no TLS.
  EXPECT_THAT(*config, HasSubstr("    stream_server_address = \"127.0.0.1\"\n"));
  EXPECT_THAT(*config, HasSubstr("    stream_server_port = \"0\"\n"));
  EXPECT_THAT(*config, HasSubstr("    enable_tls_streaming = false\n"));
  // Other sections' keys of the same name are left alone.
  EXPECT_THAT(*config, HasSubstr("[debug]\n  address = \"\"\n"));
  EXPECT_THAT(*config, HasSubstr("[ttrpc]\n  address = \"\"\n"));
  EXPECT_THAT(*config, Not(HasSubstr("/run/containerd")));
  EXPECT_THAT(*config, Not(HasSubstr("/var/lib/containerd")));
}

TEST(MakeContainerdConfig, PointsTheCniSectionAtDebiansPluginsAndAConfDirOfItsOwn) {
  auto config = MakeContainerdConfig(kDefaultConfig, "/tmp/x", "nodelet.local/pause:1.0");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_THAT(*config, HasSubstr("[plugins.\"io.containerd.grpc.v1.cri\".cni]\n"
                                 "      bin_dir = \"/usr/lib/cni\"\n"
                                 "      conf_dir = \"/tmp/x/cni/net.d\"\n"));
  EXPECT_THAT(*config, HasSubstr("      max_conf_num = 1\n"));
  EXPECT_THAT(*config, Not(HasSubstr("/etc/cni")));
  EXPECT_THAT(*config, Not(HasSubstr("/opt/cni")));
}

TEST(PodNetworkForSlot, CarvesA24OutOf198_18_0_0Slash15PerSlot) {
  auto first = PodNetworkForSlot(0);
  EXPECT_EQ(first.bridge, "nlbr0");
  EXPECT_EQ(first.network, "nodelet-0");
  EXPECT_EQ(first.subnet, "198.18.0.0/24");
  EXPECT_EQ(first.gateway, "198.18.0.1");
  auto mid = PodNetworkForSlot(256);
  EXPECT_EQ(mid.subnet, "198.19.0.0/24");
  EXPECT_EQ(mid.ip_prefix, "198.19.0.");
  auto last = PodNetworkForSlot(kCniSlots - 1);
  EXPECT_EQ(last.bridge, "nlbr511");
  EXPECT_EQ(last.subnet, "198.19.255.0/24");
  EXPECT_EQ(last.gateway, "198.19.255.1");
  EXPECT_LE(last.bridge.size(), 15u);  // IFNAMSIZ - 1
}

TEST(MakeCniConfList, BridgeWithHostLocalAndNoRouteOutPlusPortmap) {
  auto net = PodNetworkForSlot(7);
  auto list = nlohmann::json::parse(MakeCniConfList(net, "/tmp/x/cni/ipam"));
  EXPECT_EQ(list["name"], "nodelet-7");
  ASSERT_EQ(list["plugins"].size(), 2u);
  const auto& bridge = list["plugins"][0];
  EXPECT_EQ(bridge["type"], "bridge");
  EXPECT_EQ(bridge["bridge"], "nlbr7");
  EXPECT_EQ(bridge["isGateway"], true);
  EXPECT_EQ(bridge["ipMasq"], false);
  EXPECT_EQ(bridge["hairpinMode"], true);
  const auto& ipam = bridge["ipam"];
  EXPECT_EQ(ipam["type"], "host-local");
  EXPECT_EQ(ipam["dataDir"], "/tmp/x/cni/ipam");
  EXPECT_EQ(ipam["ranges"][0][0]["subnet"], "198.18.7.0/24");
  EXPECT_EQ(ipam["ranges"][0][0]["gateway"], "198.18.7.1");
  EXPECT_FALSE(ipam.contains("routes"));  // pods reach the bridge's subnet and nothing else
  const auto& portmap = list["plugins"][1];
  EXPECT_EQ(portmap["type"], "portmap");
  EXPECT_EQ(portmap["capabilities"]["portMappings"], true);
}

TEST(MakeContainerdConfig, SetsTheRegistryConfigPathOnlyWhenAsked) {
  auto plain = MakeContainerdConfig(kDefaultConfig, "/tmp/x", "nodelet.local/pause:1.0");
  ASSERT_TRUE(plain.ok());
  EXPECT_THAT(*plain, HasSubstr("registry]\n      config_path = \"\"\n"));
  auto with =
      MakeContainerdConfig(kDefaultConfig, "/tmp/x", "nodelet.local/pause:1.0", "/tmp/x/certs.d");
  ASSERT_TRUE(with.ok()) << with.status().ToString();
  EXPECT_THAT(*with, HasSubstr("registry]\n      config_path = \"/tmp/x/certs.d\"\n"));
}

TEST(MakeContainerdConfig, QuotesPaths) {
  auto config = MakeContainerdConfig(kDefaultConfig, "/tmp/a\"b", "nodelet.local/pause:1.0");
  ASSERT_TRUE(config.ok());
  EXPECT_THAT(*config, HasSubstr("root = \"/tmp/a\\\"b/root\""));
}

TEST(MakeContainerdConfig, RefusesADefaultConfigWithoutARequiredKey) {
  std::string without = kDefaultConfig;
  without.erase(without.find("    restrict_oom_score_adj = false\n"),
                std::string("    restrict_oom_score_adj = false\n").size());
  auto config = MakeContainerdConfig(without, "/tmp/x", "nodelet.local/pause:1.0");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(), HasSubstr("restrict_oom_score_adj"));
}

}  // namespace
}  // namespace nodelet::testing
