// The flags and YAML configuration file every nodelet binary shares.
//
// One file serves all binaries: top-level keys are the shared settings (the flags' long names
// without dashes: `root-dir: /var/lib/nodelet`), and a section named after a binary
// (`plegd:`, `supervisor:`...) holds that binary's own keys, which override the top level.
// Flags given on the command line override the file.
#pragma once

#include <sys/types.h>
#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "lib/common/duration.h"
#include "lib/common/status.h"

namespace nodelet {

struct CommonOptions {
  std::string config_file;  // --config; empty: none
  std::string root_dir = "/var/lib/nodelet";
  std::string run_dir = "/run/nodelet";
  std::string log_dir = "/var/log/nodelet";
  std::string log_level = "info";
  std::string log_format = "text";  // --log-format: text or json (lib/common/logging.h)
  // How often a service sends a heartbeat to the supervisor. 2 s: each heartbeat wakes four
  // threads (the service's loop and ZeroMQ I/O thread, the supervisor's), which at 100 idle pods
  // were about a third of all nodelet's wakeups at 1 s (docs/bench.md); the supervisor's
  // --heartbeat-deadline (5 s) still spans two of them.
  int heartbeat_interval_ms = 2000;
  // --admin-group NAME|GID as given ("" when unset), and the gid it names (ResolveCommonOptions):
  // the group besides root (and the process's own uid) that may connect to the sockets in the
  // run directory (lib/ipc/peer_access.h).
  std::string admin_group_flag;
  std::optional<gid_t> admin_group;
};

// A CLI11 config reader for YAML. It first checks the whole file against the table of every
// binary's keys (lib/service/config_keys.h) and refuses an unknown key, naming the file, the
// key's path and the nearest known key. Then the top-level keys that `app` has, and every key
// of the section named `section`, become flag values.
class YamlConfigReader : public CLI::Config {
 public:
  // `file`: the file's name in errors; empty: the value of `app`'s --config.
  YamlConfigReader(std::string section, const CLI::App* app, std::string file = "")
      : section_(std::move(section)), app_(app), file_(std::move(file)) {}
  std::string to_config(const CLI::App*, bool, bool, std::string) const override;
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override;

 private:
  std::string section_;
  const CLI::App* app_;  // outlives the reader (it holds it)
  std::string file_;
};

// Adds --config, --root-dir, --run-dir, --log-dir, --log-level, --heartbeat-interval and
// --admin-group to `app` and sets the YAML reader for `section`.
void AddCommonOptions(CLI::App& app, CommonOptions& opts, const std::string& section);

// The exit code for a ParseError of `app` (0 for --help); prints CLI11's message and, for an
// unknown flag, the nearest flag `app` knows ("--max-podz: unknown flag; nearest: --max-pods").
int ExitOnParseError(const CLI::App& app, const CLI::ParseError& error);

// After parsing: resolves --admin-group into a gid. The error names the flag ("--admin-group: no
// group named 'x'"); the binaries print it and exit 2.
Status ResolveCommonOptions(CommonOptions& opts);

// Loads the YAML file (for the sections that CLI11 does not map, such as the supervisor's
// per-service table). An empty path gives an empty node.
Result<YAML::Node> LoadYamlFile(const std::string& path);

// A CLI11 check that accepts what ParseDuration (lib/common/duration.h: Go's grammar, 0 or
// more) accepts, with its error message.
CLI::Validator DurationValidator();

}  // namespace nodelet
