// `pods`, `pod NAME` and `events`: asking statusd (the failures and their exit codes), --watch's
// rows, the named pod, and the subcommands' flags. The output formats are in pods_format.cc.
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
bool Names(const status::PodStatusRecord& r, std::string name) {
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

}  // namespace

// --watch: a row for every change after the table shown (`shown`), until interrupted.
int WatchPods(const PodsOptions& o, ipc::Context& ctx, status::StatusClient& client,
              std::vector<status::PodStatusRecord> shown, bool wide, const std::string& node,
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
              std::vector<status::PodStatusRecord> shown, bool wide, const std::string& node,
              std::ostream& out, std::ostream& err) {
  status::StatusWatcher watcher(ctx, o.run_dir);
  if (Status s = watcher.Connect(); !s.ok()) {
    PrintFailure(err, "watch statusd", s, o);
    return FailureCode(s);
  }
  // Each change is one row, in the columns of what was shown so far (kubectl get -w). A row is
  // the last line of the table of everything shown plus the changed pod.
  auto print_row = [&](const status::PodStatusRecord& r) {
    std::vector<status::PodStatusRecord> all = shown;
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
    std::vector<status::PodStatusRecord> changed;
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

namespace {

// The one record `name` names, or the exit code after saying why: 4 for none, 1 for several.
Result<const status::PodStatusRecord*> FindPod(const std::vector<status::PodStatusRecord>& records,
                                               const std::string& name, const PodsOptions& o,
                                               std::ostream& err, int* exit_code) {
  std::vector<const status::PodStatusRecord*> matches;
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
  const status::PodStatusRecord& pod = **found;
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
