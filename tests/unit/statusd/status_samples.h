// Sample pods and statuses for statusd's unit tests.
#pragma once

#include <string>

#include "lib/status/pod_status.h"

namespace nodelet::statusd::testing {

using namespace nodelet::status;  // NOLINT: test helpers

inline PodIdentity SamplePod(const std::string& uid, RestartPolicy policy = RestartPolicy::kAlways,
                             const std::string& name = "") {
  PodIdentity p;
  p.namespace_ = "default";
  p.name = name.empty() ? "pod-" + uid : name;
  p.uid = uid;
  p.restart_policy = policy;
  p.creation_time_unix_s = 1'700'000'000;
  p.container_count = 1;
  return p;
}

inline ContainerStatus RunningContainer(const std::string& name, int64_t started = 1'700'000'100) {
  ContainerStatus c;
  c.name = name;
  c.state.running = ContainerStateRunning{started};
  c.ready = true;
  c.started = true;
  c.image = "busybox:latest";
  c.image_id = "sha256:abc";
  c.container_id = "containerd://" + name + "-1";
  return c;
}

inline ContainerStatus TerminatedContainer(const std::string& name, int32_t exit_code) {
  ContainerStatus c = RunningContainer(name);
  c.state = ContainerState{};
  ContainerStateTerminated t;
  t.exit_code = exit_code;
  t.reason = exit_code == 0 ? "Completed" : "Error";
  t.started_at_unix_s = 1'700'000'100;
  t.finished_at_unix_s = 1'700'000'200;
  t.container_id = c.container_id;
  c.state.terminated = t;
  c.ready = false;
  c.started = false;
  return c;
}

inline ContainerStatus WaitingContainer(const std::string& name, const std::string& reason) {
  ContainerStatus c;
  c.name = name;
  c.state.waiting = ContainerStateWaiting{reason, ""};
  c.image = "busybox:latest";
  return c;
}

inline PodStatus RunningStatus(const std::string& message = "") {
  PodStatus s;
  s.phase = PodPhase::kRunning;
  s.message = message;
  s.host_ip = "127.0.0.1";
  s.pod_ip = "127.0.0.1";
  s.pod_ips = {"127.0.0.1"};
  s.conditions = {{"Ready", ConditionStatus::kTrue, 0, 0, "", ""},
                  {"ContainersReady", ConditionStatus::kTrue, 0, 0, "", ""}};
  s.container_statuses = {RunningContainer("app")};
  return s;
}

}  // namespace nodelet::statusd::testing
