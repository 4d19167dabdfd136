// Whether a path nodelet keeps its state, sockets or manifests under can be changed only by root
// and nodelet's own user: the check OpenSSH's StrictModes and systemd make before they trust a
// file (docs/security.md, "Edges: bytes, files and users nodelet does not control").
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lib/common/status.h"

namespace nodelet {

// Who may own and write what nodelet trusts: uid 0 and `self_uid` (nodelet's euid); a directory
// may be group-writable when its group is gid 0 or `trusted_group` (the --admin-group, whose
// members are root-equivalent anyway).
struct TrustPolicy {
  uid_t self_uid = 0;
  std::optional<gid_t> trusted_group;
  // This process's euid and the given group.
  static TrustPolicy ForThisProcess(std::optional<gid_t> trusted_group = std::nullopt);
};

// Checks `path` (absolute) and every ancestor, from "/" down, without following links (lstat):
//  - each existing component is owned by root or policy.self_uid (a link too: only its owner's
//    directory could replace it, but a link owned by another user is refused by name);
//  - an ancestor directory is not writable by others: not world-writable and not group-writable
//    by a group other than root's or the trusted one, unless it has the sticky bit (/tmp, 1777:
//    others cannot rename or remove what they do not own in it);
//  - the last component is never world-writable and not group-writable by an untrusted group,
//    sticky or not (what is made in it is nodelet's).
// A link met on the way is checked itself and then the path it resolves to is checked in full.
// A relative path is taken from the working directory. Components that do not exist yet end the
// walk: the first missing one will be made by nodelet in a directory only trusted users can write.
// `what` names the path for messages ("--run-dir"). PermissionDenied names `what`, the path, the
// offending component, its owner, mode and why.
Status CheckTrustedPath(const std::string& path, const TrustPolicy& policy,
                        const std::string& what = "path");

// Each (what, path) pair by CheckTrustedPath, in order; the first refusal. Empty paths (a flag
// not given) are skipped.
Status CheckTrustedPaths(const std::vector<std::pair<std::string, std::string>>& paths,
                         const TrustPolicy& policy);

}  // namespace nodelet
