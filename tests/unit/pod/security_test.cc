// The securityContext model: what the parser takes, what validation refuses (with the field's
// path), and lib/pod/security.h's reading of it (capabilities, sysctls, effective settings).
#include "lib/pod/security.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lib/pod/defaults.h"
#include "lib/pod/manifest_parser.h"
#include "lib/pod/validation.h"

namespace nodelet::pod {
namespace {

constexpr char kHead[] = R"(apiVersion: v1
kind: Pod
metadata: {name: sec, namespace: default, uid: 0b6d3f2a-9c1e-4f7b-8a2d-1e5c9f0a3b7d}
spec:
)";

// Decodes kHead + `spec` (indented two spaces), defaults it, and returns the parse errors
// followed by the validation errors, one string each.
std::vector<std::string> Errors(const std::string& spec, Pod* out = nullptr) {
  auto r = DecodeManifest(std::string(kHead) + spec, "sec.yaml");
  std::vector<std::string> errors;
  for (const auto& e : r.errors) errors.push_back(e.message);
  if (!errors.empty() || r.pods.empty()) return errors;
  Pod pod = r.pods[0].pod;
  ApplyPodDefaults(pod);
  for (const auto& e : ValidatePod(pod)) errors.push_back(e.ToString());
  if (out) *out = pod;
  return errors;
}

constexpr char kContainer[] = "  containers:\n  - name: app\n    image: busybox\n";

TEST(SecurityModelTest, EveryFieldIsReadIntoTheModel) {
  Pod pod;
  auto errors = Errors(std::string(R"(  hostPID: true
  hostIPC: true
  securityContext:
    runAsUser: 1000
    runAsGroup: 1001
    runAsNonRoot: true
    fsGroup: 2000
    fsGroupChangePolicy: OnRootMismatch
    supplementalGroups: [3000, 0]
    sysctls: [{name: kernel/shm_rmid_forced, value: "1"}]
    seccompProfile: {type: RuntimeDefault}
)") + kContainer + R"(    securityContext:
      capabilities: {add: [net_raw, CAP_SYS_TIME], drop: [ALL]}
      seccompProfile: {type: Localhost, localhostProfile: deny/mkdir.json}
      appArmorProfile: {type: Unconfined}
      procMount: Default
      runAsUser: 5
)",
                       &pod);
  ASSERT_THAT(errors, ::testing::IsEmpty());
  EXPECT_TRUE(pod.spec.host_pid);
  EXPECT_TRUE(pod.spec.host_ipc);
  ASSERT_TRUE(pod.spec.security_context);
  const PodSecurityContext& p = *pod.spec.security_context;
  EXPECT_EQ(p.fs_group, 2000);
  EXPECT_EQ(p.fs_group_change_policy, "OnRootMismatch");
  EXPECT_EQ(p.supplemental_groups, (std::vector<int64_t>{3000, 0}));
  ASSERT_EQ(p.sysctls.size(), 1u);
  EXPECT_EQ(SysctlDotted(p.sysctls[0].name), "kernel.shm_rmid_forced");
  const Container& c = pod.spec.containers[0];
  ASSERT_TRUE(c.security_context && c.security_context->capabilities);
  EXPECT_EQ(c.security_context->capabilities->add,
            (std::vector<std::string>{"net_raw", "CAP_SYS_TIME"}));
  // The container's own fields win over the pod's.
  EXPECT_EQ(EffectiveRunAsUser(pod, c), 5);
  EXPECT_EQ(EffectiveRunAsGroup(pod, c), 1001);
  EXPECT_TRUE(EffectiveRunAsNonRoot(pod, c));
  EXPECT_EQ(EffectiveSeccomp(pod, c), (SecurityProfile{"Localhost", "deny/mkdir.json"}));
  EXPECT_EQ(EffectiveAppArmor(pod, c), (SecurityProfile{"Unconfined", ""}));
}

TEST(SecurityModelTest, RefusalsNameTheFieldAndTheReason) {
  struct Case {
    std::string spec;
    std::string error;
  };
  const std::string sc = std::string(kContainer) + "    securityContext:\n";
  for (const Case& k : std::vector<Case>{
           {sc + "      capabilities: {add: [NET_FLY]}\n",
            "spec.containers[0].securityContext.capabilities.add[0]: Invalid value: \"NET_FLY\": "
            "not a Linux capability"},
           {sc + "      seccompProfile: {type: Localhost, localhostProfile: ../../etc/x.json}\n",
            "spec.containers[0].securityContext.seccompProfile.localhostProfile: Invalid value: "
            "\"../../etc/x.json\": must not contain '..'"},
           {sc + "      seccompProfile: {type: Localhost, localhostProfile: /etc/x.json}\n",
            "spec.containers[0].securityContext.seccompProfile.localhostProfile: Invalid value: "
            "\"/etc/x.json\": must be a relative path"},
           {sc + "      seccompProfile: {type: Localhost}\n",
            "spec.containers[0].securityContext.seccompProfile.localhostProfile: Required value"},
           {sc + "      seccompProfile: {type: RuntimeDefault, localhostProfile: x}\n",
            "spec.containers[0].securityContext.seccompProfile.localhostProfile: Forbidden: can "
            "only be set if the type is Localhost"},
           {sc + "      seccompProfile: {type: Strict}\n",
            "spec.containers[0].securityContext.seccompProfile.type: Unsupported value: "
            "\"Strict\""},
           {sc + "      procMount: Unmasked\n",
            "spec.containers[0].securityContext.procMount: Forbidden: Unmasked needs the pod's "
            "own user namespace"},
           {sc + "      seLinuxOptions: {level: \"s0:c1\"}\n",
            "spec.containers[0].securityContext.seLinuxOptions: Forbidden"},
           {"  securityContext: {fsGroupChangePolicy: Sometimes}\n" + std::string(kContainer),
            "spec.securityContext.fsGroupChangePolicy: Unsupported value: \"Sometimes\""},
           {"  securityContext: {sysctls: [{name: Kernel.Shm}]}\n" + std::string(kContainer),
            "spec.securityContext.sysctls[0].name: Invalid value: \"Kernel.Shm\""},
           {"  securityContext: {sysctls: [{name: kernel.sem, value: '1'}, {name: kernel/sem, "
            "value: '2'}]}\n" +
                std::string(kContainer),
            "spec.securityContext.sysctls[1].name: Duplicate value: \"kernel/sem\""},
           {"  securityContext: {fsGroup: -1}\n" + std::string(kContainer),
            "spec.securityContext.fsGroup: Invalid value: -1"},
           {"  hostPID: true\n  shareProcessNamespace: true\n" + std::string(kContainer),
            "spec.shareProcessNamespace: Invalid value: true: ShareProcessNamespace and HostPID "
            "cannot both be enabled"},
       }) {
    auto errors = Errors(k.spec);
    ASSERT_FALSE(errors.empty()) << k.spec;
    EXPECT_THAT(errors[0], ::testing::HasSubstr(k.error)) << k.spec;
  }
}

TEST(SecurityModelTest, AppArmorAnnotationsAreCheckedAndRead) {
  Pod pod;
  ASSERT_THAT(Errors(kContainer, &pod), ::testing::IsEmpty());
  const Container& c = pod.spec.containers[0];
  EXPECT_FALSE(EffectiveAppArmor(pod, c));
  EXPECT_FALSE(NeedsAppArmor(pod));
  pod.metadata.annotations[std::string(kAppArmorAnnotationPrefix) + "app"] = "localhost/k8s-x";
  EXPECT_EQ(EffectiveAppArmor(pod, c), (SecurityProfile{"Localhost", "k8s-x"}));
  EXPECT_TRUE(NeedsAppArmor(pod));
  EXPECT_TRUE(ValidatePod(pod).empty());
  pod.metadata.annotations[std::string(kAppArmorAnnotationPrefix) + "app"] = "unconfined";
  EXPECT_FALSE(NeedsAppArmor(pod));
  pod.metadata.annotations[std::string(kAppArmorAnnotationPrefix) + "app"] = "strict";
  ASSERT_FALSE(ValidatePod(pod).empty());
  EXPECT_THAT(ValidatePod(pod)[0].ToString(), ::testing::HasSubstr("invalid AppArmor profile"));
  pod.metadata.annotations.clear();
  pod.metadata.annotations[std::string(kAppArmorAnnotationPrefix) + "ghost"] = "unconfined";
  ASSERT_FALSE(ValidatePod(pod).empty());
  EXPECT_THAT(ValidatePod(pod)[0].ToString(), ::testing::HasSubstr("container not found"));
  // The field wins over the annotation.
  pod.metadata.annotations.clear();
  pod.metadata.annotations[std::string(kAppArmorAnnotationPrefix) + "app"] = "runtime/default";
  pod.spec.containers[0].security_context = SecurityContext{};
  pod.spec.containers[0].security_context->app_armor_profile = SecurityProfile{"Unconfined", ""};
  EXPECT_EQ(EffectiveAppArmor(pod, pod.spec.containers[0]), (SecurityProfile{"Unconfined", ""}));
}

TEST(SecurityModelTest, CapabilityNames) {
  EXPECT_EQ(CanonicalCapability("net_raw"), "NET_RAW");
  EXPECT_EQ(CanonicalCapability("CAP_NET_RAW"), "NET_RAW");
  EXPECT_EQ(CanonicalCapability("cap_sys_admin"), "SYS_ADMIN");
  EXPECT_EQ(CanonicalCapability("all"), "ALL");
  EXPECT_EQ(CanonicalCapability("CHECKPOINT_RESTORE"), "CHECKPOINT_RESTORE");
  EXPECT_FALSE(CanonicalCapability("CAP_"));
  EXPECT_FALSE(CanonicalCapability("CAP_ALL"));
  EXPECT_FALSE(CanonicalCapability("NET RAW"));
  EXPECT_FALSE(CanonicalCapability(""));
}

TEST(SecurityModelTest, SysctlsAllowedAsTheKubeletAllowsThem) {
  EXPECT_EQ(SysctlDotted("net/ipv4/ip_local_port_range"), "net.ipv4.ip_local_port_range");
  EXPECT_EQ(SysctlDotted("net/ipv4/conf/eno2.100/rp_filter"), "net.ipv4.conf.eno2/100.rp_filter");
  EXPECT_EQ(SysctlDotted("kernel.msgmax"), "kernel.msgmax");
  EXPECT_TRUE(IsSafeSysctl("net.ipv4.tcp_syncookies"));
  EXPECT_FALSE(IsSafeSysctl("net.core.somaxconn"));
  EXPECT_EQ(SysctlNamespace("kernel.msgmax"), "ipc");
  EXPECT_EQ(SysctlNamespace("fs.mqueue.msg_max"), "ipc");
  EXPECT_EQ(SysctlNamespace("net.core.somaxconn"), "net");
  EXPECT_EQ(SysctlNamespace("vm.swappiness"), "");
  EXPECT_TRUE(SysctlMatches("kernel.msgmax", {"kernel.msg*"}));
  EXPECT_TRUE(SysctlMatches("net.core.somaxconn", {"x", "net/core/somaxconn"}));
  EXPECT_FALSE(SysctlMatches("kernel.msgmax", {"kernel.msgma"}));

  Pod pod;
  ASSERT_THAT(Errors(kContainer, &pod), ::testing::IsEmpty());
  pod.spec.security_context = PodSecurityContext{};
  auto& sysctls = pod.spec.security_context->sysctls;
  sysctls = {{"net.ipv4.ip_local_port_range", "1024 65000"}, {"kernel.shm_rmid_forced", "1"}};
  EXPECT_EQ(ForbiddenSysctls(pod, {}), "");
  sysctls.push_back({"net.core.somaxconn", "1024"});
  EXPECT_EQ(ForbiddenSysctls(pod, {}), "forbidden sysctl: \"net.core.somaxconn\" not allowlisted");
  EXPECT_EQ(ForbiddenSysctls(pod, {"net.core.*"}), "");
  pod.spec.host_network = true;
  EXPECT_EQ(ForbiddenSysctls(pod, {"net.core.*"}),
            "forbidden sysctl: \"net.ipv4.ip_local_port_range\" not allowed with host net enabled");
  pod.spec.host_network = false;
  pod.spec.host_ipc = true;
  EXPECT_EQ(ForbiddenSysctls(pod, {"net.core.*"}),
            "forbidden sysctl: \"kernel.shm_rmid_forced\" not allowed with host ipc enabled");
  pod.spec.host_ipc = false;
  sysctls = {{"vm.swappiness", "1"}};
  EXPECT_EQ(ForbiddenSysctls(pod, {"*"}),
            "forbidden sysctl: \"vm.swappiness\" not a namespaced sysctl");
}

}  // namespace
}  // namespace nodelet::pod
