// The kubelet's flag names where nodelet's concept is the same, parsed by the real binaries'
// option parsers: aliases land in nodelet's options, -v becomes a log level unless --log-level
// is given, --address and --read-only-port make --http-address.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lib/service/kubelet_names.h"
#include "tests/testing/binary_apps.h"
#include "tests/testing/harness.h"

namespace nodelet::testing {
namespace {

// ParseSupervisorOptions over `args` (after argv[0]); its exit code (-1: go on).
int ParseNodelet(std::vector<std::string> args, supervisor::SupervisorOptions* o) {
  args.insert(args.begin(), "nodelet");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return supervisor::ParseSupervisorOptions(static_cast<int>(argv.size()), argv.data(), o);
}

TEST(KubeletFlagsTest, TheKubeletsNamesAreAliasesOfNodeletsFlags) {
  BinaryApp nodelet("supervisor");
  ASSERT_EQ(nodelet.Parse({"--container-runtime-endpoint", "unix:///run/x.sock",
                           "--hostname-override", "node-7", "--sync-frequency", "30s"}),
            "");
  EXPECT_EQ(nodelet.supervisor_options().runtime_endpoint, "unix:///run/x.sock");
  EXPECT_EQ(nodelet.supervisor_options().node_name, "node-7");
  EXPECT_EQ(nodelet.supervisor_options().resync_period, "30s");
  for (const char* section : {"plegd", "podworkerd"}) {
    BinaryApp service(section);
    EXPECT_EQ(service.Parse({"--container-runtime-endpoint", "unix:///run/x.sock"}), "") << section;
  }
  BinaryApp podworkerd("podworkerd");
  EXPECT_EQ(podworkerd.Parse({"--sync-frequency", "30s", "--minimum-image-ttl-duration", "5m"}),
            "");
  // The file takes nodelet's names only: the kubelet's are not config keys.
  for (const auto& key : nodelet.Keys()) {
    EXPECT_NE(key, "container-runtime-endpoint");
    EXPECT_NE(key, "hostname-override");
    EXPECT_NE(key, "v");
    EXPECT_NE(key, "read-only-port");
  }
}

TEST(KubeletFlagsTest, VerbosityIsALogLevelUnlessLogLevelIsGiven) {
  EXPECT_STREQ(LogLevelOfVerbosity(0), "info");
  EXPECT_STREQ(LogLevelOfVerbosity(2), "info");
  EXPECT_STREQ(LogLevelOfVerbosity(4), "debug");
  EXPECT_STREQ(LogLevelOfVerbosity(9), "trace");
  for (const char* section : {"supervisor", "statusd"}) {
    BinaryApp a(section);
    ASSERT_EQ(a.Parse({"-v", "4"}), "") << section;
    BinaryApp b(section);
    ASSERT_EQ(b.Parse({"--v=5", "--log-level", "warn"}), "") << section;
    BinaryApp c(section);
    EXPECT_NE(c.Parse({"-v", "-1"}), "") << section << ": a negative verbosity is refused";
  }
  supervisor::SupervisorOptions o;
  ASSERT_EQ(ParseNodelet({"-v", "4", "--http-address", ""}, &o), -1);
  EXPECT_EQ(o.common.log_level, "debug");
  supervisor::SupervisorOptions both;
  ASSERT_EQ(ParseNodelet({"--v=6", "--log-level", "warn", "--http-address", ""}, &both), -1);
  EXPECT_EQ(both.common.log_level, "warn");
}

TEST(KubeletFlagsTest, AddressAndReadOnlyPortMakeTheHttpAddress) {
  supervisor::SupervisorOptions port;
  ASSERT_EQ(ParseNodelet({"--read-only-port", "10266"}, &port), -1);
  EXPECT_EQ(port.http_address, "127.0.0.1:10266");
  supervisor::SupervisorOptions off;
  ASSERT_EQ(ParseNodelet({"--read-only-port", "0"}, &off), -1);
  EXPECT_EQ(off.http_address, "") << "port 0: no endpoint, as the kubelet";
  supervisor::SupervisorOptions both;
  ASSERT_EQ(ParseNodelet({"--address", "::1", "--read-only-port", "10267"}, &both), -1);
  EXPECT_EQ(both.http_address, "[::1]:10267");
  supervisor::SupervisorOptions bad;
  EXPECT_EQ(ParseNodelet({"--read-only-port", "70000"}, &bad), 2);
}

TEST(KubeletFlagsTest, ResyncPeriodIsPassedToPodworkerd) {
  supervisor::SupervisorOptions o;
  ASSERT_EQ(ParseNodelet({"--sync-frequency", "45s", "--http-address", ""}, &o), -1);
  bool found = false;
  for (const auto& spec : supervisor::BuildChildSpecs(o)) {
    for (const auto& arg : spec.argv) {
      if (arg == "--resync-period=45s") found = spec.name == "podworkerd";
    }
  }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace nodelet::testing
