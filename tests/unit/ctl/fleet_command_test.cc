// `nodeletctl fleet`'s parts that need no etcd: the keys `apply` writes (and what it refuses),
// the rows of `fleet nodes` and the table of `fleet pods`. fleet-e2e runs it against etcd.
#include "ctl/fleet_command.h"

#include <gtest/gtest.h>

#include "ctl/pods_command.h"
#include "lib/status/pod_status_json.h"

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

// What statusd's etcd sink writes (PodToJson) reads back as the record it came from, so that
// `fleet pods` shows what `nodeletctl pods` shows for every kind of STATUS.
TEST(FleetCommandTest, PodsColumnsAreTheSameAsNodeletctlPodsFromTheSinksJson) {
  std::vector<status::PodStatusRecord> cases;
  status::PodStatusRecord r;
  // As statusd holds them: every container has a status (a regular one waits
  // PodInitializing while the init containers run).
  r.pod = {"shop", "web", "u1", status::RestartPolicy::kAlways, 1767225600, 1, 1};
  r.version = 7;
  r.status.phase = status::PodPhase::kPending;
  status::ContainerStatus init;
  init.name = "setup";
  init.state.terminated = status::ContainerStateTerminated{};
  init.state.terminated->exit_code = 3;
  init.state.terminated->started_at_unix_s = 1767225601;
  init.state.terminated->finished_at_unix_s = 1767225602;
  r.status.init_container_statuses = {init};
  status::ContainerStatus waiting;
  waiting.name = "app";
  waiting.state.waiting = status::ContainerStateWaiting{"PodInitializing", ""};
  r.status.container_statuses = {waiting};
  cases.push_back(r);  // Init:ExitCode:3
  r.status.init_container_statuses.clear();
  r.pod.init_container_count = 0;
  r.pod.container_count = 2;
  status::ContainerStatus app;
  app.name = "app";
  app.restart_count = 4;
  app.state.waiting = status::ContainerStateWaiting{"CrashLoopBackOff", "back-off 40s"};
  app.last_state.terminated = status::ContainerStateTerminated{};
  app.last_state.terminated->exit_code = 1;
  app.last_state.terminated->finished_at_unix_s = 1767225650;
  status::ContainerStatus side;
  side.name = "side";
  side.ready = true;
  side.state.running = status::ContainerStateRunning{1767225610};
  r.status.phase = status::PodPhase::kRunning;
  r.status.container_statuses = {app, side};
  cases.push_back(r);  // CrashLoopBackOff, 1/2, 4 (restarts ... ago)
  r.status.reason = "Evicted";
  r.status.phase = status::PodPhase::kFailed;
  cases.push_back(r);
  for (const auto& want : cases) {
    auto got = PodRecordFromJson(status::PodToJson(want));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    const int64_t now = 1767225700;
    EXPECT_EQ(StatusColumn(*got), StatusColumn(want)) << StatusColumn(want);
    EXPECT_EQ(ReadyColumn(*got), ReadyColumn(want));
    EXPECT_EQ(RestartsColumn(*got, now), RestartsColumn(want, now));
    EXPECT_EQ(got->version, 7u);
    EXPECT_EQ(got->pod.creation_time_unix_s, want.pod.creation_time_unix_s);
  }
  EXPECT_EQ(StatusColumn(*PodRecordFromJson(status::PodToJson(cases[0]))), "Init:ExitCode:3");

  // Garbage from etcd is refused naming the field; the table says so in the pod's row.
  auto bad = nlohmann::json::parse(
      R"({"metadata":{"name":"x","namespace":"d"},"status":{"containerStatuses":[)"
      R"({"name":"a","restartCount":"many"}]}})");
  auto refused = PodRecordFromJson(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("status.containerStatuses[0]"), std::string::npos)
      << refused.status().message();
  EXPECT_FALSE(
      PodRecordFromJson(nlohmann::json::parse(R"({"metadata":{"creationTimestamp":"yesterday"}})"))
          .ok());
  const std::string table = FormatFleetPods({{"node-a", {bad.dump()}}}, 0);
  EXPECT_NE(table.find("<invalid: status.containerStatuses[0]"), std::string::npos) << table;
}

}  // namespace
}  // namespace nodelet::ctl
