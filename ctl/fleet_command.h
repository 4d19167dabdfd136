// `nodeletctl fleet`: the fleet's desired state and statuses in etcd (docs/fleet.md), with the
// same --etcd-* flags as nodelet:
//
//   fleet nodes                     NAME READY LEASE PODS: every node the keyspace names (its
//                                   Node, its pods or its statuses); NotReady when its Node (on
//                                   its lease) is gone
//   fleet pods [--node N]           the table `nodeletctl pods` prints (the same column
//                                   rules), from the status keys, with the node first
//   fleet apply -f FILE (--node N | --all)
//                                   each Pod, ConfigMap and Secret of FILE to its key; a pod that
//                                   does not decode is refused with the file and the field, and
//                                   nothing of the file is written
//   fleet delete KIND NAMESPACE/NAME [--node N | --all]
//                                   KIND: pod, configmap or secret (pods: --node or --all)
//
// Exit codes: 0; 1 a refused input or a failed write; 2 bad usage; 4 etcd cannot be reached.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "lib/common/status.h"
#include "lib/etcd/etcd_client.h"
#include "lib/etcd/etcd_flags.h"
#include "lib/status/pod_status.h"

namespace nodelet::ctl {

// The --etcd-* flags, as nodelet's (`fleet` defaults --etcd-endpoints to etcd's own
// http://127.0.0.1:2379).
using FleetOptions = etcd::EtcdFlags;

// One row of `fleet nodes`, from the keys (exposed for tests).
struct FleetNodeRow {
  std::string name;
  std::string ready;  // "Ready", "NotReady" or "Unknown"
  std::string lease;  // how long ago the lease was renewed ("3s"), or "<none>"
  int pods = 0;
};

// The rows of `fleet nodes`: `nodes` maps a node to its Node JSON ("" when no Node key exists),
// `lease_age_s` to its lease's age (absent: no lease), `status_counts` to its status keys, and
// every node in `pod_nodes` has pods.
std::vector<FleetNodeRow> FleetNodeRows(const std::map<std::string, std::string>& nodes,
                                        const std::map<std::string, int64_t>& lease_age_s,
                                        const std::map<std::string, int>& status_counts,
                                        const std::vector<std::string>& pod_nodes);
std::string FormatFleetNodes(const std::vector<FleetNodeRow>& rows);
// A status value (v1 Pod JSON, as statusd's etcd sink writes it) as statusd's record, so that
// `fleet pods` computes its columns as `nodeletctl pods` does. A field of the wrong type is an
// error naming it; an absent one keeps its default.
Result<status::PodStatusRecord> PodRecordFromJson(const nlohmann::json& pod);

// `fleet pods`: NODE NAMESPACE NAME READY STATUS RESTARTS AGE from the status values (v1 Pod
// JSON), by node, the columns as `nodeletctl pods` prints them.
std::string FormatFleetPods(const std::map<std::string, std::vector<std::string>>& by_node,
                            int64_t now_unix_s);

// The keys `apply` writes for FILE's documents: key -> value (the document as YAML). Pods go
// under `node` ("_all" for --all). Refuses (naming FILE, the document and the field) anything
// that does not decode or is of another kind.
Result<std::map<std::string, std::string>> FleetApplyKeys(const std::string& prefix,
                                                          const std::string& file,
                                                          const std::string& content,
                                                          const std::string& node);

// Adds `fleet` with nodes, pods, apply and delete.
void AddFleetCommand(CLI::App& app, int* exit_code);

}  // namespace nodelet::ctl
