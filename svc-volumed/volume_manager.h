// VolumeManager: volumed's desired state of the world (the pods the supervisor wants, with the
// ConfigMaps and Secrets), its actual state (what is set up under ROOT/pods/UID/volumes and
// mounted per /proc/self/mountinfo), and the reconciler that moves one towards the other: it
// tears down what is no longer desired before it sets up what is, one operation per volume at a
// time, with exponential backoff per failing volume (500 ms doubling to 2 min 8 s).
//
// Plugins: emptyDir (a directory; medium Memory: a tmpfs mount with sizeLimit), hostPath (with
// the type checks), downwardAPI, configMap and secret (files written atomically: a new
// timestamped directory, then a `..data` symlink swapped with rename(2); user-visible names are
// symlinks through `..data`; secrets on tmpfs; see atomic_writer.h for how a container that
// tampers with the directory is kept from steering the writer). Everything is idempotent, so a
// restart rebuilds the actual state by looking (mountinfo, directories) and never mounts twice.
//
// Single-threaded (volumed's main loop).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "lib/common/beneath.h"
#include "lib/common/clock.h"
#include "lib/common/status.h"
#include "lib/pod/pod.h"
#include "svc-volumed/atomic_writer.h"

namespace nodelet::volumed {

struct ConfigObject {
  std::string namespace_name;
  std::string name;
  std::map<std::string, std::string> data;
};

struct DesiredState {
  std::map<std::string, std::shared_ptr<const pod::Pod>> pods;  // by uid
  std::map<std::string, ConfigObject> config_maps;              // by "namespace/name"
  std::map<std::string, ConfigObject> secrets;
  // Every pod source has reported: pods on disk that are not desired may be removed.
  bool sources_ready = false;
};

struct VolumeInfo {
  std::string pod_name;
  std::string name;
  std::string plugin;  // empty-dir, host-path, downward-api, configmap, secret
  std::string host_path;
  std::string state;  // desired, mounted, failing
  std::string error;
};

struct PodVolumesInfo {
  bool known = false;
  bool ready = false;
  std::string reason;
  std::vector<VolumeInfo> volumes;
};

// Mount points under `prefix` (inclusive), from /proc/self/mountinfo, deepest first.
std::vector<std::string> MountsUnder(const std::string& prefix);
bool IsMountPoint(const std::string& path);

class VolumeManager {
 public:
  VolumeManager(std::string root_dir, const Clock& clock);

  void SetDesired(DesiredState desired);
  // One pass. Returns the pods whose readiness or volume content changed.
  std::set<std::string> Reconcile();

  PodVolumesInfo Get(const std::string& uid) const;
  // Every known pod's volumes (all pods when uid is empty).
  std::vector<std::pair<std::string, VolumeInfo>> Report(const std::string& uid) const;

  // ROOT/pods/UID; a uid that is not one path component (see lib/common/safe_path.h) is an
  // error, so no pod data names a directory outside ROOT/pods.
  Result<std::string> PodDir(const std::string& uid) const;
  uint64_t operations() const { return operations_; }
  uint64_t failures() const { return failures_; }

 private:
  struct Vol {
    std::string plugin;
    std::string host_path;
    bool ready = false;
    std::string error;
    std::string content_hash;  // what was last written (file-based plugins)
    MonoTime retry_at{};
    std::chrono::milliseconds backoff{0};
  };
  struct PodState {
    std::map<std::string, Vol> volumes;  // by volume name
  };

  Status SetUp(const pod::Pod& pod, const pod::Volume& v, Vol& state, bool* changed);
  Status TearDownPod(const std::string& uid);
  Result<std::string> VolumeDir(const std::string& uid, const std::string& plugin,
                                const std::string& name) const;
  // The files a file-based volume must hold (path -> content, mode), or an error.
  Status Files(const pod::Pod& pod, const pod::Volume& v,
               std::map<std::string, std::pair<std::string, int>>* files) const;

  std::string root_;
  const Clock& clock_;
  DesiredState desired_;
  std::map<std::string, PodState> pods_;
  std::set<std::string> cleanup_reported_;
  uint64_t operations_ = 0, failures_ = 0;
};

// Checks a hostPath volume's `type` (Directory, DirectoryOrCreate, File, FileOrCreate, Socket,
// CharDevice, BlockDevice; "" checks nothing) on an fd: the path is opened once (links followed
// as the kubelet's stat does, /proc magic links refused) and the type is read with fstat; what
// *OrCreate makes is created with mkdirat/openat(O_EXCL) on its parent's fd.
Status CheckHostPath(const std::string& path, const std::string& type, LookupOptions options = {});

}  // namespace nodelet::volumed
