#include "lib/common/trusted_path.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "lib/common/beneath.h"

namespace nodelet {
namespace {

std::string Octal(mode_t mode) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

class Walker {
 public:
  Walker(const TrustPolicy& policy, const std::string& what, const std::string& original)
      : policy_(policy), what_(what), original_(original) {}

  Status Walk(const std::string& path, int links) {
    if (path.empty() || path[0] != '/') {
      return InvalidArgument(what_ + " '" + original_ + "' is not an absolute path");
    }
    const std::vector<std::string> parts = PathComponents(path);
    std::string prefix = "/";
    // "/" itself, then each component; `last` is the path's own.
    for (size_t i = 0; i <= parts.size(); ++i) {
      if (i > 0) prefix += (i > 1 ? "/" : "") + parts[i - 1];
      const bool last = i == parts.size();
      struct stat st {};
      if (lstat(prefix.c_str(), &st) != 0) {
        if (errno == ENOENT) return Status::Ok();  // made later, under a trusted directory
        return ErrnoStatus(what_ + " '" + original_ + "': cannot stat '" + prefix + "'", errno);
      }
      if (st.st_uid != 0 && st.st_uid != policy_.self_uid) {
        return Refuse(prefix, st,
                      std::string(S_ISLNK(st.st_mode) ? "a link" : "it") + " is owned by uid " +
                          std::to_string(st.st_uid) + ", not root or nodelet's uid " +
                          std::to_string(policy_.self_uid));
      }
      if (S_ISLNK(st.st_mode)) {
        if (links >= kMaxLinks) return Refuse(prefix, st, "too many links on the way");
        // This one link only (readlink, not realpath): a link in its target is met again by
        // the walk below and checked like this one, owner included.
        char target[PATH_MAX];
        const ssize_t n = readlink(prefix.c_str(), target, sizeof(target) - 1);
        if (n <= 0) {
          return ErrnoStatus(what_ + " '" + original_ + "': cannot read the link '" + prefix + "'",
                             errno);
        }
        std::string rest(target, static_cast<size_t>(n));
        if (rest[0] != '/') rest = prefix.substr(0, prefix.rfind('/') + 1) + rest;
        for (size_t j = i; j < parts.size(); ++j) rest += (rest == "/" ? "" : "/") + parts[j];
        return Walk(rest, links + 1);
      }
      if (!last && !S_ISDIR(st.st_mode)) return Refuse(prefix, st, "it is not a directory");
      const bool trusted_group =
          st.st_gid == 0 || (policy_.trusted_group && st.st_gid == *policy_.trusted_group);
      const bool sticky_ok = !last && S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX) != 0;
      if ((st.st_mode & S_IWOTH) != 0 && !sticky_ok) {
        return Refuse(prefix, st,
                      last ? "it is writable by every user"
                           : "it is writable by every user and has no sticky bit");
      }
      if ((st.st_mode & S_IWGRP) != 0 && !trusted_group && !sticky_ok) {
        return Refuse(prefix, st,
                      "it is writable by group " + std::to_string(st.st_gid) +
                          ", which is neither root's nor the admin group");
      }
    }
    return Status::Ok();
  }

 private:
  Status Refuse(const std::string& component, const struct stat& st, const std::string& why) {
    std::string where = component == original_ ? "" : " (at '" + component + "')";
    return PermissionDenied(what_ + " '" + original_ + "' is not trusted" + where + ": owner " +
                            std::to_string(st.st_uid) + ":" + std::to_string(st.st_gid) +
                            ", mode " + Octal(st.st_mode) + "; " + why +
                            ", so another user could replace what nodelet keeps there");
  }

  const TrustPolicy& policy_;
  const std::string& what_;
  const std::string& original_;
};

}  // namespace

TrustPolicy TrustPolicy::ForThisProcess(std::optional<gid_t> trusted_group) {
  return TrustPolicy{geteuid(), trusted_group};
}

Status CheckTrustedPath(const std::string& path, const TrustPolicy& policy,
                        const std::string& what) {
  std::string absolute = path;
  if (!path.empty() && path[0] != '/') {
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd) == nullptr) {
      return ErrnoStatus(what + " '" + path + "': no working directory", errno);
    }
    absolute = std::string(cwd) + "/" + path;
  }
  return Walker(policy, what, path).Walk(absolute, 0);
}

Status CheckTrustedPaths(const std::vector<std::pair<std::string, std::string>>& paths,
                         const TrustPolicy& policy) {
  for (const auto& [what, path] : paths) {
    if (path.empty()) continue;
    if (Status s = CheckTrustedPath(path, policy, what); !s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace nodelet
