#include "ctl/pods_command.h"

#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ctl/cli_output.h"
#include "ctl/ctl_client.h"
#include "lib/common/clock.h"
#include "lib/ipc/endpoints.h"
#include "lib/ipc/peer_access.h"
#include "lib/status/pod_status_json.h"
#include "lib/status/status_client.h"

namespace nodelet::ctl {
namespace {

using status::ContainerState;
using status::ContainerStatus;
using status::PodStatusRecord;

std::string Ago(int64_t then, int64_t now) {
  if (then == 0) return "<unknown>";
  return HumanDuration(now - then);
}

std::string Time(int64_t unix_s) { return unix_s == 0 ? "<none>" : status::FormatRfc3339(unix_s); }

// The latest end of a previous run, over all containers (kubectl's lastRestartDate).
int64_t LastRestart(const std::vector<ContainerStatus>& containers, int64_t current) {
  for (const auto& c : containers) {
    if (c.last_state.terminated)
      current = std::max(current, c.last_state.terminated->finished_at_unix_s);
  }
  return current;
}

status::StatusClientOptions ClientOptions(const PodsOptions& o) {
  status::StatusClientOptions c;
  c.sender = ipc::ServiceId::Ctl;
  c.deadline = o.timeout;
  c.attempt_timeout = std::min(o.timeout, std::chrono::milliseconds(1000));
  return c;
}

void PrintFailure(std::ostream& err, const std::string& what, const Status& s,
                  const PodsOptions& o) {
  Error(err) << "failed to " << what << ": " << s.message() << "\n";
  if (s.code() == StatusCode::kDeadlineExceeded || s.code() == StatusCode::kUnavailable) {
    Error(err) << "nodelet-statusd is asked directly, at '" << ipc::kStatusEndpoint.Path(o.run_dir)
               << "': is it running?\n";
  }
}

// The exit code of a failed call to statusd: 4 when it could not be reached (or timed out), 1
// for an answer that makes no sense.
int FailureCode(const Status& s) {
  return s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kInternal
             ? kExitFailed
             : kExitUnknown;
}

// NAME, NAMESPACE/NAME, pod/NAME or a uid names this record.
bool Names(const PodStatusRecord& r, std::string name) {
  if (name.rfind("pod/", 0) == 0) name = name.substr(4);
  return r.pod.uid == name || r.pod.name == name || r.pod.namespace_ + "/" + r.pod.name == name;
}

// Tells a user the file system keeps out apart from a statusd that is not there (a ZeroMQ connect
// would only retry until the deadline). False after printing "nodeletctl: permission denied: ...".
bool MayConnect(std::ostream& err, const PodsOptions& o) {
  Status s = ipc::ProbeIpcSocket(ipc::kStatusEndpoint.Path(o.run_dir));
  if (s.code() != StatusCode::kPermissionDenied) return true;
  Error(err) << s.message() << "\n";
  return false;
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

// --watch: a row for every change after the table shown (`shown`), until interrupted.
int WatchPods(const PodsOptions& o, ipc::Context& ctx, status::StatusClient& client,
              std::vector<PodStatusRecord> shown, bool wide, const std::string& node,
              std::ostream& out, std::ostream& err);

int RunPods(const PodsOptions& o, std::ostream& out, std::ostream& err) {
  OutputFormat format;
  if (!ParseOutputOrExplain(o.output, &format, err)) return kExitUsage;
  if (o.all_namespaces && !o.namespace_.empty()) {
    Error(err) << "-A lists every namespace: give it or -n NAMESPACE, not both\n";
    return kExitUsage;
  }
  if (o.watch && format != OutputFormat::kTable && format != OutputFormat::kWide) {
    Error(err) << "--watch prints table rows: give it with no -o or -o wide\n";
    return kExitUsage;
  }
  if (!MayConnect(err, o)) return kExitUnknown;
  ipc::Context ctx;
  status::StatusClient client(ctx, o.run_dir, ClientOptions(o));
  if (Status s = client.Connect(); !s.ok()) {
    PrintFailure(err, "connect to statusd", s, o);
    return FailureCode(s);
  }
  auto list = client.ListPodStatuses(o.namespace_);
  if (!list.ok()) {
    PrintFailure(err, "list pods", list.status(), o);
    return FailureCode(list.status());
  }
  if (PrintDocument(format, status::PodListToJson(list->records), out, 4)) return kExitOk;
  if (format == OutputFormat::kName) {
    for (const auto& r : list->records) out << "pod/" << r.pod.name << "\n";
    return kExitOk;
  }
  if (list->records.empty()) {
    // Not an error (kubectl's message and exit 0), on stderr so that a pipe reads nothing.
    err << "No pods found" << (o.namespace_.empty() ? "" : " in namespace " + o.namespace_)
        << ".\n";
    return kExitOk;
  }
  const bool wide = format == OutputFormat::kWide;
  std::string node;
  if (wide) {
    // The node's name, from the supervisor (every pod here runs on it); <none> without it.
    auto reply = CtlRequest(*o.clock, o.run_dir, ipc::ctl::RequestKind::Node, {}, o.timeout);
    if (reply.ok() && reply->ok) {
      auto j = nlohmann::json::parse(reply->node_json, nullptr, false);
      if (j.is_object() && j["metadata"].is_object()) node = j["metadata"].value("name", "");
    }
  }
  out << FormatPodTable(list->records, o.clock->WallSeconds(), wide, node, o.namespace_.empty());
  out.flush();
  if (!o.watch) return kExitOk;
  return WatchPods(o, ctx, client, std::move(list->records), wide, node, out, err);
}

int WatchPods(const PodsOptions& o, ipc::Context& ctx, status::StatusClient& client,
              std::vector<PodStatusRecord> shown, bool wide, const std::string& node,
              std::ostream& out, std::ostream& err) {
  status::StatusWatcher watcher(ctx, o.run_dir);
  if (Status s = watcher.Connect(); !s.ok()) {
    PrintFailure(err, "watch statusd", s, o);
    return FailureCode(s);
  }
  // Each change is one row, in the columns of what was shown so far (kubectl get -w). A row is
  // the last line of the table of everything shown plus the changed pod.
  auto print_row = [&](const PodStatusRecord& r) {
    std::vector<PodStatusRecord> all = shown;
    all.push_back(r);
    std::string table =
        FormatPodTable(all, o.clock->WallSeconds(), wide, node, o.namespace_.empty());
    table.pop_back();
    out << table.substr(table.rfind('\n') + 1) << "\n";
    out.flush();
  };
  std::map<std::string, uint64_t> versions;
  for (const auto& r : shown) versions[r.pod.uid] = r.version;
  for (;;) {
    // Woken at least every second (the watch has no end of its own: it runs until the
    // operator interrupts it).
    auto event = watcher.Next(std::chrono::milliseconds(1000));
    if (!event.ok()) {
      if (event.status().code() == StatusCode::kDeadlineExceeded ||
          event.status().code() == StatusCode::kInvalidArgument) {
        continue;
      }
      PrintFailure(err, "watch statusd", event.status(), o);
      return FailureCode(event.status());
    }
    std::vector<PodStatusRecord> changed;
    if (event->gap) {
      // Missed changes: what differs from the last list is shown.
      auto list = client.ListPodStatuses(o.namespace_);
      if (!list.ok()) continue;
      for (auto& r : list->records) {
        auto v = versions.find(r.pod.uid);
        if (v == versions.end() || v->second != r.version) changed.push_back(r);
      }
    } else if (o.namespace_.empty() || event->record.pod.namespace_ == o.namespace_) {
      changed.push_back(event->record);
    }
    for (const auto& r : changed) {
      versions[r.pod.uid] = r.version;
      print_row(r);
      bool known = false;
      for (auto& s : shown) {
        if (s.pod.uid == r.pod.uid) {
          s = r;
          known = true;
        }
      }
      if (!known) shown.push_back(r);
    }
  }
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

namespace {

// The one record `name` names, or the exit code after saying why: 4 for none, 1 for several.
Result<const PodStatusRecord*> FindPod(const std::vector<PodStatusRecord>& records,
                                       const std::string& name, const PodsOptions& o,
                                       std::ostream& err, int* exit_code) {
  std::vector<const PodStatusRecord*> matches;
  for (const auto& r : records) {
    if (Names(r, name)) matches.push_back(&r);
  }
  if (matches.empty()) {
    Error(err) << "no pod '" << name << "'"
               << (o.namespace_.empty() ? "" : " in namespace " + o.namespace_) << " (statusd has "
               << records.size() << " pod" << (records.size() == 1 ? "" : "s") << ")\n";
    *exit_code = kExitUnknown;
    return NotFound(name);
  }
  if (matches.size() > 1) {
    Error(err) << "'" << name << "' names " << matches.size()
               << " pods; give NAMESPACE/NAME, -n NAMESPACE or the uid:\n";
    for (const auto* r : matches) {
      Error(err) << "  " << r->pod.namespace_ << "/" << r->pod.name << " (uid " << r->pod.uid
                 << ")\n";
    }
    *exit_code = kExitFailed;
    return InvalidArgument(name);
  }
  return matches[0];
}

}  // namespace

int RunEvents(const PodsOptions& o, const std::string& name, std::ostream& out, std::ostream& err) {
  OutputFormat format;
  if (!ParseOutputOrExplain(o.output, &format, err)) return kExitUsage;
  if (!MayConnect(err, o)) return kExitUnknown;
  ipc::Context ctx;
  status::StatusClient client(ctx, o.run_dir, ClientOptions(o));
  if (Status s = client.Connect(); !s.ok()) {
    PrintFailure(err, "connect to statusd", s, o);
    return FailureCode(s);
  }
  std::string uid;
  if (!name.empty()) {
    auto list = client.ListPodStatuses(o.namespace_);
    if (!list.ok()) {
      PrintFailure(err, "list pods", list.status(), o);
      return FailureCode(list.status());
    }
    int rc = kExitOk;
    auto found = FindPod(list->records, name, o, err, &rc);
    if (!found.ok()) return rc;
    uid = (*found)->pod.uid;
  }
  auto events = client.ListEvents(uid);
  if (!events.ok()) {
    PrintFailure(err, "list events", events.status(), o);
    return FailureCode(events.status());
  }
  if (uid.empty() && !o.namespace_.empty()) {
    std::erase_if(*events, [&](const status::PodEvent& e) { return e.namespace_ != o.namespace_; });
  }
  if (PrintDocument(format, EventListJson(*events), out)) return kExitOk;
  if (format == OutputFormat::kName) {
    // The object each event is about, as OBJECT shows it.
    for (const auto& e : *events) {
      out << (e.pod_uid == "node" ? "node/" : "pod/") << e.pod_name << "\n";
    }
    return kExitOk;
  }
  out << FormatEvents(*events, o.clock->WallSeconds(), uid.empty());
  return kExitOk;
}

int RunPod(const PodsOptions& o, const std::string& name, std::ostream& out, std::ostream& err) {
  OutputFormat format;
  if (!ParseOutputOrExplain(o.output, &format, err)) return kExitUsage;
  if (!MayConnect(err, o)) return kExitUnknown;
  ipc::Context ctx;
  status::StatusClient client(ctx, o.run_dir, ClientOptions(o));
  if (Status s = client.Connect(); !s.ok()) {
    PrintFailure(err, "connect to statusd", s, o);
    return FailureCode(s);
  }
  auto list = client.ListPodStatuses(o.namespace_);
  if (!list.ok()) {
    PrintFailure(err, "list pods", list.status(), o);
    return FailureCode(list.status());
  }
  int rc = kExitOk;
  auto found = FindPod(list->records, name, o, err, &rc);
  if (!found.ok()) return rc;
  const PodStatusRecord& pod = **found;
  if (PrintDocument(format, status::PodToJson(pod), out, 4)) return kExitOk;
  if (format == OutputFormat::kName) {
    out << "pod/" << pod.pod.name << "\n";
    return kExitOk;
  }
  out << FormatPodDetails(pod, o.clock->WallSeconds());
  // Events at the bottom, as kubectl describe shows them.
  auto events = client.ListEvents(pod.pod.uid);
  if (events.ok()) {
    out << "Events:\n";
    if (events->empty()) {
      out << "  <none>\n";
    } else {
      std::istringstream lines(FormatEvents(*events, o.clock->WallSeconds(), false));
      for (std::string line; std::getline(lines, line);) out << "  " << line << "\n";
    }
  }
  return kExitOk;
}

void AddPodCommands(CLI::App& app, const std::string* run_dir, int* exit_code) {
  auto opts = std::make_shared<PodsOptions>();
  auto timeout_ms = std::make_shared<int>(3000);

  CLI::App* pods = app.add_subcommand("pods", "List pod statuses (from nodelet-statusd)");
  pods->add_option("-n,--namespace", opts->namespace_,
                   "Only pods of this namespace (default: every namespace, with a NAMESPACE "
                   "column)");
  pods->add_flag("-A,--all-namespaces", opts->all_namespaces, "Every namespace (the default)");
  pods->add_option("-o,--output", opts->output,
                   "Output format: json or yaml (a v1 PodList), wide (the table with each pod's "
                   "IP, node and QoS class), name (pod/NAME)");
  pods->add_flag("-w,--watch", opts->watch,
                 "After the table, print a row for every change until interrupted");
  pods->add_option("--timeout", *timeout_ms, "How long to wait for statusd, in milliseconds")
      ->capture_default_str();
  pods->callback([=] {
    opts->run_dir = *run_dir;
    opts->timeout = std::chrono::milliseconds(*timeout_ms);
    *exit_code = RunPods(*opts, std::cout, std::cerr);
  });

  auto name = std::make_shared<std::string>();
  CLI::App* pod = app.add_subcommand("pod", "Show one pod's status and conditions");
  pod->add_option("NAME", *name, "Pod name, NAMESPACE/NAME, or uid")->required();
  pod->add_option("-n,--namespace", opts->namespace_, "The pod's namespace");
  pod->add_option("-o,--output", opts->output,
                  "Output format: json or yaml (a v1 Pod), name (pod/NAME)");
  pod->add_option("--timeout", *timeout_ms, "How long to wait for statusd, in milliseconds")
      ->capture_default_str();
  pod->callback([=] {
    opts->run_dir = *run_dir;
    opts->timeout = std::chrono::milliseconds(*timeout_ms);
    *exit_code = RunPod(*opts, *name, std::cout, std::cerr);
  });

  auto events_pod = std::make_shared<std::string>();
  CLI::App* events = app.add_subcommand(
      "events", "Pod events (Created, Started, BackOff, ...), deduplicated with counts");
  events->add_option("POD", *events_pod, "Only this pod (name, NAMESPACE/NAME or uid)");
  events->add_option("-n,--namespace", opts->namespace_, "The pod's namespace");
  events->add_option("-o,--output", opts->output,
                     "Output format: json or yaml (a v1 EventList), name, wide");
  events->add_option("--timeout", *timeout_ms, "How long to wait for statusd, in milliseconds")
      ->capture_default_str();
  events->callback([=] {
    opts->run_dir = *run_dir;
    opts->timeout = std::chrono::milliseconds(*timeout_ms);
    *exit_code = RunEvents(*opts, *events_pod, std::cout, std::cerr);
  });
}

}  // namespace nodelet::ctl
