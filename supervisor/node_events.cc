#include "supervisor/node_events.h"

namespace nodelet::supervisor {

status::PodEvent MakeNodeEvent(const std::string& node, const std::string& type,
                               const std::string& reason, const std::string& message,
                               int64_t now_unix_s) {
  status::PodEvent e;
  e.pod_uid = "node";
  e.pod_name = node;
  e.type = type;
  e.reason = reason;
  e.message = message;
  e.source = "nodelet";
  e.first_unix_s = e.last_unix_s = now_unix_s;
  return e;
}

status::PodEvent NodeConditionEvent(const std::string& node, const std::string& type, bool status,
                                    int64_t now_unix_s) {
  std::string reason;
  if (type == "Ready") {
    reason = status ? "NodeReady" : "NodeNotReady";
  } else if (type == "MemoryPressure") {
    reason = status ? "NodeHasInsufficientMemory" : "NodeHasSufficientMemory";
  } else if (type == "DiskPressure") {
    reason = status ? "NodeHasDiskPressure" : "NodeHasNoDiskPressure";
  } else if (type == "PIDPressure") {
    reason = status ? "NodeHasInsufficientPID" : "NodeHasSufficientPID";
  } else {
    reason = (status ? "" : "No") + type;
  }
  return MakeNodeEvent(node, "Normal", reason, "Node " + node + " status is now: " + reason,
                       now_unix_s);
}

std::function<void(const std::string& type, bool status)> NodeConditionEventsTo(
    EventLoop& loop, const Clock& clock, std::string node,
    std::function<void(status::PodEvent)> record) {
  return [&loop, &clock, node = std::move(node), record = std::move(record)](
             const std::string& type, bool status) {
    loop.Post([&clock, node, record, type, status] {
      record(NodeConditionEvent(node, type, status, clock.WallSeconds()));
    });
  };
}

std::vector<status::PodEvent> ServiceEventWatcher::Observe(const std::vector<ServiceInfo>& services,
                                                           const std::string& node,
                                                           int64_t now_unix_s) {
  std::vector<status::PodEvent> out;
  for (const auto& s : services) {
    auto [it, first] = last_.try_emplace(s.name, Seen{s.state, s.restarts, false});
    Seen& seen = it->second;
    if (first) {
      seen.fatal = s.state == ProcessState::Fatal;
      continue;
    }
    const std::string unit = "nodelet-" + s.name;
    if (s.state == ProcessState::Fatal) {
      // Its last exit made it FATAL: that, not a restart, is what happened.
      if (!seen.fatal) {
        out.push_back(MakeNodeEvent(
            node, "Warning", "ServiceFatal",
            unit + " is FATAL: " + s.description + " (nodeletctl start " + s.name + " tries again)",
            now_unix_s));
      }
      seen.fatal = true;
    } else if (s.restarts > seen.restarts) {
      out.push_back(MakeNodeEvent(node, "Warning", "ServiceRestarted",
                                  unit + " ended and was restarted (automatic restart " +
                                      std::to_string(s.restarts) +
                                      (s.description.empty() ? ")" : "): " + s.description),
                                  now_unix_s));
    }
    if (seen.fatal && s.state == ProcessState::Running) {
      out.push_back(MakeNodeEvent(node, "Normal", "ServiceRecovered",
                                  unit + " is RUNNING again after FATAL", now_unix_s));
      seen.fatal = false;
    }
    seen.state = s.state;
    seen.restarts = s.restarts;
  }
  return out;
}

}  // namespace nodelet::supervisor
