// The writer of configMap, secret and downwardAPI volumes: the kubelet's AtomicWriter contract,
// done on directory fds so that nothing a container left in the volume directory can steer it.
//
// Layout of a volume directory DIR:
//   DIR/..data_<ns>/   the payload (files and their subdirectories), written fresh each time
//   DIR/..data         a symlink to the current ..data_<ns>, swapped with one renameat
//   DIR/NAME           for each top-level name of the payload, a symlink `..data/NAME`
//
// The writer works under an fd of DIR (opened O_DIRECTORY | O_NOFOLLOW). It creates with
// mkdirat, openat(O_CREAT | O_EXCL | O_NOFOLLOW), symlinkat and renameat, sets modes with fchmod
// on the file's own fd, and never follows a link it did not write: `..data` is only read, never
// resolved. It removes only what it owns: old payload directories found by name (`..data_`
// followed by digits, no `/`) and opened O_NOFOLLOW | O_DIRECTORY beneath DIR, emptied with
// unlinkat on fds (never following a link), and user-visible links that point into `..data/`.
// Anything else it finds is left alone; what stands in its way is an error.
#pragma once

#include <map>
#include <string>
#include <utility>

#include "lib/common/clock.h"
#include "lib/common/status.h"

namespace nodelet::volumed {

// Relative path -> (content, mode).
using Payload = std::map<std::string, std::pair<std::string, int>>;

// True for the payload directories the writer creates: `..data_` then 1 to 20 digits.
bool IsPayloadDirName(const std::string& name);

// A payload path must be relative, without empty, "." or ".." components, and no component may
// start with "..".
bool IsSafePayloadPath(const std::string& path);

// Writes `files` into the directory `dir_fd` (see above). `stamp` names the new payload
// directory (`..data_<stamp>`, bumped while the name is taken). `fs_group` (the pod's fsGroup,
// or -1): every file and directory of the payload is in that group, files get mode | 0440 and
// directories 02755, before ..data is swapped, so a reader in the group never meets a file it
// cannot read.
Status AtomicWriteAt(int dir_fd, const Payload& files, uint64_t stamp, int fs_group = -1);

// Opens `dir` (which must exist and must not be a link) and writes into it, stamped with the
// wall clock of `clock` in ns. With an fsGroup, `dir` itself is in that group too (02755).
Status AtomicWriteFiles(const Clock& clock, const std::string& dir, const Payload& files,
                        int fs_group = -1);

// Removes the directory `path` and everything in it on directory fds, never following a link,
// at any depth (TreeRemover, in one go): a directory a container swapped for a link meanwhile
// is removed as the link; `path` itself a link is refused. The components of `path` above its
// last one must be nodelet's own (ROOT/pods/UID). Missing: OK.
Status RemoveTreeNoFollow(const std::string& path);

}  // namespace nodelet::volumed
