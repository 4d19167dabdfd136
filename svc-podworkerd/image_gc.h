// ImageGc: podworkerd's image garbage collector, with the kubelet's policy. When the image
// filesystem (CRI ImageFsInfo gives its mountpoint; statvfs its capacity and free space) is at or
// above the high threshold, unused images are removed, least recently used first, until the
// usage is back under the low threshold. An image is in use while any container that exists in
// the runtime (running or exited) was made from it, or a desired pod names it; in-use images,
// the sandbox (pause) image, images the runtime reports `pinned`, and images detected less than
// the minimum age ago are never removed. Not thread-safe: one caller (the GC thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "lib/common/clock.h"
#include "lib/common/status.h"
#include "lib/cri/runtime_service.h"

namespace nodelet::podworkerd {

struct ImageGcPolicy {
  // At or above this usage (percent of the image filesystem's capacity) GC runs; 100 disables.
  int high_threshold_percent = 85;
  // GC frees space until the usage is under this.
  int low_threshold_percent = 80;
  // An image detected less than this long ago is never removed.
  std::chrono::milliseconds minimum_age{std::chrono::minutes(2)};
};

// INVALID_ARGUMENT naming the bad value: thresholds within 0..100, low <= high, age >= 0.
Status ValidateImageGcPolicy(const ImageGcPolicy& policy);

// Capacity and free space of the filesystem that holds a path.
struct FsStats {
  uint64_t capacity_bytes = 0;
  uint64_t available_bytes = 0;  // free for unprivileged users (statvfs f_bavail)
};

class FsStatsSource {
 public:
  virtual ~FsStatsSource() = default;
  virtual Result<FsStats> Stat(const std::string& path) = 0;
};

// statvfs(2).
class StatvfsFsStats final : public FsStatsSource {
 public:
  Result<FsStats> Stat(const std::string& path) override;
};

// What one GarbageCollect() did.
struct ImageGcResult {
  FsStats fs;                   // the image filesystem before GC
  std::string mountpoint;       // as ImageFsInfo reported it
  int usage_percent = 0;        // before GC
  bool over_threshold = false;  // usage >= high threshold: images were to be freed
  uint64_t bytes_to_free = 0;
  uint64_t bytes_freed = 0;          // the removed images' sizes, as the runtime reports them
  std::vector<std::string> removed;  // image ids, in removal order
  // Not OK when the usage could not be read, or not enough could be freed (the kubelet's
  // "Failed to garbage collect required amount of images ...").
  Status status;
};

class ImageGc {
 public:
  ImageGc(cri::RuntimeService& runtime, cri::ImageService& images, FsStatsSource& fs,
          const Clock& clock, ImageGcPolicy policy);

  // Image references never removed (the sandbox image); resolved through ImageStatus each run.
  void set_pinned_refs(std::vector<std::string> refs) { pinned_refs_ = std::move(refs); }
  // Image references that desired pods name; in use even while no container of theirs exists.
  void set_desired_refs(std::set<std::string> refs) { desired_refs_ = std::move(refs); }

  // Refreshes the image records (first detected, last used) from the runtime.
  Status DetectImages();
  // DetectImages, then frees space if the usage is at or above the high threshold.
  ImageGcResult GarbageCollect();

  // The records, for tests and logs.
  struct Record {
    MonoTime first_detected{};
    MonoTime last_used{};
    uint64_t size_bytes = 0;
    bool in_use = false;
    bool pinned = false;  // the runtime's flag or a pinned reference
    std::string name;     // the first tag, or the id
  };
  const std::map<std::string, Record>& records() const { return records_; }

 private:
  // Removes unused images, oldest last use first, until `bytes_to_free` is reached.
  void FreeSpace(uint64_t bytes_to_free, ImageGcResult& result);

  cri::RuntimeService& runtime_;
  cri::ImageService& images_;
  FsStatsSource& fs_;
  const Clock& clock_;
  ImageGcPolicy policy_;
  std::vector<std::string> pinned_refs_;
  std::set<std::string> desired_refs_;
  std::map<std::string, Record> records_;  // by image id
};

}  // namespace nodelet::podworkerd
