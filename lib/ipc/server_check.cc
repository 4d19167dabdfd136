#include "lib/ipc/server_check.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "lib/common/trusted_path.h"

namespace nodelet::ipc {

Status CheckIpcServer(const std::string& uri) {
  constexpr std::string_view kScheme = "ipc://";
  if (uri.compare(0, kScheme.size(), kScheme) != 0) return Status::Ok();
  const std::string path = uri.substr(kScheme.size());
  const size_t slash = path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) {
      return ErrnoStatus("cannot stat the directory of socket '" + path + "'", errno);
    }
    // Not made yet (ZeroMQ connects early and retries): whoever may write its nearest existing
    // ancestor may make it. CheckTrustedPath vets that ancestor, except for the sticky directory
    // it lets pass as an ancestor (/tmp), where any user could make the missing one first.
    std::string up = dir;
    while (stat(up.c_str(), &st) != 0) {
      const size_t cut = up.rfind('/');
      if (errno != ENOENT || cut == std::string::npos || up == "/") {
        return ErrnoStatus("cannot stat an ancestor of socket '" + path + "'", errno);
      }
      up = cut == 0 ? "/" : up.substr(0, cut);
    }
    if ((st.st_mode & S_ISVTX) != 0 && (st.st_mode & (S_IWOTH | S_IWGRP)) != 0) {
      return PermissionDenied("not connecting to socket '" + path + "': its directory '" + dir +
                              "' is not there, and any user may make it in '" + up + "'");
    }
  }
  if (Status s = CheckTrustedPath(dir, TrustPolicy::ForThisProcess(), "its directory"); !s.ok()) {
    return PermissionDenied("not connecting to socket '" + path + "': " + s.message());
  }
  if (lstat(path.c_str(), &st) != 0) {
    // Not bound yet: only root or we can bind it later, in this directory. Not searchable by
    // us: then connect() cannot reach it either.
    if (errno == ENOENT || errno == EACCES) return Status::Ok();
    return ErrnoStatus("cannot stat socket '" + path + "'", errno);
  }
  const uid_t self = geteuid();
  if (!S_ISSOCK(st.st_mode)) {
    return PermissionDenied("not connecting to socket '" + path + "': it is not a socket");
  }
  if (st.st_uid != 0 && st.st_uid != self) {
    char mode[16];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return PermissionDenied("not connecting to socket '" + path + "': it is owned by uid " +
                            std::to_string(st.st_uid) + " (mode " + mode +
                            "), not root or this process's uid " + std::to_string(self) +
                            ", so another user serves it");
  }
  return Status::Ok();
}

}  // namespace nodelet::ipc
