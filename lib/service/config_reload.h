// Reloading the configuration file (SIGHUP, `systemctl reload`, the supervisor's ReloadConfig):
// what changed in the file since it was last read, and which of the changes a binary can apply
// while it runs (docs/supervisor.md, "Reloading the configuration").
//
// Only the file is read again: the command line is the same as at start, and a flag given there
// wins over the file, so a change to such a key in the file changes nothing. Each binary names the
// keys it applies live; a change to any other key is refused with the key named (the running
// value stays until a restart). A file that no longer parses, or a live key whose new value is
// invalid, is refused whole: nothing is applied.
#pragma once

#include <CLI/CLI.hpp>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "lib/common/status.h"

namespace nodelet {

// A binary's settings as its config file gives them: its top-level keys and those of its section
// (as YamlConfigReader reads them), key -> its values (one for a scalar, each item of a list).
using FileSettings = std::map<std::string, std::vector<std::string>>;

// Reads `path` (empty: no file, no settings) with the strictness of the start: an unknown key is
// an error naming the file and the key. `app` is the binary's app (with AddCommonOptions).
Result<FileSettings> ReadFileSettings(const std::string& path, const std::string& section,
                                      const CLI::App& app);

// What a reload does with the keys whose values changed (added, removed or changed), each list
// sorted.
struct ReloadPlan {
  std::vector<std::string> apply;       // live keys: applied now
  std::vector<std::string> restart;     // other keys: need a restart, the running value stays
  std::vector<std::string> overridden;  // given on the command line, which wins
  bool empty() const { return apply.empty() && restart.empty() && overridden.empty(); }
  // One line for the log: "applied log-level; not applied (a restart is needed): max-pods;
  // ignored (given on the command line): run-dir", or "nothing changed".
  std::string Summary() const;
};

// `argv`: the binary's command line (argv[0] excluded or not: only "--KEY" and "--KEY=..." count).
ReloadPlan PlanReload(const FileSettings& before, const FileSettings& after,
                      const std::set<std::string>& live, const std::vector<std::string>& argv);

// What the binary runs with after a reload by `plan`: `after`, but the keys it did not apply
// (restart, overridden) as they were in `before`, so that the next reload names them again.
FileSettings SettingsAfterReload(const FileSettings& before, const FileSettings& after,
                                 const ReloadPlan& plan);

// The value of `key` in `settings` (a list's items joined by ','), or `fallback` when the file
// does not give it.
std::string SettingOr(const FileSettings& settings, const std::string& key,
                      const std::string& fallback);
// Whether `plan` applies `key`.
bool Applies(const ReloadPlan& plan, const std::string& key);

// The log levels --log-level takes, and whether `level` is one.
const std::vector<std::string>& LogLevels();
bool IsLogLevel(const std::string& level);

}  // namespace nodelet
