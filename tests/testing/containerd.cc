// ContainerdInstance's start (checks, config, a root tmpfs, the pod network, the daemon, CRI
// Version, the images imported and seen by CRI) and its adoption of an instance left running
// (Attach); ContainerPid.
#include "tests/testing/containerd.h"

#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "lib/common/fs.h"
#include "tests/testing/containerd_internal.h"
#include "tests/testing/harness.h"

namespace nodelet::testing {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

constexpr char kNamespace[] = "k8s.io";

}  // namespace

using containerd_internal::Cmdline;
using containerd_internal::FindOnPath;
using containerd_internal::LogTail;
using containerd_internal::PidfdOpen;
using containerd_internal::Remaining;
using containerd_internal::SetUpPodNetwork;
using containerd_internal::SpawnContainerd;
using containerd_internal::UndoPodNetwork;

ContainerdInstance::ContainerdInstance(std::string dir, pid_t pid, bool is_child,
                                       milliseconds stop_timeout)
    : dir_(std::move(dir)), pid_(pid), is_child_(is_child), stop_timeout_(stop_timeout) {
  pidfd_ = PidfdOpen(pid_);
  auto client = cri::GrpcCriClient::Create(endpoint());
  if (client.ok()) cri_ = std::move(client).value();
}

ContainerdInstance::~ContainerdInstance() {
  // A destructor cannot report: a failed stop shows in the leak checks of the test that ran.
  if (!released_) (void)Stop();
  // Released: containerd keeps the slot's lock (and its file) for whoever attaches later.
  if (released_) slot_.Close();
  if (pidfd_ >= 0) close(pidfd_);
}

Result<std::unique_ptr<ContainerdInstance>> ContainerdInstance::Start(
    const ContainerdOptions& options) {
  auto deadline = steady_clock::now() + options.start_timeout;
  if (options.dir.empty() || options.dir[0] != '/') {
    return InvalidArgument("containerd dir '" + options.dir + "' must be an absolute path");
  }
  const std::string& dir = options.dir;
  if ((dir + "/containerd.sock.ttrpc").size() > 107) {
    return InvalidArgument("containerd dir '" + dir + "' is too long for a unix socket path");
  }
  for (const char* sub : {"", "/root", "/state"}) {
    if (Status s = EnsureDirectory(dir + sub, 0700); !s.ok()) return s;
  }
  std::string pid_file = dir + "/containerd.pid";
  if (std::string old = ReadTextFile(pid_file); !old.empty()) {
    pid_t old_pid = static_cast<pid_t>(std::atoi(old.c_str()));
    if (old_pid > 0 && ProcessAlive(old_pid)) {
      return Status(StatusCode::kAlreadyExists, "containerd already runs in '" + dir + "' (pid " +
                                                    std::to_string(old_pid) + ")");
    }
  }
  for (const auto& tarball : options.image_tarballs) {
    if (access(tarball.c_str(), R_OK) != 0) {
      return NotFound("image tarball '" + tarball + "' is missing (run images/build-images)");
    }
  }
  std::string containerd = FindOnPath(options.containerd_bin);
  std::string ctr = FindOnPath(options.ctr_bin);
  if (containerd.empty())
    return NotFound("'" + options.containerd_bin + "' is not installed (package containerd)");
  if (ctr.empty())
    return NotFound("'" + options.ctr_bin + "' is not installed (package containerd)");
  if (FindOnPath("runc").empty()) return NotFound("'runc' is not installed (package runc)");

  auto defaults = RunCommand({containerd, "config", "default"}, Remaining(deadline));
  if (defaults.exit_code != 0) {
    return Internal("'containerd config default' failed: " + defaults.output);
  }
  auto config = MakeContainerdConfig(defaults.output, dir, options.sandbox_image,
                                     options.registry_config_path);
  if (!config.ok()) return config.status();
  std::string config_path = dir + "/config.toml";
  {
    std::ofstream out(config_path, std::ios::trunc);
    out << *config;
    if (!out.flush()) return ErrnoStatus("write '" + config_path + "'", errno);
  }

  // A small image filesystem: a tmpfs over root/ (unmounted by Stop() through CleanLeftovers,
  // or right here when containerd cannot be started).
  bool root_mounted = false;
  if (options.root_tmpfs_bytes > 0) {
    std::string root = dir + "/root";
    std::string data = "size=" + std::to_string(options.root_tmpfs_bytes) + ",mode=0700";
    if (mount("tmpfs", root.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, data.c_str()) != 0) {
      return ErrnoStatus("mount a tmpfs of " + std::to_string(options.root_tmpfs_bytes) +
                             " bytes at '" + root + "'",
                         errno);
    }
    root_mounted = true;
  }

  // The pod network: a slot of our own, its conf list, its FORWARD rule. Cleaned by Stop() once
  // the instance exists, or right here when containerd cannot be started.
  PodNetwork network;
  CniSlot slot;
  auto undo_all = [&] {
    UndoPodNetwork(dir, network, slot);
    if (root_mounted) umount2((dir + "/root").c_str(), MNT_DETACH);
  };
  Status cni_ready = SetUpPodNetwork(dir, options.pod_network, network, slot);
  if (!cni_ready.ok()) {
    undo_all();
    return cni_ready;
  }

  std::string log_path = dir + "/containerd.log";
  auto spawned = SpawnContainerd(containerd, config_path, log_path, pid_file, slot.fd());
  if (!spawned.ok()) {
    undo_all();
    return spawned.status();
  }
  pid_t pid = *spawned;
  std::unique_ptr<ContainerdInstance> instance(
      new ContainerdInstance(dir, pid, /*is_child=*/true, options.stop_timeout));
  instance->network_ = network;
  instance->slot_ = std::move(slot);
  if (instance->cri_ == nullptr) return Internal("cannot create a CRI client for '" + dir + "'");
  instance->containerd_path_ = containerd;

  // Wait for CRI Version. The wait itself is gRPC's wait-for-ready (it connects as soon as the
  // socket answers); slicing it lets us notice a containerd that exits at startup.
  for (;;) {
    auto left = Remaining(deadline);
    if (left.count() == 0) {
      return DeadlineExceeded("containerd in '" + dir + "' did not answer CRI Version within " +
                              std::to_string(options.start_timeout.count()) +
                              " ms; log:" + LogTail(log_path));
    }
    auto version = instance->cri_->WaitForReady(std::min(left, milliseconds(500)));
    if (version.ok()) break;
    if (!instance->running()) {
      return Unavailable("containerd in '" + dir + "' exited at startup; log:" + LogTail(log_path));
    }
  }

  for (const auto& tarball : options.image_tarballs) {
    auto imported = RunCommand(
        {ctr, "-a", instance->socket_path(), "-n", kNamespace, "images", "import", tarball},
        Remaining(deadline));
    if (imported.exit_code != 0) {
      return Internal("ctr images import '" + tarball + "' failed" +
                      (imported.timed_out ? std::string(" (timed out)") : std::string()) + ": " +
                      imported.output);
    }
  }

  // CRI learns of imported images from containerd's event stream, a moment after `ctr` returns.
  // There is no event a client can wait on, so check with a short backoff, bounded.
  if (!options.image_tarballs.empty()) {
    cri::v1::ImageSpec sandbox_image;
    sandbox_image.set_image(options.sandbox_image);
    milliseconds backoff(2);
    for (;;) {
      auto status = instance->cri_->ImageStatus(sandbox_image, false);
      if (status.ok() && status->has_image()) break;
      if (Remaining(deadline).count() == 0) {
        return DeadlineExceeded("CRI does not see the sandbox image '" + options.sandbox_image +
                                "' after the import" +
                                (status.ok() ? std::string() : ": " + status.status().message()));
      }
      std::this_thread::sleep_for(std::min(backoff, Remaining(deadline)));
      backoff = std::min(backoff * 2, milliseconds(100));
    }
  }
  return instance;
}

