// The table of config keys (lib/service/config_keys.h) against every binary's real flags, and
// every example the project ships parsed by the real option parsers: deploy/nodelet.yaml with
// its commented examples uncommented, and each `--flag value` in docs/*.md and README.md that
// names a nodelet flag.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "lib/service/config_keys.h"
#include "supervisor/eviction_manager.h"
#include "tests/testing/binary_apps.h"
#include "tests/testing/harness.h"

namespace nodelet::testing {
namespace {

using ::testing::HasSubstr;

std::string SourcePath(const std::string& relative) {
  return std::string(NODELET_SOURCE_DIR) + "/" + relative;
}

std::string ReadSource(const std::string& relative) {
  std::ifstream in(SourcePath(relative));
  EXPECT_TRUE(in.good()) << relative;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Every line `# key: ...` (any indentation before the `#`, any after the `# `) loses its "# ",
// so `#   cgroup-driver: cgroupfs` becomes `  cgroup-driver: cgroupfs`. Prose comments stay.
std::string Uncomment(const std::string& yaml, int* uncommented) {
  static const std::regex kKeyLine(R"(^(\s*)# (\s*[a-z][a-z0-9-]*:(\s.*)?)$)");
  std::istringstream in(yaml);
  std::string out, line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, kKeyLine)) {
      line = m[1].str() + m[2].str();
      ++*uncommented;
    }
    out += line + "\n";
  }
  return out;
}

// Parses the config file through every binary; for the supervisor also its eviction thresholds
// (checked when it starts), so that an example such as memory.available=1m30s is really read.
void ExpectEveryBinaryTakes(const std::string& path) {
  for (const auto& section : BinarySections()) {
    BinaryApp bin(section);
    EXPECT_EQ(bin.Parse({"--config", path}), "") << section << " reading " << path;
    if (section == "supervisor") {
      const auto& o = bin.supervisor_options();
      auto thresholds = supervisor::EvictionThresholdsFromFlags(o.eviction_hard, o.eviction_soft,
                                                                o.eviction_soft_grace_period,
                                                                o.eviction_minimum_reclaim);
      EXPECT_TRUE(thresholds.ok()) << path << ": " << thresholds.status().message();
    }
  }
}

TEST(ConfigKeysTest, TableMatchesEveryBinarysFlags) {
  ASSERT_EQ(ConfigSections().size(), BinarySections().size());
  for (const auto& section : BinarySections()) {
    BinaryApp bin(section);
    const auto* keys = ConfigSectionKeys(section);
    ASSERT_NE(keys, nullptr) << section;
    EXPECT_EQ(*keys, bin.Keys()) << "lib/service/config_keys.cc's " << section
                                 << " keys differ from nodelet-" << section << "'s flags";
  }
}

TEST(ConfigExamplesTest, ShippedConfigAndItsCommentedExamplesParse) {
  const std::string shipped = ReadSource("deploy/nodelet.yaml");
  TempDir dir;
  WriteTextFile(dir.Sub("shipped.yaml"), shipped);
  ExpectEveryBinaryTakes(dir.Sub("shipped.yaml"));

  int uncommented = 0;
  const std::string all = Uncomment(shipped, &uncommented);
  EXPECT_GE(uncommented, 10) << all;  // the examples are there to be tried
  WriteTextFile(dir.Sub("examples.yaml"), all);
  ExpectEveryBinaryTakes(dir.Sub("examples.yaml"));
}

