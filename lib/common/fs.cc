#include "lib/common/fs.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "lib/common/unique_fd.h"

namespace nodelet {

Status EnsureDirectory(const std::string& path, mode_t mode) {
  if (path.empty()) return InvalidArgument("empty directory path");
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (partial.empty()) continue;
    if (mkdir(partial.c_str(), pos == std::string::npos ? mode : 0755) != 0 && errno != EEXIST) {
      return ErrnoStatus("Failed to create directory '" + partial + "'", errno);
    }
  }
  // The last component is opened without following a link, and the mode is set on that fd: a
  // link put in its place is refused by name, and never is its target chmodded.
  UniqueFd dir(open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir) {
    const int err = errno;
    struct stat lst {};
    if (lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) {
      return InvalidArgument("'" + path + "' is a symbolic link; nodelet makes its directories " +
                             "itself and never follows a link in their place");
    }
    if (err == ENOTDIR) return InvalidArgument("'" + path + "' exists and is not a directory");
    return ErrnoStatus("Failed to open '" + path + "'", err);
  }
  struct stat st {};
  if (fstat(dir.get(), &st) != 0) return ErrnoStatus("Failed to stat '" + path + "'", errno);
  if ((st.st_mode & 07777) != mode && fchmod(dir.get(), mode) != 0) {
    return ErrnoStatus("Failed to chmod '" + path + "'", errno);
  }
  return Status::Ok();
}

Status WriteFileAtomically(const std::string& path, const std::string& content, mode_t mode) {
  const std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) return Internal("open '" + tmp + "': " + std::strerror(errno));
  Status s = Status::Ok();
  // The umask may have narrowed the mode open() used, and an earlier PATH.tmp keeps its own.
  if (fchmod(fd, mode) != 0) s = Internal("chmod '" + tmp + "': " + std::strerror(errno));
  size_t done = 0;
  while (s.ok() && done < content.size()) {
    ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      s = Internal("write '" + tmp + "': " + std::strerror(errno));
    } else {
      done += static_cast<size_t>(n);
    }
  }
  if (s.ok() && fsync(fd) != 0) s = Internal("fsync '" + tmp + "': " + std::strerror(errno));
  close(fd);
  if (s.ok() && rename(tmp.c_str(), path.c_str()) != 0) {
    s = Internal("rename '" + tmp + "' to '" + path + "': " + std::strerror(errno));
  }
  if (!s.ok()) unlink(tmp.c_str());
  return s;
}

Result<std::string> ReadFileBounded(const std::string& path, size_t max_bytes) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus("Failed to open '" + path + "'", errno);
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("Failed to read '" + path + "'", errno);
    }
    if (n == 0) break;
    if (out.size() + static_cast<size_t>(n) > max_bytes) {
      return ResourceExhausted("'" + path + "' is larger than " + std::to_string(max_bytes) +
                               " bytes");
    }
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

Result<PidLock> TryPidLock(const std::string& lock_path) {
  UniqueFd fd(open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return ErrnoStatus("Failed to open '" + lock_path + "'", errno);
  PidLock out;
  if (flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[24] = {};
    ssize_t n = pread(fd.get(), buf, sizeof buf - 1, 0);
    if (err != EWOULDBLOCK) return ErrnoStatus("Failed to lock '" + lock_path + "'", err);
    out.holder = n > 0 ? static_cast<pid_t>(std::strtol(buf, nullptr, 10)) : 0;
    return out;
  }
  const std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(fd.get(), 0) != 0 || pwrite(fd.get(), pid.data(), pid.size(), 0) < 0) {
    return ErrnoStatus("Failed to write '" + lock_path + "'", errno);
  }
  out.fd = fd.release();  // the caller holds the lock from here
  return out;
}

std::string HolderPid(const PidLock& lock) {
  return lock.holder > 0 ? std::to_string(lock.holder) : "?";
}

Result<int> LockSocketPath(const std::string& path) {
  const std::string lock_path = path + ".lock";
  auto lock = TryPidLock(lock_path);
  if (!lock.ok()) return lock.status();
  if (lock->fd < 0) {
    return FailedPrecondition("'" + path + "' is served by another process (pid " +
                              HolderPid(*lock) + "), which holds '" + lock_path + "'");
  }
  return lock->fd;
}

}  // namespace nodelet
