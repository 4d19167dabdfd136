// The config file is strict: every key is checked against the table of all binaries' keys
// (lib/service/config_keys.h) before any becomes a flag value, and an unknown one stops the
// parse naming the file, the key's path and the nearest known key.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "lib/service/config_keys.h"
#include "lib/service/options.h"
#include "tests/testing/harness.h"

namespace nodelet {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A binary reading the plegd section, with the shared flags and --relist-period.
struct Parsed {
  bool ok = false;
  std::string error;
  CommonOptions common;
  std::string relist_period;
};

Parsed ParseAsPlegd(const std::string& yaml, const std::string& path) {
  std::ofstream(path) << yaml;
  Parsed p;
  CLI::App app{"test", "nodelet-plegd"};
  AddCommonOptions(app, p.common, "plegd");
  app.add_option("--relist-period", p.relist_period);
  std::vector<std::string> args = {"--config", path};
  std::reverse(args.begin(), args.end());  // CLI11 takes a vector in reverse
  try {
    app.parse(args);
    p.ok = true;
  } catch (const CLI::ParseError& e) {
    p.error = e.what();
  }
  return p;
}

class ConfigReaderTest : public ::testing::Test {
 protected:
  testing::TempDir dir_;
  std::string path_ = dir_.Sub("nodelet.yaml");
};

TEST_F(ConfigReaderTest, ReadsTopLevelAndOwnSectionWithOtherBinariesKeysAccepted) {
  Parsed p = ParseAsPlegd(
      "log-level: debug\n"
      "max-pods: 50\n"  // the supervisor's, at the top level: not plegd's, still valid
      "plegd:\n  relist-period: 10s\n"
      "supervisor:\n  max-pods: 3\n  services:\n    plegd:\n      args: [--x]\n"
      "podworkerd:\n  resync-period: 1m\n"
      "statusd:\n  db-check-period: 0\n"
      "volumed:\n",
      path_);
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_EQ(p.common.log_level, "debug");
  EXPECT_EQ(p.relist_period, "10s");
}

TEST_F(ConfigReaderTest, UnknownKeyInASectionNamesFilePathAndNearestKey) {
  // Read by plegd, a typo in the supervisor's section still stops it: the file is one.
  Parsed p = ParseAsPlegd("supervisor:\n  max-podz: 3\n", path_);
  ASSERT_FALSE(p.ok);
  EXPECT_THAT(p.error, HasSubstr(path_));
  EXPECT_THAT(p.error, HasSubstr("'supervisor.max-podz'"));
  EXPECT_THAT(p.error, HasSubstr("nearest known key: 'max-pods'"));

  Parsed own = ParseAsPlegd("plegd:\n  relist-perod: 1s\n", path_);
  ASSERT_FALSE(own.ok);
  EXPECT_THAT(own.error, HasSubstr("'plegd.relist-perod'"));
  EXPECT_THAT(own.error, HasSubstr("'relist-period'"));
}

TEST_F(ConfigReaderTest, KeyOfAnotherSectionIsRefusedInOneThatDoesNotTakeIt) {
  // max-pods is a key, but not plegd's.
  Parsed p = ParseAsPlegd("plegd:\n  max-pods: 3\n", path_);
  ASSERT_FALSE(p.ok);
  EXPECT_THAT(p.error, HasSubstr("'plegd.max-pods'"));
  EXPECT_THAT(p.error, HasSubstr("nodelet-plegd has no such key"));
}

TEST_F(ConfigReaderTest, UnknownTopLevelKeyAndUnknownSectionAreRefused) {
  Parsed key = ParseAsPlegd("log-levle: debug\n", path_);
  ASSERT_FALSE(key.ok);
  EXPECT_THAT(key.error, HasSubstr("unknown key 'log-levle'"));
  EXPECT_THAT(key.error, HasSubstr("nearest known key: 'log-level'"));

  Parsed section = ParseAsPlegd("plegdd:\n  relist-period: 1s\n", path_);
  ASSERT_FALSE(section.ok);
  EXPECT_THAT(section.error, HasSubstr("unknown key 'plegdd'"));
  EXPECT_THAT(section.error, HasSubstr("nearest known key: 'plegd'"));

  Parsed service = ParseAsPlegd("supervisor:\n  services:\n    plgd:\n      args: []\n", path_);
  ASSERT_FALSE(service.ok);
  EXPECT_THAT(service.error, HasSubstr("'supervisor.services.plgd'"));
  EXPECT_THAT(service.error, HasSubstr("'plegd'"));

  Parsed field = ParseAsPlegd("supervisor:\n  services:\n    plegd:\n      arg: []\n", path_);
  ASSERT_FALSE(field.ok);
  EXPECT_THAT(field.error, HasSubstr("'supervisor.services.plegd.arg'"));
  EXPECT_THAT(field.error, HasSubstr("'args'"));
}

TEST_F(ConfigReaderTest, SectionThatIsNotAMappingIsRefused) {
  Parsed p = ParseAsPlegd("plegd: 3\n", path_);
  ASSERT_FALSE(p.ok);
  EXPECT_THAT(p.error, HasSubstr("'plegd' must be a mapping"));
  Parsed nested = ParseAsPlegd("plegd:\n  relist-period: {a: 1}\n", path_);
  ASSERT_FALSE(nested.ok);
  EXPECT_THAT(nested.error, HasSubstr("'plegd.relist-period' takes a value"));
}

TEST(NearestKeyTest, PicksTheSmallestEditDistance) {
  std::vector<std::string> keys = {"max-pods", "node-ip", "pod-manifest-path"};
  EXPECT_EQ(NearestKey("max-podz", keys), "max-pods");
  EXPECT_EQ(NearestKey("nodeip", keys), "node-ip");
  EXPECT_EQ(NearestKey("pod-manifests-path", keys), "pod-manifest-path");
  EXPECT_EQ(NearestKey("x", {}), "");
}

}  // namespace
}  // namespace nodelet
