// `nodeletctl volumes [POD] [-o json|yaml|wide|name]`: volumed's desired and actual volumes,
// straight from volumed's socket: per volume its plugin, state (desired, mounted, failing) and host
// path, or why it fails. POD is a pod name (NAME-NODE) or UID. Exit 0; 4 when volumed is
// unreachable or the pod is unknown.
#pragma once

#include <CLI/CLI.hpp>
#include <ostream>
#include <string>

#include "ctl/cli_output.h"

namespace nodelet::ctl {

int RunVolumes(const std::string& run_dir, const std::string& pod, OutputFormat format,
               std::ostream& out, std::ostream& err);

void AddVolumesCommand(CLI::App& app, const std::string* run_dir, int* rc);

}  // namespace nodelet::ctl
