// ManifestBook: the pod manager's record of what each manifest of each pod source became (the
// pods it made, the ConfigMaps and Secrets it carried, or why it was rejected) and of each
// source's last failure to be read, for `nodeletctl manifests`. It also decides which rejections
// are new: each is logged and sent as one FailedToParseManifest node event when it first
// appears, and again only after it was fixed (gone from a read of its source) and came back.
//
// Pure bookkeeping, no I/O: the pod manager feeds it each snapshot it takes and asks it for the
// report with its own view of admission.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "lib/status/pod_status.h"
#include "supervisor/service_control.h"

namespace nodelet::supervisor {

// The node event's reason for a rejected manifest (a file, a URL body, a ConfigMap or Secret in
// one): the kubelet's config sources only log this; nodelet makes it an event so that it is
// visible without reading logs.
inline constexpr char kFailedToParseManifest[] = "FailedToParseManifest";
// The node event for a pod kept out because another source's pod holds its uid or its
// namespace/name (supervisor/pod_config.h: the winner by source rank).
inline constexpr char kPodSourceConflict[] = "PodSourceConflict";

// At most this many errors of one manifest are reported (the rest are counted: "... and N
// more"), each at most kMaxReportedErrorBytes: a manifest's text stays bounded in the report and
// in events whatever a hostile file holds.
inline constexpr size_t kMaxReportedErrors = 10;
inline constexpr size_t kMaxReportedErrorBytes = 1024;

// One manifest as the pod manager took it.
struct ManifestRecord {
  struct Pod {
    std::string namespace_name, name, uid;
  };
  struct Config {
    std::string kind, namespace_name, name;  // kind: ConfigMap or Secret
  };
  std::string origin;  // the file's path, or the URL
  // As logged: "ORIGIN: FIELD: reason", "ORIGIN (document N): FIELD: reason".
  std::vector<std::string> errors;
  std::vector<Pod> pods;
  std::vector<Config> configs;
};

// What admission made of a pod, by uid: the pod manager's admitted and rejected sets.
struct Admission {
  ipc::ctl::PodAdmission state = ipc::ctl::PodAdmission::Admitted;
  std::string reason;  // Rejected: OutOfcpu, ...; Ignored: why
};
using AdmissionLookup = std::function<Admission(const std::string& uid)>;

class ManifestBook {
 public:
  // A configured source: "file" with the manifest directory, "http" with the URL.
  void AddSource(const std::string& source, const std::string& location);
  // A reloaded configuration moved `source` (its manifests and failure go; the next read fills
  // them) or dropped it (empty location: it is no longer listed).
  void MoveSource(const std::string& source, const std::string& location);
  // `source` was read: `manifests` replace its previous ones and its failure is cleared. Returns
  // the errors among them that are new (not in the source's previous read), in order.
  std::vector<std::string> Read(const std::string& source, std::vector<ManifestRecord> manifests);
  // `source` could not be read (`failure`: "REASON: message"): its manifests stay as last read.
  void Failed(const std::string& source, const std::string& failure);
  // `source` was read but refused whole because of `errors` (a URL body of which a document does
  // not parse): as Failed, and returns the errors that are new, as Read does.
  std::vector<std::string> Refused(const std::string& source, const std::string& failure,
                                   const std::vector<std::string>& errors);

  // Every source (in the order added) and every manifest (by source, then origin).
  ManifestReport Report(const AdmissionLookup& admission) const;

 private:
  // Replaces the source's current errors with `errors`; returns those it did not hold.
  std::vector<std::string> Remember(const std::string& source,
                                    const std::vector<std::string>& errors);

  struct Source {
    std::string name, location, failure;
    bool ready = false;
    std::map<std::string, ManifestRecord> manifests;  // by origin
    std::set<std::string> errors;                     // reported and not yet fixed
  };
  std::vector<Source> sources_;
  Source* Find(const std::string& source);
};

// The node event for a rejected manifest: pod uid "node", type Warning, reason
// FailedToParseManifest, the message "Rejected manifest ERROR" (ERROR names the origin, the field
// and the reason, bounded to kMaxReportedErrorBytes).
status::PodEvent RejectedManifestEvent(const std::string& node_name, const std::string& error,
                                       int64_t unix_s);

// A pod kept out of the desired set because another source's pod holds its uid or its
// namespace/name (PodConflict of pod_config.h, without the pod).
struct SourceConflict {
  std::string kind;  // "uid" or "name"
  std::string source, uid, full_name;
  std::string winner_source, winner_uid;
};

// The node event for it: pod uid "node", type Warning, reason PodSourceConflict, a message that
// names the pod kept out (source, namespace/name, uid), what the winner holds, and the rule.
status::PodEvent SourceConflictEvent(const std::string& node_name, const SourceConflict& c,
                                     int64_t unix_s);

// `error` without its leading origin ("ORIGIN: " or "ORIGIN " before "(document N)"), bounded
// to kMaxReportedErrorBytes: what the report shows next to the origin.
std::string ErrorDetail(const std::string& origin, const std::string& error);

}  // namespace nodelet::supervisor
