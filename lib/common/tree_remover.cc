#include "lib/common/tree_remover.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace nodelet {
namespace {

constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

bool IsDot(const char* n) { return n[0] == '.' && (n[1] == '\0' || (n[1] == '.' && n[2] == '\0')); }

// Opens the directory `name` of `parent` without following a link, with its identity.
// -1 with errno when it cannot.
int OpenDir(int parent, const char* name, struct stat* st) {
  int fd = openat(parent, name, kDirFlags);
  if (fd < 0) return -1;
  if (fstat(fd, st) != 0) {
    int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

}  // namespace

TreeRemover::TreeRemover(const std::string& path) : display_(path), refuse_top_link_(true) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  const std::string parent = slash == std::string::npos ? "."
                             : slash == 0               ? "/"
                                                        : p.substr(0, slash);
  name_ = slash == std::string::npos ? p : p.substr(slash + 1);
  if (name_.empty() || name_ == "." || name_ == "..") {
    open_error_ = InvalidArgument("refusing to remove the tree " + path + ": not a directory name");
    return;
  }
  parent_.reset(open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!parent_.valid()) {
    if (errno == ENOENT) {
      done_ = true;  // nothing there
    } else {
      open_error_ = ErrnoStatus("open " + parent + " to remove " + name_, errno);
    }
  }
}

TreeRemover::TreeRemover(int parent_fd, std::string name, std::string display)
    : name_(std::move(name)), display_(std::move(display)) {
  if (name_.empty() || name_ == "." || name_ == ".." || name_.find('/') != std::string::npos) {
    open_error_ = InvalidArgument("refusing to remove the tree " + display_ + ": not one name");
    return;
  }
  parent_.reset(fcntl(parent_fd, F_DUPFD_CLOEXEC, 0));
  if (!parent_.valid()) open_error_ = ErrnoStatus("duplicate the directory of " + display_, errno);
}

TreeRemover::~TreeRemover() { CloseAll(); }

void TreeRemover::CloseAll() {
  for (auto& l : levels_) {
    if (l.dir != nullptr) closedir(l.dir);
  }
  levels_.clear();
}

Status TreeRemover::Fail(const std::string& what, const std::string& name, int err) const {
  return ErrnoStatus(
      what + " " + name + " at depth " + std::to_string(levels_.size()) + " of " + display_, err);
}

Status TreeRemover::OpenTop(bool* gone) {
  *gone = false;
  struct stat st {};
  int fd = OpenDir(parent_.get(), name_.c_str(), &st);
  if (fd < 0) {
    if (errno == ENOENT) {
      *gone = true;
      return Status::Ok();
    }
    if (errno != ELOOP && errno != ENOTDIR) return Fail("open", name_, errno);
    if (refuse_top_link_) {
      return FailedPrecondition("refusing to remove " + display_ + ": not a directory (a link?)");
    }
    // Not a directory (a link put in its place): removed as itself.
    if (unlinkat(parent_.get(), name_.c_str(), 0) != 0 && errno != ENOENT) {
      return Fail("remove", name_, errno);
    }
    ++removed_;
    *gone = true;
    return Status::Ok();
  }
  return PushLevel(fd, name_, st);
}

Status TreeRemover::PushLevel(int fd, const std::string& name, const struct stat& st) {
  DIR* dir = fdopendir(fd);
  if (dir == nullptr) {
    int err = errno;
    close(fd);
    return Fail("read", name, err);
  }
  levels_.push_back(Level{name, st.st_dev, st.st_ino, dir});
  return Status::Ok();
}

Status TreeRemover::Descend(int parent_dir_fd, const std::string& name, bool* descended) {
  *descended = false;
  struct stat st {};
  int fd = OpenDir(parent_dir_fd, name.c_str(), &st);
  if (fd < 0) {
    // Not a directory (removed as itself by the caller) or gone.
    if (errno == ENOTDIR || errno == ELOOP || errno == ENOENT) return Status::Ok();
    return Fail("open", name, errno);
  }
  if (Status s = PushLevel(fd, name, st); !s.ok()) return s;
  if (levels_.size() > kOpenLevels) {
    Level& far = levels_[levels_.size() - 1 - kOpenLevels];
    if (far.dir != nullptr) {
      closedir(far.dir);
      far.dir = nullptr;
    }
  }
  *descended = true;
  return Status::Ok();
}

Status TreeRemover::Ascend(bool* finished) {
  *finished = false;
  Level child = std::move(levels_.back());
  levels_.pop_back();
  if (levels_.empty()) {
    closedir(child.dir);
    if (unlinkat(parent_.get(), name_.c_str(), AT_REMOVEDIR) == 0) {
      ++removed_;
      *finished = true;
    } else if (errno == ENOENT) {
      *finished = true;
    } else if (errno != ENOTEMPTY && errno != EEXIST) {
      return Fail("remove", name_, errno);
    }
    // Not empty: something came meanwhile; the next operation opens the top again.
    return Status::Ok();
  }
  Level& parent = levels_.back();
  if (parent.dir == nullptr) {
    // Back up by "..", which must be the directory seen on the way down; else start again.
    struct stat st {};
    int fd = OpenDir(dirfd(child.dir), "..", &st);
    closedir(child.dir);
    if (fd >= 0 && (st.st_dev != parent.dev || st.st_ino != parent.ino)) {
      close(fd);
      fd = -1;
    }
    if (fd >= 0) parent.dir = fdopendir(fd);
    if (parent.dir == nullptr) {
      if (fd >= 0) close(fd);
      CloseAll();
      return Status::Ok();
    }
  } else {
    closedir(child.dir);
  }
  const int pfd = dirfd(parent.dir);
  if (unlinkat(pfd, child.name.c_str(), AT_REMOVEDIR) == 0) {
    ++removed_;
    return Status::Ok();
  }
  if (errno == ENOENT) return Status::Ok();
  if (errno != ENOTEMPTY && errno != EEXIST && errno != ENOTDIR) {
    return Fail("remove", child.name, errno);
  }
  // Something came meanwhile (or a link took its place): look at it again.
  bool descended = false;
  if (Status s = Descend(pfd, child.name, &descended); !s.ok()) return s;
  if (!descended && unlinkat(pfd, child.name.c_str(), 0) == 0) ++removed_;
  return Status::Ok();
}

Result<bool> TreeRemover::Step(size_t budget) {
  if (done_) return true;
  if (!open_error_.ok()) return open_error_;
  for (size_t ops = 0; ops < budget; ++ops) {
    ++operations_;
    if (levels_.empty()) {
      bool gone = false;
      if (Status s = OpenTop(&gone); !s.ok()) return s;
      if (gone) {
        done_ = true;
        return true;
      }
      continue;
    }
    DIR* dir = levels_.back().dir;
    errno = 0;
    const dirent* e = readdir(dir);
    if (e == nullptr) {
      if (errno != 0) return Fail("read", levels_.back().name, errno);
      bool finished = false;
      if (Status s = Ascend(&finished); !s.ok()) return s;
      if (finished) {
        done_ = true;
        return true;
      }
      continue;
    }
    if (IsDot(e->d_name)) continue;
    const std::string name = e->d_name;
    const unsigned char type = e->d_type;
    const int fd = dirfd(dir);
    if (type == DT_DIR || type == DT_UNKNOWN) {
      bool descended = false;
      if (Status s = Descend(fd, name, &descended); !s.ok()) return s;
      if (descended) continue;
    }
    if (unlinkat(fd, name.c_str(), 0) == 0) {
      ++removed_;
      continue;
    }
    if (errno == ENOENT) continue;
    if (errno == EISDIR) {
      // A directory took its place since the entry was read.
      bool descended = false;
      if (Status s = Descend(fd, name, &descended); !s.ok()) return s;
      continue;
    }
    return Fail("remove", name, errno);
  }
  return false;
}

Status TreeRemover::RemoveAll() {
  for (;;) {
    auto step = Step(1 << 16);
    if (!step.ok()) return step.status();
    if (*step) return Status::Ok();
  }
}

Status RemoveTreeNoFollowAt(const std::string& path) { return TreeRemover(path).RemoveAll(); }

}  // namespace nodelet
