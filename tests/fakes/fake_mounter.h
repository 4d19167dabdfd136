// FakeMounter: an in-memory mount table for volumed's unit tests. Mounts touch no filesystem;
// every call is counted, and a test can make the next calls fail.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "svc-volumed/mounter.h"

namespace nodelet::testing {

class FakeMounter : public volumed::Mounter {
 public:
  struct Mount {
    std::string path;
    std::string options;
  };

  Status MountTmpfs(const std::string& path, const std::string& options) override {
    ++mount_calls_;
    if (fail_mounts_ > 0) {
      --fail_mounts_;
      return FailedPrecondition("mount tmpfs on " + path + ": injected failure");
    }
    mounts_.push_back({path, options});
    return Status::Ok();
  }

  Status Unmount(const std::string& path) override {
    ++unmount_calls_;
    if (fail_unmounts_ > 0) {
      --fail_unmounts_;
      return FailedPrecondition("unmount " + path + ": injected failure");
    }
    // The mount on top: the last one made on `path`.
    for (auto it = mounts_.rbegin(); it != mounts_.rend(); ++it) {
      if (it->path == path) {
        mounts_.erase(std::next(it).base());
        return Status::Ok();
      }
    }
    return FailedPrecondition("unmount " + path + ": Invalid argument");
  }

  Result<std::vector<std::string>> MountPointsUnder(const std::string& prefix) const override {
    ++list_calls_;
    if (fail_lists_ > 0) {
      --fail_lists_;
      return FailedPrecondition("read /proc/self/mountinfo: injected failure");
    }
    std::vector<std::string> out;
    for (const auto& m : mounts_) {
      if (m.path == prefix || m.path.rfind(prefix + "/", 0) == 0) out.push_back(m.path);
    }
    std::stable_sort(out.begin(), out.end(),
                     [](const auto& a, const auto& b) { return a.size() > b.size(); });
    return out;
  }

  // The next `n` calls of each kind fail.
  void FailMounts(int n) { fail_mounts_ = n; }
  void FailUnmounts(int n) { fail_unmounts_ = n; }
  void FailLists(int n) { fail_lists_ = n; }

  const std::vector<Mount>& mounts() const { return mounts_; }
  int Count(const std::string& path) const {
    return static_cast<int>(std::count_if(mounts_.begin(), mounts_.end(),
                                          [&](const Mount& m) { return m.path == path; }));
  }
  int mount_calls() const { return mount_calls_; }
  int unmount_calls() const { return unmount_calls_; }
  int list_calls() const { return list_calls_; }
  // Every call of any kind.
  int calls() const { return mount_calls_ + unmount_calls_ + list_calls_; }

 private:
  std::vector<Mount> mounts_;
  int mount_calls_ = 0, unmount_calls_ = 0;
  mutable int list_calls_ = 0;
  int fail_mounts_ = 0, fail_unmounts_ = 0;
  mutable int fail_lists_ = 0;
};

}  // namespace nodelet::testing
