// The Pod model (lib/pod) as CRI configs, the way the kubelet's kuberuntime builds them: the
// sandbox config (metadata, hostname, log directory, labels that mark the pod as nodelet's,
// namespaces) and each container's config (image, command, env, log path, the spec hash
// annotation that tells a later sync whether the spec changed, resources, security context).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lib/common/beneath.h"
#include "lib/cri/runtime_service.h"
#include "lib/pod/pod.h"
#include "svc-podworkerd/container_env.h"
#include "svc-podworkerd/pod_dns.h"

namespace nodelet::podworkerd {

// Labels and annotations on sandboxes and containers nodelet creates.
inline constexpr char kManagedLabel[] = "nodelet.io/managed";  // = plegd::kManagedLabel
inline constexpr char kPodNameLabel[] = "io.kubernetes.pod.name";
inline constexpr char kPodNamespaceLabel[] = "io.kubernetes.pod.namespace";
inline constexpr char kPodUidLabel[] = "io.kubernetes.pod.uid";
inline constexpr char kContainerNameLabel[] = "io.kubernetes.container.name";
inline constexpr char kContainerHashAnnotation[] = "nodelet.io/container-hash";  // hex
inline constexpr char kRestartCountAnnotation[] = "io.kubernetes.container.restartCount";
inline constexpr char kGracePeriodAnnotation[] = "io.kubernetes.pod.terminationGracePeriod";

// LOG_DIR/pods/NAMESPACE_NAME_UID, the pod's log directory (the kubelet's layout).
// An error when namespace, name or uid would make it anything but one directory in LOG_DIR/pods.
Result<std::string> PodLogDirectory(const std::string& log_dir, const pod::Pod& pod);

// The sandbox's hostname and resolver config, from the node's DNS settings (pod_dns.h).
struct SandboxNetwork {
  std::string hostname;  // empty for hostNetwork pods (the node's)
  DnsSettings dns;
};

// The sandbox's hostname (GeneratePodHostnameAndDomain, then KernelHostname for
// setHostnameAsFQDN); "" when the pod uses the node's network. Reads nothing.
Result<std::string> SandboxHostname(const pod::Pod& pod, const std::string& cluster_domain);

// The kubelet's part of generatePodSandboxConfig that reads the node: the host's resolver
// config (settings.resolv_conf, read even when the policy does not use it, as the kubelet does),
// ComposePodDns, and the hostname (GeneratePodHostnameAndDomain, KernelHostname) unless the pod
// uses the node's network. `events` gets MissingClusterDNS and DNSConfigForming. An error (an
// unreadable resolv.conf, an FQDN over 64 characters) fails the sandbox's creation.
Result<SandboxNetwork> MakeSandboxNetwork(const pod::Pod& pod, const NodeDnsSettings& settings,
                                          std::vector<DnsEvent>* events);

// With `network`, its hostname and (when it has any) dns_config; without, neither. port_mappings:
// every containers[].ports entry with a hostPort (hostIP, protocol) unless the pod uses the node's
// network.
cri::v1::PodSandboxConfig MakeSandboxConfig(const pod::Pod& pod, uint32_t attempt,
                                            const std::string& log_dir,
                                            const SandboxNetwork* network = nullptr);

// The user an image runs as, from CRI ImageStatus: a uid when the image's user is numeric,
// else a username; neither when the image names none (root).
struct ImageUser {
  std::optional<int64_t> uid;
  std::string username;
};

// The container's securityContext after the pod's defaults, as the kubelet hands it to the
// runtime: namespaces, user and group (the image's user when the pod names none, as the
// kubelet does, so that runAsGroup alone works), fsGroup and supplementalGroups, privileged,
// read-only root, no_new_privs, capabilities, seccomp (Localhost profiles are files in
// `seccomp_dir`, ROOT-DIR/seccomp) and AppArmor.
void SetContainerSecurity(const pod::Pod& pod, const pod::Container& container,
                          const std::string& seccomp_dir, const ImageUser* image,
                          cri::v1::LinuxContainerSecurityContext* out);

// The kubelet's verifyRunAsNonRoot: with runAsNonRoot, the container must run as a uid other
// than 0, known before it starts (a runAsUser, or the image's numeric user). The error's text
// is the kubelet's, for the container's CreateContainerConfigError.
Status VerifyRunAsNonRoot(const pod::Pod& pod, const pod::Container& container,
                          const ImageUser& image);

// `restart_count` becomes the metadata attempt and the log file: CONTAINER/N.log. `env` is the
// container's resolved environment, command and args (container_env.h); without it they are
// the spec's as written. `seccomp_dir` and `image` as for SetContainerSecurity.
cri::v1::ContainerConfig MakeContainerConfig(const pod::Pod& pod, const pod::Container& container,
                                             uint32_t restart_count,
                                             const ContainerEnvironment* env = nullptr,
                                             const std::string& seccomp_dir = "",
                                             const ImageUser* image = nullptr);

// subPath mounts (the kubelet's fix for CVE-2021-25741). The container may change its volume
// while nodelet resolves a subPath in it, so the subPath is never handed to the runtime by name:
// it is opened beneath the volume's fd (lib/common/beneath.h: openat2 with RESOLVE_BENEATH |
// RESOLVE_NO_MAGICLINKS, or the O_NOFOLLOW walk), missing directories are made with mkdirat on
// the same fds, and what was opened is bind-mounted through /proc/self/fd/N on a staging path
// of nodelet's own, ROOT/pods/UID/volume-subpaths/VOLUME/CONTAINER/INDEX. The runtime mounts
// the staging path. volumed unmounts the staging mounts with the rest of the pod directory when
// the pod goes; a container started again rebinds its staging paths.
struct SubPathOptions {
  LookupOptions lookup;
  // Runs between the lookup and the bind mount (tests swap the directory for a link there).
  BeneathHook before_use;
  // Runs between the lookup of one component and the next while missing ones are created.
  BeneathHook while_creating;
};

// ROOT/pods/UID/volume-subpaths/VOLUME/CONTAINER/INDEX; refuses names that are not one path
// component.
Result<std::string> SubPathStagingPath(const std::string& root_dir, const std::string& pod_uid,
                                       const std::string& volume, const std::string& container,
                                       size_t index);

// Opens `sub_path` beneath the volume at `volume_path` (created as a directory when missing, as
// the kubelet does). A symlink that stays inside the volume is followed; anything that leads out
// is refused with an error that names the subPath.
Result<UniqueFd> OpenSubPath(const std::string& volume_path, const std::string& sub_path,
                             const SubPathOptions& options = {});

// OpenSubPath, then the bind mount of what it opened on `staging` (made a directory or an empty
// file to match; an earlier mount there is detached first). Returns `staging`.
Result<std::string> StageSubPath(const std::string& volume_path, const std::string& sub_path,
                                 const std::string& staging, const SubPathOptions& options = {});

// The CRI mounts of a container's volumeMounts, given each volume's host path (from volumed).
// configMap, secret and downwardAPI volumes are always read-only (their writer is nodelet, as
// in the kubelet since CVE-2017-1002102). subPaths are staged under `root_dir`.
Result<std::vector<cri::v1::Mount>> MakeMounts(
    const pod::Pod& pod, const pod::Container& container,
    const std::map<std::string, std::string>& volume_paths, const std::string& root_dir,
    const SubPathOptions& options = {});

// `content` written as the pod's /etc/hosts under `root_dir` (WriteEtcHostsFile), and the mount
// that puts it at /etc/hosts.
Result<cri::v1::Mount> EtcHostsFileMount(const std::string& root_dir, const std::string& pod_uid,
                                         const std::string& content);
// The container's termination-message file for attempt `attempt` under `root_dir`, created
// empty, and the read-write mount that puts it at the container's terminationMessagePath.
Result<cri::v1::Mount> TerminationMessageMount(const std::string& root_dir, const pod::Pod& pod,
                                               const pod::Container& container, uint32_t attempt);

}  // namespace nodelet::podworkerd
