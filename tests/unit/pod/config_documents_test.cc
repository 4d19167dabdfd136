// ConfigMap and Secret documents as the API server decodes them, and the registry credential
// Secrets' required keys.
#include "lib/pod/config_documents.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <string>

#include "lib/common/base64.h"

namespace nodelet::pod {
namespace {

Result<ConfigData> Parse(const std::string& kind, const std::string& yaml) {
  OtherDocument doc;
  doc.kind = kind;
  doc.name = "creds";
  doc.object = YAML::Load(yaml);
  return ParseConfigObject(doc);
}

TEST(ConfigDocumentsTest, DataIsDecodedAndASecretHasItsType) {
  auto secret = Parse("Secret", "data: {a: " + EncodeBase64("one\n") + "}\nstringData: {b: two}");
  ASSERT_TRUE(secret.ok()) << secret.status().ToString();
  EXPECT_EQ(secret->namespace_name, "default");
  EXPECT_EQ(secret->type, "Opaque") << "a Secret that names no type";
  EXPECT_EQ(secret->data.at("a"), "one\n");
  EXPECT_EQ(secret->data.at("b"), "two");
  auto config_map =
      Parse("ConfigMap",
            "data: {a: text}\nbinaryData: {b: " + EncodeBase64(std::string("\0\xff", 2)) + "}");
  ASSERT_TRUE(config_map.ok()) << config_map.status().ToString();
  EXPECT_EQ(config_map->type, "");
  EXPECT_EQ(config_map->data.at("b"), std::string("\0\xff", 2));
  auto bad = Parse("Secret", "data: {a: '%%'}");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "data.a: invalid base64");
}

TEST(ConfigDocumentsTest, RegistryCredentialSecretsNeedTheirKeyHoldingAJsonObject) {
  const std::string json = EncodeBase64(R"({"auths": {}})");
  auto good = Parse(
      "Secret", "type: kubernetes.io/dockerconfigjson\ndata: {.dockerconfigjson: " + json + "}");
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(good->type, "kubernetes.io/dockerconfigjson");
  auto missing =
      Parse("Secret", "type: kubernetes.io/dockerconfigjson\ndata: {other: " + json + "}");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "data[.dockerconfigjson]: Required value");
  auto not_json = Parse("Secret", "type: kubernetes.io/dockercfg\nstringData: {.dockercfg: '['}");
  ASSERT_FALSE(not_json.ok());
  EXPECT_EQ(not_json.status().message(),
            "data[.dockercfg]: Invalid value: must be a JSON object (kubernetes.io/dockercfg)");
  auto list_type = Parse("Secret", "type: [a]");
  ASSERT_FALSE(list_type.ok());
  EXPECT_EQ(list_type.status().message(), "type: must be a string");
}

TEST(ConfigDocumentsTest, Base64RoundTripsEveryLength) {
  EXPECT_EQ(EncodeBase64(""), "");
  EXPECT_EQ(EncodeBase64("f"), "Zg==");
  EXPECT_EQ(EncodeBase64("fo"), "Zm8=");
  EXPECT_EQ(EncodeBase64("foo"), "Zm9v");
  EXPECT_EQ(EncodeBase64("team:team-pass"), "dGVhbTp0ZWFtLXBhc3M=");
  std::string bytes;
  for (int i = 0; i < 256; ++i) {
    bytes.push_back(static_cast<char>(i));
    EXPECT_EQ(DecodeBase64(EncodeBase64(bytes)), bytes);
  }
}

}  // namespace
}  // namespace nodelet::pod
