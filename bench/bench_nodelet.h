// A real nodelet (every service) on a private containerd for the end-to-end benchmarks: its
// directories under one temporary dir, a manifest directory written atomically, waiting for
// pods Running on statusd's watch stream, and the nodelet processes (supervisor and services)
// found by pid for /proc sampling. Header-only; link the containerd harness and status client.
#pragma once

#include <dirent.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "lib/status/status_client.h"
#include "tests/testing/containerd.h"
#include "tests/testing/harness.h"

namespace nodelet::bench {

using std::chrono::milliseconds;

// A pod whose containers wait idle (no CPU) and end at once on SIGTERM.
inline std::string IdlePodYaml(const std::string& name, int containers,
                               const std::string& restart_policy = "Always") {
  std::string y = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
                  "\nspec:\n  hostNetwork: true\n  restartPolicy: " + restart_policy +
                  "\n  terminationGracePeriodSeconds: 2\n  containers:\n";
  for (int i = 0; i < containers; ++i) {
    y += "  - name: c" + std::to_string(i) +
         "\n    image: nodelet.local/busybox:1.0\n    imagePullPolicy: Never\n"
         "    command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; sleep 100000000 & wait\"]\n";
  }
  return y;
}

// True when every container of the record is running.
inline bool AllRunning(const status::PodStatusRecord& r, size_t containers) {
  if (r.status.phase != status::PodPhase::kRunning) return false;
  if (r.status.container_statuses.size() < containers) return false;
  for (const auto& c : r.status.container_statuses) {
    if (!c.state.running) return false;
  }
  return true;
}

class BenchNodelet {
 public:
  // Starts containerd under dir/ctrd (images from images_dir).
  static std::unique_ptr<BenchNodelet> Start(const std::string& images_dir) {
    auto b = std::unique_ptr<BenchNodelet>(new BenchNodelet());
    testing::ContainerdOptions opts;
    opts.dir = b->dir_.Sub("ctrd");
    opts.image_tarballs = testing::DefaultImageTarballs(images_dir);
    auto started = testing::ContainerdInstance::Start(opts);
    if (!started.ok()) {
      std::fprintf(stderr, "containerd: %s\n", started.status().ToString().c_str());
      return nullptr;
    }
    b->containerd_ = std::move(*started);
    return b;
  }
  ~BenchNodelet() {
    StopNodelet();
    if (containerd_) (void)containerd_->Stop();
  }

  // Starts nodelet with fresh directories named after `tag`; false when it is not READY.
  bool StartNodelet(const std::string& bin_dir, const std::string& tag,
                    std::vector<std::string> extra = {}) {
    StopNodelet();
    tag_ = tag;
    std::filesystem::create_directories(manifests());
    notify_ = std::make_unique<testing::NotifyListener>(dir_.Sub("notify-" + tag + ".sock"));
    std::vector<std::string> argv = {bin_dir + "/nodelet", "--root-dir", dir_.Sub("root-" + tag),
                                     "--run-dir", run_dir(), "--log-dir", dir_.Sub("log-" + tag),
                                     "--runtime-endpoint", containerd_->endpoint(),
                                     "--pod-manifest-path", manifests(), "--node-name", "bench",
                                     // Pod cgroups under the bench's own root, removed with
                                     // its directory (TempDir).
                                     "--cgroup-root", testing::TestCgroupRoot(dir_.path())};
    argv.insert(argv.end(), extra.begin(), extra.end());
    nodelet_ = std::make_unique<testing::Subprocess>(
        argv, std::map<std::string, std::string>{{"NOTIFY_SOCKET", notify_->path()}},
        dir_.Sub("nodelet-" + tag + ".log"));
    if (!notify_->WaitFor("READY=1", milliseconds(30000))) {
      std::fprintf(stderr, "nodelet did not become ready (log %s)\n",
                   dir_.Sub("nodelet-" + tag + ".log").c_str());
      return false;
    }
    return true;
  }

  void StopNodelet() {
    if (!nodelet_) return;
    nodelet_->Signal(SIGTERM);
    nodelet_->Wait(milliseconds(30000));
    nodelet_.reset();
  }

  std::string manifests() const { return dir_.Sub("manifests-" + tag_); }
  std::string run_dir() const { return dir_.Sub("run-" + tag_); }
  testing::ContainerdInstance& containerd() { return *containerd_; }
  pid_t supervisor_pid() const { return nodelet_ ? nodelet_->pid() : -1; }

  // Writes a manifest atomically (a hidden file, then rename).
  void Write(const std::string& file, const std::string& content) {
    std::string tmp = manifests() + "/." + file + ".tmp";
    std::ofstream(tmp) << content;
    std::filesystem::rename(tmp, manifests() + "/" + file);
  }
  void Remove(const std::string& file) { std::filesystem::remove(manifests() + "/" + file); }

  // Until CRI lists no sandbox (nodelet removed its pods); CRI has no event to wait on.
  bool WaitRuntimeEmpty(milliseconds timeout) {
    auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      auto list = containerd_->cri().ListPodSandbox(::runtime::v1::PodSandboxFilter());
      if (list.ok() && list->empty()) return true;
      std::this_thread::sleep_for(milliseconds(100));
    }
    return false;
  }

  // The supervisor and its direct children (the services), by name (argv[0]'s base name).
  std::map<std::string, pid_t> Processes() const {
    std::map<std::string, pid_t> out;
    pid_t sup = supervisor_pid();
    if (sup <= 0) return out;
    out[ProcessName(sup)] = sup;
    DIR* d = opendir("/proc");
    if (!d) return out;
    while (dirent* e = readdir(d)) {
      pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
      if (pid <= 0 || ParentPid(pid) != sup) continue;
      std::string name = ProcessName(pid);
      if (name.rfind("nodelet", 0) == 0) out[name] = pid;
    }
    closedir(d);
    return out;
  }

  static std::string ProcessName(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
    std::string argv0;
    std::getline(in, argv0, '\0');
    auto slash = argv0.rfind('/');
    return slash == std::string::npos ? argv0 : argv0.substr(slash + 1);
  }

  static pid_t ParentPid(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("PPid:", 0) == 0) return static_cast<pid_t>(std::atoi(line.c_str() + 5));
    }
    return -1;
  }

 private:
  BenchNodelet() = default;

  testing::TempDir dir_;
  std::unique_ptr<testing::ContainerdInstance> containerd_;
  std::unique_ptr<testing::NotifyListener> notify_;
  std::unique_ptr<testing::Subprocess> nodelet_;
  std::string tag_ = "0";
};

}  // namespace nodelet::bench
