// Pod statuses as nodelet keeps them: plain C++ values of Kubernetes' core/v1 PodStatus (and the
// pod identity stored with it), comparable with ==, independent of the wire format. statusd,
// its clients (podworkerd, nodeletctl, the benchmark) and the sinks share these types;
// status_codec.h converts them to and from status.fbs, pod_status_json.h to v1 JSON.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lib/common/status.h"

namespace nodelet::status {

// v1 PodPhase. Values match status.fbs.
enum class PodPhase : uint8_t {
  kPending = 0,
  kRunning = 1,
  kSucceeded = 2,
  kFailed = 3,
  kUnknown = 4
};
// v1 ConditionStatus.
enum class ConditionStatus : uint8_t { kUnknown = 0, kTrue = 1, kFalse = 2 };
// v1 RestartPolicy.
enum class RestartPolicy : uint8_t { kAlways = 0, kOnFailure = 1, kNever = 2 };

inline constexpr uint8_t kMaxPodPhase = 4;
inline constexpr uint8_t kMaxConditionStatus = 2;
inline constexpr uint8_t kMaxRestartPolicy = 2;

// "Pending", "Running"...; "Phase(7)" for a value out of range.
std::string PhaseName(PodPhase phase);
std::string ConditionStatusName(ConditionStatus status);
std::string RestartPolicyName(RestartPolicy policy);
bool IsTerminal(PodPhase phase);

// The reason and exit code TerminatePod gives a container whose end was not observed.
inline constexpr const char* kContainerStatusUnknown = "ContainerStatusUnknown";
inline constexpr int32_t kTerminatedUnknownExitCode = 137;

struct PodCondition {
  std::string type;
  ConditionStatus status = ConditionStatus::kUnknown;
  int64_t last_probe_time_unix_s = 0;
  int64_t last_transition_time_unix_s = 0;
  std::string reason;
  std::string message;
  bool operator==(const PodCondition&) const = default;
};

struct ContainerStateWaiting {
  std::string reason;
  std::string message;
  bool operator==(const ContainerStateWaiting&) const = default;
};

struct ContainerStateRunning {
  int64_t started_at_unix_s = 0;
  bool operator==(const ContainerStateRunning&) const = default;
};

struct ContainerStateTerminated {
  int32_t exit_code = 0;
  int32_t signal = 0;
  std::string reason;
  std::string message;
  int64_t started_at_unix_s = 0;
  int64_t finished_at_unix_s = 0;
  std::string container_id;
  bool operator==(const ContainerStateTerminated&) const = default;
};

// At most one member is set; none means "waiting" without a reason, as in v1.
struct ContainerState {
  std::optional<ContainerStateWaiting> waiting;
  std::optional<ContainerStateRunning> running;
  std::optional<ContainerStateTerminated> terminated;
  bool empty() const { return !waiting && !running && !terminated; }
  bool operator==(const ContainerState&) const = default;
};

struct ContainerStatus {
  std::string name;
  ContainerState state;
  ContainerState last_state;
  bool ready = false;
  int32_t restart_count = 0;
  std::string image;
  std::string image_id;
  std::string container_id;
  bool started = false;
  bool operator==(const ContainerStatus&) const = default;
};

struct PodStatus {
  PodPhase phase = PodPhase::kPending;
  std::vector<PodCondition> conditions;
  std::string message;
  std::string reason;
  std::string host_ip;
  std::vector<std::string> host_ips;
  std::string pod_ip;
  std::vector<std::string> pod_ips;
  int64_t start_time_unix_s = 0;
  std::vector<ContainerStatus> init_container_statuses;
  std::vector<ContainerStatus> container_statuses;
  std::string qos_class;
  bool operator==(const PodStatus&) const = default;

  const PodCondition* FindCondition(const std::string& type) const;
};

struct PodIdentity {
  std::string namespace_;
  std::string name;
  std::string uid;
  RestartPolicy restart_policy = RestartPolicy::kAlways;
  int64_t creation_time_unix_s = 0;
  uint32_t container_count = 0;
  uint32_t init_container_count = 0;
  bool operator==(const PodIdentity&) const = default;

  // "namespace/name (uid 'uid')", for messages.
  std::string Describe() const;
};

// One pod's stored status and its version.
// A Kubernetes-style event about a pod (status.fbs EventRecord).
struct PodEvent {
  std::string pod_uid;
  std::string namespace_;
  std::string pod_name;
  std::string type = "Normal";  // Normal or Warning
  std::string reason;           // Created, Started, Killing, BackOff, Unhealthy, ...
  std::string message;
  std::string source;
  uint32_t count = 1;
  int64_t first_unix_s = 0;
  int64_t last_unix_s = 0;
  bool operator==(const PodEvent&) const = default;
};

struct PodStatusRecord {
  PodIdentity pod;
  PodStatus status;
  uint64_t version = 0;
  int64_t updated_at_unix_s = 0;
  bool operator==(const PodStatusRecord&) const = default;
};

// The node's status as statusd keeps it: a v1 Node object (JSON) and its version, which grows
// by one with every change of content and survives restarts of statusd.
struct NodeStatusRecord {
  std::string node_json;
  uint64_t version = 0;
  int64_t updated_at_unix_s = 0;
  bool operator==(const NodeStatusRecord&) const = default;
};

// Checks what a writer sent before anything is stored: identity fields present, enums in
// range, container and condition names non-empty and unique, at most one container state.
// InvalidArgument naming the field and the reason.
Status ValidatePodStatus(const PodIdentity& pod, const PodStatus& status);

}  // namespace nodelet::status
