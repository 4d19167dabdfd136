// nodelet's --mode, parsed once into a SupervisorMode: both values from the flag and from the
// config file's supervisor section, and anything else refused while parsing, naming the flag.
#include "supervisor/supervisor_options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "tests/testing/harness.h"

namespace nodelet::supervisor {
namespace {

using ::testing::HasSubstr;

// Runs ParseSupervisorOptions on `args` (after argv[0]); returns its exit code and stderr.
struct Parsed {
  int rc = 0;
  std::string stderr_text;
  SupervisorOptions options;
};
Parsed Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "nodelet");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  Parsed p;
  ::testing::internal::CaptureStderr();
  p.rc = ParseSupervisorOptions(static_cast<int>(args.size()), argv.data(), &p.options);
  p.stderr_text = ::testing::internal::GetCapturedStderr();
  return p;
}

TEST(SupervisorModeTest, ParsesBothValuesAndNamesThem) {
  for (auto mode : {SupervisorMode::kStandalone, SupervisorMode::kSystemd}) {
    auto parsed = ParseSupervisorMode(SupervisorModeName(mode));
    ASSERT_TRUE(parsed.ok()) << SupervisorModeName(mode);
    EXPECT_EQ(*parsed, mode);
  }
  EXPECT_EQ(SupervisorModeName(SupervisorMode::kStandalone), "standalone");
  EXPECT_EQ(SupervisorModeName(SupervisorMode::kSystemd), "systemd");
}

