// Mounter: the mount table as volumed uses it, behind an interface so the reconciler and the
// plugins can be tested without root (tests/fakes/fake_mounter.h). MounterImpl is the host's:
// mount(2), umount2(2) and /proc/self/mountinfo.
#pragma once

#include <istream>
#include <string>
#include <vector>

#include "lib/common/status.h"

namespace nodelet::volumed {

class Mounter {
 public:
  virtual ~Mounter() = default;
  // Mounts a tmpfs on the directory `path` (nosuid, nodev) with the tmpfs `options`
  // ("mode=0777,size=N").
  virtual Status MountTmpfs(const std::string& path, const std::string& options) = 0;
  // Unmounts the mount on top of `path`; a busy one is detached (lazy unmount) instead.
  virtual Status Unmount(const std::string& path) = 0;
  // The mount points at `prefix` or under it, deepest first; a path mounted twice is listed
  // twice. An error when the mount table cannot be read (never an empty list instead).
  virtual Result<std::vector<std::string>> MountPointsUnder(const std::string& prefix) const = 0;
};

// Whether something is mounted on `path` itself.
Result<bool> IsMountedOn(const Mounter& mounter, const std::string& path);

// Unmounts everything at or under `dir`, deepest first, and checks that nothing is left (when
// it unmounted anything).
Status UnmountUnder(Mounter& mounter, const std::string& dir);

// UnmountUnder, then removes `dir` and everything in it without following a link
// (RemoveTreeNoFollow): a tree that a container could write into is never removed across a
// mount or through a link.
Status UnmountAndRemoveTree(Mounter& mounter, const std::string& dir);

class MounterImpl : public Mounter {
 public:
  Status MountTmpfs(const std::string& path, const std::string& options) override;
  Status Unmount(const std::string& path) override;
  Result<std::vector<std::string>> MountPointsUnder(const std::string& prefix) const override;
};

// The mount points of a mountinfo table (proc(5): the fifth field, with \ooo escapes decoded)
// at `prefix` or under it, deepest first. Lines that do not parse are skipped.
std::vector<std::string> ParseMountPoints(std::istream& mountinfo, const std::string& prefix);

// The host's mount points under `prefix` (MounterImpl); empty when mountinfo cannot be read.
// For tests and tools that only look.
std::vector<std::string> MountsUnder(const std::string& prefix);
bool IsMountPoint(const std::string& path);

// FailedPrecondition "WHAT PATH: strerror(errno)", for a system call on PATH that just failed.
Status PathErrno(const std::string& what, const std::string& path);

}  // namespace nodelet::volumed
