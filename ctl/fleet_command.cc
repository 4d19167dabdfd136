#include "ctl/fleet_command.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <ctime>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "ctl/output_flags.h"
#include "ctl/pods_command.h"
#include "lib/common/clock.h"
#include "lib/common/fs.h"
#include "lib/common/rfc3339.h"
#include "lib/etcd/fleet_keys.h"
#include "lib/pod/manifest_parser.h"

namespace nodelet::ctl {

namespace {

using nlohmann::json;

// The Ready condition of a v1 Node, as kubectl prints it.
std::string NodeReady(const std::string& node_json) {
  auto doc = json::parse(node_json, nullptr, false);
  if (!doc.is_object() || !doc.contains("status") || !doc["status"].contains("conditions") ||
      !doc["status"]["conditions"].is_array()) {
    return "Unknown";
  }
  for (const auto& c : doc["status"]["conditions"]) {
    if (c.is_object() && c.value("type", "") == "Ready") {
      return c.value("status", "") == "True" ? "Ready" : "NotReady";
    }
  }
  return "Unknown";
}

// The pieces of a v1 Pod's JSON that PodRecordFromJson reads. Values come from etcd (any
// node's writes): a field of the wrong type is an error naming it, an absent one its default.
Status WrongType(const std::string& field, const char* want) {
  return InvalidArgument(field + ": not " + want);
}

Status ReadString(const json& j, const std::string& path, const char* key, std::string* out) {
  if (!j.contains(key) || j[key].is_null()) return Status::Ok();
  if (!j[key].is_string()) return WrongType(path + "." + key, "a string");
  *out = j[key].get<std::string>();
  return Status::Ok();
}

Status ReadTime(const json& j, const std::string& path, const char* key, int64_t* out) {
  std::string text;
  if (Status s = ReadString(j, path, key, &text); !s.ok() || text.empty()) return s;
  auto t = ParseRfc3339(text);
  if (!t) return InvalidArgument(path + "." + key + ": \"" + text + "\" is not an RFC 3339 time");
  *out = t->seconds;
  return Status::Ok();
}

Status ReadState(const json& j, const std::string& path, status::ContainerState* out) {
  if (j.is_null()) return Status::Ok();
  if (!j.is_object()) return WrongType(path, "an object");
  if (j.contains("waiting") && j["waiting"].is_object()) {
    status::ContainerStateWaiting w;
    if (Status s = ReadString(j["waiting"], path + ".waiting", "reason", &w.reason); !s.ok()) {
      return s;
    }
    if (Status s = ReadString(j["waiting"], path + ".waiting", "message", &w.message); !s.ok()) {
      return s;
    }
    out->waiting = w;
  }
  if (j.contains("running") && j["running"].is_object()) {
    status::ContainerStateRunning r;
    if (Status s = ReadTime(j["running"], path + ".running", "startedAt", &r.started_at_unix_s);
        !s.ok()) {
      return s;
    }
    out->running = r;
  }
  if (j.contains("terminated") && j["terminated"].is_object()) {
    const json& t = j["terminated"];
    const std::string at = path + ".terminated";
    status::ContainerStateTerminated term;
    if (!t.value("exitCode", json(0)).is_number_integer() ||
        !t.value("signal", json(0)).is_number_integer()) {
      return WrongType(at + ".exitCode/signal", "an integer");
    }
    term.exit_code = t.value("exitCode", 0);
    term.signal = t.value("signal", 0);
    for (auto [key, field] :
         {std::pair{"reason", &term.reason}, std::pair{"message", &term.message},
          std::pair{"containerID", &term.container_id}}) {
      if (Status s = ReadString(t, at, key, field); !s.ok()) return s;
    }
    if (Status s = ReadTime(t, at, "startedAt", &term.started_at_unix_s); !s.ok()) return s;
    if (Status s = ReadTime(t, at, "finishedAt", &term.finished_at_unix_s); !s.ok()) return s;
    out->terminated = term;
  }
  return Status::Ok();
}

Status ReadContainers(const json& st, const char* key, std::vector<status::ContainerStatus>* out) {
  const std::string path = std::string("status.") + key;
  if (!st.contains(key) || st[key].is_null()) return Status::Ok();
  if (!st[key].is_array()) return WrongType(path, "a list");
  for (size_t i = 0; i < st[key].size(); ++i) {
    const json& c = st[key][i];
    const std::string at = path + "[" + std::to_string(i) + "]";
    if (!c.is_object()) return WrongType(at, "an object");
    status::ContainerStatus cs;
    if (Status s = ReadString(c, at, "name", &cs.name); !s.ok()) return s;
    if (Status s = ReadState(c.value("state", json()), at + ".state", &cs.state); !s.ok()) return s;
    if (Status s = ReadState(c.value("lastState", json()), at + ".lastState", &cs.last_state);
        !s.ok()) {
      return s;
    }
    if (!c.value("ready", json(false)).is_boolean() ||
        !c.value("restartCount", json(0)).is_number_integer()) {
      return WrongType(at + ".ready/restartCount", "a boolean and an integer");
    }
    cs.ready = c.value("ready", false);
    cs.restart_count = c.value("restartCount", 0);
    out->push_back(std::move(cs));
  }
  return Status::Ok();
}

}  // namespace

Result<status::PodStatusRecord> PodRecordFromJson(const json& pod) {
  if (!pod.is_object()) return InvalidArgument("not a JSON object");
  status::PodStatusRecord r;
  const json meta = pod.value("metadata", json::object());
  const json st = pod.value("status", json::object());
  if (!meta.is_object()) return WrongType("metadata", "an object");
  if (!st.is_object()) return WrongType("status", "an object");
  for (auto [key, field] :
       {std::pair{"name", &r.pod.name}, std::pair{"namespace", &r.pod.namespace_},
        std::pair{"uid", &r.pod.uid}}) {
    if (Status s = ReadString(meta, "metadata", key, field); !s.ok()) return s;
  }
  if (Status s = ReadTime(meta, "metadata", "creationTimestamp", &r.pod.creation_time_unix_s);
      !s.ok()) {
    return s;
  }
  std::string version;
  if (Status s = ReadString(meta, "metadata", "resourceVersion", &version); !s.ok()) return s;
  r.version = std::strtoull(version.c_str(), nullptr, 10);
  std::string phase;
  if (Status s = ReadString(st, "status", "phase", &phase); !s.ok()) return s;
  r.status.phase = status::PodPhase::kUnknown;
  for (auto p : {status::PodPhase::kPending, status::PodPhase::kRunning,
                 status::PodPhase::kSucceeded, status::PodPhase::kFailed}) {
    if (status::PhaseName(p) == phase) r.status.phase = p;
  }
  if (Status s = ReadString(st, "status", "reason", &r.status.reason); !s.ok()) return s;
  if (Status s = ReadString(st, "status", "message", &r.status.message); !s.ok()) return s;
  if (st.contains("conditions") && st["conditions"].is_array()) {
    for (const auto& c : st["conditions"]) {
      if (!c.is_object()) continue;
      status::PodCondition cond;
      if (Status s = ReadString(c, "status.conditions", "type", &cond.type); !s.ok()) return s;
      std::string value;
      if (Status s = ReadString(c, "status.conditions", "status", &value); !s.ok()) return s;
      cond.status = value == "True"    ? status::ConditionStatus::kTrue
                    : value == "False" ? status::ConditionStatus::kFalse
                                       : status::ConditionStatus::kUnknown;
      r.status.conditions.push_back(std::move(cond));
    }
  }
  if (Status s = ReadContainers(st, "initContainerStatuses", &r.status.init_container_statuses);
      !s.ok()) {
    return s;
  }
  if (Status s = ReadContainers(st, "containerStatuses", &r.status.container_statuses); !s.ok()) {
    return s;
  }
  return r;
}

namespace {

// One row of `fleet pods` from a status value, with the columns `nodeletctl pods` computes from
// statusd's records (ReadyColumn, StatusColumn, RestartsColumn); a value that does not decode
// shows why in STATUS.
std::vector<std::string> PodRow(const std::string& node, const json& pod, int64_t now) {
  auto record = PodRecordFromJson(pod);
  if (!record.ok()) {
    const json meta = pod.is_object() ? pod.value("metadata", json::object()) : json::object();
    const std::string ns = meta.is_object() ? meta.value("namespace", "") : "";
    const std::string name = meta.is_object() ? meta.value("name", "") : "";
    return {node, ns, name, "-", "<invalid: " + record.status().message() + ">", "-", "-"};
  }
  const auto& r = *record;
  return {node,
          r.pod.namespace_,
          r.pod.name,
          ReadyColumn(r),
          StatusColumn(r),
          RestartsColumn(r, now),
          r.pod.creation_time_unix_s == 0 ? "<unknown>"
                                          : HumanDuration(now - r.pod.creation_time_unix_s)};
}

Result<std::unique_ptr<etcd::Client>> Connect(const FleetOptions& o) {
  if (Status s = o.Check(); !s.ok()) return s;
  return etcd::Client::Connect(o.ToClientOptions(), RealClock::Get());
}

// The node a key below `head` names (its first component).
std::string FirstComponent(const std::string& key, const std::string& head) {
  std::string rest = key.substr(head.size());
  return rest.substr(0, rest.find('/'));
}

int Fail(std::ostream& err, const Status& s) {
  Error(err) << "fleet: " << s.message() << "\n";
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded
             ? kExitUnknown
             : kExitFailed;
}

int RunNodes(const FleetOptions& o, OutputFormat format, std::ostream& out, std::ostream& err) {
  auto client = Connect(o);
  if (!client.ok()) return Fail(err, client.status());
  etcd::FleetKeys keys{o.prefix};
  auto nodes = (*client)->GetPrefix(keys.Nodes());
  if (!nodes.ok()) return Fail(err, nodes.status());
  auto pods = (*client)->GetPrefix(keys.Pods());
  if (!pods.ok()) return Fail(err, pods.status());
  auto statuses = (*client)->GetPrefix(keys.Statuses());
  if (!statuses.ok()) return Fail(err, statuses.status());
  auto registered = (*client)->GetPrefix(keys.Registrations());
  if (!registered.ok()) return Fail(err, registered.status());
  std::map<std::string, std::string> node_json;
  std::map<std::string, int64_t> lease_age;
  for (const auto& kv : nodes->kvs) {
    const std::string name = kv.key.substr(keys.Nodes().size());
    node_json[name] = kv.value;
    if (kv.lease != 0) {
      auto info = (*client)->GetLeaseInfo(kv.lease);
      if (info.ok() && info->ttl >= 0) lease_age[name] = info->granted_ttl - info->ttl;
    }
  }
  std::map<std::string, int> counts;
  for (const auto& kv : statuses->kvs) ++counts[FirstComponent(kv.key, keys.Statuses())];
  std::vector<std::string> pod_nodes;
  for (const auto& kv : registered->kvs)
    pod_nodes.push_back(kv.key.substr(keys.Registrations().size()));
  for (const auto& kv : pods->kvs) {
    std::string n = FirstComponent(kv.key, keys.Pods());
    if (n != etcd::kAllNodes) pod_nodes.push_back(n);
  }
  const auto rows = FleetNodeRows(node_json, lease_age, counts, pod_nodes);
  json doc = {{"nodes", json::array()}};
  for (const auto& r : rows) {
    doc["nodes"].push_back(
        {{"name", r.name}, {"ready", r.ready}, {"lease", r.lease}, {"pods", r.pods}});
  }
  if (PrintDocument(format, doc, out)) return 0;
  if (format == OutputFormat::kName) {
    for (const auto& r : rows) out << "node/" << r.name << "\n";
    return 0;
  }
  out << FormatFleetNodes(rows);
  return 0;
}

int RunPods(const FleetOptions& o, const std::string& node, OutputFormat format, std::ostream& out,
            std::ostream& err) {
  auto client = Connect(o);
  if (!client.ok()) return Fail(err, client.status());
  etcd::FleetKeys keys{o.prefix};
  auto statuses = (*client)->GetPrefix(node.empty() ? keys.Statuses() : keys.StatusOfNode(node));
  if (!statuses.ok()) return Fail(err, statuses.status());
  std::map<std::string, std::vector<std::string>> by_node;
  for (const auto& kv : statuses->kvs) {
    by_node[FirstComponent(kv.key, keys.Statuses())].push_back(kv.value);
  }
  if (format == OutputFormat::kTable || format == OutputFormat::kWide) {
    out << FormatFleetPods(by_node, RealClock::Get().WallSeconds());
    return 0;
  }
  // The status values themselves (v1 Pods), as a PodList; a value that is not JSON is left out.
  json items = json::array();
  for (const auto& [n, values] : by_node) {
    for (const auto& v : values) {
      auto doc = json::parse(v, nullptr, false);
      if (doc.is_object()) items.push_back(std::move(doc));
    }
  }
  if (PrintDocument(format, {{"apiVersion", "v1"}, {"kind", "PodList"}, {"items", items}}, out,
                    4)) {
    return 0;
  }
  for (const auto& item : items) {
    const json meta = item.value("metadata", json::object());
    out << "pod/" << (meta.is_object() ? meta.value("name", "") : "") << "\n";
  }
  return 0;
}

int RunApply(const FleetOptions& o, const std::string& file, const std::string& node, bool all,
             std::ostream& out, std::ostream& err) {
  if (all == !node.empty()) {
    Error(err) << "fleet apply: give --node NODE or --all\n";
    return kExitUsage;
  }
  auto content = ReadFileBounded(file, pod::kMaxManifestBytes);
  if (!content.ok()) return Fail(err, content.status());
  auto writes = FleetApplyKeys(o.prefix, file, *content, all ? etcd::kAllNodes : node);
  if (!writes.ok()) {
    Error(err) << "fleet apply: " << writes.status().message() << "\n";
    return kExitFailed;
  }
  auto client = Connect(o);
  if (!client.ok()) return Fail(err, client.status());
  for (const auto& [key, value] : *writes) {
    auto put = (*client)->Put(key, value);
    if (!put.ok()) return Fail(err, put.status());
    out << key << " written\n";
  }
  return 0;
}

int RunDelete(const FleetOptions& o, const std::string& kind, const std::string& what,
              const std::string& node, bool all, std::ostream& out, std::ostream& err) {
  size_t slash = what.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == what.size() ||
      what.find('/', slash + 1) != std::string::npos) {
    Error(err) << "fleet delete: give NAMESPACE/NAME, not '" << what << "'\n";
    return kExitUsage;
  }
  const std::string ns = what.substr(0, slash), name = what.substr(slash + 1);
  etcd::FleetKeys keys{o.prefix};
  std::string key;
  if (kind == "pod") {
    if (all == !node.empty()) {
      Error(err) << "fleet delete pod: give --node NODE or --all\n";
      return kExitUsage;
    }
    key = keys.Pod(all ? etcd::kAllNodes : node, ns, name);
  } else if (kind == "configmap" || kind == "secret") {
    key = keys.Config(kind == "secret" ? "Secret" : "ConfigMap", ns, name);
  } else {
    Error(err) << "fleet delete: KIND is pod, configmap or secret, not '" << kind << "'\n";
    return kExitUsage;
  }
  auto client = Connect(o);
  if (!client.ok()) return Fail(err, client.status());
  auto got = (*client)->Get(key);
  if (!got.ok()) return Fail(err, got.status());
  if (got->kvs.empty()) {
    Error(err) << "fleet delete: " << key << " does not exist\n";
    return kExitFailed;
  }
  auto del = (*client)->Delete(key);
  if (!del.ok()) return Fail(err, del.status());
  out << key << " deleted\n";
  return 0;
}

}  // namespace

