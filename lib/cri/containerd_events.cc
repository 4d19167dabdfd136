#include "lib/cri/containerd_events.h"

#include "lib/cri/containerd_events.pb.h"

namespace nodelet::cri {

namespace events = ::containerd::services::events::v1;

bool TopicChangesRuntime(const std::string& topic) {
  // An exec's process starting does not change what CRI lists.
  if (topic == "/tasks/exec-added" || topic == "/tasks/exec-started") return false;
  for (const char* prefix : {"/tasks/", "/containers/", "/sandboxes/"}) {
    if (topic.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

std::optional<std::string> EventContainerId(const std::string& topic, const std::string& payload) {
  if (topic == "/tasks/exit") {
    events::TaskExitTarget exit;
    if (!exit.ParseFromString(payload)) return std::nullopt;
    // An exec's process exited (a probe, `nodeletctl exec`): the container did not.
    if (!exit.id().empty() && exit.id() != exit.container_id()) return std::nullopt;
    return exit.container_id();
  }
  if (topic == "/tasks/delete") {
    events::TaskDeleteTarget deleted;
    if (!deleted.ParseFromString(payload)) return std::nullopt;
    // An exec's process deleted: the container's own task is still there.
    if (!deleted.id().empty() && deleted.id() != deleted.container_id()) return std::nullopt;
    return deleted.container_id();
  }
  events::EventTarget target;
  if (!target.ParseFromString(payload)) return std::nullopt;
  return target.container_id();
}

}  // namespace nodelet::cri
