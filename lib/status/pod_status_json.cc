#include "lib/status/pod_status_json.h"

namespace nodelet::status {
namespace {

using nlohmann::json;

void PutTime(json& j, const char* key, int64_t unix_s) {
  if (unix_s != 0) j[key] = FormatRfc3339(unix_s);
}

void PutString(json& j, const char* key, const std::string& value) {
  if (!value.empty()) j[key] = value;
}

json StateToJson(const ContainerState& s) {
  json j = json::object();
  if (s.waiting) {
    json w = json::object();
    PutString(w, "reason", s.waiting->reason);
    PutString(w, "message", s.waiting->message);
    j["waiting"] = w;
  }
  if (s.running) {
    json r = json::object();
    PutTime(r, "startedAt", s.running->started_at_unix_s);
    j["running"] = r;
  }
  if (s.terminated) {
    const auto& t = *s.terminated;
    json tj = {{"exitCode", t.exit_code}};
    if (t.signal != 0) tj["signal"] = t.signal;
    PutString(tj, "reason", t.reason);
    PutString(tj, "message", t.message);
    // v1 always serializes these two (null when unset).
    tj["startedAt"] = t.started_at_unix_s != 0 ? json(FormatRfc3339(t.started_at_unix_s)) : json();
    tj["finishedAt"] =
        t.finished_at_unix_s != 0 ? json(FormatRfc3339(t.finished_at_unix_s)) : json();
    PutString(tj, "containerID", t.container_id);
    j["terminated"] = tj;
  }
  return j;
}

json ContainersToJson(const std::vector<ContainerStatus>& containers) {
  json out = json::array();
  for (const auto& c : containers) {
    json j = {{"name", c.name},
              {"state", c.state.empty() ? json{{"waiting", json::object()}} : StateToJson(c.state)},
              {"lastState", StateToJson(c.last_state)},
              {"ready", c.ready},
              {"restartCount", c.restart_count},
              {"image", c.image},
              {"imageID", c.image_id},
              {"started", c.started}};
    PutString(j, "containerID", c.container_id);
    out.push_back(std::move(j));
  }
  return out;
}

json IpsToJson(const std::vector<std::string>& ips) {
  json out = json::array();
  for (const auto& ip : ips) out.push_back({{"ip", ip}});
  return out;
}

}  // namespace

json PodStatusToJson(const PodStatus& s) {
  json j = {{"phase", PhaseName(s.phase)}};
  if (!s.conditions.empty()) {
    json conds = json::array();
    for (const auto& c : s.conditions) {
      json cj = {{"type", c.type}, {"status", ConditionStatusName(c.status)}};
      cj["lastProbeTime"] =
          c.last_probe_time_unix_s != 0 ? json(FormatRfc3339(c.last_probe_time_unix_s)) : json();
      PutTime(cj, "lastTransitionTime", c.last_transition_time_unix_s);
      PutString(cj, "reason", c.reason);
      PutString(cj, "message", c.message);
      conds.push_back(std::move(cj));
    }
    j["conditions"] = conds;
  }
  PutString(j, "message", s.message);
  PutString(j, "reason", s.reason);
  PutString(j, "hostIP", s.host_ip);
  if (!s.host_ips.empty()) j["hostIPs"] = IpsToJson(s.host_ips);
  PutString(j, "podIP", s.pod_ip);
  if (!s.pod_ips.empty()) j["podIPs"] = IpsToJson(s.pod_ips);
  PutTime(j, "startTime", s.start_time_unix_s);
  if (!s.init_container_statuses.empty()) {
    j["initContainerStatuses"] = ContainersToJson(s.init_container_statuses);
  }
  if (!s.container_statuses.empty()) {
    j["containerStatuses"] = ContainersToJson(s.container_statuses);
  }
  PutString(j, "qosClass", s.qos_class);
  return j;
}

json PodToJson(const PodStatusRecord& r) {
  json meta = {{"name", r.pod.name},
               {"namespace", r.pod.namespace_},
               {"uid", r.pod.uid},
               {"resourceVersion", std::to_string(r.version)}};
  PutTime(meta, "creationTimestamp", r.pod.creation_time_unix_s);
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", meta},
          {"spec", {{"restartPolicy", RestartPolicyName(r.pod.restart_policy)}}},
          {"status", PodStatusToJson(r.status)}};
}

json PodListToJson(const std::vector<PodStatusRecord>& records) {
  json items = json::array();
  for (const auto& r : records) items.push_back(PodToJson(r));
  return {{"apiVersion", "v1"},
          {"kind", "PodList"},
          {"metadata", {{"resourceVersion", ""}}},
          {"items", items}};
}

}  // namespace nodelet::status
