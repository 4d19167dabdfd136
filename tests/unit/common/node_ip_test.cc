#include "lib/common/node_ip.h"

#include <gtest/gtest.h>

#include <fstream>

#include "tests/testing/harness.h"

namespace nodelet {
namespace {

std::vector<InterfaceAddress> Addresses() {
  return {{"lo", "127.0.0.1", false, true, true},      {"lo", "::1", true, true, true},
          {"nlbr7", "198.18.7.1", false, true, false}, {"eth0", "fe80::1", true, true, false},
          {"eth0", "2001:db8::2", true, true, false},  {"eth0", "192.0.2.2", false, true, false},
          {"eth1", "203.0.113.9", false, false, false}};
}

TEST(NodeIPTest, DefaultRouteInterfaceFirstIPv4BeforeIPv6) {
  auto ip = ChooseNodeIP("", Addresses(), "eth0");
  ASSERT_TRUE(ip.ok());
  EXPECT_EQ(*ip, "192.0.2.2");
}

TEST(NodeIPTest, WithoutDefaultRouteAnyUpGlobalAddress) {
  auto ip = ChooseNodeIP("", Addresses(), "");
  ASSERT_TRUE(ip.ok());
  EXPECT_EQ(*ip, "198.18.7.1");  // the first up, global IPv4 (eth1 is down)
  auto only_lo = ChooseNodeIP("", {{"lo", "127.0.0.1", false, true, true}}, "");
  ASSERT_TRUE(only_lo.ok());
  EXPECT_EQ(*only_lo, "127.0.0.1");
}

TEST(NodeIPTest, RequestedMustBeAUsableAddressOfThisHost) {
  auto ok = ChooseNodeIP("2001:db8::2", Addresses(), "eth0");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, "2001:db8::2");
  for (const char* bad : {"not-an-ip", "0.0.0.0", "127.0.0.1", "169.254.1.1", "224.0.0.1", "::1",
                          "fe80::1", "10.9.9.9"}) {
    auto r = ChooseNodeIP(bad, Addresses(), "eth0");
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find(bad), std::string::npos) << bad;
    }
  }
}

TEST(NodeIPTest, DefaultRouteFromProcNetRoute) {
  testing::TempDir dir;
  const std::string file = dir.Sub("route");
  std::ofstream(file)
      << "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
         "nlbr3\t00031200\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
         "eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n";
  EXPECT_EQ(DefaultRouteInterface(file), "eth0");
  std::ofstream(file) << "Iface\tDestination\n";
  EXPECT_EQ(DefaultRouteInterface(file), "");
  EXPECT_EQ(DefaultRouteInterface(dir.Sub("missing")), "");
}

TEST(NodeIPTest, ThisHostHasOne) {
  auto ip = NodeIP("");
  ASSERT_TRUE(ip.ok());
  EXPECT_FALSE(ip->empty());
}

}  // namespace
}  // namespace nodelet
