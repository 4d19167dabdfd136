#include "lib/cri/containerd_events.h"

#include <gtest/gtest.h>

#include "lib/cri/containerd_events.pb.h"

namespace nodelet::cri {
namespace {

namespace events = ::containerd::services::events::v1;

std::string Exit(const std::string& container, const std::string& process) {
  events::TaskExitTarget e;
  e.set_container_id(container);
  e.set_id(process);
  return e.SerializeAsString();
}

std::string Delete(const std::string& container, const std::string& process) {
  events::TaskDeleteTarget e;
  e.set_container_id(container);
  e.set_id(process);
  return e.SerializeAsString();
}

TEST(ContainerdEventsTest, ATasksExitOrDeleteNamesItsContainerAndAnExecsNothing) {
  EXPECT_EQ(EventContainerId("/tasks/exit", Exit("c1", "c1")), "c1");
  EXPECT_EQ(EventContainerId("/tasks/exit", Exit("c1", "probe-7")), std::nullopt);
  EXPECT_EQ(EventContainerId("/tasks/delete", Delete("c1", "")), "c1");
  EXPECT_EQ(EventContainerId("/tasks/delete", Delete("c1", "c1")), "c1");
  EXPECT_EQ(EventContainerId("/tasks/delete", Delete("c1", "exec-3")), std::nullopt);
  events::EventTarget start;
  start.set_container_id("c2");
  EXPECT_EQ(EventContainerId("/tasks/start", start.SerializeAsString()), "c2");
  EXPECT_EQ(EventContainerId("/tasks/start", "\xff\xff not protobuf"), std::nullopt);
}

TEST(ContainerdEventsTest, OnlyTopicsThatCanChangeWhatCriListsAreKept) {
  EXPECT_TRUE(TopicChangesRuntime("/tasks/exit"));
  EXPECT_TRUE(TopicChangesRuntime("/containers/delete"));
  EXPECT_FALSE(TopicChangesRuntime("/tasks/exec-added"));
  EXPECT_FALSE(TopicChangesRuntime("/tasks/exec-started"));
  EXPECT_FALSE(TopicChangesRuntime("/images/create"));
  EXPECT_FALSE(TopicChangesRuntime("/snapshot/prepare"));
}

}  // namespace
}  // namespace nodelet::cri
