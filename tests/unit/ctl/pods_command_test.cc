#include "ctl/pods_command.h"

#include <gtest/gtest.h>

#include "lib/status/pod_status_json.h"
#include "tests/unit/statusd/status_samples.h"

namespace nodelet::ctl {
namespace {

using namespace nodelet::statusd::testing;  // NOLINT

constexpr int64_t kNow = 1'700'010'000;

PodStatusRecord Record(const std::string& name, PodStatus status, uint32_t containers = 1) {
  PodStatusRecord r;
  r.pod = SamplePod("uid-" + name, RestartPolicy::kAlways, name);
  r.pod.container_count = containers;
  r.pod.creation_time_unix_s = kNow - 150;
  r.status = std::move(status);
  r.version = 3;
  return r;
}

TEST(PodsCommandTest, HumanDurationFollowsKubectl) {
  EXPECT_EQ(HumanDuration(-5), "<invalid>");
  EXPECT_EQ(HumanDuration(-1), "0s");
  EXPECT_EQ(HumanDuration(0), "0s");
  EXPECT_EQ(HumanDuration(45), "45s");
  EXPECT_EQ(HumanDuration(119), "119s");
  EXPECT_EQ(HumanDuration(150), "2m30s");
  EXPECT_EQ(HumanDuration(300), "5m");
  EXPECT_EQ(HumanDuration(15 * 60), "15m");
  EXPECT_EQ(HumanDuration(3 * 3600 + 15 * 60), "3h15m");
  EXPECT_EQ(HumanDuration(10 * 3600), "10h");
  EXPECT_EQ(HumanDuration(50 * 3600), "2d2h");
  EXPECT_EQ(HumanDuration(10 * 86400), "10d");
  EXPECT_EQ(HumanDuration(3 * 365 * 86400 + 5 * 86400), "3y5d");
  EXPECT_EQ(HumanDuration(10LL * 365 * 86400), "10y");
}

TEST(PodsCommandTest, StatusColumnFollowsKubectl) {
  EXPECT_EQ(StatusColumn(Record("a", RunningStatus())), "Running");

  PodStatus crash = RunningStatus();
  crash.container_statuses = {WaitingContainer("app", "CrashLoopBackOff")};
  EXPECT_EQ(StatusColumn(Record("b", crash)), "CrashLoopBackOff");

  PodStatus init = RunningStatus();
  init.phase = PodPhase::kPending;
  init.init_container_statuses = {TerminatedContainer("i0", 0), RunningContainer("i1")};
  init.container_statuses = {WaitingContainer("app", "PodInitializing")};
  auto init_rec = Record("c", init);
  init_rec.pod.init_container_count = 2;
  EXPECT_EQ(StatusColumn(init_rec), "Init:1/2");
  init.init_container_statuses[1] = TerminatedContainer("i1", 1);
  EXPECT_EQ(StatusColumn(Record("c", init)), "Init:Error");

  PodStatus done = RunningStatus();
  done.phase = PodPhase::kSucceeded;
  done.container_statuses = {TerminatedContainer("app", 0)};
  EXPECT_EQ(StatusColumn(Record("d", done)), "Completed");

  PodStatus noreason = RunningStatus();
  noreason.container_statuses = {TerminatedContainer("app", 3)};
  noreason.container_statuses[0].state.terminated->reason.clear();
  EXPECT_EQ(StatusColumn(Record("e", noreason)), "ExitCode:3");

  PodStatus evicted = RunningStatus();
  evicted.phase = PodPhase::kFailed;
  evicted.reason = "Evicted";
  evicted.container_statuses.clear();
  EXPECT_EQ(StatusColumn(Record("f", evicted)), "Evicted");
}

TEST(PodsCommandTest, ReadyAndRestartsColumns) {
  PodStatus s = RunningStatus();
  s.container_statuses.push_back(WaitingContainer("side", "CrashLoopBackOff"));
  s.container_statuses[1].restart_count = 3;
  s.container_statuses[1].last_state.terminated =
      ContainerStateTerminated{1, 0, "Error", "", 0, kNow - 120, ""};
  auto r = Record("a", s, 2);
  EXPECT_EQ(ReadyColumn(r), "1/2");
  EXPECT_EQ(RestartsColumn(r, kNow), "3 (2m ago)");
  // Containers without a status yet still count in the total.
  auto pending = Record("b", RunningStatus(), 3);
  EXPECT_EQ(ReadyColumn(pending), "1/3");
  EXPECT_EQ(RestartsColumn(pending, kNow), "0");
}

TEST(PodsCommandTest, TableHasKubectlColumns) {
  std::string table = FormatPodTable(
      {Record("web", RunningStatus()), Record("db-long-name", RunningStatus())}, kNow);
  EXPECT_EQ(table,
            "NAME           READY   STATUS    RESTARTS   AGE\n"
            "web            1/1     Running   0          2m30s\n"
            "db-long-name   1/1     Running   0          2m30s\n");
  // -o wide: the pod's IP, the node and the QoS class too, <none> for what is not known.
  PodStatus pending = RunningStatus();
  pending.pod_ip.clear();
  pending.qos_class.clear();
  PodStatus running = RunningStatus();
  running.pod_ip = "198.18.3.7";
  running.qos_class = "BestEffort";
  EXPECT_EQ(FormatPodTable({Record("web", running), Record("db", pending)}, kNow, true, "node1"),
            "NAME   READY   STATUS    RESTARTS   AGE     IP           NODE    QOS\n"
            "web    1/1     Running   0          2m30s   198.18.3.7   node1   BestEffort\n"
            "db     1/1     Running   0          2m30s   <none>       node1   <none>\n");
  EXPECT_EQ(FormatPodTable({Record("db", pending)}, kNow, true),
            "NAME   READY   STATUS    RESTARTS   AGE     IP       NODE     QOS\n"
            "db     1/1     Running   0          2m30s   <none>   <none>   <none>\n");
}

TEST(PodsCommandTest, DetailsShowConditionsAndContainers) {
  PodStatus s = RunningStatus("all good");
  s.conditions[0].last_transition_time_unix_s = 1'700'000'000;
  s.conditions[0].reason = "Fine";
  std::string d = FormatPodDetails(Record("web", s), kNow);
  EXPECT_NE(d.find("Name:             web\n"), std::string::npos) << d;
  EXPECT_NE(d.find("Status Version:   3"), std::string::npos) << d;
  EXPECT_NE(d.find("Message:          all good"), std::string::npos) << d;
  EXPECT_NE(
      d.find("Conditions:\n  Type              Status   LastTransitionTime     Reason   Message\n"
             "  Ready             True     2023-11-14T22:13:20Z   Fine\n"),
      std::string::npos)
      << d;
  EXPECT_NE(d.find("  app:\n    Container ID:   containerd://app-1"), std::string::npos) << d;
  EXPECT_NE(d.find("    State:          Running\n"), std::string::npos) << d;
}

TEST(PodsCommandTest, JsonIsAV1PodList) {
  PodStatus s = RunningStatus();
  s.start_time_unix_s = 1'700'000'000;
  auto j = status::PodListToJson({Record("web", s)});
  EXPECT_EQ(j["kind"], "PodList");
  EXPECT_EQ(j["apiVersion"], "v1");
  ASSERT_EQ(j["items"].size(), 1u);
  const auto& pod = j["items"][0];
  EXPECT_EQ(pod["kind"], "Pod");
  EXPECT_EQ(pod["metadata"]["name"], "web");
  EXPECT_EQ(pod["metadata"]["namespace"], "default");
  EXPECT_EQ(pod["metadata"]["uid"], "uid-web");
  EXPECT_EQ(pod["metadata"]["resourceVersion"], "3");
  EXPECT_EQ(pod["status"]["phase"], "Running");
  EXPECT_EQ(pod["status"]["startTime"], "2023-11-14T22:13:20Z");
  EXPECT_EQ(pod["status"]["podIPs"][0]["ip"], "127.0.0.1");
  EXPECT_EQ(pod["status"]["conditions"][0]["type"], "Ready");
  EXPECT_EQ(pod["status"]["conditions"][0]["status"], "True");
  const auto& c = pod["status"]["containerStatuses"][0];
  EXPECT_EQ(c["name"], "app");
  EXPECT_TRUE(c["ready"].get<bool>());
  EXPECT_EQ(c["state"]["running"]["startedAt"], "2023-11-14T22:15:00Z");
  EXPECT_TRUE(c["lastState"].is_object());
}

}  // namespace
}  // namespace nodelet::ctl
