// What the supervisor writes for the fleet holds a pod's bytes: the etcd status sink's value
// (the v1 Pod of a status) and the etcd source's cache file. Bytes that are not UTF-8 are written
// as U+FFFD in valid JSON; they never throw on the sink's or the source's thread.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "lib/common/utf8.h"
#include "supervisor/etcd_status_sink.h"
#include "supervisor/sources/etcd_source.h"
#include "tests/unit/statusd/status_samples.h"

namespace nodelet::supervisor {
namespace {

using namespace nodelet::statusd::testing;  // NOLINT: the sample pods

const std::string kBad = "bad \xFF\xFE osc \x1b]0;t\x07 cut \xE2\x82";
const std::string kFffd(kReplacementCharacter);

TEST(EtcdTextTest, AStatusValueIsValidJsonForAnyBytes) {
  PodStatusRecord r;
  r.pod = SamplePod("u1");
  r.pod.name = "name-\xC3";
  r.status = RunningStatus(kBad);
  ContainerStatus c = TerminatedContainer("app", 1);
  c.state.terminated->message = kBad;
  r.status.container_statuses.push_back(c);
  r.version = 3;
  std::string value;
  ASSERT_NO_THROW(value = EtcdStatusValue(r));
  EXPECT_TRUE(IsValidUtf8(value));
  auto doc = nlohmann::json::parse(value, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << value;
  const std::string want = "bad " + kFffd + kFffd + " osc \x1b]0;t\x07 cut " + kFffd;
  EXPECT_EQ(doc["status"].value("message", ""), want);
  EXPECT_EQ(doc["metadata"].value("name", ""), "name-" + kFffd);
}

TEST(EtcdTextTest, TheSourceCacheIsValidJsonForAnyBytes) {
  const std::map<std::string, std::string> manifests = {
      {"/nodelet/v1/pods/n1/default/ok", "kind: Pod\n"},
      {"/nodelet/v1/pods/n1/default/bad", "kind: Pod\nmetadata: {name: \"\xFF\"}\n"},
      {"/nodelet/v1/configmaps/default/c\xFE", "data: {}\n"}};
  std::string text;
  ASSERT_NO_THROW(text = EtcdCacheText(manifests));
  EXPECT_TRUE(IsValidUtf8(text));
  auto doc = nlohmann::json::parse(text, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << text;
  ASSERT_TRUE(doc["manifests"].is_object());
  EXPECT_EQ(doc["manifests"].size(), 3u);
  EXPECT_EQ(doc["manifests"]["/nodelet/v1/pods/n1/default/ok"], "kind: Pod\n");
  EXPECT_EQ(doc["manifests"]["/nodelet/v1/pods/n1/default/bad"],
            "kind: Pod\nmetadata: {name: \"" + kFffd + "\"}\n");
}

}  // namespace
}  // namespace nodelet::supervisor
