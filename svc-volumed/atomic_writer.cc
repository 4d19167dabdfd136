#include "svc-volumed/atomic_writer.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <set>
#include <vector>

#include "lib/common/beneath.h"
#include "lib/common/tree_remover.h"

namespace nodelet::volumed {
namespace {

constexpr char kDataLink[] = "..data";
constexpr char kTmpLink[] = "..data_tmp";
constexpr char kPayloadPrefix[] = "..data_";
constexpr char kLinkPrefix[] = "..data/";
constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

Status Fail(const std::string& what, int err) { return ErrnoStatus(what, err); }

// The names in the directory `fd` ("." and ".." left out).
Result<std::vector<std::string>> ListNames(int fd) {
  int dup_fd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dup_fd < 0) return Fail("open directory", errno);
  DIR* d = fdopendir(dup_fd);
  if (d == nullptr) {
    int err = errno;
    close(dup_fd);
    return Fail("read directory", err);
  }
  std::vector<std::string> names;
  errno = 0;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  int err = errno;
  closedir(d);
  if (err != 0) return Fail("read directory", err);
  return names;
}

// Removes the payload directory `name` of `dir_fd` if it is one of ours: the name matches and
// it opens as a directory without following a link. Anything else by that name stays.
Status RemovePayloadDir(int dir_fd, const std::string& name) {
  if (!IsPayloadDirName(name)) return Status::Ok();
  UniqueFd fd(openat(dir_fd, name.c_str(), kDirFlags));
  if (!fd.valid()) {
    if (errno == ENOENT || errno == ELOOP || errno == ENOTDIR) return Status::Ok();
    return Fail("open " + name, errno);
  }
  return TreeRemover(dir_fd, name, name).RemoveAll();
}

Status WriteAll(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = write(fd, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Fail("write", errno);
    }
    off += static_cast<size_t>(n);
  }
  return Status::Ok();
}

// With an fsGroup (>= 0): the directory's group becomes it, and the directory 02755 (the
// kubelet's read-only volume ownership: group read and search, set-group-ID).
Status OwnDirectory(int fd, int fs_group, const std::string& what) {
  if (fs_group < 0) return Status::Ok();
  if (fchown(fd, static_cast<uid_t>(-1), static_cast<gid_t>(fs_group)) != 0) {
    return Fail("chown " + what + " to group " + std::to_string(fs_group), errno);
  }
  if (fchmod(fd, 02755) != 0) return Fail("chmod " + what, errno);
  return Status::Ok();
}

// Writes one payload file at `rel` under the payload directory `root_fd`, creating its parent
// directories (0755) on fds. With an fsGroup, files and directories are in that group and the
// group may read them (mode | 0440), as the kubelet leaves a read-only volume.
Status WriteFileAt(int root_fd, const std::string& rel, const std::string& content, int mode,
                   int fs_group) {
  std::vector<std::string> parts;
  if (!SplitRelative(rel, &parts) || parts.empty())
    return InvalidArgument("refusing file path " + rel);
  UniqueFd parent(openat(root_fd, ".", kDirFlags));
  if (!parent.valid()) return Fail("open payload directory", errno);
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const char* name = parts[i].c_str();
    bool made = mkdirat(parent.get(), name, 0755) == 0;
    if (!made && errno != EEXIST) return Fail("create directory for " + rel, errno);
    UniqueFd next(openat(parent.get(), name, kDirFlags));
    if (!next.valid()) return Fail("open directory for " + rel, errno);
    if (made && fchmod(next.get(), 0755) != 0) return Fail("chmod directory for " + rel, errno);
    if (made) {
      if (Status s = OwnDirectory(next.get(), fs_group, "directory for " + rel); !s.ok()) return s;
    }
    parent = std::move(next);
  }
  UniqueFd fd(openat(parent.get(), parts.back().c_str(),
                     O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.valid()) return Fail("create " + rel, errno);
  if (Status s = WriteAll(fd.get(), content); !s.ok())
    return Status(s.code(), rel + ": " + s.message());
  mode_t bits = static_cast<mode_t>(mode) & 07777;
  if (fs_group >= 0) {
    if (fchown(fd.get(), static_cast<uid_t>(-1), static_cast<gid_t>(fs_group)) != 0) {
      return Fail("chown " + rel + " to group " + std::to_string(fs_group), errno);
    }
    bits |= 0440;
  }
  if (fchmod(fd.get(), bits) != 0) return Fail("chmod " + rel, errno);
  if (close(fd.release()) != 0) return Fail("close " + rel, errno);
  return Status::Ok();
}

// Points `name` in `dir_fd` at `target` with one renameat of a fresh link over it.
Status ReplaceLink(int dir_fd, const std::string& name, const std::string& target) {
  if (unlinkat(dir_fd, kTmpLink, 0) != 0 && errno != ENOENT)
    return Fail(std::string("remove ") + kTmpLink, errno);
  if (symlinkat(target.c_str(), dir_fd, kTmpLink) != 0)
    return Fail(std::string("link ") + kTmpLink, errno);
  if (renameat(dir_fd, kTmpLink, dir_fd, name.c_str()) != 0) {
    int err = errno;
    unlinkat(dir_fd, kTmpLink, 0);
    return Fail("replace " + name, err);
  }
  return Status::Ok();
}

