// Node-wide registry credentials: a docker config.json read as the kubelet's keyring reads it,
// matched to an image's registry, and passed to CRI PullImage (each tried in turn).
#include "svc-podworkerd/registry_credentials.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "svc-podworkerd/image_puller.h"
#include "svc-podworkerd/pull_secrets.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_cri_runtime.h"
#include "tests/testing/harness.h"

namespace nodelet::podworkerd {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Users(const std::vector<RegistryCredential>& cs) {
  std::vector<std::string> out;
  for (const auto& c : cs) out.push_back(c.username);
  return out;
}

TEST(RegistryCredentialsTest, ImagesAreLocatedAsTheRuntimeReadsThem) {
  auto at = [](const char* image) {
    auto l = LocateImage(image);
    return l.host + " " + l.repository;
  };
  EXPECT_EQ(at("busybox"), "docker.io library/busybox");
  EXPECT_EQ(at("busybox:1.36"), "docker.io library/busybox");
  EXPECT_EQ(at("team/app@sha256:abc"), "docker.io team/app");
  EXPECT_EQ(at("127.0.0.1:5000/test/busybox:1"), "127.0.0.1:5000 test/busybox");
  EXPECT_EQ(at("127.0.0.1:5000/test/busybox"), "127.0.0.1:5000 test/busybox");
  EXPECT_EQ(at("registry.example.com/a/b:c"), "registry.example.com a/b");
  EXPECT_EQ(at("localhost/app"), "localhost app");
  EXPECT_EQ(at("index.docker.io/library/nginx"), "docker.io library/nginx");
}

TEST(RegistryCredentialsTest, EntriesMatchByHostGlobPortAndPathMostSpecificFirst) {
  // "dXNlcjpwYXNz" is base64("user:pass").
  auto k = DockerKeyring::Parse(R"({"auths": {
      "https://index.docker.io/v1/": {"auth": "aHViOmh1Yg=="},
      "registry.example.com": {"username": "whole", "password": "p1"},
      "registry.example.com/team": {"username": "team", "password": "p2"},
      "*.corp.example": {"username": "glob", "password": "p3"},
      "127.0.0.1:5000": {"auth": "dXNlcjpwYXNz"},
      "http://10.0.0.1": {"username": "anyport", "password": "p4"}}})",
                                "config.json");
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  EXPECT_EQ(k->size(), 6u);
  EXPECT_THAT(Users(k->Lookup("busybox")), ElementsAre("hub"));
  EXPECT_THAT(Users(k->Lookup("docker.io/library/busybox:1")), ElementsAre("hub"));
  EXPECT_THAT(Users(k->Lookup("registry.example.com/team/app:1")), ElementsAre("team", "whole"));
  EXPECT_THAT(Users(k->Lookup("registry.example.com/other/app")), ElementsAre("whole"));
  EXPECT_THAT(Users(k->Lookup("registry.example.com/teamx/app")), ElementsAre("whole"))
      << "a path matches whole components";
  EXPECT_THAT(Users(k->Lookup("a.corp.example/x")), ElementsAre("glob"));
  EXPECT_TRUE(k->Lookup("a.b.corp.example/x").empty()) << "one glob is one label";
  auto local = k->Lookup("127.0.0.1:5000/test/busybox:1");
  ASSERT_EQ(local.size(), 1u);
  EXPECT_EQ(local[0].username, "user");
  EXPECT_EQ(local[0].password, "pass");
  EXPECT_TRUE(k->Lookup("127.0.0.1:5001/test/busybox").empty()) << "another port";
  EXPECT_THAT(Users(k->Lookup("10.0.0.1:8443/x")), ElementsAre("anyport"))
      << "a key without a port matches any";
  EXPECT_TRUE(k->Lookup("quay.io/x/y").empty());
}

TEST(RegistryCredentialsTest, ABrokenConfigIsAnErrorNamingTheFileAndKey) {
  auto not_json = DockerKeyring::Parse("{", "/r/config.json");
  ASSERT_FALSE(not_json.ok());
  EXPECT_EQ(not_json.status().message(), "/r/config.json: not a JSON object");
  auto bad_auth = DockerKeyring::Parse(R"({"auths": {"r.io": {"auth": "%%%"}}})", "/r/config.json");
  ASSERT_FALSE(bad_auth.ok());
  EXPECT_EQ(bad_auth.status().message(),
            "/r/config.json: auths.r.io.auth: not base64 of USER:PASSWORD");
  auto bad_type = DockerKeyring::Parse(R"({"auths": {"r.io": {"username": 7}}})", "c");
  ASSERT_FALSE(bad_type.ok());
  EXPECT_EQ(bad_type.status().message(), "c: auths.r.io.username: not a string");
  auto helpers = DockerKeyring::Parse(R"({"credsStore": "desktop"})", "c");
  ASSERT_TRUE(helpers.ok());
  EXPECT_EQ(helpers->size(), 0u) << "credential helpers are not nodelet's to run";
}