Result<std::unique_ptr<ContainerdInstance>> ContainerdInstance::Attach(const std::string& dir,
                                                                       milliseconds stop_timeout) {
  std::string pid_file = dir + "/containerd.pid";
  std::string text = ReadTextFile(pid_file);
  if (text.empty()) return NotFound("no containerd pid file in '" + dir + "'");
  pid_t pid = static_cast<pid_t>(std::atoi(text.c_str()));
  if (pid <= 0) return InvalidArgument("bad containerd pid file '" + pid_file + "'");
  // Only adopt the process if it really is our containerd (pids are reused).
  bool ours = false;
  if (ProcessAlive(pid)) {
    auto argv = Cmdline(pid);
    ours = argv.size() >= 3 && fs::path(argv[0]).filename() == "containerd" &&
           std::find(argv.begin(), argv.end(), dir + "/config.toml") != argv.end();
  }
  std::unique_ptr<ContainerdInstance> instance(
      new ContainerdInstance(dir, ours ? pid : -1, /*is_child=*/false, stop_timeout));
  // The pod network's slot, as Start() recorded it; its lock is held by containerd.
  std::string slot_text = ReadTextFile(dir + "/cni/slot");
  if (!slot_text.empty()) {
    int slot = std::atoi(slot_text.c_str());
    if (slot < 0 || slot >= kCniSlots) {
      return InvalidArgument("bad CNI slot file '" + dir + "/cni/slot'");
    }
    instance->network_ = PodNetworkForSlot(slot);
  }
  return instance;
}

pid_t ContainerPid(cri::RuntimeService& cri, const std::string& container_id) {
  auto st = cri.ContainerStatus(container_id, true);
  if (!st.ok()) return -1;
  auto it = st->info().find("info");
  if (it == st->info().end()) return -1;
  auto info = nlohmann::json::parse(it->second, nullptr, false);
  if (info.is_discarded() || !info.contains("pid") || !info["pid"].is_number_integer()) return -1;
  return info["pid"].get<pid_t>();
}

}  // namespace nodelet::testing
