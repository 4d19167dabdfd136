// The etcd source's rules that need no etcd: which keys name pods, and which ConfigMaps and
// Secrets a pod reads (what the source then fetches and watches). The source itself runs
// against a real etcd cluster in fleet-e2e.
#include "supervisor/sources/etcd_source.h"

#include <gtest/gtest.h>

namespace nodelet::supervisor {
namespace {

TEST(EtcdSourceTest, APodKeyIsPrefixPodsNodeNamespaceName) {
  auto k = ParsePodKey("/nodelet/v1", "/nodelet/v1/pods/node-a/default/web");
  ASSERT_TRUE(k.has_value());
  EXPECT_EQ(k->node, "node-a");
  EXPECT_EQ(k->namespace_name, "default");
  EXPECT_EQ(k->name, "web");
  auto all = ParsePodKey("/nodelet/v1", "/nodelet/v1/pods/_all/kube-system/agent");
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(all->node, "_all");
  for (const char* bad : {"/nodelet/v1/pods/node-a/default", "/nodelet/v1/pods/node-a/default/",
                          "/nodelet/v1/pods/node-a/default/web/extra",
                          "/nodelet/v1/pods/node-a/../web", "/nodelet/v1/pods//default/web",
                          "/nodelet/v2/pods/node-a/default/web", "/nodelet/v1/status/a/b/c"}) {
    EXPECT_FALSE(ParsePodKey("/nodelet/v1", bad).has_value()) << bad;
  }
}

TEST(EtcdSourceTest, ConfigRefsAreVolumesEnvEnvFromOfEveryContainerAndPullSecrets) {
  pod::Pod p;
  p.metadata.namespace_name = "shop";
  pod::Volume cm;
  cm.name = "conf";
  cm.config_map = pod::ConfigMapVolumeSource{};
  cm.config_map->name = "settings";
  pod::Volume sec;
  sec.name = "creds";
  sec.secret = pod::SecretVolumeSource{};
  sec.secret->secret_name = "db";
  pod::Volume scratch;
  scratch.name = "tmp";
  scratch.empty_dir = pod::EmptyDirVolumeSource{};
  p.spec.volumes = {cm, sec, scratch};
  pod::Container init;
  pod::EnvVar from_secret;
  from_secret.name = "TOKEN";
  from_secret.value_from = pod::EnvVarSource{};
  from_secret.value_from->secret_key_ref = pod::KeySelector{"api", "token", std::nullopt};
  init.env = {from_secret};
  p.spec.init_containers = {init};
  pod::Container app;
  pod::EnvFromSource all;
  all.config_map_ref = pod::EnvFromRef{"features", std::nullopt};
  pod::EnvVar plain;
  plain.name = "MODE";
  plain.value = "fast";
  app.env = {plain};
  app.env_from = {all};
  p.spec.containers = {app};
  p.spec.image_pull_secrets = {"registry", ""};  // an empty name is skipped, as the kubelet does
  EXPECT_EQ(ConfigRefs(p),
            (std::set<std::string>{"ConfigMap/shop/features", "ConfigMap/shop/settings",
                                   "Secret/shop/api", "Secret/shop/db", "Secret/shop/registry"}));
  p.metadata.namespace_name.clear();
  EXPECT_EQ(ConfigRefs(p).count("ConfigMap/default/settings"), 1u) << "default namespace";
}

TEST(EtcdSourceTest, FleetKeysFollowTheDocumentedKeyspace) {
  FleetKeys k{"/nodelet/v1"};
  EXPECT_EQ(k.NodePods("n1"), "/nodelet/v1/pods/n1/");
  EXPECT_EQ(k.AllPods(), "/nodelet/v1/pods/_all/");
  EXPECT_EQ(k.Config("ConfigMap", "ns", "c"), "/nodelet/v1/configmaps/ns/c");
  EXPECT_EQ(k.Config("Secret", "ns", "s"), "/nodelet/v1/secrets/ns/s");
  EXPECT_EQ(k.Status("n1", "ns", "p"), "/nodelet/v1/status/n1/ns/p");
  EXPECT_EQ(k.Node("n1"), "/nodelet/v1/nodes/n1");
}

}  // namespace
}  // namespace nodelet::supervisor
