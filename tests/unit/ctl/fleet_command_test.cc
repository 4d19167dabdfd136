// `nodeletctl fleet`'s parts that need no etcd: the keys `apply` writes (and what it refuses),
// the rows of `fleet nodes` and the table of `fleet pods`. fleet-e2e runs it against etcd.
#include "ctl/fleet_command.h"

#include <gtest/gtest.h>

namespace nodelet::ctl {
namespace {

constexpr char kTwo[] = R"(apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: shop
spec:
  containers:
  - name: app
    image: nodelet.local/busybox:1.0
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  mode: fast
)";

TEST(FleetCommandTest, ApplyWritesEachDocumentToItsKey) {
  auto keys = FleetApplyKeys("/nodelet/v1", "web.yaml", kTwo, "node-a");
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  ASSERT_EQ(keys->size(), 2u);
  ASSERT_TRUE(keys->count("/nodelet/v1/pods/node-a/shop/web"));
  EXPECT_NE(keys->at("/nodelet/v1/pods/node-a/shop/web").find("kind: Pod"), std::string::npos);
  ASSERT_TRUE(keys->count("/nodelet/v1/configmaps/default/settings"));
  EXPECT_NE(keys->at("/nodelet/v1/configmaps/default/settings").find("mode: fast"),
            std::string::npos);
  auto all = FleetApplyKeys("/nodelet/v1", "web.yaml", kTwo, "_all");
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->count("/nodelet/v1/pods/_all/shop/web"));
}

TEST(FleetCommandTest, ApplyRefusesAPodThatDoesNotDecodeNamingTheFileAndField) {
  const std::string bad = R"(apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: app
    image: nodelet.local/busybox:1.0
    restartPolicy: Sometimes
  restartPolicy: Sometimes
)";
  auto keys = FleetApplyKeys("/nodelet/v1", "bad.yaml", bad, "node-a");
  ASSERT_FALSE(keys.ok());
  EXPECT_NE(keys.status().message().find("bad.yaml"), std::string::npos);
  EXPECT_NE(keys.status().message().find("restartPolicy"), std::string::npos)
      << keys.status().message();
  EXPECT_FALSE(FleetApplyKeys("/nodelet/v1", "empty.yaml", "", "node-a").ok());
}

TEST(FleetCommandTest, NodesWithoutANodeKeyAreNotReady) {
  const std::string ready =
      R"({"status":{"conditions":[{"type":"MemoryPressure","status":"False"},)"
      R"({"type":"Ready","status":"True"}]}})";
  auto rows = FleetNodeRows({{"node-a", ready}}, {{"node-a", 3}}, {{"node-a", 2}, {"node-b", 1}},
                            {"node-b", "node-c"});
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].name, "node-a");
  EXPECT_EQ(rows[0].ready, "Ready");
  EXPECT_EQ(rows[0].lease, "3s");
  EXPECT_EQ(rows[0].pods, 2);
  EXPECT_EQ(rows[1].name, "node-b");
  EXPECT_EQ(rows[1].ready, "NotReady") << "its lease expired: no Node key";
  EXPECT_EQ(rows[1].lease, "<none>");
  EXPECT_EQ(rows[2].pods, 0);
  const std::string table = FormatFleetNodes(rows);
  EXPECT_EQ(table.substr(0, table.find('\n')), "NAME     READY      LEASE    PODS");
}

TEST(FleetCommandTest, PodsTableHasTheNodeFirstAndThePodsColumns) {
  const std::string web =
      R"({"metadata":{"name":"web","namespace":"shop",)"
      R"("creationTimestamp":"2026-01-01T00:00:00Z"},)"
      R"("status":{"phase":"Running","containerStatuses":[)"
      R"({"name":"app","ready":true,"restartCount":2,"state":{"running":{}}}]}})";
  const std::string waiting = R"({"metadata":{"name":"job","namespace":"default"},)"
                              R"("status":{"phase":"Pending","containerStatuses":[)"
                              R"({"name":"app","ready":false,"restartCount":0,)"
                              R"("state":{"waiting":{"reason":"ErrImagePull"}}}]}})";
  const std::string out = FormatFleetPods({{"node-a", {web}}, {"node-b", {waiting}}},
                                          1767225600 + 90);  // 90 s after web was made
  EXPECT_NE(out.find("NODE"), std::string::npos);
  EXPECT_NE(out.find("node-a   shop        web    1/1     Running        2          90s"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("ErrImagePull"), std::string::npos) << out;
}

}  // namespace
}  // namespace nodelet::ctl
