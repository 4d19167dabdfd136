// A KubeletConfiguration file as --config, read by every binary's real option parser: the fields
// nodelet has land in its options, a field at the value nodelet has anyway is taken, every
// other field is refused by name with the file.
#include "lib/service/kubelet_config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "tests/testing/binary_apps.h"
#include "tests/testing/harness.h"

namespace nodelet::testing {
namespace {

class KubeletConfigTest : public ::testing::Test {
 protected:
  // The error of `section` reading `yaml` as its --config ("" when it parsed).
  std::string Read(BinaryApp& bin, const std::string& yaml) {
    std::ofstream(path_) << yaml;
    return bin.Parse({"--config", path_});
  }
  TempDir dir_;
  std::string path_ = dir_.Sub("kubelet-config.yaml");
};

const char kHeader[] = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

TEST_F(KubeletConfigTest, TheFieldsNodeletHasBecomeItsSettingsInEveryBinary) {
  const std::string yaml = std::string(kHeader) +
                           "staticPodPath: /etc/kubernetes/manifests\n"
                           "maxPods: 50\n"
                           "containerRuntimeEndpoint: unix:///run/k3s.sock\n"
                           "syncFrequency: 30s\n"
                           "runtimeRequestTimeout: 3m\n"
                           "readOnlyPort: 10256\n"
                           "cgroupDriver: systemd\n"
                           "clusterDNS: [198.18.0.10]\n"
                           "clusterDomain: cluster.local\n"
                           "evictionHard: {memory.available: 200Mi, nodefs.available: 5%}\n"
                           "systemReserved: {cpu: 100m, memory: 256Mi}\n"
                           "staticPodURLHeader: {X-Token: [a, b]}\n"
                           "logging: {format: text, verbosity: 4}\n"
                           "featureGates: {EventedPLEG: true}\n"
                           "fileCheckFrequency: 20s\n"
                           "failSwapOn: false\n"
                           "streamingConnectionIdleTimeout: 4h\n"
                           "imageGCHighThresholdPercent: 90\n";
  BinaryApp nodelet("supervisor");
  ASSERT_EQ(Read(nodelet, yaml), "");
  const auto& o = nodelet.supervisor_options();
  EXPECT_EQ(o.pod_manifest_path, "/etc/kubernetes/manifests");
  EXPECT_EQ(o.max_pods, 50);
  EXPECT_EQ(o.runtime_endpoint, "unix:///run/k3s.sock");
  EXPECT_EQ(o.resync_period, "30s");
  EXPECT_EQ(o.http_address, "0.0.0.0:10256") << "the kubelet's read-only port on its address";
  EXPECT_EQ(o.cgroups.driver, "systemd");
  EXPECT_EQ(o.cluster_dns, std::vector<std::string>{"198.18.0.10"});
  EXPECT_EQ(o.eviction_hard, "memory.available<200Mi,nodefs.available<5%");
  EXPECT_EQ(o.system_reserved, "cpu=100m,memory=256Mi");
  EXPECT_EQ(o.manifest_url_headers, (std::vector<std::string>{"X-Token: a", "X-Token: b"}));
  EXPECT_EQ(o.common.log_level, "debug");
  EXPECT_TRUE(o.runtime_events);
  for (const char* section : {"plegd", "podworkerd", "statusd", "volumed"}) {
    BinaryApp service(section);
    EXPECT_EQ(Read(service, yaml), "") << section;
  }
}

TEST_F(KubeletConfigTest, ZeroIsTheKubeletsDefaultAndReadOnlyPortZeroTurnsTheEndpointOff) {
  BinaryApp nodelet("supervisor");
  ASSERT_EQ(
      Read(nodelet, std::string(kHeader) + "maxPods: 0\nreadOnlyPort: 0\nsyncFrequency: 0s\n"), "");
  EXPECT_EQ(nodelet.supervisor_options().max_pods, 110);
  EXPECT_EQ(nodelet.supervisor_options().http_address, "");
  EXPECT_EQ(nodelet.supervisor_options().resync_period, "");
  BinaryApp defaults("supervisor");
  ASSERT_EQ(Read(defaults, kHeader), "");
  EXPECT_EQ(defaults.supervisor_options().http_address, "127.0.0.1:10255")
      << "without readOnlyPort nodelet keeps its loopback endpoint";
}

TEST_F(KubeletConfigTest, EveryOtherFieldIsRefusedByNameWithTheFile) {
  BinaryApp nodelet("supervisor");
  const std::string error = Read(nodelet, std::string(kHeader) +
                                              "authentication: {anonymous: {enabled: false}}\n"
                                              "cpuManagerPolicy: static\n"
                                              "featureGates: {SidecarContainers: true}\n"
                                              "fileCheckFrequency: 5s\n"
                                              "registerNode: true\n"
                                              "address: 0.0.0.0\n");
  EXPECT_NE(error.find(path_), std::string::npos) << error;
  for (const char* field :
       {"'authentication' (nodelet has no authenticated server",
        "'cpuManagerPolicy' (nodelet supports only none)", "'featureGates.SidecarContainers'",
        "'fileCheckFrequency'", "'registerNode' (nodelet has no API server", "'address'"}) {
    EXPECT_NE(error.find(field), std::string::npos) << field << " in " << error;
  }
  BinaryApp plegd("plegd");
  EXPECT_NE(Read(plegd, std::string(kHeader) + "cpuManagerPolicy: static\n"), "")
      << "every binary refuses it";
  BinaryApp old("supervisor");
  const std::string version =
      Read(old, "apiVersion: kubelet.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n");
  EXPECT_NE(version.find("nodelet reads kubelet.config.k8s.io/v1beta1"), std::string::npos)
      << version;
  BinaryApp shape("supervisor");
  const std::string wrong = Read(shape, std::string(kHeader) + "evictionHard: [memory]\n");
  EXPECT_NE(wrong.find("'evictionHard' (want a map)"), std::string::npos) << wrong;
}

}  // namespace
}  // namespace nodelet::testing
