// nodeletctl: the operator's CLI (flags and subcommands; the logic is in ctl/*_command*.cc).
#include <CLI/CLI.hpp>
#include <iostream>

#include "ctl/fleet_command.h"
#include "ctl/logs_command.h"
#include "ctl/manifests_command.h"
#include "ctl/pods_command.h"
#include "ctl/service_commands.h"
#include "ctl/stream_commands.h"
#include "ctl/terminal_output.h"
#include "ctl/top_command.h"
#include "ctl/volumes_command.h"
#include "nodelet_version.h"

int main(int argc, char** argv) {
  // Container and manifest text never drives the operator's terminal (ctl/terminal_output.h).
  const nodelet::ctl::TerminalOutputGuard terminal(argc, argv);
  using nodelet::ctl::CtlOptions;
  using nodelet::ipc::ctl::RequestKind;
  CLI::App app{"nodeletctl: control a running nodelet (in the style of supervisorctl)",
               "nodeletctl"};
  app.require_subcommand(1);
  CtlOptions o;
  app.add_option("--run-dir", o.run_dir, "Run directory of the nodelet to talk to")
      ->capture_default_str();
  int rc = 0;
  std::vector<std::string> names;
  bool json = false;

  auto* status = app.add_subcommand(
      "status", "Show the services' states (exit 0 all running, 3 some not, 4 unknown)");
  status->add_option("services", names, "Service names (default: all)");
  status->add_flag("--json", json, "Print JSON for scripts");
  status->callback([&] { rc = nodelet::ctl::RunStatus(o, names, json, std::cout, std::cerr); });

  for (auto [cmd, kind, help] :
       {std::tuple{"start", RequestKind::Start, "Start services (names or 'all'); clears FATAL"},
        std::tuple{"stop", RequestKind::Stop, "Stop services (names or 'all')"},
        std::tuple{"restart", RequestKind::Restart,
                   "Restart services; the others are not touched"}}) {
    auto* sub = app.add_subcommand(cmd, help);
    sub->add_option("services", names, "Service names or 'all'")->required();
    sub->callback(
        [&, kind = kind] { rc = nodelet::ctl::RunAction(o, kind, names, std::cout, std::cerr); });
  }

  auto* pid = app.add_subcommand("pid", "Pid of the supervisor, or of the named services ('all')");
  pid->add_option("services", names, "Service names or 'all'");
  pid->callback([&] { rc = nodelet::ctl::RunPid(o, names, std::cout, std::cerr); });

  auto* version = app.add_subcommand("version", "The running nodelet's version");
  version->callback([&] {
    rc = nodelet::ctl::RunVersion(o, std::cout, std::cerr);
    if (rc == 0) std::cout << "nodeletctl " << NODELET_VERSION << "\n";
  });

  std::string tail_name;
  int tail_lines = 10;
  bool follow = false;
  auto* tail = app.add_subcommand("tail", "Show a service's log (stdout and stderr)");
  tail->add_flag("-f,--follow", follow, "Keep printing what is appended");
  tail->add_option("-n,--lines", tail_lines, "Number of lines")->capture_default_str();
  tail->add_option("service", tail_name, "Service name")->required();
  tail->callback(
      [&] { rc = nodelet::ctl::RunTail(o, tail_name, tail_lines, follow, std::cout, std::cerr); });

  bool node_json = false;
  auto* node = app.add_subcommand("node", "The node's status: conditions, capacity, versions");
  node->add_flag("--json", node_json, "The v1 Node object");
  node->callback([&] { rc = nodelet::ctl::RunNode(o, node_json, std::cout, std::cerr); });

  bool runtime_json = false;
  auto* runtime =
      app.add_subcommand("runtime", "plegd's view of the runtime: sandboxes and containers");
  runtime->add_flag("--json", runtime_json, "Print JSON for scripts");
  runtime->callback([&] { rc = nodelet::ctl::RunRuntime(o, runtime_json, std::cout, std::cerr); });

  std::string manifests_output;
  auto* manifests = app.add_subcommand(
      "manifests",
      "Each manifest of each pod source: its pods and their admission, or why it was rejected "
      "(exit 0 all taken, 1 some rejected or a source failing, 4 no nodelet)");
  manifests->add_option("-o,--output", manifests_output, "Output format: json");
  manifests->callback(
      [&] { rc = nodelet::ctl::RunManifests(o, manifests_output, std::cout, std::cerr); });

  // `pods` and `pod NAME`: statuses straight from statusd (ctl/pods_command.h).
  nodelet::ctl::AddPodCommands(app, &o.run_dir, &rc);
  nodelet::ctl::LogsRequest logs_req;
  auto* logs = app.add_subcommand(
      "logs", "A pod's container log, as kubectl logs (exit 0; 4 unknown pod or container)");
  logs->add_option("pod", logs_req.pod, "Pod name (NAME or NAMESPACE/NAME)")->required();
  logs->add_option("-c,--container", logs_req.container, "Container (required when several)");
  logs->add_flag("-f,--follow", logs_req.follow,
                 "Keep printing what is appended (across rotations) until the container ends");
  logs->add_flag("-p,--previous", logs_req.previous,
                 "The previous instance of the container (before its last restart)");
  logs->add_option("--since", logs_req.since, "Only lines newer than this duration (5s, 2m, 1h)");
  logs->add_flag("--timestamps", logs_req.timestamps, "Prefix each line with its RFC3339 time");
  logs->add_option("--tail", logs_req.tail, "Only the last N lines (-1: all)");
  logs->add_flag("--all-containers", logs_req.all_containers,
                 "Every container of the pod, init containers first");
  logs->callback([&] { rc = nodelet::ctl::RunLogs(o, logs_req, std::cout, std::cerr); });

  // `volumes [POD]`: straight from volumed (ctl/volumes_command.h).
  nodelet::ctl::AddVolumesCommand(app, &o.run_dir, &rc);
  // `exec`, `attach`, `port-forward`: sessions through podworkerd and the runtime's streaming
  // server (ctl/stream_commands.h).
  nodelet::ctl::AddStreamCommands(app, &o.run_dir, &rc);
  // `top [pods|node]`: /stats/summary from the HTTP endpoint (ctl/top_command.h).
  nodelet::ctl::AddTopCommand(app, &o.run_dir, &rc);
  // `fleet nodes|pods|apply|delete`: the fleet's keys in etcd (ctl/fleet_command.h).
  nodelet::ctl::AddFleetCommand(app, &rc);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  return rc;
}
