// `-o/--output` on a nodeletctl command, and `--json` where a command had it (the same as
// `-o json`, kept for the scripts that use it). Only for files that build the command line.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <ostream>
#include <string>

#include "ctl/cli_output.h"

namespace nodelet::ctl {

struct OutputFlags {
  std::string output;
  bool json = false;

  // The format asked for; false after printing why when it is unknown (exit kExitUsage).
  bool Resolve(OutputFormat* format, std::ostream& err) const {
    if (json && !output.empty() && output != "json") {
      Error(err) << "--json and -o " << output << " ask for two formats\n";
      return false;
    }
    return ParseOutputOrExplain(json ? "json" : output, format, err);
  }
};

inline void AddOutputFlags(CLI::App* command, OutputFlags* flags, bool json_alias,
                           const std::string& help = std::string(kOutputHelp)) {
  command->add_option("-o,--output", flags->output, help);
  if (json_alias) command->add_flag("--json", flags->json, "The same as -o json");
}

}  // namespace nodelet::ctl
