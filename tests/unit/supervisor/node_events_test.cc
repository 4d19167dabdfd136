// The node events the supervisor records: the kubelet's reasons for a condition's change, and a
// service's restart, FATAL and recovery, each once.
#include "supervisor/node_events.h"

#include <gtest/gtest.h>

namespace nodelet::supervisor {
namespace {

ServiceInfo Service(const std::string& name, ProcessState state, uint32_t restarts,
                    const std::string& description = "") {
  ServiceInfo s;
  s.name = name;
  s.state = state;
  s.restarts = restarts;
  s.description = description;
  return s;
}

TEST(NodeEventsTest, ConditionsHaveTheKubeletsReasons) {
  const std::vector<std::tuple<std::string, bool, std::string>> cases = {
      {"Ready", true, "NodeReady"},
      {"Ready", false, "NodeNotReady"},
      {"MemoryPressure", true, "NodeHasInsufficientMemory"},
      {"MemoryPressure", false, "NodeHasSufficientMemory"},
      {"DiskPressure", true, "NodeHasDiskPressure"},
      {"DiskPressure", false, "NodeHasNoDiskPressure"},
      {"PIDPressure", true, "NodeHasInsufficientPID"},
      {"PIDPressure", false, "NodeHasSufficientPID"},
  };
  for (const auto& [type, status, reason] : cases) {
    const auto e = NodeConditionEvent("node1", type, status, 1000);
    EXPECT_EQ(e.reason, reason) << type << " " << status;
    EXPECT_EQ(e.type, "Normal");
    EXPECT_EQ(e.pod_uid, "node");
    EXPECT_EQ(e.pod_name, "node1");
    EXPECT_EQ(e.message, "Node node1 status is now: " + reason);
    EXPECT_EQ(e.first_unix_s, 1000);
  }
}

TEST(NodeEventsTest, ARestartAFatalAndARecoveryAreEachOneEvent) {
  ServiceEventWatcher w;
  const auto running = [](uint32_t restarts) {
    return std::vector<ServiceInfo>{Service("plegd", ProcessState::Running, restarts),
                                    Service("volumed", ProcessState::Running, 0)};
  };
  EXPECT_TRUE(w.Observe(running(0), "n", 1).empty()) << "the first look records nothing";
  EXPECT_TRUE(w.Observe(running(0), "n", 2).empty());

  auto restarted = w.Observe({Service("plegd", ProcessState::Backoff, 1, "exit 1, restart in 0.4s"),
                              Service("volumed", ProcessState::Running, 0)},
                             "n", 3);
  ASSERT_EQ(restarted.size(), 1u);
  EXPECT_EQ(restarted[0].type, "Warning");
  EXPECT_EQ(restarted[0].reason, "ServiceRestarted");
  EXPECT_EQ(restarted[0].message,
            "nodelet-plegd ended and was restarted (automatic restart 1): exit 1, restart in 0.4s");
  EXPECT_TRUE(w.Observe(running(1), "n", 4).empty()) << "RUNNING again is not another event";

  // The exit that made it FATAL counts as a restart in the supervisor, not here.
  auto fatal = w.Observe({Service("plegd", ProcessState::Running, 1),
                          Service("volumed", ProcessState::Fatal, 1, "too many restarts")},
                         "n", 5);
  ASSERT_EQ(fatal.size(), 1u);
  EXPECT_EQ(fatal[0].reason, "ServiceFatal");
  EXPECT_EQ(fatal[0].message,
            "nodelet-volumed is FATAL: too many restarts (nodeletctl start volumed tries again)");
  EXPECT_TRUE(w.Observe({Service("plegd", ProcessState::Running, 1),
                         Service("volumed", ProcessState::Fatal, 1, "too many restarts")},
                        "n", 6)
                  .empty())
      << "still FATAL: nothing new";
  EXPECT_TRUE(w.Observe({Service("plegd", ProcessState::Running, 1),
                         Service("volumed", ProcessState::Starting, 1)},
                        "n", 7)
                  .empty());
  auto recovered = w.Observe(
      {Service("plegd", ProcessState::Running, 1), Service("volumed", ProcessState::Running, 1)},
      "n", 8);
  ASSERT_EQ(recovered.size(), 1u);
  EXPECT_EQ(recovered[0].reason, "ServiceRecovered");
  EXPECT_EQ(recovered[0].type, "Normal");
}

}  // namespace
}  // namespace nodelet::supervisor
