// ContainerdInstance: a private containerd for integration tests and `./dev run` (through the
// nodelet-containerd tool, images/containerd-up and -down). Its root, state, socket, config and
// log live under one directory; it serves CRI with the project's own pause image as the sandbox
// image. Stop() (and the destructor) removes every sandbox and container through CRI, stops
// containerd by pid, then cleans whatever is left: shims and their containers by pid, mounts under
// the directory, the cgroups, runc state and shim sockets of its containers. The one
// implementation of this config and cleanup logic; see docs/runtime.md.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lib/common/status.h"
#include "lib/cri/grpc_cri_client.h"
#include "tests/testing/pod_network.h"

namespace nodelet::testing {

inline constexpr char kPauseImage[] = "nodelet.local/pause:1.0";
inline constexpr char kBusyboxImage[] = "nodelet.local/busybox:1.0";

struct ContainerdOptions {
  // Everything goes here: config.toml, root/, state/, containerd.sock, containerd.log,
  // containerd.pid. Created when missing. Keep it short: the socket path must fit in 107 bytes.
  std::string dir;
  // OCI image tarballs imported (ctr -n k8s.io images import) once containerd answers.
  std::vector<std::string> image_tarballs;
  std::string sandbox_image = kPauseImage;
  // The CRI plugin's registry.config_path: a certs.d-style directory with HOST/hosts.toml files
  // (e.g. plain HTTP for a test registry, see tests/testing/registry.h). Empty: the default.
  std::string registry_config_path;
  // Until CRI Version answers and every image is imported.
  std::chrono::milliseconds start_timeout{std::chrono::seconds(60)};
  // Grace between SIGTERM and SIGKILL when stopping containerd.
  std::chrono::milliseconds stop_timeout{std::chrono::seconds(10)};
  // When non-zero, a tmpfs of this many bytes is mounted at DIR/root before containerd starts
  // (a small image filesystem, e.g. for image garbage collection); Stop() unmounts it, also
  // when Start() fails.
  uint64_t root_tmpfs_bytes = 0;
  // A pod network of its own (tests/testing/pod_network.h, docs/runtime.md): a CNI bridge in a
  // slot unique on this machine, its subnet of 198.18.0.0/15, portmap for hostPorts. With false,
  // the CNI conf dir exists but stays empty (CRI Status then reports NetworkReady false and only
  // host-network pods can run).
  bool pod_network = true;
  std::string containerd_bin = "containerd";  // found on PATH unless absolute
  std::string ctr_bin = "ctr";
};

// The image tarballs that images/build-images wrote into `images_dir` (pause.tar, busybox.tar).
std::vector<std::string> DefaultImageTarballs(const std::string& images_dir);

// The directory with the built image tarballs, from NODELET_IMAGES_DIR (set by meson's test()).
std::string ImagesDir();

// containerd's config: `containerd config default` with root, state and the gRPC address moved
// under `dir`, and the CRI plugin's sandbox_image, restrict_oom_score_adj = true (root lacks
// CAP_SYS_RESOURCE in some VMs) and netns_mounts_under_state_dir = true, the CNI section's
// bin_dir (Debian's /usr/lib/cni), conf_dir (DIR/cni/net.d) and max_conf_num = 1, and the
// registry's config_path when `registry_config_path` is not empty. Exposed for tests.
Result<std::string> MakeContainerdConfig(const std::string& default_config, const std::string& dir,
                                         const std::string& sandbox_image,
                                         const std::string& registry_config_path = "");

// The host pid of a running container, from containerd's verbose ContainerStatus ("info" JSON,
// "pid" field); -1 when it cannot be found.
pid_t ContainerPid(cri::RuntimeService& cri, const std::string& container_id);

class ContainerdInstance {
 public:
  // Writes the config, starts containerd in its own session (output to DIR/containerd.log, pid
  // in DIR/containerd.pid), waits for CRI Version (gRPC wait-for-ready, bounded by
  // start_timeout), imports the images and checks that CRI sees the sandbox image. On failure
  // everything started is cleaned up and the error names the step and the log's tail.
  static Result<std::unique_ptr<ContainerdInstance>> Start(const ContainerdOptions& options);
  // Adopts an instance that Start() left running in `dir` (after Release()), e.g. for
  // `nodelet-containerd down`. NOT_FOUND when there is no pid file.
  static Result<std::unique_ptr<ContainerdInstance>> Attach(
      const std::string& dir, std::chrono::milliseconds stop_timeout = std::chrono::seconds(10));
  // Stop(), unless released.
  ~ContainerdInstance();
  ContainerdInstance(const ContainerdInstance&) = delete;
  ContainerdInstance& operator=(const ContainerdInstance&) = delete;

