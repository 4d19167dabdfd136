// exec, attach and port-forward find their pod as `logs` does: NAME alone in every namespace,
// and a name in several namespaces is refused with each NAMESPACE/NAME, not sent to default.
#include "ctl/stream_target.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace nodelet::ctl {
namespace {

using ::testing::HasSubstr;

status::PodStatusRecord Record(const std::string& ns, const std::string& name,
                               const std::string& uid) {
  status::PodStatusRecord r;
  r.pod.namespace_ = ns;
  r.pod.name = name;
  r.pod.uid = uid;
  return r;
}

TEST(StreamTargetTest, ANameInSeveralNamespacesIsRefusedNamingThem) {
  const std::vector<status::PodStatusRecord> pods = {
      Record("default", "web", "u1"), Record("shop", "web", "u2"), Record("shop", "db", "u3")};
  auto ambiguous = ResolveStreamTarget(pods, "web");
  ASSERT_FALSE(ambiguous.ok());
  EXPECT_EQ(ambiguous.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(ambiguous.status().message(), HasSubstr("default/web"));
  EXPECT_THAT(ambiguous.status().message(), HasSubstr("shop/web"));
  // NAMESPACE/NAME picks one.
  auto given = ResolveStreamTarget(pods, "shop/web");
  ASSERT_TRUE(given.ok());
  EXPECT_EQ(given->namespace_name, "shop");
  EXPECT_EQ(given->name, "web");
  // A name in one namespace is found there, not in default.
  auto db = ResolveStreamTarget(pods, "db");
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  EXPECT_EQ(db->namespace_name, "shop");
  // Unknown (or statusd not reachable: no list): default/NAME, for podworkerd to answer.
  auto none = ResolveStreamTarget({}, "web");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->namespace_name, "default");
  EXPECT_EQ(none->name, "web");
}

}  // namespace
}  // namespace nodelet::ctl
