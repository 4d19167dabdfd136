// PlegRuntime: the narrow view of the container runtime that plegd needs (list everything,
// inspect one sandbox or container), so the relist logic is tested against a fake and runs
// against CRI through an adapter (cri_pleg_runtime.h). Calls may block up to their own
// deadline; plegd never calls them from its main loop.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lib/common/status.h"
#include "pleg_generated.h"

namespace nodelet::plegd {

using ipc::pleg::ContainerState;
using ipc::pleg::SandboxState;

// Label that nodelet puts on every sandbox and container it creates; a pod without it is
// foreign: reported, never killed.
inline constexpr const char* kManagedLabel = "nodelet.io/managed";
// Kubernetes' own pod labels (CRI metadata carries name, namespace, uid too).
inline constexpr const char* kPodUidLabel = "io.kubernetes.pod.uid";

struct SandboxListing {
  std::string id;
  std::string pod_uid;
  std::string pod_name;
  std::string pod_namespace;
  uint32_t attempt = 0;
  SandboxState state = SandboxState::NotReady;
  int64_t created_at_ns = 0;
  std::map<std::string, std::string> labels;
};

struct ContainerListing {
  std::string id;
  std::string sandbox_id;
  std::string name;
  uint32_t attempt = 0;
  ContainerState state = ContainerState::Unknown;
  int64_t created_at_ns = 0;
};

// One relist's raw answer: ListPodSandbox + ListContainers.
struct RuntimeListing {
  std::vector<SandboxListing> sandboxes;
  std::vector<ContainerListing> containers;
};

// What a runtime event says of the container (or sandbox) it names, in the order of a
// container's life (a later one implies the earlier ones): something (kAny), its start, its exit
// (its task's exit or delete), its removal.
enum class RuntimeChange { kAny = 0, kStarted = 1, kExited = 2, kRemoved = 3 };

struct PodRef {
  std::string uid;
  std::string sandbox_id;
};

class PlegRuntime {
 public:
  virtual ~PlegRuntime() = default;
  virtual Result<RuntimeListing> List() = 0;
  // One pod alone (its sandboxes, grouped as List() groups them, and their containers): a
  // relist of that pod. `known_sandboxes`: the ids of the pod's sandboxes in the last view, which
  // a runtime that finds the pod's sandboxes by a label must look up as well (one made by hand
  // may lack the label).
  virtual Result<RuntimeListing> ListPod(const std::string& uid,
                                         const std::vector<std::string>& known_sandboxes) = 0;
  // The pod a container or sandbox id belongs to (its uid, and the sandbox's id): NOT_FOUND when
  // the runtime lists no such id, FAILED_PRECONDITION when the pod is not nodelet's (foreign).
  virtual Result<PodRef> PodOf(const std::string& runtime_id) = 0;
  // PodSandboxStatus.
  virtual Result<ipc::pleg::SandboxRecordT> InspectSandbox(const std::string& id) = 0;
  // ContainerStatus.
  virtual Result<ipc::pleg::ContainerRecordT> InspectContainer(const std::string& id) = 0;
  // The runtime's calls made so far, by call name (CRI's: ListPodSandbox, ContainerStatus...),
  // exported as counters `runtime_operations:<call>` (the kubelet's
  // kubelet_runtime_operations_total). Empty when the runtime does not count them.
  virtual std::map<std::string, uint64_t> CallCounts() const { return {}; }
};

}  // namespace nodelet::plegd
