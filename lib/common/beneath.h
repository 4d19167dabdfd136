// Path lookups that cannot be steered by whoever else writes into a directory: a container
// writing into its volume while nodelet (root) resolves a subPath in it, or a host directory
// that something else can change under a hostPath. Everything is resolved from a directory fd:
// with openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS) when the kernel has it, else by a
// walk of one component at a time (openat with O_NOFOLLOW, symlinks read with readlinkat and
// resolved by the walk itself, `..` popped from the walk's own stack). Either way no symlink,
// `..` or /proc magic link can lead out of the starting directory, and the result is an fd: what
// was checked is what is used, whatever is renamed or swapped afterwards.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "lib/common/status.h"
#include "lib/common/unique_fd.h"

namespace nodelet {

// Links a path walk follows before it gives up with ELOOP: the kernel's own limit (MAXSYMLINKS).
inline constexpr int kMaxLinks = 40;

// Every component of `path`, ".." included, empty ones and "." dropped.
std::vector<std::string> PathComponents(const std::string& path);

// How a lookup may go: kAuto uses openat2 and falls back to the walk on ENOSYS; kWalk always
// walks (tests run both).
enum class BeneathMode { kAuto, kWalk };

// Where a lookup must stay: kBeneath refuses anything that leads out of the starting directory
// (absolute symlinks included: RESOLVE_BENEATH); kInRoot treats the starting directory as `/`,
// so absolute symlinks and `..` stay inside it (RESOLVE_IN_ROOT), which from an fd of the real
// `/` is an ordinary lookup without magic links.
enum class BeneathScope { kBeneath, kInRoot };

struct LookupOptions {
  BeneathMode mode = BeneathMode::kAuto;
  BeneathScope scope = BeneathScope::kBeneath;
};

// Opens `rel` (relative; "" is `dir_fd` itself) beneath `dir_fd` as an O_PATH fd, following
// symlinks that stay beneath it. `flags` may add O_DIRECTORY (the result must be a directory)
// and O_NOFOLLOW (a final symlink is opened as the link). Returns -errno on failure: EXDEV for
// a path that leads out (absolute symlinks included), ELOOP for too many links or a magic link,
// ENOENT, ENOTDIR, ...
int OpenBeneathRaw(int dir_fd, const std::string& rel, int flags, LookupOptions options = {});

// A hook called between a lookup and the use of its result (tests swap files there).
using BeneathHook = std::function<void(const std::string& step)>;

// OpenBeneathRaw as a Result; the message names `what` (e.g. `subPath "a/b"`).
Result<UniqueFd> OpenBeneath(int dir_fd, const std::string& rel, int flags, const std::string& what,
                             LookupOptions options = {});

// Opens the directory `rel` beneath `dir_fd`, creating each missing component with mkdirat on
// its parent's fd and opening it again with O_NOFOLLOW (then fchmod to `mode`), so a component
// swapped for a link meanwhile is refused. Every existing prefix is looked up from `dir_fd`
// with the rules above. An existing final component may be a file. `hook` (may be null) runs
// before each lookup of a prefix after the first, i.e. between the check of the parent and its
// use. Sets *created when anything was created (may be null).
Result<UniqueFd> OpenOrCreateBeneath(int dir_fd, const std::string& rel, mode_t mode,
                                     const std::string& what, const BeneathHook& hook = nullptr,
                                     LookupOptions options = {}, bool* created = nullptr);

// The message for a failed lookup (-errno `err`) of `what`.
Status BeneathError(const std::string& what, int err);

// True when the running kernel has openat2 (probed once).
bool KernelHasOpenat2();

// `path`'s components ("a//b/./c" -> a, b, c); false when one is ".." or `path` is absolute.
bool SplitRelative(const std::string& path, std::vector<std::string>* parts);

}  // namespace nodelet
