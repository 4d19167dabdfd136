// Sandbox decisions: whether a pod keeps its sandbox or gets a new one, and with which attempt
// (the kubelet's PodSandboxChanged inside computePodActions), as pure functions of the pod and
// what is known of its sandboxes. No I/O: PodSyncer calls them, unit tests drive them directly.
//
// The rules, for every state CRI can report after a runtime restart:
// - no sandbox at all: create one, attempt 0;
// - more than one READY sandbox, the newest one not READY, a network namespace that differs from
//   the pod's (hostNetwork changed), or a pod-network sandbox without an IP (its network
//   namespace is gone): kill the pod's containers, stop its sandboxes, create a new one;
// - else keep the newest sandbox.
// A new sandbox's attempt is one above the highest attempt of any sandbox of the pod seen, so
// its name (NAME_NAMESPACE_UID_ATTEMPT) never collides with one the runtime still holds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lib/pod/pod.h"
#include "pleg_generated.h"

namespace nodelet::podworkerd {

// One sandbox as CRI or plegd reports it.
struct SandboxView {
  std::string id;
  bool ready = false;
  uint32_t attempt = 0;
  int64_t created_at_ns = 0;
  std::string ip;
  bool host_network = false;
};

struct SandboxDecision {
  // True: a new sandbox must be made (after killing what runs and stopping `stop`).
  bool create = false;
  // The attempt of the new sandbox (when create) or of the kept one.
  uint32_t attempt = 0;
  // The sandbox to keep (when !create).
  std::string keep_id;
  // READY sandboxes to stop before the new one is made.
  std::vector<std::string> stop;
  // Why a new sandbox is made ("" for the first one): for the SandboxChanged event and the log.
  std::string reason;
};

std::vector<SandboxView> SandboxViews(const ipc::pleg::PodRecordT* record);

// The decision from the pod's sandboxes (any order).
SandboxDecision DecideSandbox(const pod::Pod& pod, const std::vector<SandboxView>& sandboxes);

// The highest attempt among `sandboxes`, or nullopt when there are none.
std::optional<uint32_t> HighestAttempt(const std::vector<SandboxView>& sandboxes);

// The id of the sandbox that holds the name in containerd's "failed to reserve sandbox name
// ...: name ... is reserved for \"ID\"" error, or "" when `message` is not that error.
std::string SandboxNameHolder(const std::string& message);

}  // namespace nodelet::podworkerd
