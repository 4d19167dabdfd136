// The pods commands' output formats: kubectl's columns and human durations, the pod table
// (plain and wide), one pod in detail (`pod NAME`), and the events as a table or a v1 EventList.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ctl/pods_command.h"
#include "lib/common/rfc3339.h"
#include "lib/status/pod_status_json.h"

namespace nodelet::ctl {
namespace {

using status::ContainerState;
using status::ContainerStatus;
using status::PodStatusRecord;

std::string Ago(int64_t then, int64_t now) {
  if (then == 0) return "<unknown>";
  return HumanDuration(now - then);
}

std::string Time(int64_t unix_s) { return unix_s == 0 ? "<none>" : FormatRfc3339(unix_s); }

// The latest end of a previous run, over all containers (kubectl's lastRestartDate).
int64_t LastRestart(const std::vector<ContainerStatus>& containers, int64_t current) {
  for (const auto& c : containers) {
    if (c.last_state.terminated)
      current = std::max(current, c.last_state.terminated->finished_at_unix_s);
  }
  return current;
}

void DescribeState(std::ostringstream& out, const char* label, const ContainerState& s,
                   const std::string& indent) {
  out << indent << label;
  if (s.running) {
    out << "Running\n"
        << indent << "  Started:      " << Time(s.running->started_at_unix_s) << "\n";
  } else if (s.terminated) {
    const auto& t = *s.terminated;
    out << "Terminated\n";
    if (!t.reason.empty()) out << indent << "  Reason:       " << t.reason << "\n";
    if (!t.message.empty()) out << indent << "  Message:      " << t.message << "\n";
    out << indent << "  Exit Code:    " << t.exit_code << "\n";
    if (t.signal != 0) out << indent << "  Signal:       " << t.signal << "\n";
    out << indent << "  Started:      " << Time(t.started_at_unix_s) << "\n";
    out << indent << "  Finished:     " << Time(t.finished_at_unix_s) << "\n";
  } else if (s.waiting) {
    out << "Waiting\n";
    if (!s.waiting->reason.empty())
      out << indent << "  Reason:       " << s.waiting->reason << "\n";
    if (!s.waiting->message.empty())
      out << indent << "  Message:      " << s.waiting->message << "\n";
  } else {
    out << "<none>\n";
  }
}

void DescribeContainers(std::ostringstream& out, const char* title,
                        const std::vector<ContainerStatus>& containers) {
  if (containers.empty()) return;
  out << title << ":\n";
  for (const auto& c : containers) {
    out << "  " << c.name << ":\n";
    out << "    Container ID:   " << (c.container_id.empty() ? "<none>" : c.container_id) << "\n";
    out << "    Image:          " << c.image << "\n";
    out << "    Image ID:       " << c.image_id << "\n";
    DescribeState(out, "State:          ", c.state, "    ");
    if (!c.last_state.empty()) DescribeState(out, "Last State:     ", c.last_state, "    ");
    out << "    Ready:          " << (c.ready ? "True" : "False") << "\n";
    out << "    Started:        " << (c.started ? "true" : "false") << "\n";
    out << "    Restart Count:  " << c.restart_count << "\n";
  }
}

}  // namespace

std::string Columns(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::ostringstream out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 3, ' ');
    }
    out << line << "\n";
  }
  return out.str();
}

std::string HumanDuration(int64_t seconds) {
  if (seconds < -1) return "<invalid>";
  if (seconds < 0) return "0s";
  if (seconds < 120) return std::to_string(seconds) + "s";
  int64_t minutes = seconds / 60;
  if (minutes < 10) {
    int64_t s = seconds % 60;
    return std::to_string(minutes) + "m" + (s == 0 ? "" : std::to_string(s) + "s");
  }
  if (minutes < 180) return std::to_string(minutes) + "m";
  int64_t hours = seconds / 3600;
  if (hours < 8) {
    int64_t m = minutes % 60;
    return std::to_string(hours) + "h" + (m == 0 ? "" : std::to_string(m) + "m");
  }
  if (hours < 48) return std::to_string(hours) + "h";
  if (hours < 24 * 8) {
    int64_t h = hours % 24;
    return std::to_string(hours / 24) + "d" + (h == 0 ? "" : std::to_string(h) + "h");
  }
  if (hours < 24 * 365 * 2) return std::to_string(hours / 24) + "d";
  if (hours < 24 * 365 * 8) {
    int64_t d = (hours / 24) % 365;
    return std::to_string(hours / 24 / 365) + "y" + (d == 0 ? "" : std::to_string(d) + "d");
  }
  return std::to_string(hours / 24 / 365) + "y";
}

