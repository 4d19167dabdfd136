// Static pods the kubelet's way: a decoded manifest becomes a pod named NAME-NODENAME, with a
// UID derived from the manifest, its source and the node, the kubernetes.io/config.*
// annotations, spec.nodeName set, the API's defaults applied, and then validated.
//
// UID: 32 lowercase hex digits of FNV-1a 128 over
//   "nodelet.static-pod-uid.v2\n" "host:" NODE (lowercased) "\n" ("file:" PATH | "url:" URL) "\n"
//   "pod:" NAMESPACE "/" NAME "\n"   (the name as written; namespace "default" when unset)
// so the same pod from the same manifest on the same node keeps its UID when the manifest is
// edited: an edit is an UPDATE of the pod (its changed containers restart, restartCount goes on)
// rather than the kubelet's delete-and-create of a new pod. Another node, another source or
// another name gives another UID. A manifest that sets metadata.uid keeps it.
//
// A pod from etcd never keeps a metadata.uid of its value (a value could otherwise take a
// static pod's uid, and with it its directory and its containers): its UID is always 32 hex
// digits of FNV-1a 128 over
//   "nodelet.etcd-pod-uid.v1\n" "host:" NODE "\n" "etcd:" KEY "\n" "created:" CREATE_REVISION "\n"
//   "pod:" NAMESPACE "/" NAME "\n"
// where CREATE_REVISION is the key's create_revision in etcd: an edit of the value keeps the
// pod, a key deleted and written again is a new pod, and the same _all key is another pod on
// each node.
//
// kubernetes.io/config.hash: 32 hex digits of FNV-1a 128 over "nodelet.static-pod-hash.v1\n",
// node and source as above, then CanonicalPod(the pod as written): it changes with any field.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "lib/common/rfc3339.h"
#include "lib/pod/manifest_parser.h"
#include "lib/pod/pod.h"

namespace nodelet::pod {

inline constexpr char kConfigHashAnnotation[] = "kubernetes.io/config.hash";
inline constexpr char kConfigMirrorAnnotation[] = "kubernetes.io/config.mirror";
inline constexpr char kConfigSeenAnnotation[] = "kubernetes.io/config.seen";
inline constexpr char kConfigSourceAnnotation[] = "kubernetes.io/config.source";

// kEtcd: the fleet's etcd source (docs/fleet.md). Its pods are not static pods: they keep
// their name (no -NODENAME), as pods of the API server do, and carry no config.mirror.
enum class PodSourceKind { kFile, kHttp, kEtcd };

// Where a static pod came from.
struct StaticPodOrigin {
  PodSourceKind kind = PodSourceKind::kFile;
  std::string source;           // the manifest's path, the manifest URL, or the etcd key
  std::string node_name;        // --node-name
  int64_t create_revision = 0;  // kEtcd: the key's create_revision
  // When the source first saw the pod (config.seen). The caller keeps the first value for a pod
  // it already knows, so re-reading a manifest does not change the pod.
  UnixTime seen;
};

// "file", "http" or "etcd" (config.source).
const char* PodSourceName(PodSourceKind kind);

// The node name as nodelet uses it: lowercased, like the kubelet's hostname-derived name.
std::string NormalizeNodeName(std::string_view node_name);

// NAME-NODENAME, the node name normalized.
std::string StaticPodName(std::string_view name, std::string_view node_name);

// The UID described above.
std::string StaticPodUid(const Pod& as_written, const StaticPodOrigin& origin);
// The UID of a pod from etcd described above (origin.kind kEtcd).
std::string EtcdPodUid(const Pod& as_written, const StaticPodOrigin& origin);
// The config.hash described above.
std::string StaticPodConfigHash(const Pod& as_written, const StaticPodOrigin& origin);

// Defaults, name, namespace, UID, nodeName (normalized) and annotations, then ValidatePod. On
// failure returns InvalidArgument with the first problem as "FIELD: reason" and, when `errors` is
// given, fills it with every problem.
Result<Pod> MakeStaticPod(const Pod& as_written, const StaticPodOrigin& origin,
                          FieldErrors* errors = nullptr);

// Decodes a manifest (see manifest_parser.h) and turns each Pod document into a static pod;
// `pods` then holds ready, valid pods. Errors name `origin.source`, e.g.
// "/etc/nodelet/manifests/web.yaml: spec.containers[1].name: Duplicate value: \"app\"". Two
// documents giving the same pod name: the second is an error.
ManifestParseResult LoadStaticPods(std::string_view content, const StaticPodOrigin& origin,
                                   const ParseOptions& options = {});

// Reads origin.source (a file, bounded by options.limits.max_file_bytes) and loads it.
ManifestParseResult ReadStaticPodFile(const StaticPodOrigin& origin,
                                      const ParseOptions& options = {});

}  // namespace nodelet::pod
