// A reload reads the config file again with the start's strictness and sorts what changed: live
// keys applied, others named as needing a restart, keys given on the command line ignored.
#include "lib/service/config_reload.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "lib/service/options.h"
#include "tests/testing/harness.h"

namespace nodelet {
namespace {

using Keys = std::vector<std::string>;

class ConfigReloadTest : public ::testing::Test {
 protected:
  // The plegd binary's app: the shared flags and --relist-period.
  ConfigReloadTest() {
    AddCommonOptions(app_, common_, "plegd");
    app_.add_option("--relist-period", relist_period_);
  }
  Result<FileSettings> Read(const std::string& yaml) {
    std::ofstream(path_) << yaml;
    return ReadFileSettings(path_, "plegd", app_);
  }

  testing::TempDir dir_;
  std::string path_ = dir_.Sub("nodelet.yaml");
  CLI::App app_{"test", "nodelet-plegd"};
  CommonOptions common_;
  std::string relist_period_;
};

TEST_F(ConfigReloadTest, ReadsTheTopLevelAndTheBinarysSectionOnly) {
  auto s = Read(
      "log-level: debug\nmax-pods: 5\nplegd:\n  relist-period: 2s\nsupervisor:\n"
      "  http-address: ''\n  services:\n    plegd:\n      args: [--x]\n");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(*s, (FileSettings{{"log-level", {"debug"}}, {"relist-period", {"2s"}}}));
}

TEST_F(ConfigReloadTest, AnUnknownKeyIsRefusedNamingTheFileAndTheKey) {
  auto s = Read("log-levle: debug\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find(path_), std::string::npos) << s.status().message();
  EXPECT_NE(s.status().message().find("log-levle"), std::string::npos) << s.status().message();
  auto broken = Read("log-level: [\n");
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("not valid YAML"), std::string::npos);
}

TEST_F(ConfigReloadTest, NoFileIsNoSettings) {
  auto s = ReadFileSettings("", "plegd", app_);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->empty());
}

TEST_F(ConfigReloadTest, ChangedKeysAreSortedIntoAppliedRestartAndOverridden) {
  FileSettings before = {{"log-level", {"info"}}, {"relist-period", {"1s"}}, {"run-dir", {"/a"}}};
  FileSettings after = {{"log-level", {"debug"}},
                        {"relist-period", {"1s"}},
                        {"root-dir", {"/r"}},
                        {"run-dir", {"/b"}}};
  ReloadPlan plan = PlanReload(before, after, {"log-level"}, {"--run-dir=/x", "--config", "f"});
  EXPECT_EQ(plan.apply, Keys{"log-level"});
  EXPECT_EQ(plan.restart, Keys{"root-dir"});
  EXPECT_EQ(plan.overridden, Keys{"run-dir"});
  EXPECT_EQ(plan.Summary(),
            "applied log-level; not applied (a restart is needed): root-dir; ignored (given on "
            "the command line, which wins): run-dir");
  // A key removed from the file changed too (back to its default).
  ReloadPlan removed = PlanReload(after, {}, {"log-level"}, {});
  EXPECT_EQ(removed.apply, Keys{"log-level"});
  EXPECT_EQ(removed.restart, (Keys{"relist-period", "root-dir", "run-dir"}));
  EXPECT_EQ(PlanReload(before, before, {"log-level"}, {}).Summary(), "nothing changed");
}

TEST_F(ConfigReloadTest, KeysNotAppliedAreNamedAgainAtTheNextReload) {
  FileSettings before = {{"log-level", {"info"}}, {"relist-period", {"1s"}}};
  FileSettings after = {{"log-level", {"debug"}}, {"relist-period", {"5s"}}, {"root-dir", {"/r"}}};
  ReloadPlan plan = PlanReload(before, after, {"log-level"}, {});
  FileSettings running = SettingsAfterReload(before, after, plan);
  EXPECT_EQ(running, (FileSettings{{"log-level", {"debug"}}, {"relist-period", {"1s"}}}));
  ReloadPlan again = PlanReload(running, after, {"log-level"}, {});
  EXPECT_TRUE(again.apply.empty());
  EXPECT_EQ(again.restart, (Keys{"relist-period", "root-dir"}));
}

TEST_F(ConfigReloadTest, ListsJoinAndMissingKeysFallBack) {
  FileSettings s = {{"manifest-url-header", {"A: 1", "B: 2"}}};
  EXPECT_EQ(SettingOr(s, "manifest-url-header", ""), "A: 1,B: 2");
  EXPECT_EQ(SettingOr(s, "log-level", "info"), "info");
  EXPECT_TRUE(IsLogLevel("debug"));
  EXPECT_FALSE(IsLogLevel("verbose"));
}

}  // namespace
}  // namespace nodelet
