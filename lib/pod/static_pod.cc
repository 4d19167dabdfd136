#include "lib/pod/static_pod.h"

#include <algorithm>
#include <set>

#include "lib/common/fs.h"
#include "lib/pod/canonical.h"
#include "lib/pod/defaults.h"
#include "lib/pod/validation.h"

namespace nodelet::pod {

const char* PodSourceName(PodSourceKind kind) {
  switch (kind) {
    case PodSourceKind::kFile:
      return "file";
    case PodSourceKind::kHttp:
      return "http";
    case PodSourceKind::kEtcd:
      return "etcd";
  }
  return "file";
}

namespace {
// The origin's line of the UID and hash inputs.
std::string OriginLine(const StaticPodOrigin& origin) {
  switch (origin.kind) {
    case PodSourceKind::kFile:
      return "file:" + origin.source + "\n";
    case PodSourceKind::kHttp:
      return "url:" + origin.source + "\n";
    case PodSourceKind::kEtcd:
      return "etcd:" + origin.source + "\n";
  }
  return "file:" + origin.source + "\n";
}
}  // namespace

std::string NormalizeNodeName(std::string_view node_name) {
  std::string out;
  for (char c : node_name) out += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return out;
}

std::string StaticPodName(std::string_view name, std::string_view node_name) {
  return std::string(name) + "-" + NormalizeNodeName(node_name);
}

std::string StaticPodUid(const Pod& as_written, const StaticPodOrigin& origin) {
  std::string input = "nodelet.static-pod-uid.v2\n";
  input += "host:" + NormalizeNodeName(origin.node_name) + "\n";
  input += OriginLine(origin);
  const std::string& ns = as_written.metadata.namespace_name;
  input += "pod:" + (ns.empty() ? std::string(kDefaultNamespace) : ns) + "/" +
           as_written.metadata.name + "\n";
  return Hex128(Fnv1a128(input));
}

std::string EtcdPodUid(const Pod& as_written, const StaticPodOrigin& origin) {
  std::string input = "nodelet.etcd-pod-uid.v1\n";
  input += "host:" + NormalizeNodeName(origin.node_name) + "\n";
  input += "etcd:" + origin.source + "\n";
  input += "created:" + std::to_string(origin.create_revision) + "\n";
  const std::string& ns = as_written.metadata.namespace_name;
  input += "pod:" + (ns.empty() ? std::string(kDefaultNamespace) : ns) + "/" +
           as_written.metadata.name + "\n";
  return Hex128(Fnv1a128(input));
}

std::string StaticPodConfigHash(const Pod& as_written, const StaticPodOrigin& origin) {
  std::string input = "nodelet.static-pod-hash.v1\n";
  input += "host:" + NormalizeNodeName(origin.node_name) + "\n";
  input += OriginLine(origin);
  input += CanonicalPod(as_written);
  return Hex128(Fnv1a128(input));
}

Result<Pod> MakeStaticPod(const Pod& as_written, const StaticPodOrigin& origin,
                          FieldErrors* errors) {
  Pod pod = as_written;
  if (origin.kind == PodSourceKind::kEtcd) {
    pod.metadata.uid = EtcdPodUid(as_written, origin);  // never the value's own
  } else if (pod.metadata.uid.empty()) {
    pod.metadata.uid = StaticPodUid(as_written, origin);
  }
  ApplyPodDefaults(pod);
  const bool is_static = origin.kind != PodSourceKind::kEtcd;
  if (!pod.metadata.name.empty() && is_static) {
    pod.metadata.name = StaticPodName(pod.metadata.name, origin.node_name);
  }
  pod.spec.node_name = NormalizeNodeName(origin.node_name);
  auto& annotations = pod.metadata.annotations;
  annotations[kConfigHashAnnotation] = StaticPodConfigHash(as_written, origin);
  if (is_static) annotations[kConfigMirrorAnnotation] = pod.metadata.uid;
  annotations[kConfigSeenAnnotation] = FormatRfc3339Nano(origin.seen);
  annotations[kConfigSourceAnnotation] = PodSourceName(origin.kind);
  FieldErrors found = ValidatePod(pod);
  if (found.empty()) return pod;
  Status status = InvalidArgument(found.front().ToString());
  if (errors) *errors = std::move(found);
  return status;
}

ManifestParseResult LoadStaticPods(std::string_view content, const StaticPodOrigin& origin,
                                   const ParseOptions& options) {
  ManifestParseResult decoded = DecodeManifest(content, origin.source, options);
  ManifestParseResult out;
  out.documents = decoded.documents;
  out.others = std::move(decoded.others);
  out.errors = std::move(decoded.errors);
  const bool multi = decoded.documents > 1;
  std::set<std::string> names;
  for (PodDocument& doc : decoded.pods) {
    FieldErrors errors;
    auto pod = MakeStaticPod(doc.pod, origin, &errors);
    if (pod.ok() && !names.insert(pod->FullName()).second) {
      errors = {FieldError::Duplicate("metadata.name", pod->metadata.name)};
      pod = InvalidArgument(errors.front().ToString());
    }
    if (!pod.ok()) {
      out.errors.push_back(
          {doc.document,
           ManifestMessage(origin.source, doc.document, multi, pod.status().message()),
           std::move(errors)});
      continue;
    }
    if (origin.kind == PodSourceKind::kEtcd && !doc.pod.metadata.uid.empty()) {
      doc.ignored_fields.push_back("metadata.uid");  // replaced by the derived one
    }
    out.pods.push_back({doc.document, std::move(*pod), std::move(doc.ignored_fields)});
  }
  std::stable_sort(
      out.errors.begin(), out.errors.end(),
      [](const ManifestError& a, const ManifestError& b) { return a.document < b.document; });
  return out;
}

ManifestParseResult ReadStaticPodFile(const StaticPodOrigin& origin, const ParseOptions& options) {
  auto content = ReadFileBounded(origin.source, options.limits.max_file_bytes);
  if (!content.ok()) {
    ManifestParseResult result;
    std::string detail = content.status().code() == StatusCode::kResourceExhausted
                             ? "the manifest is larger than the limit of " +
                                   std::to_string(options.limits.max_file_bytes) + " bytes"
                             : content.status().message();
    result.errors.push_back({0, ManifestMessage(origin.source, 0, false, detail), {}});
    return result;
  }
  return LoadStaticPods(*content, origin, options);
}

}  // namespace nodelet::pod
