#include "svc-podworkerd/container_env.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "svc-podworkerd/lifecycle_hooks.h"

namespace nodelet::podworkerd {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

pod::Pod EnvPod() {
  pod::Pod pod;
  pod.metadata.name = "web";
  pod.metadata.namespace_name = "prod";
  pod.metadata.uid = "u1";
  pod::Container c;
  c.name = "app";
  pod.spec.containers.push_back(c);
  return pod;
}

EnvSources Sources() {
  EnvSources s;
  s.config_maps["prod/settings"] = {"prod", "settings", {{"level", "debug"}, {"1bad", "x"}}};
  s.secrets["prod/token"] = {"prod", "token", {{"t", "s3cret"}}};
  s.runtime = {"198.18.0.9", "127.0.0.1"};
  s.node = {2000, 1 << 30, 0};
  return s;
}

pod::EnvVar From(const std::string& name, pod::EnvVarSource src) {
  return pod::EnvVar{name, "", std::move(src)};
}

TEST(ContainerEnvTest, EnvFromThenEnvInOrderWithExpansion) {
  pod::Pod pod = EnvPod();
  pod::Container& c = pod.spec.containers[0];
  c.env_from = {pod::EnvFromSource{"CFG_", pod::EnvFromRef{"settings", std::nullopt}, {}},
                pod::EnvFromSource{"", pod::EnvFromRef{"settings", std::nullopt}, {}},
                pod::EnvFromSource{"", {}, pod::EnvFromRef{"absent", true}}};
  pod::EnvVarSource ip;
  ip.field_ref = pod::ObjectFieldSelector{"v1", "status.podIP"};
  pod::EnvVarSource token;
  token.secret_key_ref = pod::KeySelector{"token", "t", std::nullopt};
  pod::EnvVarSource cpu;
  cpu.resource_field_ref = pod::ResourceFieldSelector{"", "limits.cpu", std::nullopt};
  c.env = {{"A", "one", std::nullopt},
           From("IP", ip),
           From("TOKEN", token),
           From("CPUS", cpu),
           {"MSG", "$(A) at $(IP) $(CFG_level) $$(A) $(NOPE)", std::nullopt},
           {"A", "two", std::nullopt}};
  c.command = {"echo", "$(MSG)"};
  c.args = {"$(A)", "$$(A)"};
  auto env = MakeContainerEnvironment(pod, c, Sources());
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_THAT(env->env,
              ElementsAre(Pair("CFG_1bad", "x"), Pair("CFG_level", "debug"), Pair("level", "debug"),
                          Pair("A", "two"), Pair("IP", "198.18.0.9"), Pair("TOKEN", "s3cret"),
                          Pair("CPUS", "2"), Pair("MSG", "one at 198.18.0.9 debug $(A) $(NOPE)")));
  EXPECT_THAT(env->command, ElementsAre("echo", "one at 198.18.0.9 debug $(A) $(NOPE)"));
  EXPECT_THAT(env->args, ElementsAre("two", "$(A)"));
  ASSERT_EQ(env->warnings.size(), 1u);
  EXPECT_THAT(env->warnings[0], ::testing::HasSubstr("Keys [1bad] from the EnvFrom configMap "
                                                     "prod/settings were skipped"));
}

TEST(ContainerEnvTest, MissingObjectsAndKeys) {
  pod::Pod pod = EnvPod();
  pod::Container& c = pod.spec.containers[0];
  auto with = [&](pod::EnvVarSource src) {
    c.env = {From("X", std::move(src))};
    auto env = MakeContainerEnvironment(pod, c, Sources());
    if (!env.ok()) return env.status().message();
    return env->env.empty() ? std::string("(unset)") : env->env[0].second;
  };
  pod::EnvVarSource s;
  s.config_map_key_ref = pod::KeySelector{"ghost", "k", std::nullopt};
  EXPECT_EQ(with(s), "configmap \"ghost\" not found");
  s.config_map_key_ref = pod::KeySelector{"settings", "k", std::nullopt};
  EXPECT_EQ(with(s), "couldn't find key k in ConfigMap prod/settings");
  s.config_map_key_ref = pod::KeySelector{"settings", "k", true};
  EXPECT_EQ(with(s), "(unset)");
  s.config_map_key_ref.reset();
  s.secret_key_ref = pod::KeySelector{"ghost", "k", std::nullopt};
  EXPECT_EQ(with(s), "secret \"ghost\" not found");
  s.secret_key_ref = pod::KeySelector{"ghost", "k", true};
  EXPECT_EQ(with(s), "(unset)");
  c.env.clear();
  c.env_from = {pod::EnvFromSource{"", {}, pod::EnvFromRef{"ghost", std::nullopt}}};
  auto env = MakeContainerEnvironment(pod, c, Sources());
  EXPECT_EQ(env.status().message(), "secret \"ghost\" not found");
}

TEST(PreStopAnnotationTest, RoundTripsWithTheNamedPortResolved) {
  pod::Container c;
  c.name = "app";
  c.ports = {{"http", 8080, "TCP", 0}};
  pod::LifecycleHandler h;
  h.http_get = pod::HttpGetAction{
      "", pod::IntOrString::String("http"), "/stop", "HTTP", {{"X-Why", "deleted"}}};
  c.lifecycle = pod::Lifecycle{std::nullopt, h};
  std::string text = EncodePreStop(c);
  std::string error;
  auto back = DecodePreStop(text, &error);
  ASSERT_TRUE(back.has_value()) << error;
  ASSERT_TRUE(back->http_get.has_value());
  EXPECT_EQ(back->http_get->port, pod::IntOrString::Int(8080));
  EXPECT_EQ(back->http_get->path, "/stop");
  EXPECT_EQ(back->http_get->http_headers.at(0).value, "deleted");

  h = {};
  h.exec = pod::ExecAction{{"sh", "-c", "echo bye"}};
  c.lifecycle = pod::Lifecycle{std::nullopt, h};
  back = DecodePreStop(EncodePreStop(c), &error);
  ASSERT_TRUE(back.has_value()) << error;
  EXPECT_EQ(*back, h);
  h = {};
  h.sleep = pod::SleepAction{7};
  c.lifecycle = pod::Lifecycle{std::nullopt, h};
  back = DecodePreStop(EncodePreStop(c), &error);
  ASSERT_TRUE(back.has_value()) << error;
  EXPECT_EQ(*back, h);

  c.lifecycle.reset();
  EXPECT_EQ(EncodePreStop(c), "");
  for (const char* bad :
       {"", "{", "{}", "[1]", "{\"exec\":{\"command\":7}}", "{\"httpGet\":{\"port\":[]}}"}) {
    error.clear();
    EXPECT_FALSE(DecodePreStop(bad, &error).has_value()) << bad;
    EXPECT_FALSE(error.empty()) << bad;
  }
  EXPECT_FALSE(DecodePreStop(std::string(kMaxPreStopAnnotationBytes + 1, ' '), &error));
}

}  // namespace
}  // namespace nodelet::podworkerd
