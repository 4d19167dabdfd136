#include "lib/common/fs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

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
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return ErrnoStatus("Failed to stat '" + path + "'", errno);
  if (!S_ISDIR(st.st_mode)) return InvalidArgument("'" + path + "' exists and is not a directory");
  if ((st.st_mode & 07777) != mode && chmod(path.c_str(), mode) != 0) {
    return ErrnoStatus("Failed to chmod '" + path + "'", errno);
  }
  return Status::Ok();
}

Result<std::string> ReadFileBounded(const std::string& path, size_t max_bytes) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("Failed to open '" + path + "'", errno);
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      close(fd);
      return ErrnoStatus("Failed to read '" + path + "'", err);
    }
    if (n == 0) break;
    if (out.size() + static_cast<size_t>(n) > max_bytes) {
      close(fd);
      return ResourceExhausted("'" + path + "' is larger than " + std::to_string(max_bytes) +
                               " bytes");
    }
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

}  // namespace nodelet