  const std::string& dir() const { return dir_; }
  std::string socket_path() const { return dir_ + "/containerd.sock"; }
  std::string endpoint() const { return "unix://" + socket_path(); }
  pid_t pid() const { return pid_; }
  bool running() const;
  // The pod network. The conf dir (DIR/cni/net.d) always exists; the rest is empty without
  // ContainerdOptions::pod_network. containerd re-reads the conf dir when it changes, so a test
  // may empty it (NetworkReady false) and write MakeCniConfList() back.
  std::string cni_conf_dir() const { return dir_ + "/cni/net.d"; }
  bool has_pod_network() const { return network_.slot >= 0; }
  int cni_slot() const { return network_.slot; }
  const std::string& bridge_name() const { return network_.bridge; }
  const std::string& network_name() const { return network_.network; }
  const std::string& pod_subnet() const { return network_.subnet; }   // "198.18.x.0/24"
  const std::string& gateway_ip() const { return network_.gateway; }  // the bridge's, .1
  // host-local's dataDir (DIR/cni/ipam); its files are in ipam_data_dir()/network_name().
  std::string ipam_data_dir() const { return has_pod_network() ? dir_ + "/cni/ipam" : ""; }
  // The conf list that Start() wrote into cni_conf_dir() (empty without a pod network).
  std::string cni_conf_list() const;

  // A CRI client for this instance (default deadlines).
  cri::GrpcCriClient& cri() { return *cri_; }

  // The pids of the containerd shims serving this instance (found by their -address argument).
  std::vector<pid_t> ShimPids() const;

  // Leaves containerd running when this object is destroyed (the pid file stays).
  void Release() { released_ = true; }

  // Restarts the containerd daemon alone, as an upgrade or a crash would: SIGTERM (SIGKILL after
  // stop_timeout), then a new containerd over the same config, root and state, and waits for CRI
  // Version (up to `start_timeout`). Sandboxes, containers and their shims keep running; the
  // new daemon adopts them. `while_down`, when set, runs after the old daemon exited and before
  // the new one starts (a fault test's "meanwhile"). FAILED_PRECONDITION after Stop().
  Status Restart(std::chrono::milliseconds start_timeout = std::chrono::seconds(60),
                 const std::function<void()>& while_down = nullptr);

  // Removes every sandbox and container (CRI), stops containerd (SIGTERM, then SIGKILL after
  // stop_timeout), kills leftover shims and container processes, unmounts everything under dir,
  // removes its containers' cgroups, runc state and shim sockets, and the pid file (the unmount
  // includes a root tmpfs). Every step runs even when an earlier one fails; returns the first
  // failure. Idempotent.
  Status Stop();

 private:
  ContainerdInstance(std::string dir, pid_t pid, bool is_child,
                     std::chrono::milliseconds stop_timeout);

  Status RemoveEverythingThroughCri();
  Status StopContainerd();
  Status CleanLeftovers();
  Status CleanPodNetwork();

  std::string dir_;
  std::string containerd_path_;  // the binary Start() ran; Restart() runs it again
  pid_t pid_ = -1;
  int pidfd_ = -1;
  bool is_child_ = false;  // started by this process: reap it
  bool stopped_ = false;
  bool released_ = false;
  std::chrono::milliseconds stop_timeout_;
  std::unique_ptr<cri::GrpcCriClient> cri_;
  PodNetwork network_;  // slot -1: none
  CniSlot slot_;        // held from Start() to Stop() (not by an attached instance)
};

}  // namespace nodelet::testing