std::string ReadyColumn(const PodStatusRecord& r) {
  size_t ready = 0;
  for (const auto& c : r.status.container_statuses) {
    if (c.ready && c.state.running) ++ready;
  }
  size_t total = std::max<size_t>(r.pod.container_count, r.status.container_statuses.size());
  return std::to_string(ready) + "/" + std::to_string(total);
}

std::string StatusColumn(const PodStatusRecord& r) {
  const auto& s = r.status;
  std::string reason = s.reason.empty() ? status::PhaseName(s.phase) : s.reason;
  size_t init_total =
      std::max<size_t>(r.pod.init_container_count, s.init_container_statuses.size());
  bool initializing = false;
  for (size_t i = 0; i < s.init_container_statuses.size(); ++i) {
    const auto& c = s.init_container_statuses[i];
    if (c.state.terminated && c.state.terminated->exit_code == 0) continue;
    initializing = true;
    if (c.state.terminated) {
      const auto& t = *c.state.terminated;
      if (!t.reason.empty()) {
        reason = "Init:" + t.reason;
      } else if (t.signal != 0) {
        reason = "Init:Signal:" + std::to_string(t.signal);
      } else {
        reason = "Init:ExitCode:" + std::to_string(t.exit_code);
      }
    } else if (c.state.waiting && !c.state.waiting->reason.empty() &&
               c.state.waiting->reason != "PodInitializing") {
      reason = "Init:" + c.state.waiting->reason;
    } else {
      reason = "Init:" + std::to_string(i) + "/" + std::to_string(init_total);
    }
    break;
  }
  if (initializing) return reason;
  bool has_running = false;
  for (auto it = s.container_statuses.rbegin(); it != s.container_statuses.rend(); ++it) {
    const auto& st = it->state;
    if (st.waiting && !st.waiting->reason.empty()) {
      reason = st.waiting->reason;
    } else if (st.terminated && !st.terminated->reason.empty()) {
      reason = st.terminated->reason;
    } else if (st.terminated) {
      reason = st.terminated->signal != 0 ? "Signal:" + std::to_string(st.terminated->signal)
                                          : "ExitCode:" + std::to_string(st.terminated->exit_code);
    } else if (it->ready && st.running) {
      has_running = true;
    }
  }
  if (reason == "Completed" && has_running) {
    const auto* ready = s.FindCondition("Ready");
    reason = ready != nullptr && ready->status == status::ConditionStatus::kTrue ? "Running"
                                                                                 : "NotReady";
  }
  return reason;
}

std::string RestartsColumn(const PodStatusRecord& r, int64_t now_unix_s) {
  int64_t restarts = 0;
  for (const auto& c : r.status.container_statuses) restarts += c.restart_count;
  int64_t last = LastRestart(r.status.container_statuses, 0);
  std::string out = std::to_string(restarts);
  if (restarts > 0 && last != 0) out += " (" + HumanDuration(now_unix_s - last) + " ago)";
  return out;
}

std::string FormatPodTable(const std::vector<PodStatusRecord>& records, int64_t now_unix_s,
                           bool wide, const std::string& node, bool with_namespace) {
  std::vector<std::vector<std::string>> rows = {{"NAME", "READY", "STATUS", "RESTARTS", "AGE"}};
  if (with_namespace) rows[0].insert(rows[0].begin(), "NAMESPACE");
  if (wide) rows[0].insert(rows[0].end(), {"IP", "NODE", "QOS"});
  for (const auto& r : records) {
    rows.push_back({r.pod.name, ReadyColumn(r), StatusColumn(r), RestartsColumn(r, now_unix_s),
                    Ago(r.pod.creation_time_unix_s, now_unix_s)});
    if (with_namespace) rows.back().insert(rows.back().begin(), r.pod.namespace_);
    if (wide) {
      rows.back().insert(
          rows.back().end(),
          {r.status.pod_ip.empty() ? "<none>" : r.status.pod_ip, node.empty() ? "<none>" : node,
           r.status.qos_class.empty() ? "<none>" : r.status.qos_class});
    }
  }
  return Columns(rows);
}

