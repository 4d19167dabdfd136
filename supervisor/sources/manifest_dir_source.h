// ManifestDirSource: the `--pod-manifest-path` source. Watches the directory with inotify and
// re-reads it every resync period (20 s, as the kubelet does) so nothing is missed even when
// inotify overflows. Files whose name starts with '.' are ignored (editors' swap files, the
// kubelet's convention), as are directories and anything that is not a regular file. Each file
// is read with a size limit; an unreadable or oversized file becomes a ManifestFile with an
// error, so the pod config reports it and every other manifest goes on. A missing directory holds
// no pods (as for the kubelet); one that exists but cannot be read (permissions, not a
// directory, I/O error) yields a snapshot with `failure`, which keeps the pods it served.
#pragma once

#include <chrono>
#include <string>

#include "lib/common/clock.h"
#include "lib/pod/manifest_parser.h"
#include "supervisor/sources/manifest_source.h"

namespace nodelet::supervisor {

class ManifestDirSource {
 public:
  ManifestDirSource(std::string dir, const Clock& clock,
                    std::chrono::milliseconds resync = std::chrono::seconds(20),
                    size_t max_file_bytes = pod::kMaxManifestBytes);
  ~ManifestDirSource();
  ManifestDirSource(const ManifestDirSource&) = delete;
  ManifestDirSource& operator=(const ManifestDirSource&) = delete;

  // Sets up the inotify watch. A directory that does not exist yet is not an error: it is
  // watched for by re-reading, and the snapshot is empty until it appears.
  Status Start();
  // The inotify fd for the owner's poll loop (-1 when the directory is missing).
  int fd() const { return inotify_fd_; }
  // When the periodic re-read is due.
  MonoTime NextResync() const { return next_resync_; }
  // Drains inotify and returns a snapshot when something changed or the resync is due;
  // nullopt otherwise. The first call always returns a snapshot.
  std::optional<SourceSnapshot> Poll();
  // Reads the directory now.
  SourceSnapshot Read();

 private:
  bool DrainInotify();
  void Watch();

  std::string dir_;
  const Clock& clock_;
  std::chrono::milliseconds resync_;
  size_t max_file_bytes_;
  int inotify_fd_ = -1;
  int watch_ = -1;
  bool first_ = true;
  MonoTime next_resync_{};
};

}  // namespace nodelet::supervisor
