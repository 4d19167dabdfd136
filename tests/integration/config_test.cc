// The real binaries and their configuration: a typo in the config file stops nodelet before it
// starts anything, naming the file, the key and the nearest known key; an unknown flag is
// refused with the nearest known flag; and the examples each binary's --help gives parse.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "supervisor/eviction_manager.h"
#include "tests/testing/binary_apps.h"
#include "tests/testing/harness.h"

namespace nodelet::testing {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

class ConfigTest : public ::testing::Test {
 protected:
  // A service directory whose "services" only leave a mark: nodelet starting any of them shows.
  void SetUp() override {
    std::filesystem::create_directories(dir_.Sub("services"));
    for (const char* name : {"plegd", "statusd", "volumed", "podworkerd"}) {
      const std::string path = dir_.Sub("services/nodelet-") + name;
      WriteTextFile(path, "#!/bin/sh\ntouch " + dir_.Sub("spawned-") + name + "\nexec sleep 30\n");
      chmod(path.c_str(), 0755);
    }
  }
  std::vector<std::string> NodeletArgv() {
    return {BinDir() + "/nodelet",
            "--root-dir",
            dir_.Sub("root"),
            "--run-dir",
            dir_.Sub("run"),
            "--log-dir",
            dir_.Sub("log"),
            "--service-dir",
            dir_.Sub("services"),
            "--cgroup-root",
            TestCgroupRoot(dir_.path()),
            "--http-address",
            ""};
  }
  void ExpectNothingStarted() {
    for (const char* name : {"plegd", "statusd", "volumed", "podworkerd"}) {
      EXPECT_FALSE(std::filesystem::exists(dir_.Sub("spawned-") + name)) << name;
    }
    EXPECT_FALSE(std::filesystem::exists(dir_.Sub("run"))) << "nodelet made its run directory";
  }

  TempDir dir_;
};

TEST_F(ConfigTest, TypoInConfigStopsNodeletAtOnceNamingFileKeyAndNearestKey) {
  const std::string config = dir_.Sub("nodelet.yaml");
  WriteTextFile(config, "supervisor:\n  max-podz: 3\n");
  auto argv = NodeletArgv();
  argv.insert(argv.end(), {"--config", config});
  const auto started = std::chrono::steady_clock::now();
  CommandResult r = RunCommand(argv, 10s);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 3s) << "not refused at once";
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, -1) << r.output;
  EXPECT_THAT(r.output, HasSubstr(config));
  EXPECT_THAT(r.output, HasSubstr("supervisor.max-podz"));
  EXPECT_THAT(r.output, HasSubstr("max-pods"));
  ExpectNothingStarted();

  // Each service refuses the same file by itself (systemd mode starts them with it).
  for (const char* bin : {"nodelet-plegd", "nodelet-statusd"}) {
    CommandResult svc = RunCommand({BinDir() + "/" + bin, "--root-dir", dir_.Sub("root"),
                                    "--run-dir", dir_.Sub("run"), "--config", config},
                                   10s);
    EXPECT_EQ(svc.exit_code, 2) << bin << ": " << svc.output;
    EXPECT_THAT(svc.output, HasSubstr("supervisor.max-podz")) << bin;
  }
  ExpectNothingStarted();
}

TEST_F(ConfigTest, UnknownFlagIsRefusedWithTheNearestKnownFlag) {
  auto argv = NodeletArgv();
  argv.insert(argv.end(), {"--max-podz", "3"});
  CommandResult r = RunCommand(argv, 10s);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--max-podz"));
  EXPECT_THAT(r.output, HasSubstr("nearest known flag: --max-pods"));
  ExpectNothingStarted();

  CommandResult svc = RunCommand({BinDir() + "/nodelet-plegd", "--relist-perod=1s"}, 10s);
  EXPECT_EQ(svc.exit_code, 2) << svc.output;
  EXPECT_THAT(svc.output, HasSubstr("nearest known flag: --relist-period"));
}

TEST_F(ConfigTest, OldBareMillisecondsAndNegativeDurationsAreRefusedSayingWhy) {
  auto argv = NodeletArgv();
  argv.insert(argv.end(), {"--backoff-initial", "100"});
  CommandResult bare = RunCommand(argv, 10s);
  EXPECT_EQ(bare.exit_code, 2) << bare.output;
  EXPECT_THAT(bare.output, HasSubstr("unit is missing"));
  argv.back() = "-1s";
  CommandResult negative = RunCommand(argv, 10s);
  EXPECT_EQ(negative.exit_code, 2) << negative.output;
  EXPECT_THAT(negative.output, HasSubstr("negative"));
  ExpectNothingStarted();
}

// Each option's "e.g. EXAMPLE" in the real binary's --help, as --flag=EXAMPLE.
std::vector<std::string> HelpExamples(const std::string& binary) {
  CommandResult help = RunCommand({BinDir() + "/" + binary, "--help"}, 10s);
  EXPECT_EQ(help.exit_code, 0) << binary << ": " << help.output;
  static const std::regex kOption(R"(^\s+(--[a-z][a-z0-9-]*))");
  static const std::regex kExample(R"(e\.g\. '?([^\s',;)]+(,[^\s';)]+)*)'?)");
  std::vector<std::string> out;
  std::istringstream in(help.output);
  std::string line, option;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, kOption)) option = m[1].str();
    if (option.empty() || !std::regex_search(line, m, kExample)) continue;
    out.push_back(option + "=" + m[1].str());
  }
  return out;
}

TEST_F(ConfigTest, EveryHelpExampleParses) {
  int examples = 0;
  for (const auto& section : BinarySections()) {
    const std::string binary = section == "supervisor" ? "nodelet" : "nodelet-" + section;
    std::vector<std::string> args = HelpExamples(binary);
    examples += static_cast<int>(args.size());
    // All of a binary's examples at once: they are meant to go together (a soft threshold's
    // example with its grace period's).
    BinaryApp bin(section);
    EXPECT_EQ(bin.Parse(args), "") << binary << " " << ::testing::PrintToString(args);
    if (section == "supervisor") {
      EXPECT_THAT(args, ::testing::Contains("--eviction-soft-grace-period=memory.available=1m30s"));
      const auto& o = bin.supervisor_options();
      auto thresholds = supervisor::EvictionThresholdsFromFlags(o.eviction_hard, o.eviction_soft,
                                                                o.eviction_soft_grace_period,
                                                                o.eviction_minimum_reclaim);
      EXPECT_TRUE(thresholds.ok()) << thresholds.status().message();
    }
  }
  EXPECT_GE(examples, 8);
}

}  // namespace
}  // namespace nodelet::testing
