// The node events the supervisor records (pod uid "node", in `nodeletctl events` and statusd's
// store; docs/observability.md, "Node events"): a node condition's change, as the kubelet's
// node status setters record them (NodeReady, NodeNotReady, NodeHasInsufficientMemory, ...),
// and a service that restarted or went FATAL (nodelet's own: the kubelet has no services).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "lib/common/clock.h"
#include "lib/service/event_loop.h"
#include "lib/status/pod_status.h"
#include "supervisor/service_control.h"

namespace nodelet::supervisor {

// A node event from "nodelet" about `node` at `now_unix_s`.
status::PodEvent MakeNodeEvent(const std::string& node, const std::string& type,
                               const std::string& reason, const std::string& message,
                               int64_t now_unix_s);

// The kubelet's event for condition `type` (Ready, MemoryPressure, DiskPressure, PIDPressure)
// becoming `status`: Normal, reason NodeReady/NodeNotReady, NodeHasInsufficientMemory/
// NodeHasSufficientMemory, NodeHasDiskPressure/NodeHasNoDiskPressure,
// NodeHasInsufficientPID/NodeHasSufficientPID, message "Node NODE status is now: REASON".
// Another condition gets reason TYPE or NoTYPE.
status::PodEvent NodeConditionEvent(const std::string& node, const std::string& type, bool status,
                                    int64_t now_unix_s);

// NodeStatusOptions::on_transition for the node status: posts each change to `loop`,
// where `record` gets its NodeConditionEvent (stamped with `clock`'s wall time).
std::function<void(const std::string& type, bool status)> NodeConditionEventsTo(
    EventLoop& loop, const Clock& clock, std::string node,
    std::function<void(status::PodEvent)> record);

// Watches the services' states, one observation after another, for what an operator is
// paged for: a Warning ServiceRestarted when a service's automatic restarts grew (with what
// ended it), a Warning ServiceFatal when it went FATAL instead, a Normal ServiceRecovered when a
// FATAL service is RUNNING again (through whatever states between). The first observation of a
// service records nothing.
class ServiceEventWatcher {
 public:
  std::vector<status::PodEvent> Observe(const std::vector<ServiceInfo>& services,
                                        const std::string& node, int64_t now_unix_s);

 private:
  struct Seen {
    ProcessState state;
    uint32_t restarts;
    bool fatal;  // FATAL since its last ServiceFatal, until RUNNING again
  };
  std::map<std::string, Seen> last_;
};

}  // namespace nodelet::supervisor
