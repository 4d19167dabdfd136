// The pod's and containers' securityContext as the CRI configs carry them to the runtime
// (cri_configs.h), and the runAsNonRoot check against the image's user.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "lib/pod/defaults.h"
#include "lib/pod/manifest_parser.h"
#include "svc-podworkerd/cri_configs.h"

namespace nodelet::podworkerd {
namespace {

namespace v1 = cri::v1;

pod::Pod Parse(const std::string& yaml) {
  auto r = pod::DecodeManifest(yaml, "sec.yaml");
  EXPECT_TRUE(r.errors.empty()) << (r.errors.empty() ? "" : r.errors[0].message);
  pod::Pod pod = r.pods.at(0).pod;
  pod::ApplyPodDefaults(pod);
  return pod;
}

constexpr char kPod[] = R"(apiVersion: v1
kind: Pod
metadata: {name: sec, namespace: ns, uid: 0b6d3f2a-9c1e-4f7b-8a2d-1e5c9f0a3b7d}
spec:
  shareProcessNamespace: true
  hostIPC: true
  securityContext:
    runAsUser: 1000
    runAsGroup: 1001
    fsGroup: 2000
    supplementalGroups: [3000, 2000]
    sysctls: [{name: net/ipv4/ip_local_port_range, value: "1024 2048"}]
    seccompProfile: {type: RuntimeDefault}
  containers:
  - name: app
    image: busybox
    securityContext:
      runAsUser: 7
      capabilities: {add: [net_bind_service, CAP_SYS_TIME], drop: [all]}
      seccompProfile: {type: Localhost, localhostProfile: deny-mkdir.json}
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
  - name: plain
    image: busybox
)";

TEST(CriSecurityTest, TheSandboxCarriesThePodsSettings) {
  pod::Pod pod = Parse(kPod);
  v1::PodSandboxConfig config = MakeSandboxConfig(pod, 0, "/logs");
  const auto& sc = config.linux().security_context();
  EXPECT_EQ(sc.namespace_options().pid(), v1::POD);
  EXPECT_EQ(sc.namespace_options().ipc(), v1::NODE);
  EXPECT_EQ(sc.namespace_options().network(), v1::POD);
  EXPECT_EQ(sc.run_as_user().value(), 1000);
  EXPECT_EQ(sc.run_as_group().value(), 1001);
  EXPECT_THAT(sc.supplemental_groups(), ::testing::ElementsAre(2000, 3000));
  EXPECT_EQ(sc.seccomp().profile_type(), v1::SecurityProfile::RuntimeDefault);
  EXPECT_FALSE(sc.privileged());
  ASSERT_EQ(config.linux().sysctls().count("net.ipv4.ip_local_port_range"), 1u);
  EXPECT_EQ(config.linux().sysctls().at("net.ipv4.ip_local_port_range"), "1024 2048");
}

TEST(CriSecurityTest, EachContainerGetsItsOwnFieldsOverThePods) {
  pod::Pod pod = Parse(kPod);
  v1::ContainerConfig app =
      MakeContainerConfig(pod, pod.spec.containers[0], 0, nullptr, "/var/lib/nodelet/seccomp");
  const auto& sc = app.linux().security_context();
  EXPECT_EQ(sc.namespace_options().pid(), v1::POD);
  EXPECT_EQ(sc.run_as_user().value(), 7);
  EXPECT_EQ(sc.run_as_group().value(), 1001);
  EXPECT_THAT(sc.supplemental_groups(), ::testing::ElementsAre(2000, 3000));
  EXPECT_THAT(sc.capabilities().add_capabilities(),
              ::testing::ElementsAre("NET_BIND_SERVICE", "SYS_TIME"));
  EXPECT_THAT(sc.capabilities().drop_capabilities(), ::testing::ElementsAre("ALL"));
  EXPECT_EQ(sc.seccomp().profile_type(), v1::SecurityProfile::Localhost);
  EXPECT_EQ(sc.seccomp().localhost_ref(), "/var/lib/nodelet/seccomp/deny-mkdir.json");
  EXPECT_TRUE(sc.no_new_privs());
  EXPECT_TRUE(sc.readonly_rootfs());
  EXPECT_FALSE(sc.has_apparmor());

  v1::ContainerConfig plain = MakeContainerConfig(pod, pod.spec.containers[1], 0);
  const auto& p = plain.linux().security_context();
  EXPECT_EQ(p.run_as_user().value(), 1000);
  EXPECT_EQ(p.seccomp().profile_type(), v1::SecurityProfile::RuntimeDefault);
  EXPECT_FALSE(p.no_new_privs());
  EXPECT_FALSE(p.has_capabilities());
}

TEST(CriSecurityTest, WithoutAnyProfileSeccompIsUnconfinedAsInTheKubelet) {
  pod::Pod pod = Parse(R"(apiVersion: v1
kind: Pod
metadata: {name: plain, namespace: ns, uid: 0b6d3f2a-9c1e-4f7b-8a2d-1e5c9f0a3b7d}
spec:
  hostPID: true
  containers: [{name: app, image: busybox, securityContext: {privileged: true}}]
)");
  v1::PodSandboxConfig sandbox = MakeSandboxConfig(pod, 0, "/logs");
  EXPECT_TRUE(sandbox.linux().security_context().privileged());
  EXPECT_EQ(sandbox.linux().security_context().namespace_options().pid(), v1::NODE);
  v1::ContainerConfig c = MakeContainerConfig(pod, pod.spec.containers[0], 0);
  EXPECT_EQ(c.linux().security_context().seccomp().profile_type(), v1::SecurityProfile::Unconfined);
  EXPECT_EQ(c.linux().security_context().namespace_options().pid(), v1::NODE);
  EXPECT_FALSE(c.linux().security_context().has_run_as_user());
}

TEST(CriSecurityTest, AGroupWithoutAUserTakesTheImagesUser) {
  pod::Pod pod = Parse(R"(apiVersion: v1
kind: Pod
metadata: {name: g, namespace: ns, uid: 0b6d3f2a-9c1e-4f7b-8a2d-1e5c9f0a3b7d}
spec:
  containers: [{name: app, image: busybox, securityContext: {runAsGroup: 44}}]
)");
  ImageUser numeric{.uid = 33, .username = ""};
  auto c = MakeContainerConfig(pod, pod.spec.containers[0], 0, nullptr, "", &numeric);
  EXPECT_EQ(c.linux().security_context().run_as_user().value(), 33);
  ImageUser named{.uid = std::nullopt, .username = "www"};
  c = MakeContainerConfig(pod, pod.spec.containers[0], 0, nullptr, "", &named);
  EXPECT_FALSE(c.linux().security_context().has_run_as_user());
  EXPECT_EQ(c.linux().security_context().run_as_username(), "www");
}

TEST(CriSecurityTest, RunAsNonRootIsCheckedAsTheKubeletChecksIt) {
  pod::Pod pod = Parse(R"(apiVersion: v1
kind: Pod
metadata: {name: nr, namespace: ns, uid: u1}
spec:
  securityContext: {runAsNonRoot: true}
  containers: [{name: app, image: busybox}]
)");
  const pod::Container& c = pod.spec.containers[0];
  EXPECT_THAT(VerifyRunAsNonRoot(pod, c, ImageUser{.uid = 0}).message(),
              ::testing::HasSubstr("container has runAsNonRoot and image will run as root"));
  EXPECT_THAT(VerifyRunAsNonRoot(pod, c, ImageUser{}).message(),
              ::testing::HasSubstr("container has runAsNonRoot and image will run as root"));
  EXPECT_THAT(VerifyRunAsNonRoot(pod, c, ImageUser{.username = "nobody"}).message(),
              ::testing::HasSubstr("image has non-numeric user (nobody), cannot verify user is "
                                   "non-root"));
  EXPECT_TRUE(VerifyRunAsNonRoot(pod, c, ImageUser{.uid = 65534}).ok());
  pod.spec.security_context->run_as_user = 0;
  EXPECT_THAT(VerifyRunAsNonRoot(pod, c, ImageUser{.uid = 65534}).message(),
              ::testing::HasSubstr("container's runAsUser breaks non-root policy"));
  pod.spec.security_context->run_as_user = 10;
  EXPECT_TRUE(VerifyRunAsNonRoot(pod, c, ImageUser{.uid = 0}).ok());
  // The container's runAsNonRoot: false wins over the pod's true.
  pod.spec.security_context->run_as_user.reset();
  pod.spec.containers[0].security_context = pod::SecurityContext{.run_as_non_root = false};
  EXPECT_TRUE(VerifyRunAsNonRoot(pod, pod.spec.containers[0], ImageUser{.uid = 0}).ok());
}

}  // namespace
}  // namespace nodelet::podworkerd
