// What every nodeletctl command shares: the exit codes, the error prefix and the output formats
// of `-o` (docs/nodeletctl.md, "One grammar").
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "lib/common/status.h"

namespace nodelet::ctl {

// The exit codes of every command (tests/unit/ctl/cli_grammar_test.cc checks each):
//   0  done (`status`: every service RUNNING);
//   1  done, and it failed or was refused: an action that failed, a manifest rejected, a source
//      failing, an answer that makes no sense;
//   2  usage: an unknown command or flag, a bad flag value, a missing argument;
//   3  `status`: a service is not RUNNING (LSB, as supervisorctl);
//   4  unknown: nodelet, or the service the command asks (statusd, volumed, the HTTP endpoint),
//      cannot be reached or refuses this user, or the service, pod or container named does not
//      exist.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNotRunning = 3;
inline constexpr int kExitUnknown = 4;

// Every error line nodeletctl prints starts with this (`nodeletctl: no pod 'web'`).
inline constexpr std::string_view kErrorPrefix = "nodeletctl: ";
// Writes kErrorPrefix to `err` and returns it, for `Error(err) << "what" << "\n"`.
std::ostream& Error(std::ostream& err);

// `-o`: "" is the command's table; wide adds the columns a command has beyond it (the table
// where it has none); json and yaml are the same document; name prints what identifies each
// row, one per line (kubectl's `pod/NAME`, a service's name).
enum class OutputFormat { kTable, kWide, kJson, kYaml, kName };
inline constexpr std::string_view kOutputHelp = "Output format: json, yaml, wide or name";

// InvalidArgument "unknown output format 'x' (known: json, yaml, wide, name)" for anything else.
Result<OutputFormat> ParseOutputFormat(std::string_view value);
// Parses `value` into `*format`; on an error prints it (with the prefix) and returns false, and
// the command exits kExitUsage.
bool ParseOutputOrExplain(std::string_view value, OutputFormat* format, std::ostream& err);

// `doc` as YAML, block style as kubectl prints it (a sequence under a key at the key's
// indentation). A string is written plain only when YAML reads it back as the same string (not
// a number, a boolean, null or a date, no indicator characters); otherwise double-quoted, with
// control characters, DEL, the C1 controls, U+2028/U+2029 and U+FEFF escaped and bytes that are
// not UTF-8 written as U+FFFD. Reading the text back gives `doc` again.
std::string YamlText(const nlohmann::json& doc);

// Prints `doc` for -o json (indented by `json_indent`) or -o yaml; false for the other formats.
bool PrintDocument(OutputFormat format, const nlohmann::json& doc, std::ostream& out,
                   int json_indent = 2);
// Prints one name per line.
void PrintNames(const std::vector<std::string>& names, std::ostream& out);

}  // namespace nodelet::ctl