TEST(RegistryCredentialsTest, TheFirstConfigThatExistsIsReadAtEachPull) {
  testing::TempDir dir;
  const std::string root = dir.Sub("root"), home = dir.Sub("home");
  const std::vector<std::string> paths = {root + "/config.json", home + "/config.json"};
  auto none = ReadDockerKeyring(paths);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->size(), 0u);

  testing::FakeCriRuntime runtime;
  testing::FakeClock clock;
  ImagePullerConfig config;
  config.docker_config_paths = paths;
  ImagePuller puller(runtime, clock, config);
  ASSERT_TRUE(puller.EnsureImage("r.io/app:1", "Always").status.ok());

  std::filesystem::create_directories(home);
  std::ofstream(home + "/config.json") << R"({"auths": {"r.io": {"auth": "aG9tZTpwdw=="}}})";
  ASSERT_TRUE(puller.EnsureImage("r.io/app:1", "Always").status.ok());
  std::filesystem::create_directories(root);
  std::ofstream(root + "/config.json")
      << R"({"auths": {"r.io/app": {"username": "a", "password": "x"},
                       "r.io": {"username": "b", "password": "y"}}})";
  // The first credential is refused: the next is tried.
  runtime.FailCall(testing::CriCall::kPullImage, Unavailable("unauthorized"), 1);
  ASSERT_TRUE(puller.EnsureImage("r.io/app:1", "Always").status.ok());
  EXPECT_THAT(runtime.PullAuths(), ElementsAre("", "home:pw", "a:x", "b:y"));

  // A config that does not parse: the pull goes on without credentials, and if it fails its
  // error says why none were sent.
  std::ofstream(root + "/config.json") << "{";
  runtime.FailCall(testing::CriCall::kPullImage, Unavailable("unauthorized"), 1);
  auto failed = puller.EnsureImage("r.io/app:2", "Always");
  EXPECT_FALSE(failed.status.ok());
  EXPECT_THAT(failed.message, HasSubstr("(registry credentials not read: " + root +
                                        "/config.json: not a JSON object)"));
}

pod::ConfigObject Secret(const std::string& ns, const std::string& name, const std::string& type,
                         std::map<std::string, std::string> data) {
  return pod::ConfigObject{ns, name, std::move(data), type};
}

TEST(PullSecretsTest, ThePodsSecretsOfTheRegistryTypesInItsNamespaceAreRead) {
  pod::ConfigObjectMap secrets;
  for (auto s : {Secret("shop", "json", "kubernetes.io/dockerconfigjson",
                        {{".dockerconfigjson",
                          R"({"auths": {"r.io": {"username": "json", "password": "1"}}})"}}),
                 Secret("shop", "cfg", "kubernetes.io/dockercfg",
                        {{".dockercfg", R"({"r.io/team": {"auth": "Y2ZnOjI="}})"}}),
                 // Right key, wrong type: the kubelet reads neither.
                 Secret("shop", "opaque", "Opaque",
                        {{".dockerconfigjson",
                          R"({"auths": {"r.io": {"username": "opaque", "password": "3"}}})"}}),
                 Secret("other", "elsewhere", "kubernetes.io/dockerconfigjson",
                        {{".dockerconfigjson",
                          R"({"auths": {"r.io": {"username": "other", "password": "4"}}})"}})}) {
    secrets[s.namespace_name + "/" + s.name] = s;
  }
  pod::Pod pod;
  pod.metadata.namespace_name = "shop";
  pod.spec.image_pull_secrets = {"", "json", "cfg", "opaque", "absent", "elsewhere"};
  PodPullCredentials got = PullCredentialsFor(pod, secrets, "r.io/team/app:1");
  ASSERT_TRUE(got.error.ok()) << got.error.ToString();
  // Both Secrets' entries in one keyring, the most specific first ("Y2ZnOjI=" is "cfg:2").
  EXPECT_THAT(Users(got.credentials), ElementsAre("cfg", "json"));
  EXPECT_THAT(got.missing, ElementsAre("absent", "elsewhere"));
  EXPECT_EQ(MissingPullSecretsMessage(got.missing),
            "Unable to retrieve some image pull secrets (absent, elsewhere); attempting to pull "
            "the image may not succeed.");
  EXPECT_THAT(Users(PullCredentialsFor(pod, secrets, "r.io/solo/app").credentials),
              ElementsAre("json"));
  EXPECT_TRUE(PullCredentialsFor(pod, secrets, "quay.io/x").credentials.empty());

  // The pod's come first, then the node's, each tried until one pulls.
  testing::TempDir dir;
  std::ofstream(dir.Sub("config.json"))
      << R"({"auths": {"r.io": {"username": "node", "password": "5"}}})";
  testing::FakeCriRuntime runtime;
  testing::FakeClock clock;
  ImagePullerConfig config;
  config.docker_config_paths = {dir.Sub("config.json")};
  ImagePuller puller(runtime, clock, config);
  runtime.FailCall(testing::CriCall::kPullImage, Unavailable("unauthorized"), 2);
  PullOptions with_pod_credentials;
  with_pod_credentials.pod_credentials = got.credentials;
  ASSERT_TRUE(puller.EnsureImage("r.io/team/app:1", "Always", with_pod_credentials).status.ok());
  EXPECT_THAT(runtime.PullAuths(), ElementsAre("cfg:2", "json:1", "node:5"));
}

TEST(PullSecretsTest, ASecretWhoseCredentialsDoNotParseIsAnErrorNamingIt) {
  pod::ConfigObjectMap secrets;
  secrets["default/bad"] =
      Secret("default", "bad", "kubernetes.io/dockerconfigjson",
             {{".dockerconfigjson", R"({"auths": {"r.io": {"auth": "%%%"}}})"}});
  pod::Pod pod;
  pod.spec.image_pull_secrets = {"bad"};
  PodPullCredentials got = PullCredentialsFor(pod, secrets, "r.io/app");
  ASSERT_FALSE(got.error.ok());
  EXPECT_EQ(got.error.message(),
            "imagePullSecrets: secret default/bad .dockerconfigjson: auths.r.io.auth: not base64 "
            "of USER:PASSWORD");
}

}  // namespace
}  // namespace nodelet::podworkerd
