// Pod sources: where the supervisor's pod manager gets desired pods from. Each source delivers
// full snapshots (every manifest it has, never a diff); the pod config merger turns consecutive
// snapshots into ADD/UPDATE/DELETE/REMOVE/RECONCILE. A source is ready after its first snapshot.
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
};

struct SourceSnapshot {
  std::string source;  // "file" or "http"
  std::vector<ManifestFile> manifests;
};

}  // namespace nodelet::supervisor