std::string FormatPodDetails(const PodStatusRecord& r, int64_t now_unix_s) {
  const auto& s = r.status;
  std::ostringstream out;
  out << "Name:             " << r.pod.name << "\n";
  out << "Namespace:        " << r.pod.namespace_ << "\n";
  out << "UID:              " << r.pod.uid << "\n";
  out << "Status Version:   " << r.version << " (updated " << Time(r.updated_at_unix_s) << ")\n";
  out << "Created:          " << Time(r.pod.creation_time_unix_s) << " ("
      << Ago(r.pod.creation_time_unix_s, now_unix_s) << " ago)\n";
  out << "Start Time:       " << Time(s.start_time_unix_s) << "\n";
  out << "Restart Policy:   " << status::RestartPolicyName(r.pod.restart_policy) << "\n";
  out << "Status:           " << status::PhaseName(s.phase) << "\n";
  if (!s.reason.empty()) out << "Reason:           " << s.reason << "\n";
  if (!s.message.empty()) out << "Message:          " << s.message << "\n";
  out << "Ready:            " << ReadyColumn(r) << " (" << StatusColumn(r) << ")\n";
  out << "Host IP:          " << (s.host_ip.empty() ? "<none>" : s.host_ip) << "\n";
  out << "IP:               " << (s.pod_ip.empty() ? "<none>" : s.pod_ip) << "\n";
  if (!s.pod_ips.empty()) {
    out << "IPs:\n";
    for (const auto& ip : s.pod_ips) out << "  IP:  " << ip << "\n";
  }
  if (!s.qos_class.empty()) out << "QoS Class:        " << s.qos_class << "\n";
  DescribeContainers(out, "Init Containers", s.init_container_statuses);
  DescribeContainers(out, "Containers", s.container_statuses);
  out << "Conditions:\n";
  if (s.conditions.empty()) {
    out << "  <none>\n";
  } else {
    std::vector<std::vector<std::string>> rows = {
        {"Type", "Status", "LastTransitionTime", "Reason", "Message"}};
    for (const auto& c : s.conditions) {
      rows.push_back({c.type, status::ConditionStatusName(c.status),
                      Time(c.last_transition_time_unix_s), c.reason, c.message});
    }
    std::istringstream table(Columns(rows));
    for (std::string line; std::getline(table, line);) {
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out << "  " << line << "\n";
    }
  }
  return out.str();
}

std::string FormatEvents(const std::vector<status::PodEvent>& events, int64_t now,
                         bool with_object) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back(with_object
                     ? std::vector<std::string>{"LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"}
                     : std::vector<std::string>{"LAST SEEN", "TYPE", "REASON", "MESSAGE"});
  for (const auto& e : events) {
    std::string age = Ago(e.last_unix_s, now);
    if (e.count > 1) age += " (x" + std::to_string(e.count) + ")";
    if (with_object) {
      // Node events (image GC, ...) carry the object uid "node".
      rows.push_back({age, e.type, e.reason, (e.pod_uid == "node" ? "node/" : "pod/") + e.pod_name,
                      e.message});
    } else {
      rows.push_back({age, e.type, e.reason, e.message});
    }
  }
  return Columns(rows);
}

nlohmann::json EventListJson(const std::vector<status::PodEvent>& events) {
  nlohmann::json items = nlohmann::json::array();
  for (const auto& e : events) {
    const bool node = e.pod_uid == "node";
    nlohmann::json object = {{"kind", node ? "Node" : "Pod"}, {"name", e.pod_name}};
    if (!node) {
      object["namespace"] = e.namespace_;
      object["uid"] = e.pod_uid;
    }
    items.push_back({{"involvedObject", object},
                     {"type", e.type},
                     {"reason", e.reason},
                     {"message", e.message},
                     {"source", {{"component", e.source}}},
                     {"count", e.count},
                     {"firstTimestamp", Time(e.first_unix_s)},
                     {"lastTimestamp", Time(e.last_unix_s)}});
  }
  return {{"apiVersion", "v1"}, {"kind", "EventList"}, {"items", items}};
}

}  // namespace nodelet::ctl
