// The Pod model (lib/pod) as CRI configs, the way the kubelet's kuberuntime builds them: the
// sandbox config (metadata, hostname, log directory, labels that mark the pod as nodelet's,
// namespaces) and each container's config (image, command, env, log path, the spec hash
// annotation that tells a later sync whether the spec changed, resources, security context).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lib/cri/runtime_service.h"
#include "lib/pod/pod.h"

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
std::string PodLogDirectory(const std::string& log_dir, const pod::Pod& pod);

cri::v1::PodSandboxConfig MakeSandboxConfig(const pod::Pod& pod, uint32_t attempt,
                                            const std::string& log_dir);

// `restart_count` becomes the metadata attempt and the log file: CONTAINER/N.log.
cri::v1::ContainerConfig MakeContainerConfig(const pod::Pod& pod, const pod::Container& container,
                                             uint32_t restart_count);

// The host path of `sub_path` inside the volume at `base`, refusing absolute paths, `..` and
// anything (a symlink) that resolves outside the volume. A missing subPath directory is created
// inside the volume, as the kubelet does.
Result<std::string> ResolveSubPath(const std::string& base, const std::string& sub_path);

// The CRI mounts of a container's volumeMounts, given each volume's host path (from volumed).
Result<std::vector<cri::v1::Mount>> MakeMounts(const pod::Container& container,
                                               const std::map<std::string, std::string>& volume_paths);

}  // namespace nodelet::podworkerd
