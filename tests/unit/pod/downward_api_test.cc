#include "lib/pod/downward_api.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>

namespace nodelet::pod {
namespace {

std::optional<std::string> From(const std::map<std::string, std::string>& vars,
                                std::string_view name) {
  auto it = vars.find(std::string(name));
  if (it == vars.end()) return std::nullopt;
  return it->second;
}

TEST(ExpandReferencesTest, TheApiRules) {
  const std::map<std::string, std::string> vars = {{"A", "1"}, {"B", "two words"}, {"E", ""}};
  auto expand = [&](std::string_view in) {
    return ExpandReferences(in, [&](std::string_view n) { return From(vars, n); });
  };
  EXPECT_EQ(expand("$(A)"), "1");
  EXPECT_EQ(expand("x$(A)y$(B)z"), "x1ytwo wordsz");
  EXPECT_EQ(expand("$(E)|"), "|") << "a defined empty value is substituted";
  EXPECT_EQ(expand("$(MISSING)"), "$(MISSING)") << "unknown references stay as written";
  EXPECT_EQ(expand("$$(A)"), "$(A)") << "$$ escapes";
  EXPECT_EQ(expand("$$$(A)"), "$1");
  EXPECT_EQ(expand("$$"), "$");
  EXPECT_EQ(expand("a$"), "a$") << "a trailing $ stays";
  EXPECT_EQ(expand("$A"), "$A") << "only $(...) is a reference";
  EXPECT_EQ(expand("$(A"), "$(A") << "unterminated";
  EXPECT_EQ(expand("$()"), "$()");
  EXPECT_EQ(expand("$(A)$(A)"), "11");
  EXPECT_EQ(expand("$(A)(B)"), "1(B)");
}

Pod ResourcePod() {
  Pod pod;
  pod.metadata.name = "p";
  Container c;
  c.name = "app";
  c.resources.limits["cpu"] = *Quantity::Parse("1500m");
  c.resources.limits["memory"] = *Quantity::Parse("100Mi");
  c.resources.requests["cpu"] = *Quantity::Parse("250m");
  pod.spec.containers.push_back(c);
  Container side;
  side.name = "side";
  pod.spec.containers.push_back(side);
  return pod;
}

TEST(ResourceFieldValueTest, LimitsRequestsDivisorsAndTheNodeForMissingLimits) {
  const Pod pod = ResourcePod();
  const NodeAllocatable node{4000, 8LL << 30, 100LL << 30};
  auto value = [&](const std::string& container, const std::string& resource,
                   std::optional<std::string> divisor = std::nullopt) {
    ResourceFieldSelector ref;
    ref.resource = resource;
    if (divisor) ref.divisor = *Quantity::Parse(*divisor);
    auto r = ResourceFieldValue(pod, ref, container, node);
    return r.ok() ? *r : "error: " + r.status().message();
  };
  EXPECT_EQ(value("app", "limits.cpu"), "2") << "1.5 cores round up to 2";
  EXPECT_EQ(value("app", "limits.cpu", "1m"), "1500");
  EXPECT_EQ(value("app", "requests.cpu", "1m"), "250");
  EXPECT_EQ(value("app", "requests.cpu"), "1");
  EXPECT_EQ(value("app", "limits.memory"), std::to_string(100LL << 20));
  EXPECT_EQ(value("app", "limits.memory", "1Mi"), "100");
  EXPECT_EQ(value("app", "limits.memory", "1G"), "1") << "104857600 / 1e9 rounds up";
  EXPECT_EQ(value("app", "requests.memory"), "0") << "no request is 0";
  EXPECT_EQ(value("side", "limits.cpu"), "4") << "no limit: the node's allocatable";
  EXPECT_EQ(value("side", "limits.memory", "1Gi"), "8");
  EXPECT_EQ(value("side", "limits.ephemeral-storage", "1Gi"), "100");
  EXPECT_EQ(value("ghost", "limits.cpu"), "error: resourceFieldRef: no container named \"ghost\"");
  EXPECT_EQ(value("app", "limits.gpu"),
            "error: resourceFieldRef: unsupported resource \"limits.gpu\"");
  ResourceFieldSelector named;
  named.container_name = "side";
  named.resource = "limits.cpu";
  EXPECT_EQ(*ResourceFieldValue(pod, named, "app", node), "4") << "containerName wins";
}

TEST(PodFieldValueTest, MetadataSpecAndStatusFields) {
  Pod pod;
  pod.metadata.name = "web-node1";
  pod.metadata.namespace_name = "prod";
  pod.metadata.uid = "u-1";
  pod.metadata.labels = {{"app", "web"}, {"tier", "a\"b"}};
  pod.spec.node_name = "node1";
  pod.spec.service_account_name = "builder";
  const PodRuntimeFields rt{"198.18.0.7", "127.0.0.1"};
  auto value = [&](const std::string& path) {
    auto r = PodFieldValue(pod, path, rt);
    return r.ok() ? *r : "error: " + r.status().message();
  };
  EXPECT_EQ(value("metadata.name"), "web-node1");
  EXPECT_EQ(value("metadata.namespace"), "prod");
  EXPECT_EQ(value("metadata.uid"), "u-1");
  EXPECT_EQ(value("metadata.labels['app']"), "web");
  EXPECT_EQ(value("metadata.labels['none']"), "");
  EXPECT_EQ(value("metadata.labels"), "app=\"web\"\ntier=\"a\\\"b\"\n");
  EXPECT_EQ(value("spec.nodeName"), "node1");
  EXPECT_EQ(value("spec.serviceAccountName"), "builder");
  EXPECT_EQ(value("status.podIP"), "198.18.0.7");
  EXPECT_EQ(value("status.hostIP"), "127.0.0.1");
  EXPECT_EQ(value("spec.hostname"), "error: unsupported fieldPath \"spec.hostname\"");
}

}  // namespace
}  // namespace nodelet::pod
