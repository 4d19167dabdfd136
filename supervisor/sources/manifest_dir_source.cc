#include "supervisor/sources/manifest_dir_source.h"

#include <dirent.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "lib/common/fs.h"

namespace nodelet::supervisor {

ManifestDirSource::ManifestDirSource(std::string dir, const Clock& clock,
                                     std::chrono::milliseconds resync, size_t max_file_bytes)
    : dir_(std::move(dir)), clock_(clock), resync_(resync), max_file_bytes_(max_file_bytes) {}

ManifestDirSource::~ManifestDirSource() {
  if (inotify_fd_ >= 0) close(inotify_fd_);
}

Status ManifestDirSource::Start() {
  inotify_fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (inotify_fd_ < 0) return ErrnoStatus("Failed to create an inotify instance", errno);
  Watch();
  next_resync_ = clock_.Now();
  return Status::Ok();
}

void ManifestDirSource::Watch() {
  if (watch_ >= 0) return;
  watch_ = inotify_add_watch(inotify_fd_, dir_.c_str(),
                             IN_CREATE | IN_DELETE | IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO |
                                 IN_MOVED_FROM | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF);
}

bool ManifestDirSource::DrainInotify() {
  if (inotify_fd_ < 0) return false;
  bool changed = false;
  alignas(inotify_event) char buf[8192];
  for (;;) {
    ssize_t n = read(inotify_fd_, buf, sizeof buf);
    if (n <= 0) break;
    for (char* p = buf; p < buf + n;) {
      auto* ev = reinterpret_cast<inotify_event*>(p);
      changed = true;
      if (ev->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF)) watch_ = -1;
      p += sizeof(inotify_event) + ev->len;
    }
  }
  return changed;
}

std::optional<SourceSnapshot> ManifestDirSource::Poll() {
  bool changed = DrainInotify();
  auto now = clock_.Now();
  if (!first_ && !changed && now < next_resync_) return std::nullopt;
  first_ = false;
  // The directory may have appeared (or been replaced) since we last looked.
  if (watch_ < 0 && inotify_fd_ >= 0) Watch();
  next_resync_ = now + resync_;
  return Read();
}

SourceSnapshot ManifestDirSource::Read() {
  SourceSnapshot snap;
  snap.source = "file";
  DIR* d = opendir(dir_.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return snap;  // missing directory: no pods from it, not an error
    snap.failure = SourceFailure{
        "unreadable_dir", ErrnoStatus("Failed to read manifest directory '" + dir_ + "'", errno)};
    return snap;
  }
  std::vector<std::string> names;
  for (;;) {
    errno = 0;
    dirent* e = readdir(d);
    if (e == nullptr) {
      if (errno != 0) {
        int err = errno;
        closedir(d);
        snap.failure = SourceFailure{
            "unreadable_dir", ErrnoStatus("Failed to read manifest directory '" + dir_ + "'", err)};
        return snap;
      }
      break;
    }
    std::string name = e->d_name;
    if (name.empty() || name[0] == '.') continue;
    names.push_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  for (const auto& name : names) {
    std::string path = dir_ + "/" + name;
    struct stat st {};
    if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    ManifestFile f;
    f.origin = path;
    auto content = ReadFileBounded(path, max_file_bytes_);
    if (content.ok()) {
      f.content = std::move(content).value();
    } else {
      f.error = content.status();
    }
    snap.manifests.push_back(std::move(f));
  }
  return snap;
}

}  // namespace nodelet::supervisor
