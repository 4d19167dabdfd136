// The manifest decoder: bytes of YAML or JSON (JSON is YAML) holding one or more documents
// ("---") -> Pods as written, other objects, and per-document errors.
//
// Each document must be a mapping with `kind` and `apiVersion`. `kind: Pod` with
// `apiVersion: v1` is decoded into a Pod (no defaults applied: see defaults.h); kinds named in
// ParseOptions::other_kinds (e.g. ConfigMap and Secret, for the volumes code) are returned
// undecoded as OtherDocument; any other kind is an error. Fields the decoder does not take are
// left out of the Pod, like the API server's non-strict decoding, and listed by path in
// PodDocument::ignored_fields (the supervisor names them in an IgnoredFields Warning event);
// the v1 fields whose silent loss would change what runs (hostPID, tty, capabilities,
// unsupported volume sources, ...: docs/pods.md, "Every field of the v1 Pod") are refused.
//
// Hostile input is bounded: a size cap, text-only content (no NUL, no control bytes, valid
// UTF-8), a nesting depth limit, a node budget per document (so aliases cannot multiply work),
// and a document count limit. Scalars follow the YAML 1.2 core schema, with YAML 1.1 octal
// (`0644`) for integers as Kubernetes' YAML reader does; a plain scalar that reads as a number
// or boolean where a string belongs is an error, as it is for the API server (quote it).
#pragma once

#include <yaml-cpp/yaml.h>

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "lib/pod/field_error.h"
#include "lib/pod/pod.h"

namespace nodelet::pod {

// The most bytes of one manifest: a file of --pod-manifest-path, or the body of --manifest-url
// (the URL source aborts a longer body, so what it fetches the parser always accepts by size).
inline constexpr size_t kMaxManifestBytes = 1024 * 1024;

struct ManifestLimits {
  size_t max_file_bytes = kMaxManifestBytes;  // a manifest file or a manifest URL's body
  size_t max_depth = 64;                      // nested mappings and sequences in one document
  size_t max_nodes = 200000;                  // nodes visited per document, aliases each time
  size_t max_documents = 1000;                // non-empty documents per file
};

struct ParseOptions {
  ManifestLimits limits;
  // Kinds other than Pod returned as OtherDocument instead of being rejected.
  std::set<std::string, std::less<>> other_kinds;
};

// A Pod document, decoded as written (before defaults).
struct PodDocument {
  int document = 0;  // 1-based position among the file's non-empty documents
  Pod pod;
  // Fields the decoder did not take, by path ("spec.tolerations", "spec.containers[0].tty"):
  // unknown fields and the v1 fields nodelet accepts and ignores (docs/pods.md, "Every field").
  std::vector<std::string> ignored_fields;
};

// A document of an accepted non-Pod kind, left undecoded for its consumer.
struct OtherDocument {
  int document = 0;
  std::string api_version;
  std::string kind;
  std::string name;            // metadata.name, when it is a string
  std::string namespace_name;  // metadata.namespace, when it is a string
  YAML::Node object;           // already checked against the depth and node limits
};

// Why a document (or the whole file, document 0) was rejected.
struct ManifestError {
  int document = 0;  // 0: the whole file
  // One line: "SOURCE: FIELD: reason", or "SOURCE (document N): FIELD: reason" when the file
  // holds several documents, or "SOURCE: reason" for file-level problems.
  std::string message;
  // Every field problem found (message shows the first); empty for syntax and file errors.
  FieldErrors field_errors;
};

struct ManifestParseResult {
  std::vector<PodDocument> pods;
  std::vector<OtherDocument> others;
  std::vector<ManifestError> errors;
  int documents = 0;  // non-empty documents seen
};

// Decodes `content`; `source` names it in messages (a path or a URL).
ManifestParseResult DecodeManifest(std::string_view content, std::string_view source,
                                   const ParseOptions& options = {});

// Reads `path` (refusing more than options.limits.max_file_bytes) and decodes it.
ManifestParseResult DecodeManifestFile(const std::string& path, const ParseOptions& options = {});

// "SOURCE: detail" or "SOURCE (document N): detail" (N shown only when `multi_document`).
std::string ManifestMessage(std::string_view source, int document, bool multi_document,
                            std::string_view detail);

}  // namespace nodelet::pod