std::vector<FleetNodeRow> FleetNodeRows(const std::map<std::string, std::string>& nodes,
                                        const std::map<std::string, int64_t>& lease_age_s,
                                        const std::map<std::string, int>& status_counts,
                                        const std::vector<std::string>& pod_nodes) {
  std::set<std::string> names(pod_nodes.begin(), pod_nodes.end());
  for (const auto& [n, _] : nodes) names.insert(n);
  for (const auto& [n, _] : status_counts) names.insert(n);
  std::vector<FleetNodeRow> rows;
  for (const auto& n : names) {
    FleetNodeRow r;
    r.name = n;
    auto node = nodes.find(n);
    // No Node key: its lease expired (or it never wrote one).
    r.ready = node == nodes.end() ? "NotReady" : NodeReady(node->second);
    auto age = lease_age_s.find(n);
    r.lease = age == lease_age_s.end() ? "<none>" : HumanDuration(age->second);
    auto c = status_counts.find(n);
    r.pods = c == status_counts.end() ? 0 : c->second;
    rows.push_back(r);
  }
  return rows;
}

std::string FormatFleetNodes(const std::vector<FleetNodeRow>& rows) {
  std::vector<std::vector<std::string>> t = {{"NAME", "READY", "LEASE", "PODS"}};
  for (const auto& r : rows) t.push_back({r.name, r.ready, r.lease, std::to_string(r.pods)});
  return Columns(t);
}

