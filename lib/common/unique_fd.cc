#include "lib/common/unique_fd.h"

#include <unistd.h>

namespace nodelet {

void UniqueFd::reset(int fd) {
  const int old = std::exchange(fd_, fd < 0 ? -1 : fd);
  // close() is not retried on EINTR: on Linux the fd is released either way.
  if (old >= 0 && old != fd_) close(old);
}

}  // namespace nodelet
