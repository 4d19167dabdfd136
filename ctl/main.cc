// nodeletctl: the operator's CLI (flags and subcommands; the logic is in ctl/*_command*.cc).
#include <CLI/CLI.hpp>
#include <iostream>

#include "ctl/cli_output.h"
#include "ctl/fleet_command.h"
#include "ctl/logs_command.h"
#include "ctl/manifests_command.h"
#include "ctl/output_flags.h"
#include "ctl/pods_command.h"
#include "ctl/service_commands.h"
#include "ctl/stream_commands.h"
#include "ctl/terminal_output.h"
#include "ctl/top_command.h"
#include "ctl/volumes_command.h"

int main(int argc, char** argv) {
  // Container and manifest text never drives the operator's terminal (ctl/terminal_output.h).
  const nodelet::ctl::TerminalOutputGuard terminal(argc, argv);
  using nodelet::ctl::CtlOptions;
  using nodelet::ipc::ctl::RequestKind;
  CLI::App app{"nodeletctl: control a running nodelet (in the style of supervisorctl)",
               "nodeletctl"};
  app.require_subcommand(1);
  // Global flags anywhere on the line, before or after the subcommand (kubectl's grammar): a
  // subcommand hands the flags it does not know to its parent. Subcommands made after this
  // inherit it.
  app.fallthrough();
  CtlOptions o;
  app.add_option("--run-dir", o.run_dir, "Run directory of the nodelet to talk to")
      ->envname("NODELET_RUN_DIR")
      ->capture_default_str();
  int rc = 0;
  std::vector<std::string> names;
  // The format a command's -o/--json asks for; a bad one sets rc to 2 and the command is not run.
  auto format_of = [&rc](const nodelet::ctl::OutputFlags& flags,
                         nodelet::ctl::OutputFormat* format) {
    if (flags.Resolve(format, std::cerr)) return true;
    rc = nodelet::ctl::kExitUsage;
    return false;
  };
  nodelet::ctl::OutputFormat format = nodelet::ctl::OutputFormat::kTable;

  nodelet::ctl::OutputFlags status_output;
  auto* status = app.add_subcommand(
      "status", "Show the services' states (exit 0 all running, 3 some not, 4 unknown)");
  status->add_option("services", names, "Service names (default: all)");
  nodelet::ctl::AddOutputFlags(status, &status_output, /*json_alias=*/true);
  status->callback([&] {
    if (format_of(status_output, &format))
      rc = nodelet::ctl::RunStatus(o, names, format, std::cout, std::cerr);
  });

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

  bool client_only = false;
  auto* version = app.add_subcommand(
      "version", "nodeletctl's version, then the running nodelet's (4 when it is not reachable)");
  version->add_flag("--client", client_only, "Only nodeletctl's version; nothing is asked");
  version->callback([&] { rc = nodelet::ctl::RunVersion(o, client_only, std::cout, std::cerr); });

  std::string tail_name;
  int tail_lines = 10;
  bool follow = false;
  auto* tail = app.add_subcommand("tail", "Show a service's log (stdout and stderr)");
  tail->add_flag("-f,--follow", follow, "Keep printing what is appended");
  tail->add_option("-n,--lines", tail_lines, "Number of lines")->capture_default_str();
  tail->add_option("service", tail_name, "Service name")->required();
  tail->callback(
      [&] { rc = nodelet::ctl::RunTail(o, tail_name, tail_lines, follow, std::cout, std::cerr); });

  nodelet::ctl::OutputFlags node_output;
  auto* node = app.add_subcommand("node", "The node's status: conditions, capacity, versions");
  nodelet::ctl::AddOutputFlags(node, &node_output, /*json_alias=*/true,
                               "Output format: json or yaml (the v1 Node), name, wide");
  node->callback([&] {
    if (format_of(node_output, &format))
      rc = nodelet::ctl::RunNode(o, format, std::cout, std::cerr);
  });

  nodelet::ctl::OutputFlags runtime_output;
  auto* runtime =
      app.add_subcommand("runtime", "plegd's view of the runtime: sandboxes and containers");
  nodelet::ctl::AddOutputFlags(runtime, &runtime_output, /*json_alias=*/true);
  runtime->callback([&] {
    if (format_of(runtime_output, &format))
      rc = nodelet::ctl::RunRuntime(o, format, std::cout, std::cerr);
  });

  nodelet::ctl::OutputFlags manifests_output;
  auto* manifests = app.add_subcommand(
      "manifests",
      "Each manifest of each pod source: its pods and their admission, or why it was rejected "
      "(exit 0 all taken, 1 some rejected or a source failing, 4 no nodelet)");
  nodelet::ctl::AddOutputFlags(manifests, &manifests_output, /*json_alias=*/false);
  manifests->callback([&] {
    if (format_of(manifests_output, &format))
      rc = nodelet::ctl::RunManifests(o, format, std::cout, std::cerr);
  });

  // `pods` and `pod NAME`: statuses straight from statusd (ctl/pods_command.h).
  nodelet::ctl::AddPodCommands(app, &o.run_dir, &rc);
  nodelet::ctl::LogsRequest logs_req;
  auto* logs = app.add_subcommand(
      "logs", "A pod's container log, as kubectl logs (exit 0; 4 unknown pod or container)");
  logs->add_option("pod", logs_req.pod, "Pod name (NAME, NAMESPACE/NAME or pod/NAME)")->required();
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
  logs->callback([&] {
    // pod/NAME, as `pods -o name` prints it, is NAME.
    if (logs_req.pod.rfind("pod/", 0) == 0) logs_req.pod.erase(0, 4);
    rc = nodelet::ctl::RunLogs(o, logs_req, std::cout, std::cerr);
  });

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
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // A usage error: one line with the prefix of every error, and where the usage is.
    nodelet::ctl::Error(std::cerr) << e.what() << " (nodeletctl --help)\n";
    return nodelet::ctl::kExitUsage;
  }
  return rc;
}