std::string FormatFleetPods(const std::map<std::string, std::vector<std::string>>& by_node,
                            int64_t now_unix_s) {
  std::vector<std::vector<std::string>> t = {
      {"NODE", "NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"}};
  for (const auto& [node, values] : by_node) {
    std::vector<std::vector<std::string>> rows;
    for (const auto& v : values) {
      auto doc = json::parse(v, nullptr, false);
      if (!doc.is_object()) continue;
      rows.push_back(PodRow(node, doc, now_unix_s));
    }
    std::sort(rows.begin(), rows.end());
    t.insert(t.end(), rows.begin(), rows.end());
  }
  return Columns(t);
}

Result<std::map<std::string, std::string>> FleetApplyKeys(const std::string& prefix,
                                                          const std::string& file,
                                                          const std::string& content,
                                                          const std::string& node) {
  pod::ParseOptions parse;
  parse.other_kinds = {"ConfigMap", "Secret"};
  auto decoded = pod::DecodeManifest(content, file, parse);
  if (!decoded.errors.empty()) return InvalidArgument(decoded.errors.front().message);
  // The documents as written, in order (the parser's numbering skips empty ones).
  std::vector<YAML::Node> docs;
  try {
    for (auto& d : YAML::LoadAll(content)) {
      if (!d.IsNull()) docs.push_back(d);
    }
  } catch (const YAML::Exception& e) {
    return InvalidArgument(file + ": " + e.what());
  }
  etcd::FleetKeys keys{prefix};
  std::map<std::string, std::string> out;
  auto emit = [&](int document, const std::string& key) -> Status {
    if (document < 1 || static_cast<size_t>(document) > docs.size()) {
      return Internal(file + ": document " + std::to_string(document) + " not found");
    }
    if (out.count(key) != 0) return InvalidArgument(file + ": two documents for " + key);
    YAML::Emitter e;
    e << docs[static_cast<size_t>(document - 1)];
    out[key] = std::string(e.c_str()) + "\n";
    return Status::Ok();
  };
  for (const auto& p : decoded.pods) {
    const std::string ns =
        p.pod.metadata.namespace_name.empty() ? "default" : p.pod.metadata.namespace_name;
    if (Status s = emit(p.document, keys.Pod(node, ns, p.pod.metadata.name)); !s.ok()) return s;
  }
  for (const auto& o : decoded.others) {
    if (o.name.empty()) return InvalidArgument(file + ": a " + o.kind + " without metadata.name");
    const std::string ns = o.namespace_name.empty() ? "default" : o.namespace_name;
    if (Status s = emit(o.document, keys.Config(o.kind, ns, o.name)); !s.ok()) return s;
  }
  if (out.empty()) return InvalidArgument(file + ": no Pod, ConfigMap or Secret");
  return out;
}

