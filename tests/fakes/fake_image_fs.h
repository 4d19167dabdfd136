// FakeImageFs: an image filesystem of a fixed capacity at the fake runtime's image mountpoint,
// for the image GC tests; its used bytes are `other` plus the images' sizes that the fake
// runtime's ImageFsInfo sums, so removing an image frees space.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "svc-podworkerd/image_gc.h"
#include "tests/fakes/fake_cri_runtime.h"

namespace nodelet::testing {

class FakeImageFs : public podworkerd::FsStatsSource {
 public:
  FakeImageFs(FakeCriRuntime& runtime, uint64_t capacity, uint64_t other = 0)
      : runtime_(runtime), capacity_(capacity), other_(other) {}
  Result<podworkerd::FsStats> Stat(const std::string& path) override {
    paths.push_back(path);
    if (fail) return Internal("statvfs '" + path + "': injected");
    auto info = runtime_.ImageFsInfo();
    if (!info.ok()) return info.status();
    uint64_t used = other_ + info->image_filesystems(0).used_bytes().value();
    return podworkerd::FsStats{capacity_, used >= capacity_ ? 0 : capacity_ - used};
  }
  std::vector<std::string> paths;  // every path asked for (read it only when no thread calls Stat)
  std::atomic<bool> fail{false};   // Stat fails (an unreadable filesystem)

 private:
  FakeCriRuntime& runtime_;
  uint64_t capacity_, other_;
};

}  // namespace nodelet::testing
