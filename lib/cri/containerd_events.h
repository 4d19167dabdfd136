// containerd's own events (Events/Subscribe, not CRI), as RuntimeEventWatcher reads them when the
// runtime has no CRI GetContainerEvents (lib/cri/runtime_events.h): which topics can change what
// CRI lists (topics under /tasks/, /containers/ and /sandboxes/: a task created, started,
// exited, OOM-killed or deleted, a container created or deleted; not an exec's process
// starting, exiting or deleted), and the id of the container (or sandbox: a CRI sandbox is a
// containerd container) an event's payload names.
#pragma once

#include <optional>
#include <string>

namespace nodelet::cri {

// Whether an event of `topic` can change what CRI lists.
bool TopicChangesRuntime(const std::string& topic);
// The container (or sandbox) id an event's payload names ("" when it names none); nothing for
// a payload that is not protobuf, or an exec's exit or delete (/tasks/exit or /tasks/delete of
// a process that is not the container's own).
std::optional<std::string> EventContainerId(const std::string& topic, const std::string& payload);

}  // namespace nodelet::cri