void AddFleetCommand(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<FleetOptions>();
  auto* fleet =
      app.add_subcommand("fleet", "The fleet's pods, statuses and nodes in etcd (docs/fleet.md)");
  fleet->require_subcommand(1);
  o->endpoints = {"http://127.0.0.1:2379"};
  etcd::AddEtcdFlags(*fleet, o.get(), /*node=*/false);

  auto output = std::make_shared<OutputFlags>();
  AddOutputFlags(fleet, output.get(), /*json_alias=*/false,
                 "nodes, pods: json, yaml, wide or name (pods: a v1 PodList of the statuses)");

  auto* nodes = fleet->add_subcommand("nodes", "Every node: READY, lease age, pods");
  nodes->callback([o, output, exit_code] {
    OutputFormat format;
    *exit_code = output->Resolve(&format, std::cerr) ? RunNodes(*o, format, std::cout, std::cerr)
                                                     : kExitUsage;
  });

  auto node = std::make_shared<std::string>();
  auto* pods = fleet->add_subcommand("pods", "Every pod's status, by node");
  pods->add_option("--node", *node, "Only this node's");
  pods->callback([o, node, output, exit_code] {
    OutputFormat format;
    *exit_code = output->Resolve(&format, std::cerr)
                     ? RunPods(*o, *node, format, std::cout, std::cerr)
                     : kExitUsage;
  });

  auto file = std::make_shared<std::string>();
  auto all = std::make_shared<bool>(false);
  auto* apply = fleet->add_subcommand("apply", "Write FILE's Pods, ConfigMaps and Secrets");
  apply->add_option("-f,--filename", *file, "YAML or JSON, one or more documents")->required();
  apply->add_option("--node", *node, "The node its pods are for");
  apply->add_flag("--all", *all, "Its pods are for every node");
  apply->callback([o, file, node, all, exit_code] {
    *exit_code = RunApply(*o, *file, *node, *all, std::cout, std::cerr);
  });

  auto kind = std::make_shared<std::string>();
  auto what = std::make_shared<std::string>();
  auto* del = fleet->add_subcommand("delete", "Delete a pod, ConfigMap or Secret");
  del->add_option("kind", *kind, "pod, configmap or secret")->required();
  del->add_option("name", *what, "NAMESPACE/NAME")->required();
  del->add_option("--node", *node, "The node the pod is for");
  del->add_flag("--all", *all, "The pod is for every node");
  del->callback([o, kind, what, node, all, exit_code] {
    *exit_code = RunDelete(*o, *kind, *what, *node, *all, std::cout, std::cerr);
  });
}

}  // namespace nodelet::ctl
