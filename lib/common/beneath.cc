#include "lib/common/beneath.h"

#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>

namespace nodelet {
namespace {

// 1: yes, 0: no, -1: not probed yet.
std::atomic<int> g_has_openat2{-1};

long Openat2(int dir_fd, const char* path, int flags, uint64_t resolve) {
  struct open_how how {};
  how.flags = static_cast<uint64_t>(flags);
  how.resolve = resolve;
  return syscall(SYS_openat2, dir_fd, path, &how, sizeof how);
}

// The walk: one component at a time from `dir_fd`, O_NOFOLLOW, links resolved here.
int Walk(int dir_fd, const std::string& rel, int flags, BeneathScope scope) {
  if (rel.find('\0') != std::string::npos) return -EINVAL;
  if (!rel.empty() && rel[0] == '/' && scope == BeneathScope::kBeneath) return -EXDEV;
  std::deque<std::string> todo;
  for (auto& p : PathComponents(rel)) todo.push_back(std::move(p));
  std::vector<UniqueFd> stack;  // the directories walked into, below dir_fd
  int links = 0;
  auto cur = [&] { return stack.empty() ? dir_fd : stack.back().get(); };
  while (!todo.empty()) {
    std::string name = std::move(todo.front());
    todo.pop_front();
    if (name == "..") {
      if (stack.empty()) {
        if (scope == BeneathScope::kBeneath) return -EXDEV;
        continue;  // `..` of the root is the root
      }
      stack.pop_back();
      continue;
    }
    const bool last = todo.empty();
    UniqueFd fd(openat(cur(), name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (!fd.valid()) return -errno;
    struct stat st {};
    if (fstat(fd.get(), &st) != 0) return -errno;
    if (S_ISLNK(st.st_mode)) {
      if (last && (flags & O_NOFOLLOW)) {
        if (flags & O_DIRECTORY) return -ENOTDIR;
        return fd.release();
      }
      if (++links > kMaxLinks) return -ELOOP;
      char buf[PATH_MAX];
      ssize_t n = readlinkat(fd.get(), "", buf, sizeof buf);
      if (n < 0) return -errno;
      if (n == 0) return -ENOENT;
      if (static_cast<size_t>(n) >= sizeof buf) return -ENAMETOOLONG;
      std::string target(buf, static_cast<size_t>(n));
      if (target[0] == '/') {
        if (scope == BeneathScope::kBeneath) return -EXDEV;
        stack.clear();  // back to the root
      }
      auto parts = PathComponents(target);
      todo.insert(todo.begin(), parts.begin(), parts.end());
      continue;
    }
    if (!last) {
      if (!S_ISDIR(st.st_mode)) return -ENOTDIR;
      stack.push_back(std::move(fd));
      continue;
    }
    if ((flags & O_DIRECTORY) && !S_ISDIR(st.st_mode)) return -ENOTDIR;
    return fd.release();
  }
  // Nothing left: the directory the walk stands in.
  int fd = openat(cur(), ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  return fd >= 0 ? fd : -errno;
}

}  // namespace

std::vector<std::string> PathComponents(const std::string& path) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    std::string part = path.substr(start, end - start);
    if (!part.empty() && part != ".") out.push_back(std::move(part));
    start = end + 1;
  }
  return out;
}

bool KernelHasOpenat2() {
  int known = g_has_openat2.load();
  if (known >= 0) return known == 1;
  const long fd = Openat2(AT_FDCWD, "/", O_PATH | O_CLOEXEC, 0);
  const bool has = !(fd < 0 && errno == ENOSYS);
  UniqueFd probe(static_cast<int>(fd));  // only whether the call exists matters
  g_has_openat2.store(has ? 1 : 0);
  return has;
}

bool SplitRelative(const std::string& path, std::vector<std::string>* parts) {
  if (path.empty()) {
    parts->clear();
    return true;
  }
  if (path[0] == '/' || path.find('\0') != std::string::npos) return false;
  *parts = PathComponents(path);
  for (const auto& p : *parts) {
    if (p == "..") return false;
  }
  return true;
}

int OpenBeneathRaw(int dir_fd, const std::string& rel, int flags, LookupOptions options) {
  flags &= (O_DIRECTORY | O_NOFOLLOW);
  if (options.mode == BeneathMode::kAuto && KernelHasOpenat2()) {
    if (rel.find('\0') != std::string::npos) return -EINVAL;
    const uint64_t resolve =
        (options.scope == BeneathScope::kBeneath ? RESOLVE_BENEATH : RESOLVE_IN_ROOT) |
        RESOLVE_NO_MAGICLINKS;
    const char* path = rel.empty() ? "." : rel.c_str();
    // EAGAIN: a rename raced with a `..` in the lookup; the kernel asks to try again.
    for (int attempt = 0; attempt < 64; ++attempt) {
      long fd = Openat2(dir_fd, path, O_PATH | O_CLOEXEC | flags, resolve);
      if (fd >= 0) return static_cast<int>(fd);
      if (errno == EAGAIN) continue;
      if (errno == ENOSYS) break;
      return -errno;
    }
    if (errno == EAGAIN) return -EAGAIN;
    g_has_openat2.store(0);
  }
  return Walk(dir_fd, rel, flags, options.scope);
}

Status BeneathError(const std::string& what, int err) {
  switch (err) {
    case EXDEV:
      return InvalidArgument(what + " resolves outside its volume");
    case ELOOP:
      return InvalidArgument(what + ": too many symbolic links, or a link where none may be");
    case ENOENT:
      return NotFound(what + " does not exist");
    case ENOTDIR:
      return FailedPrecondition(what + ": a component is not a directory");
    default:
      return ErrnoStatus(what, err);
  }
}

Result<UniqueFd> OpenBeneath(int dir_fd, const std::string& rel, int flags, const std::string& what,
                             LookupOptions options) {
  int fd = OpenBeneathRaw(dir_fd, rel, flags, options);
  if (fd < 0) return BeneathError(what, -fd);
  return UniqueFd(fd);
}

Result<UniqueFd> OpenOrCreateBeneath(int dir_fd, const std::string& rel, mode_t mode,
                                     const std::string& what, const BeneathHook& hook,
                                     LookupOptions options, bool* created) {
  if (created != nullptr) *created = false;
  std::vector<std::string> parts;
  if (!SplitRelative(rel, &parts)) {
    return InvalidArgument(what + " must be a relative path without '..'");
  }
  int first = OpenBeneathRaw(dir_fd, "", O_DIRECTORY, options);
  if (first < 0) return BeneathError(what, -first);
  UniqueFd current(first);
  std::string prefix;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0 && hook) hook(prefix);
    prefix += (prefix.empty() ? "" : "/") + parts[i];
    const bool last = i + 1 == parts.size();
    int fd = OpenBeneathRaw(dir_fd, prefix, last ? 0 : O_DIRECTORY, options);
    if (fd >= 0) {
      current.reset(fd);
      continue;
    }
    if (fd != -ENOENT) return BeneathError(what, -fd);
    // Missing: made on the parent's fd, then opened without following anything.
    bool made_here = mkdirat(current.get(), parts[i].c_str(), mode) == 0;
    if (!made_here && errno != EEXIST) return ErrnoStatus(what + ": create " + prefix, errno);
    UniqueFd made(
        openat(current.get(), parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!made.valid()) {
      int err = errno;
      return err == ELOOP || err == ENOTDIR
                 ? InvalidArgument(what + ": " + prefix + " was replaced while it was created")
                 : ErrnoStatus(what + ": open " + prefix, err);
    }
    if (made_here) {
      if (fchmod(made.get(), mode) != 0) return ErrnoStatus(what + ": chmod " + prefix, errno);
      if (created != nullptr) *created = true;
    }
    current = std::move(made);
  }
  return current;
}

}  // namespace nodelet
