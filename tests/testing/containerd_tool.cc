// nodelet-containerd: starts and stops the private containerd of tests/testing/containerd.h from
// the shell, for `./dev run` (through images/containerd-up and images/containerd-down).
//
//   nodelet-containerd up --dir DIR [--images IMAGES_DIR] [--timeout-seconds N]
//       starts containerd with everything under DIR, imports IMAGES_DIR/{pause,busybox}.tar,
//       leaves it running and prints its CRI endpoint (unix://DIR/containerd.sock)
//   nodelet-containerd down --dir DIR
//       removes every sandbox and container, stops containerd, cleans shims, mounts, cgroups
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/testing/containerd.h"

namespace {

int Usage() {
  std::fprintf(
      stderr,
      "usage: nodelet-containerd up --dir DIR [--images IMAGES_DIR] [--timeout-seconds N]\n"
      "       nodelet-containerd down --dir DIR\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return Usage();
  std::string command = argv[1];
  std::string dir, images;
  long timeout_seconds = 60;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (i + 1 >= argc) return Usage();
    if (arg == "--dir") {
      dir = argv[++i];
    } else if (arg == "--images") {
      images = argv[++i];
    } else if (arg == "--timeout-seconds") {
      timeout_seconds = std::strtol(argv[++i], nullptr, 10);
    } else {
      return Usage();
    }
  }
  if (dir.empty() || timeout_seconds <= 0) return Usage();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  dir = std::filesystem::absolute(dir).lexically_normal().string();
  if (!dir.empty() && dir.back() == '/') dir.pop_back();

  if (command == "up") {
    nodelet::testing::ContainerdOptions options;
    options.dir = dir;
    options.start_timeout = std::chrono::seconds(timeout_seconds);
    if (!images.empty()) options.image_tarballs = nodelet::testing::DefaultImageTarballs(images);
    auto instance = nodelet::testing::ContainerdInstance::Start(options);
    if (!instance.ok()) {
      std::fprintf(stderr, "nodelet-containerd: Failed to start containerd in '%s': %s\n",
                   dir.c_str(), instance.status().message().c_str());
      return 1;
    }
    (*instance)->Release();
    std::printf("%s\n", (*instance)->endpoint().c_str());
    return 0;
  }
  if (command == "down") {
    auto instance = nodelet::testing::ContainerdInstance::Attach(dir);
    if (!instance.ok()) {
      std::fprintf(stderr, "nodelet-containerd: nothing to stop in '%s': %s\n", dir.c_str(),
                   instance.status().message().c_str());
      return instance.status().code() == nodelet::StatusCode::kNotFound ? 0 : 1;
    }
    nodelet::Status stopped = (*instance)->Stop();
    if (!stopped.ok()) {
      std::fprintf(stderr, "nodelet-containerd: Failed to stop containerd in '%s': %s\n",
                   dir.c_str(), stopped.message().c_str());
      return 1;
    }
    return 0;
  }
  return Usage();
}