std::string ReadLink(int dir_fd, const std::string& name) {
  char buf[PATH_MAX];
  ssize_t n = readlinkat(dir_fd, name.c_str(), buf, sizeof buf);
  return n > 0 && static_cast<size_t>(n) < sizeof buf ? std::string(buf, static_cast<size_t>(n))
                                                      : "";
}

}  // namespace

bool IsPayloadDirName(const std::string& name) {
  const std::string prefix = kPayloadPrefix;
  if (name.size() <= prefix.size() || name.size() > prefix.size() + 20) return false;
  if (name.compare(0, prefix.size(), prefix) != 0) return false;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
  }
  return true;
}

bool IsSafePayloadPath(const std::string& path) {
  if (path.empty() || path[0] == '/' || path.find('\0') != std::string::npos) return false;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    std::string part = path.substr(start, end - start);
    if (part.empty() || part == "." || part.rfind("..", 0) == 0) return false;
    start = end + 1;
  }
  return true;
}

Status AtomicWriteAt(int dir_fd, const Payload& files, uint64_t stamp, int fs_group) {
  std::set<std::string> top;
  for (const auto& [rel, _] : files) {
    if (!IsSafePayloadPath(rel)) return InvalidArgument("refusing file path " + rel);
    top.insert(rel.substr(0, rel.find('/')));
  }
  // 1. The payload, in a new directory of ours.
  std::string ts;
  for (int attempt = 0;; ++attempt) {
    ts = kPayloadPrefix + std::to_string(stamp + static_cast<uint64_t>(attempt));
    if (mkdirat(dir_fd, ts.c_str(), 0755) == 0) break;
    if (errno != EEXIST || attempt >= 100) return Fail("create " + ts, errno);
  }
  {
    Status written;
    UniqueFd payload(openat(dir_fd, ts.c_str(), kDirFlags));
    if (!payload.valid()) {
      written = Fail("open " + ts, errno);
    } else if (fchmod(payload.get(), 0755) != 0) {
      written = Fail("chmod " + ts, errno);
    } else if (written = OwnDirectory(payload.get(), fs_group, ts); written.ok()) {
      for (const auto& [rel, content] : files) {
        written = WriteFileAt(payload.get(), rel, content.first, content.second, fs_group);
        if (!written.ok()) break;
      }
    }
    if (!written.ok()) {
      (void)RemovePayloadDir(dir_fd, ts);
      return written;
    }
  }
  // 2. ..data swapped to it with one rename.
  if (Status s = ReplaceLink(dir_fd, kDataLink, ts); !s.ok()) {
    (void)RemovePayloadDir(dir_fd, ts);
    return s;
  }
  // 3. The user-visible names, links through ..data.
  for (const auto& name : top) {
    const std::string want = kLinkPrefix + name;
    struct stat st {};
    if (fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno != ENOENT) return Fail("stat " + name, errno);
      if (symlinkat(want.c_str(), dir_fd, name.c_str()) != 0) return Fail("link " + name, errno);
      continue;
    }
    if (!S_ISLNK(st.st_mode)) {
      return FailedPrecondition(name + " is in the way: not a link that nodelet made");
    }
    if (ReadLink(dir_fd, name) == want) continue;
    if (Status s = ReplaceLink(dir_fd, name, want); !s.ok()) return s;
  }
  // 4. What is no longer ours to show: links into ..data for names gone from the payload, and
  //    the older payload directories.
  auto names = ListNames(dir_fd);
  if (!names.ok()) return names.status();
  for (const auto& name : *names) {
    if (name.rfind("..", 0) == 0 || top.count(name)) continue;
    struct stat st {};
    if (fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISLNK(st.st_mode))
      continue;
    if (ReadLink(dir_fd, name).rfind(kLinkPrefix, 0) != 0) continue;
    if (unlinkat(dir_fd, name.c_str(), 0) != 0 && errno != ENOENT)
      return Fail("remove " + name, errno);
  }
  for (const auto& name : *names) {
    if (name == ts || !IsPayloadDirName(name)) continue;
    if (Status s = RemovePayloadDir(dir_fd, name); !s.ok()) return s;
  }
  return Status::Ok();
}

Status AtomicWriteFiles(const Clock& clock, const std::string& dir, const Payload& files,
                        int fs_group) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    return Fail("create volume directory " + dir, errno);
  UniqueFd fd(open(dir.c_str(), kDirFlags));
  if (!fd.valid()) return Fail("open volume directory " + dir, errno);
  Status s = OwnDirectory(fd.get(), fs_group, "volume directory");
  if (s.ok())
    s = AtomicWriteAt(fd.get(), files, static_cast<uint64_t>(clock.WallNanos()), fs_group);
  if (!s.ok()) return Status(s.code(), dir + ": " + s.message());
  return s;
}

Status RemoveTreeNoFollow(const std::string& path) { return RemoveTreeNoFollowAt(path); }

}  // namespace nodelet::volumed
