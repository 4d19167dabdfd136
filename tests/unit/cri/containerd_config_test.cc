// MakeContainerdConfig: the private containerd's config is containerd's default with exactly
// the settings that keep it private and working in this VM changed, and a default config that
// lacks one of them is refused by name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/containerd.h"

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
    netns_mounts_under_state_dir = false
    restrict_oom_score_adj = false
    sandbox_image = "registry.k8s.io/pause:3.6"

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
  EXPECT_THAT(*config, HasSubstr("    netns_mounts_under_state_dir = true\n"));
  EXPECT_THAT(*config, HasSubstr("          Root = \"/tmp/x/state/runc\"\n"));
  // Other sections' keys of the same name are left alone.
  EXPECT_THAT(*config, HasSubstr("[debug]\n  address = \"\"\n"));
  EXPECT_THAT(*config, HasSubstr("[ttrpc]\n  address = \"\"\n"));
  EXPECT_THAT(*config, Not(HasSubstr("/run/containerd")));
  EXPECT_THAT(*config, Not(HasSubstr("/var/lib/containerd")));
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
