// What a reload of nodelet's config file applies in the supervisor: the new values of the live
// keys, parsed and checked as at start, a removed key back to its default, an invalid value
// refused naming the file and the key.
#include "supervisor/supervisor_reload.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "tests/testing/harness.h"

namespace nodelet::supervisor {
namespace {

class SupervisorReloadTest : public ::testing::Test {
 protected:
  SupervisorReloadTest() { running_.common.config_file = path_; }
  // The reload of `yaml` after a start with `before`.
  Result<SupervisorReload> ReloadTo(const FileSettings& before, const std::string& yaml) {
    std::ofstream(path_) << yaml;
    SupervisorOptions scratch;
    auto flags = MakeSupervisorFlags(&scratch);
    auto after = ReadFileSettings(path_, "supervisor", flags->app);
    if (!after.ok()) return after.status();
    plan_ = PlanReload(before, *after, SupervisorLiveKeys(), running_.argv);
    return ParseSupervisorReload(plan_, *after, flags->app, running_, next_);
  }

  testing::TempDir dir_;
  std::string path_ = dir_.Sub("nodelet.yaml");
  SupervisorOptions running_;
  SupervisorOptions next_;
  ReloadPlan plan_;
};

TEST_F(SupervisorReloadTest, LogLevelAndEvictionAreAppliedOtherKeysWaitForARestart) {
  running_.max_pods = 110;
  auto r = ReloadTo({},
                    "log-level: debug\nsupervisor:\n  max-pods: 7\n"
                    "  eviction-hard: memory.available<300Mi\n"
                    "  eviction-monitoring-period: 2s\n");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->log_level, "debug");
  EXPECT_EQ(plan_.restart, std::vector<std::string>{"max-pods"});
  EXPECT_EQ(next_.max_pods, 110);  // not applied: the running value stays
  ASSERT_TRUE(r->eviction.has_value());
  ASSERT_EQ(r->eviction->thresholds.size(), 1u);
  EXPECT_TRUE(r->eviction->thresholds[0].hard);
  EXPECT_EQ(r->eviction->monitoring_period, std::chrono::seconds(2));
  EXPECT_EQ(next_.eviction_hard, "memory.available<300Mi");
  EXPECT_FALSE(r->sources.has_value());
}

TEST_F(SupervisorReloadTest, AKeyRemovedFromTheFileGoesBackToItsDefault) {
  running_.eviction_hard = "memory.available<300Mi";
  auto r = ReloadTo({{"eviction-hard", {"memory.available<300Mi"}}}, "supervisor: {}\n");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(next_.eviction_hard, pod::kDefaultEvictionHard);
  ASSERT_TRUE(r->eviction.has_value());
  EXPECT_EQ(r->eviction->thresholds.size(), pod::DefaultHardThresholds().size());
}

TEST_F(SupervisorReloadTest, InvalidValuesAreRefusedNamingTheFileAndTheKey) {
  for (const auto& [yaml, key] : std::vector<std::pair<std::string, std::string>>{
           {"log-level: loud\n", "log-level"},
           {"supervisor:\n  eviction-hard: memory.available<lots\n", "eviction-hard"},
           {"supervisor:\n  eviction-pressure-transition-period: 5\n",
            "eviction-pressure-transition-period"},
           {"supervisor:\n  eviction-max-pod-grace-period: soon\n",
            "eviction-max-pod-grace-period"},
           {"supervisor:\n  http-check-frequency: often\n", "http-check-frequency"},
           {"supervisor:\n  manifest-url-header: ['no colon']\n", "manifest-url-header"},
           {"supervisor:\n  manifest-url: ftp://x/\n", "manifest-url"}}) {
    auto r = ReloadTo({}, yaml);
    ASSERT_FALSE(r.ok()) << yaml;
    EXPECT_NE(r.status().message().find(path_), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(key), std::string::npos) << r.status().message();
  }
}

TEST_F(SupervisorReloadTest, ManifestSourcesAreParsedAndAnUntrustedDirectoryRefused) {
  const std::string manifests = dir_.Sub("manifests");
  ASSERT_EQ(mkdir(manifests.c_str(), 0755), 0);
  auto r = ReloadTo({}, "supervisor:\n  pod-manifest-path: " + manifests +
                            "\n  manifest-url: http://127.0.0.1:1/pods\n"
                            "  http-check-frequency: 5s\n"
                            "  manifest-url-header: ['A: 1, 2', 'B: 3']\n");
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r->sources.has_value());
  EXPECT_EQ(r->sources->manifest_dir, manifests);
  EXPECT_EQ(r->sources->manifest_url, "http://127.0.0.1:1/pods");
  EXPECT_EQ(r->sources->manifest_url_period, std::chrono::seconds(5));
  const std::vector<std::pair<std::string, std::string>> headers = {{"A", "1, 2"}, {"B", "3"}};
  EXPECT_EQ(r->sources->manifest_url_headers, headers);
  // Anyone may write into it: refused, as at start.
  ASSERT_EQ(chmod(manifests.c_str(), 0777), 0);
  auto open = ReloadTo({}, "supervisor:\n  pod-manifest-path: " + manifests + "\n");
  ASSERT_FALSE(open.ok());
  EXPECT_NE(open.status().message().find("pod-manifest-path"), std::string::npos)
      << open.status().message();
}

TEST_F(SupervisorReloadTest, AKeyGivenOnTheCommandLineIsNotTakenFromTheFile) {
  running_.argv = {"--log-level", "warn"};
  running_.common.log_level = "warn";
  auto r = ReloadTo({}, "log-level: debug\n");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(r->log_level.has_value());
  EXPECT_EQ(plan_.overridden, std::vector<std::string>{"log-level"});
  EXPECT_EQ(next_.common.log_level, "warn");
}

}  // namespace
}  // namespace nodelet::supervisor
