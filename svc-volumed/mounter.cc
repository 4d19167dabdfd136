#include "svc-volumed/mounter.h"

#include <sys/mount.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "svc-volumed/atomic_writer.h"

namespace nodelet::volumed {
namespace {

constexpr char kMountInfo[] = "/proc/self/mountinfo";

std::string Unescape(const std::string& s) {
  // mountinfo escapes space, tab, newline and backslash as \ooo.
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      int v = 0;
      bool ok = true;
      for (size_t k = 1; k <= 3; ++k) {
        if (i + k >= s.size() || s[i + k] < '0' || s[i + k] > '7')
          ok = false;
        else
          v = v * 8 + (s[i + k] - '0');
      }
      if (ok) {
        out.push_back(static_cast<char>(v));
        i += 3;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

}  // namespace

std::vector<std::string> ParseMountPoints(std::istream& mountinfo, const std::string& prefix) {
  std::vector<std::string> out;
  std::string line;
  while (std::getline(mountinfo, line)) {
    std::istringstream fields(line);
    std::string id, parent, dev, root, mount_point;
    if (!(fields >> id >> parent >> dev >> root >> mount_point)) continue;
    mount_point = Unescape(mount_point);
    if (mount_point == prefix || mount_point.rfind(prefix + "/", 0) == 0)
      out.push_back(mount_point);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.size() > b.size(); });
  return out;
}

Result<bool> IsMountedOn(const Mounter& mounter, const std::string& path) {
  auto mounts = mounter.MountPointsUnder(path);
  if (!mounts.ok()) return mounts.status();
  return std::find(mounts->begin(), mounts->end(), path) != mounts->end();
}

Status UnmountUnder(Mounter& mounter, const std::string& dir) {
  auto mounts = mounter.MountPointsUnder(dir);
  if (!mounts.ok()) return mounts.status();
  if (!mounts->empty()) {
    for (const auto& m : *mounts) {
      if (Status s = mounter.Unmount(m); !s.ok()) return s;
    }
    // A mount can hide another on the same path: look again.
    auto left = mounter.MountPointsUnder(dir);
    if (!left.ok()) return left.status();
    if (!left->empty()) return FailedPrecondition(dir + " still has mounts");
  }
  return Status::Ok();
}

Status UnmountAndRemoveTree(Mounter& mounter, const std::string& dir) {
  if (Status s = UnmountUnder(mounter, dir); !s.ok()) return s;
  // What a container could write into: no link in it is followed.
  return RemoveTreeNoFollow(dir);
}

Status MounterImpl::MountTmpfs(const std::string& path, const std::string& options) {
  if (mount("tmpfs", path.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, options.c_str()) != 0) {
    return PathErrno("mount tmpfs on", path);
  }
  return Status::Ok();
}

Status MounterImpl::Unmount(const std::string& path) {
  if (umount2(path.c_str(), 0) != 0 && umount2(path.c_str(), MNT_DETACH) != 0) {
    return PathErrno("unmount", path);
  }
  return Status::Ok();
}

Result<std::vector<std::string>> MounterImpl::MountPointsUnder(const std::string& prefix) const {
  std::ifstream in(kMountInfo);
  if (!in.is_open()) return PathErrno("read", kMountInfo);
  auto points = ParseMountPoints(in, prefix);
  if (in.bad()) return FailedPrecondition(std::string("read ") + kMountInfo + ": I/O error");
  return points;
}

std::vector<std::string> MountsUnder(const std::string& prefix) {
  auto points = MounterImpl().MountPointsUnder(prefix);
  return points.ok() ? std::move(*points) : std::vector<std::string>();
}

bool IsMountPoint(const std::string& path) {
  auto mounted = IsMountedOn(MounterImpl(), path);
  return mounted.ok() && *mounted;
}

Status PathErrno(const std::string& what, const std::string& path) {
  return FailedPrecondition(what + " " + path + ": " + std::strerror(errno));
}

}  // namespace nodelet::volumed
