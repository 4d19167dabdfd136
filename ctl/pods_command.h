// `nodeletctl pods` and `nodeletctl pod NAME`: the pod statuses that nodelet-statusd stores,
// printed like `kubectl get pods` (NAME, READY, STATUS, RESTARTS, AGE), as a v1 PodList with
// `-o json`, or in detail with conditions (`pod NAME`, like `kubectl describe pod`).
//
// These commands talk to statusd directly over its status socket (kStatusEndpoint in the run
// directory), not through the supervisor: statusd owns the statuses and serves them even while
// the supervisor is down or restarting, and large lists do not travel through the supervisor.
// Access is the same as for the supervisor's ctl socket: the run directory's permissions.
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "lib/common/clock.h"
#include "lib/status/pod_status.h"

namespace nodelet::ctl {

struct PodsOptions {
  std::string run_dir = "/run/nodelet";
  // Only pods of this namespace (all when empty: the node's every pod, with a NAMESPACE column,
  // as `kubectl get pods -A`; -A says so explicitly and may not be given with -n).
  std::string namespace_;
  bool all_namespaces = false;
  // -o: "" (table), "wide", "json", "yaml" or "name" (ctl/cli_output.h).
  std::string output;
  // --watch: after the table, a row for every change (kubectl get -w) until interrupted.
  bool watch = false;
  // How long to wait for statusd.
  std::chrono::milliseconds timeout{3000};
  // "now" for ages (AGE, LAST SEEN): the process's clock unless a test gives another.
  const Clock* clock = &RealClock::Get();
};

// `pods`: the table (or the PodList as JSON or YAML, or pod/NAME lines) on `out`, errors on
// `err`; returns the exit code (ctl/cli_output.h: 4 when statusd cannot be reached).
int RunPods(const PodsOptions& options, std::ostream& out, std::ostream& err);
// `events [POD]`: LAST SEEN (with xCOUNT), TYPE, REASON, OBJECT, MESSAGE, oldest first; a v1
// EventList with -o json|yaml.
int RunEvents(const PodsOptions& options, const std::string& pod, std::ostream& out,
              std::ostream& err);
std::string FormatEvents(const std::vector<status::PodEvent>& events, int64_t now,
                         bool with_object);
nlohmann::json EventListJson(const std::vector<status::PodEvent>& events);
// `pod NAME`: NAME is a pod name, "namespace/name", "pod/name" (as -o name prints it) or a uid.
// 4 when no pod has it, 1 when several do.
int RunPod(const PodsOptions& options, const std::string& name, std::ostream& out,
           std::ostream& err);

// Formatting, exposed for tests. `now_unix_s` is the time AGE and "ago" are measured from.
// `wide` adds IP, NODE (`node`, "<none>" when empty) and QOS; `with_namespace` puts NAMESPACE
// first (a list of every namespace, as kubectl -A).
std::string FormatPodTable(const std::vector<status::PodStatusRecord>& records, int64_t now_unix_s,
                           bool wide = false, const std::string& node = "",
                           bool with_namespace = false);
std::string FormatPodDetails(const status::PodStatusRecord& record, int64_t now_unix_s);
// kubectl's READY ("1/2"), STATUS ("Running", "CrashLoopBackOff", "Init:0/1", "Completed") and
// RESTARTS ("3 (2m ago)") columns.
std::string ReadyColumn(const status::PodStatusRecord& record);
std::string StatusColumn(const status::PodStatusRecord& record);
std::string RestartsColumn(const status::PodStatusRecord& record, int64_t now_unix_s);
// kubectl's human durations: "45s", "2m30s", "15m", "5h", "3d4h", "2y".
std::string HumanDuration(int64_t seconds);
// Lays out rows in columns separated by three spaces, as kubectl's tabwriter does (the last
// column is not padded).
std::string Columns(const std::vector<std::vector<std::string>>& rows);

// Adds the `pods` and `pod` subcommands to nodeletctl. `run_dir` points at nodeletctl's
// --run-dir value (read when the command runs); the command's exit code goes to `exit_code`.
void AddPodCommands(CLI::App& app, const std::string* run_dir, int* exit_code);

}  // namespace nodelet::ctl
