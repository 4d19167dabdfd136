// docs/flags.md is generated from the binaries' own option tables (each flag's names, default,
// help and config key) and lib/service/kubelet_names.h (the kubelet's name for each); this test
// fails when the file is out of date and rewrites it when NODELET_UPDATE_FLAGS_DOC=1.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "lib/service/kubelet_names.h"
#include "tests/testing/binary_apps.h"

namespace nodelet::testing {
namespace {

const char* const kFlagsDoc = "docs/flags.md";

std::string Cell(std::string text) {
  std::string out;
  for (char c : text) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '\n') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out.empty() ? " " : out;
}

std::string Title(const std::string& section) {
  if (section == "supervisor") return "nodelet (the supervisor and sync loop)";
  return "nodelet-" + section;
}

std::string GeneratedFlagsDoc() {
  std::ostringstream out;
  out << "# Flags and config keys\n\n"
         "Every flag of every nodelet binary, generated from the binaries' own option tables by\n"
         "`config-unit` (`FlagsDocTest`), which fails when this file is out of date:\n"
         "`NODELET_UPDATE_FLAGS_DOC=1 meson test -C build config-unit` writes it again. A flag's\n"
         "config key is its long name without the dashes, at the top level of the config file\n"
         "(every binary that has the flag reads it) or in the binary's section "
         "(docs/supervisor.md,\n"
         "\"Configuration\"); flags given on the command line win over the file. \"command line\n"
         "only\": not a config key. The kubelet column gives the kubelet's flag and its\n"
         "KubeletConfiguration field for the same concept (lib/service/kubelet_names.cc); where\n"
         "the kubelet's flag name differs from nodelet's, nodelet accepts it too (listed among "
         "the\n"
         "flag's names). The kubelet's `-v` (klog's verbosity) sets the log level when\n"
         "`--log-level` is given neither on the command line nor in the file: 0 to 2 info (the\n"
         "kubelet's steady-state level is 2), 3 and 4 debug, 5 and more trace. A kubelet's\n"
         "KubeletConfiguration file is read as `--config` too: its fields in these keys, the\n"
         "others refused by name (docs/supervisor.md, \"Configuration\").\n";
  for (const auto& section : BinarySections()) {
    BinaryApp bin(section);
    out << "\n## " << Title(section) << "\n\n"
        << "| flag | config key | default | kubelet | what |\n|---|---|---|---|---|\n";
    for (const CLI::Option* opt : bin.app().get_options()) {
      const auto& lnames = opt->get_lnames();
      if (lnames.empty() || lnames.front() == "help") continue;
      std::string names;
      for (const auto& s : opt->get_snames())
        names += (names.empty() ? "" : ", ") + ("`-" + s + "`");
      for (const auto& l : lnames) names += (names.empty() ? "" : ", ") + ("`--" + l + "`");
      const std::string key = lnames.front() == "config" || !opt->get_configurable()
                                  ? "command line only"
                                  : "`" + lnames.front() + "`";
      const std::string def = opt->get_default_str();
      const KubeletName* kubelet = KubeletNameOf(lnames.front());
      std::string kubelet_cell;
      if (kubelet != nullptr) {
        if (kubelet->flag[0] != '\0') kubelet_cell = std::string("`") + kubelet->flag + "`";
        if (kubelet->field[0] != '\0') {
          kubelet_cell +=
              (kubelet_cell.empty() ? "" : ", ") + std::string("`") + kubelet->field + "`";
        }
      }
      out << "| " << names << " | " << key << " | " << Cell(def.empty() ? "" : "`" + def + "`")
          << " | " << Cell(kubelet_cell) << " | " << Cell(opt->get_description()) << " |\n";
    }
  }
  return out.str();
}

TEST(FlagsDocTest, DocsFlagsMdIsGeneratedFromTheBinariesOptions) {
  const std::string path = std::string(NODELET_SOURCE_DIR) + "/" + kFlagsDoc;
  const std::string want = GeneratedFlagsDoc();
  const char* update = std::getenv("NODELET_UPDATE_FLAGS_DOC");
  if (update != nullptr && std::string(update) == "1") {
    std::ofstream(path) << want;
  }
  std::ifstream in(path);
  std::stringstream have;
  have << in.rdbuf();
  EXPECT_TRUE(have.str() == want)
      << kFlagsDoc << " is out of date with the binaries' flags: run "
      << "`NODELET_UPDATE_FLAGS_DOC=1 meson test -C build config-unit` and commit the file";
}

}  // namespace
}  // namespace nodelet::testing
