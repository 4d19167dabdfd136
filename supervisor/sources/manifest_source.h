// Pod sources: where the supervisor's pod manager gets desired pods from. Each source delivers
// full snapshots (every manifest it has, never a diff); the pod config merger turns consecutive
// snapshots into ADD/UPDATE/DELETE/REMOVE/RECONCILE. A source is ready after its first
// successful read: a snapshot with `failure` set says the source could not be read this time
// (URL down, HTTP error, body too large, unreadable directory), and the pods it served last
// stay as they are.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lib/common/status.h"

namespace nodelet::supervisor {

// One manifest as read from a source: its bytes, or why they could not be read.
struct ManifestFile {
  std::string origin;   // file path, or the URL
  std::string content;  // raw YAML/JSON
  Status error;         // not OK: content is empty and this says why (too large, unreadable)
  // etcd: the key's create_revision, from which its pod's uid is derived (lib/pod/static_pod.h).
  int64_t create_revision = 0;
};

// Why a source could not be read. `reason` is a short metric label: fetch, tls, http_status,
// too_large, timeout, unreadable_dir (and parse, set by the pod manager for a URL body that does
// not parse).
struct SourceFailure {
  std::string reason;
  Status error;
};

struct SourceSnapshot {
  std::string source;  // "file", "http" or "etcd"
  std::vector<ManifestFile> manifests;
  std::optional<SourceFailure> failure;  // set: nothing was read, `manifests` is empty
  // The source's own copy of what it served before this process started (the etcd source's
  // cache file): its pods run, but the source is not ready, so nothing is removed, until it
  // has been read.
  bool from_cache = false;
};

}  // namespace nodelet::supervisor