TEST(SupervisorModeTest, RefusesAnythingElse) {
  for (const char* bad : {"", "launchd", "Systemd", "systemd ", "spawn"}) {
    auto parsed = ParseSupervisorMode(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(parsed.status().message(), HasSubstr("standalone"));
    EXPECT_THAT(parsed.status().message(), HasSubstr("systemd"));
  }
}

TEST(SupervisorOptionsTest, ModeIsStandaloneByDefaultAndSystemdOnRequest) {
  Parsed standalone = Parse({});
  EXPECT_EQ(standalone.rc, -1) << standalone.stderr_text;
  EXPECT_EQ(standalone.options.mode, SupervisorMode::kStandalone);

  Parsed systemd = Parse({"--mode", "systemd"});
  EXPECT_EQ(systemd.rc, -1) << systemd.stderr_text;
  EXPECT_EQ(systemd.options.mode, SupervisorMode::kSystemd);

  Parsed explicit_standalone = Parse({"--mode=standalone"});
  EXPECT_EQ(explicit_standalone.rc, -1) << explicit_standalone.stderr_text;
  EXPECT_EQ(explicit_standalone.options.mode, SupervisorMode::kStandalone);
}

TEST(SupervisorOptionsTest, ModeComesFromTheConfigFileAndTheFlagOverridesIt) {
  testing::TempDir dir;
  const std::string config = dir.Sub("nodelet.yaml");
  std::ofstream(config) << "supervisor:\n  mode: systemd\n";
  Parsed from_file = Parse({"--config", config});
  EXPECT_EQ(from_file.rc, -1) << from_file.stderr_text;
  EXPECT_EQ(from_file.options.mode, SupervisorMode::kSystemd);

  Parsed overridden = Parse({"--config", config, "--mode", "standalone"});
  EXPECT_EQ(overridden.rc, -1) << overridden.stderr_text;
  EXPECT_EQ(overridden.options.mode, SupervisorMode::kStandalone);
}

TEST(SupervisorOptionsTest, ABadModeIsRefusedWhileParsingNamingTheFlag) {
  Parsed bad = Parse({"--mode", "launchd"});
  EXPECT_EQ(bad.rc, 2);
  EXPECT_THAT(bad.stderr_text, HasSubstr("--mode"));
  EXPECT_THAT(bad.stderr_text, HasSubstr("launchd"));

  testing::TempDir dir;
  const std::string config = dir.Sub("nodelet.yaml");
  std::ofstream(config) << "supervisor:\n  mode: upstart\n";
  Parsed bad_file = Parse({"--config", config});
  EXPECT_EQ(bad_file.rc, 2);
  EXPECT_THAT(bad_file.stderr_text, HasSubstr("mode"));
  EXPECT_THAT(bad_file.stderr_text, HasSubstr("upstart"));
}

// --cluster-dns (comma-separated, repeatable, IPs), --cluster-domain (a DNS subdomain) and
// --resolv-conf ("" allowed) are checked and passed to podworkerd only.
TEST(SupervisorOptionsTest, DnsFlagsAreCheckedAndPassedToPodworkerd) {
  Parsed p = Parse({"--cluster-dns", "10.96.0.10,fd00::10", "--cluster-dns", "10.96.0.11",
                    "--cluster-domain", "cluster.local", "--resolv-conf", ""});
  ASSERT_EQ(p.rc, -1) << p.stderr_text;
  EXPECT_THAT(p.options.cluster_dns,
              ::testing::ElementsAre("10.96.0.10", "fd00::10", "10.96.0.11"));
  EXPECT_EQ(p.options.cluster_domain, "cluster.local");
  EXPECT_EQ(p.options.resolv_conf, "");
  for (const ChildSpec& spec : BuildChildSpecs(p.options)) {
    std::string argv;
    for (const auto& a : spec.argv) argv += a + " ";
    if (spec.name == "podworkerd") {
      EXPECT_THAT(argv, HasSubstr("--cluster-dns 10.96.0.10 --cluster-dns fd00::10 "
                                  "--cluster-dns 10.96.0.11 --cluster-domain cluster.local "
                                  "--resolv-conf= "));
    } else {
      EXPECT_THAT(argv, ::testing::Not(HasSubstr("--cluster-dns"))) << spec.name;
    }
  }
  EXPECT_EQ(Parse({}).options.resolv_conf, "/etc/resolv.conf");
  Parsed bad_ip = Parse({"--cluster-dns", "10.96.0.10,dns.local"});
  EXPECT_EQ(bad_ip.rc, 2);
  EXPECT_THAT(bad_ip.stderr_text, HasSubstr("dns.local"));
  Parsed bad_domain = Parse({"--cluster-domain", "Cluster_Local"});
  EXPECT_EQ(bad_domain.rc, 2);
  EXPECT_THAT(bad_domain.stderr_text, HasSubstr("Cluster_Local"));
}

// The container log flags are checked (a quantity, at least 2 files, a duration), refused
// naming the flag, and passed to podworkerd only.
TEST(SupervisorOptionsTest, ContainerLogFlagsAreCheckedAndPassedToPodworkerd) {
  Parsed p = Parse({"--container-log-max-size", "200Ki", "--container-log-max-files", "3",
                    "--container-log-monitor-interval", "1s"});
  ASSERT_EQ(p.rc, -1) << p.stderr_text;
  for (const ChildSpec& spec : BuildChildSpecs(p.options)) {
    std::string argv;
    for (const auto& a : spec.argv) argv += a + " ";
    if (spec.name == "podworkerd") {
      EXPECT_THAT(argv, HasSubstr("--container-log-max-size=200Ki --container-log-max-files=3 "
                                  "--container-log-monitor-interval=1s "));
    } else {
      EXPECT_THAT(argv, ::testing::Not(HasSubstr("--container-log"))) << spec.name;
    }
  }
  Parsed defaults = Parse({});
  EXPECT_EQ(defaults.options.container_logs.max_size, "10Mi");
  EXPECT_EQ(defaults.options.container_logs.max_files, 5);
  EXPECT_EQ(defaults.options.container_logs.monitor_interval, "10s");
  for (const std::vector<std::string>& bad :
       std::vector<std::vector<std::string>>{{"--container-log-max-size", "ten"},
                                             {"--container-log-max-size", "0"},
                                             {"--container-log-max-files", "1"},
                                             {"--container-log-max-files", "x"},
                                             {"--container-log-monitor-interval", "soon"}}) {
    Parsed r = Parse(bad);
    EXPECT_EQ(r.rc, 2) << bad[0] << " " << bad[1];
    EXPECT_THAT(r.stderr_text, HasSubstr(bad[0])) << r.stderr_text;
  }
}

TEST(SupervisorOptionsTest, EvictionMinimumReclaimIsAFlagAndAConfigKey) {
  Parsed p = Parse({"--eviction-minimum-reclaim", "nodefs.available=512Mi"});
  ASSERT_EQ(p.rc, -1) << p.stderr_text;
  EXPECT_EQ(p.options.eviction_minimum_reclaim, "nodefs.available=512Mi");
  testing::TempDir dir;
  testing::WriteTextFile(dir.Sub("nodelet.yaml"),
                         "supervisor:\n  eviction-minimum-reclaim: imagefs.available=5%\n");
  Parsed c = Parse({"--config", dir.Sub("nodelet.yaml")});
  ASSERT_EQ(c.rc, -1) << c.stderr_text;
  EXPECT_EQ(c.options.eviction_minimum_reclaim, "imagefs.available=5%");
}

TEST(SupervisorOptionsTest, PlainTextEtcdIsRefusedUnlessAllowed) {
  // http://, and HOST:PORT with no TLS file, are plain text: refused, naming the endpoint and
  // the flag that allows it.
  for (const char* endpoint : {"http://10.0.0.1:2379", "10.0.0.1:2379"}) {
    Parsed p = Parse({"--etcd-endpoints", std::string("https://10.0.0.2:2379,") + endpoint});
    EXPECT_EQ(p.rc, 2) << endpoint;
    EXPECT_THAT(p.stderr_text, HasSubstr(endpoint));
    EXPECT_THAT(p.stderr_text, HasSubstr("--etcd-allow-insecure"));
    Parsed allowed = Parse({"--etcd-endpoints", endpoint, "--etcd-allow-insecure"});
    EXPECT_EQ(allowed.rc, -1) << allowed.stderr_text;
    EXPECT_TRUE(allowed.options.etcd.allow_insecure);
  }
  // TLS needs no flag: https://, or HOST:PORT with a CA file.
  Parsed tls = Parse({"--etcd-endpoints", "https://10.0.0.1:2379"});
  EXPECT_EQ(tls.rc, -1) << tls.stderr_text;
  testing::TempDir dir;
  testing::WriteTextFile(dir.Sub("ca.pem"), "not read while parsing\n");
  Parsed bare = Parse({"--etcd-endpoints", "10.0.0.1:2379", "--etcd-cafile", dir.Sub("ca.pem")});
  EXPECT_EQ(bare.rc, -1) << bare.stderr_text;
  // The config file's key of the same name allows it too.
  testing::WriteTextFile(dir.Sub("nodelet.yaml"),
                         "supervisor:\n  etcd-endpoints: http://10.0.0.1:2379\n"
                         "  etcd-allow-insecure: true\n");
  Parsed c = Parse({"--config", dir.Sub("nodelet.yaml")});
  EXPECT_EQ(c.rc, -1) << c.stderr_text;
}

}  // namespace
}  // namespace nodelet::supervisor
