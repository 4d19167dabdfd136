// Small filesystem helpers with Status results.
#pragma once

#include <sys/types.h>

#include <string>

#include "lib/common/status.h"

namespace nodelet {

// Creates `path` and missing parents; sets `mode` on the last component (also when it existed).
Status EnsureDirectory(const std::string& path, mode_t mode);

// Reads a whole file, refusing files larger than `max_bytes`.
Result<std::string> ReadFileBounded(const std::string& path, size_t max_bytes);

// Replaces `path` with `content` all at once: written to PATH.tmp (O_NOFOLLOW, `mode`), synced,
// renamed over PATH; the temporary file is removed on an error, which names the step and path.
// The file ends with exactly `mode`. Only for nodelet's own directories (ROOT, RUN-DIR): a path
// that a container or manifest can reach goes through lib/common/beneath.h instead.
Status WriteFileAtomically(const std::string& path, const std::string& content, mode_t mode);

// An exclusive flock on a lock file that holds its holder's pid.
struct PidLock {
  int fd = -1;       // taken: the fd (close-on-exec); the lock lasts while it is open
  pid_t holder = 0;  // not taken: the live holder's pid as it wrote it (0 when unreadable)
};
// Tries once, without waiting. Errors are for a lock file that cannot be opened or written.
Result<PidLock> TryPidLock(const std::string& lock_path);
// The holder's pid for messages, "?" when unknown.
std::string HolderPid(const PidLock& lock);

// Takes the lock that guards a socket path that this process will bind: PATH.lock, flocked
// without waiting, holding the holder's pid. Returns the fd (close-on-exec; the lock lasts while
// it is open, and ends with the process), or an error naming the live holder. Whoever holds it
// may unlink a stale socket at PATH: no live process serves it.
Result<int> LockSocketPath(const std::string& path);

}  // namespace nodelet
