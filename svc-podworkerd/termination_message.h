// A container's termination message, the kubelet's way. Each container instance gets an empty
// file of nodelet's own, ROOT/pods/UID/containers/NAME/ATTEMPT (mode 0666, so that a container
// running as any user can write it), bind-mounted read-write at its terminationMessagePath.
// When the instance has exited, the last kMaxTerminationMessageBytes of the file are its
// `state.terminated.message`; with terminationMessagePolicy FallbackToLogsOnError, an empty file
// and a non-zero exit code, the last kMaxTerminationLogLines lines of its log (at most
// kMaxTerminationLogBytes) are used instead. The pod directory, and these files with it, goes
// with the pod's volumes (volumed), after every container stopped.
//
// The file's content is the container's: it is read with O_NOFOLLOW and never more than the
// cap. The container cannot swap the file (a bind mount's target cannot be renamed over).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "lib/common/status.h"

namespace nodelet::podworkerd {

inline constexpr size_t kMaxTerminationMessageBytes = 4096;  // the kubelet's 4 KiB
inline constexpr size_t kMaxTerminationLogLines = 80;
inline constexpr size_t kMaxTerminationLogBytes = 2048;
inline constexpr size_t kMaxPodTerminationMessageBytes = 12 * 1024;  // all containers together

// ROOT/pods/UID/containers/NAME/ATTEMPT; an error when uid or name is not one path component.
Result<std::string> TerminationMessagePath(const std::string& root_dir, const std::string& uid,
                                           const std::string& container, uint32_t attempt);

// Creates the directories and an empty file (truncating one left by an earlier try).
Status CreateTerminationMessageFile(const std::string& path);

// The last kMaxTerminationMessageBytes of the file; "" when it is missing or not a regular file.
// The text is the container's: it comes back valid UTF-8 (invalid sequences replaced by U+FFFD),
// starting on a character boundary.
std::string ReadTerminationMessage(const std::string& path);

// The last kMaxTerminationLogLines lines of a CRI log file ("TIME STREAM P|F TEXT" lines, partial
// lines joined), at most kMaxTerminationLogBytes (the end kept, from a character boundary, valid
// UTF-8); "" when unreadable.
std::string ReadLastLogLines(const std::string& log_path);

// The cap on one container's whole message in a pod of `containers` containers (init containers
// included): 12 KiB for the pod's messages together, split evenly (the kubelet's status
// manager's cut; the 4 KiB of one file is cut when it is read).
size_t TerminationMessageCap(size_t containers);

}  // namespace nodelet::podworkerd
