// What nodelet's one configuration file may hold, and the check that refuses anything else.
//
// The file has top-level keys (any binary's flag without its dashes: each binary reads those it
// has and leaves the others to the binaries that have them) and one section per binary
// (supervisor:, plegd:, podworkerd:, statusd:, volumed:) holding only that binary's keys. The
// table is declared once, in config_keys.cc; a unit test builds every binary's CLI11 app and
// compares its options with it (tests/unit/config/config_examples_test.cc): they cannot drift.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <string_view>
#include <vector>

#include "lib/common/status.h"

namespace nodelet {

struct ConfigSection {
  std::string name;               // "plegd": the section, and the binary nodelet-plegd
  std::vector<std::string> keys;  // its flags' long names without dashes, sorted
};

// Every binary that reads the file, with its keys (the shared ones included, --config not).
const std::vector<ConfigSection>& ConfigSections();

// The keys of `section`, or nullptr when there is no such section.
const std::vector<std::string>* ConfigSectionKeys(std::string_view section);

// The supervisor's table of per-service commands, supervisor.services.NAME.{command,args}: its
// key in the supervisor's section and the keys each entry takes.
inline constexpr std::string_view kServicesKey = "services";
const std::vector<std::string>& ServiceEntryKeys();

// Checks the whole parsed file against the table: every top-level key is a section or some
// binary's key, every section's key is that binary's. The error names the file, the key's path
// ("supervisor.max-podz") and the nearest known key.
Status CheckConfigKeys(const YAML::Node& root, const std::string& file);

// The candidate nearest to `word` by edit distance (the first of equals); "" when none.
std::string NearestKey(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace nodelet