TEST(ConfigExamplesTest, ShippedConfigKeepsTheBenchmarkedDefaults) {
  TempDir dir;
  WriteTextFile(dir.Sub("shipped.yaml"), ReadSource("deploy/nodelet.yaml"));
  const YAML::Node root = YAML::LoadFile(dir.Sub("shipped.yaml"));
  // Each value the file sets is the flag's default (docs/bench.md measured those), except the
  // settings that have no default to keep.
  const std::set<std::string> chosen = {"pod-manifest-path", "runtime-endpoint"};
  for (const auto& section : BinarySections()) {
    BinaryApp bin(section);
    auto check = [&](const YAML::Node& map, const std::string& where) {
      for (const auto& kv : map) {
        const std::string key = kv.first.as<std::string>();
        if (ConfigSectionKeys(key) != nullptr || chosen.count(key) || !kv.second.IsScalar()) {
          continue;
        }
        const CLI::Option* opt = bin.app().get_option_no_throw("--" + key);
        if (opt == nullptr) continue;
        std::string want = opt->get_default_str();
        if (want == "1" || want == "0") want = want == "1" ? "true" : "false";  // CLI11's bools
        EXPECT_EQ(kv.second.as<std::string>(), want)
            << where << key << " in deploy/nodelet.yaml is not nodelet-" << section << "'s default";
      }
    };
    check(root, "");
    if (root[section]) check(root[section], section + ".");
  }
  // plegd's period has no flag default (it depends on --runtime-events): the file leaves it to
  // plegd, whose default with runtime events is the benchmarked 10 s (docs/plegd.md).
  BinaryApp plegd("plegd");
  ASSERT_EQ(plegd.Parse({"--config", dir.Sub("shipped.yaml")}), "");
  const CLI::Option* events = plegd.app().get_option("--runtime-events");
  EXPECT_EQ(events->as<bool>(), true);
  EXPECT_EQ(plegd.app().get_option("--relist-period")->count(), 0u)
      << "deploy/nodelet.yaml sets plegd's relist period; its default is the benchmarked one";
}

// A flag's value in the docs is an example unless it is a placeholder (DIR, NAME|GID, <name>,
// A]) or prose after the flag.
bool IsPlaceholder(const std::string& value) {
  static const std::regex kPlaceholder(R"([A-Z]{2,}|^[A-Z]\]?$|<[a-z])");
  return value.empty() || value[0] == '-' || std::regex_search(value, kPlaceholder);
}

TEST(ConfigExamplesTest, EveryFlagExampleInTheDocsParses) {
  std::set<std::string> known;
  for (const auto& s : ConfigSections()) known.insert(s.keys.begin(), s.keys.end());
  std::vector<std::string> files = {"README.md"};
  for (const auto& e : std::filesystem::directory_iterator(SourcePath("docs"))) {
    // docs/flags.md is the flags' own help, generated (flags_doc_test.cc), not examples.
    if (e.path().extension() == ".md" && e.path().filename() != "flags.md") {
      files.push_back("docs/" + e.path().filename().string());
    }
  }
  static const std::regex kFlag(R"(--([a-z][a-z0-9-]+)(=| )([^\s`'"]*))");
  int checked = 0;
  for (const auto& file : files) {
    std::istringstream in(ReadSource(file));
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      for (std::sregex_iterator it(line.begin(), line.end(), kFlag), end; it != end; ++it) {
        const std::string flag = (*it)[1].str(), value = (*it)[3].str();
        if (!known.count(flag) || IsPlaceholder(value)) continue;
        // "cgroupfs|systemd": each choice is an example.
        std::vector<std::string> choices;
        for (size_t from = 0;;) {
          const size_t bar = value.find('|', from);
          choices.push_back(value.substr(from, bar - from));
          if (bar == std::string::npos) break;
          from = bar + 1;
        }
        for (const auto& section : BinarySections()) {
          const auto* keys = ConfigSectionKeys(section);
          if (!std::binary_search(keys->begin(), keys->end(), flag)) continue;
          for (const auto& choice : choices) {
            BinaryApp bin(section);
            EXPECT_EQ(bin.Parse({"--" + flag + "=" + choice}), "")
                << file << ":" << n << ": --" << flag << " " << choice << " ("
                << (section == "supervisor" ? "nodelet" : "nodelet-" + section) << ")";
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GE(checked, 30);
}

TEST(ConfigExamplesTest, DocsExampleWithABadDurationIsCaught) {
  // The check above is only as good as the parse: a bad example fails it.
  BinaryApp plegd("plegd");
  EXPECT_THAT(plegd.Parse({"--relist-period=1000"}), HasSubstr("unit is missing"));
  EXPECT_TRUE(IsPlaceholder("DIR/run"));
  EXPECT_TRUE(IsPlaceholder("NAME|GID"));
  EXPECT_FALSE(IsPlaceholder("memory.available<100Mi"));
  EXPECT_FALSE(IsPlaceholder("1m30s"));
}

}  // namespace
}  // namespace nodelet::testing
