// The volume plugins volumed supports, one class each behind VolumePlugin: emptyDir (medium
// Memory: a tmpfs with sizeLimit), hostPath (with the type checks), configMap, secret (on a
// tmpfs) and downwardAPI. The reconciler (volume_manager.h) picks a volume's plugin from its
// source with VolumePlugins::For, calls SetUp until it succeeds and again whenever the pod or
// the ConfigMaps and Secrets it uses change, and TearDown when the pod goes.
//
// Everything but hostPath lives in ROOT/pods/UID/volumes/kubernetes.io~PLUGIN/NAME, made on
// directory fds beneath ROOT/pods (lib/common/beneath.h). configMap, secret and downwardAPI
// files are written by the atomic writer (atomic_writer.h), which a container that tampers with
// the directory cannot steer. Every SetUp is idempotent: it looks (mountinfo, directories)
// before it makes anything, so a restarted volumed never mounts twice.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lib/common/beneath.h"
#include "lib/common/clock.h"
#include "lib/common/status.h"
#include "lib/pod/config_objects.h"
#include "lib/pod/downward_api.h"
#include "lib/pod/pod.h"
#include "svc-volumed/atomic_writer.h"
#include "svc-volumed/mounter.h"

namespace nodelet::volumed {

// A ConfigMap or a Secret as the supervisor sends it (Secret data already decoded).
using pod::ConfigObject;

// The ConfigMaps and Secrets of one desired state, by "namespace/name".
struct ConfigObjects {
  const std::map<std::string, ConfigObject>& config_maps;
  const std::map<std::string, ConfigObject>& secrets;
};

// What SetUp works from: one volume of a pod, and the ConfigMaps and Secrets.
struct VolumeSpec {
  const pod::Pod& pod;
  const pod::Volume& volume;
  ConfigObjects objects;
};

// What the reconciler keeps for a plugin between two SetUps of one volume.
struct PluginVolumeState {
  std::string host_path;     // what podworkerd hands to the runtime
  std::string content_hash;  // file-based plugins: the payload last written ("" after a failure)
};

class VolumePlugin {
 public:
  virtual ~VolumePlugin() = default;
  // The name in host paths (`kubernetes.io~NAME`) and reports: empty-dir, host-path,
  // configmap, secret, downward-api.
  virtual const std::string& name() const = 0;
  virtual bool CanSupport(const pod::Volume& v) const = 0;
  // Whether `v`, of a pod in namespace `ns`, reads a ConfigMap or Secret that differs between
  // `before` and `after` (changed, came or went), so that it must be set up again.
  virtual bool ReadsChangedObject(const pod::Volume& v, const std::string& ns,
                                  const ConfigObjects& before, const ConfigObjects& after) const {
    (void)v, (void)ns, (void)before, (void)after;
    return false;
  }
  // Brings the volume to what `spec` says; sets `state.host_path`, and `*content_changed` when
  // it wrote new content. Idempotent.
  virtual Status SetUp(const VolumeSpec& spec, PluginVolumeState& state, bool* content_changed) = 0;
  // Undoes SetUp for the volume `name` of pod `uid`: what volumed mounted is unmounted and what
  // it made is removed. A path of the host's (hostPath) is never touched.
  virtual Status TearDown(const std::string& uid, const std::string& name) = 0;
  // Only the unmount part of TearDown: what it made stays, for a caller that removes the whole
  // pod directory itself (the manager, in bounded steps whatever a container left in it).
  virtual Status Unmount(const std::string& uid, const std::string& name) {
    return TearDown(uid, name);
  }
};

// A plugin whose volumes are directories of the pod, ROOT/pods/UID/volumes/kubernetes.io~NAME/V.
class PodDirectoryPlugin : public VolumePlugin {
 public:
  PodDirectoryPlugin(std::string name, std::string root_dir, Mounter& mounter);
  const std::string& name() const override { return name_; }
  Status TearDown(const std::string& uid, const std::string& name) override;
  Status Unmount(const std::string& uid, const std::string& name) override;
  // ROOT/pods/UID/volumes/kubernetes.io~PLUGIN/NAME; uid and name must each be one path
  // component (lib/common/safe_path.h).
  Result<std::string> VolumeDir(const std::string& uid, const std::string& name) const;

 protected:
  // Makes the volume's directory (and its parents, 0755) on directory fds beneath ROOT/pods,
  // where a component swapped for a link is refused, not followed; returns an O_PATH fd of it.
  Result<UniqueFd> MakeVolumeDir(const std::string& uid, const std::string& name,
                                 mode_t mode) const;
  // A tmpfs on `dir` unless one is there already (e.g. from before a restart).
  Status EnsureTmpfs(const std::string& dir, int64_t size_bytes) const;

  const std::string root_;
  Mounter& mounter_;

 private:
  const std::string name_;
};

// emptyDir: a directory, 0777 as the kubelet makes it; `medium: Memory` mounts a tmpfs on it,
// `size=` from sizeLimit. A volume with no source at all is an emptyDir.
class EmptyDirPlugin : public PodDirectoryPlugin {
 public:
  EmptyDirPlugin(std::string root_dir, Mounter& mounter);
  bool CanSupport(const pod::Volume& v) const override { return v.empty_dir.has_value(); }
  Status SetUp(const VolumeSpec& spec, PluginVolumeState& state, bool* content_changed) override;
};

// hostPath: the path itself, after the type checks of CheckHostPath. Nothing to tear down.
class HostPathPlugin : public VolumePlugin {
 public:
  const std::string& name() const override { return name_; }
  bool CanSupport(const pod::Volume& v) const override { return v.host_path.has_value(); }
  Status SetUp(const VolumeSpec& spec, PluginVolumeState& state, bool* content_changed) override;
  Status TearDown(const std::string& uid, const std::string& name) override;

 private:
  const std::string name_ = "host-path";
};

// configMap, secret and downwardAPI: files written atomically (atomic_writer.h), rewritten only
// when the payload (paths, contents, modes) differs from what was last written.
class FilePayloadPlugin : public PodDirectoryPlugin {
 public:
  // `clock` names each written generation (atomic_writer.h).
  FilePayloadPlugin(std::string name, std::string root_dir, Mounter& mounter, const Clock& clock)
      : PodDirectoryPlugin(std::move(name), std::move(root_dir), mounter), clock_(clock) {}
  Status SetUp(const VolumeSpec& spec, PluginVolumeState& state, bool* content_changed) override;

 protected:
  // The files the volume must hold, or an error (a missing object, an unsafe path).
  virtual Status MakePayload(const VolumeSpec& spec, Payload* files) const = 0;
  // Secrets: the files live on a tmpfs, never on disk.
  virtual bool OnTmpfs() const { return false; }

 private:
  const Clock& clock_;
};

class ConfigMapPlugin : public FilePayloadPlugin {
 public:
  ConfigMapPlugin(std::string root_dir, Mounter& mounter, const Clock& clock);
  bool CanSupport(const pod::Volume& v) const override { return v.config_map.has_value(); }
  bool ReadsChangedObject(const pod::Volume& v, const std::string& ns, const ConfigObjects& before,
                          const ConfigObjects& after) const override;

 protected:
  Status MakePayload(const VolumeSpec& spec, Payload* files) const override;
};

class SecretPlugin : public FilePayloadPlugin {
 public:
  SecretPlugin(std::string root_dir, Mounter& mounter, const Clock& clock);
  bool CanSupport(const pod::Volume& v) const override { return v.secret.has_value(); }
  bool ReadsChangedObject(const pod::Volume& v, const std::string& ns, const ConfigObjects& before,
                          const ConfigObjects& after) const override;

 protected:
  Status MakePayload(const VolumeSpec& spec, Payload* files) const override;
  bool OnTmpfs() const override { return true; }
};

// downwardAPI: metadata.name, namespace, uid, labels, annotations, labels['k'],
// annotations['k'] and spec.nodeName through fieldRef.
class DownwardApiPlugin : public FilePayloadPlugin {
 public:
  DownwardApiPlugin(std::string root_dir, Mounter& mounter, const Clock& clock);
  bool CanSupport(const pod::Volume& v) const override { return v.downward_api.has_value(); }

 protected:
  Status MakePayload(const VolumeSpec& spec, Payload* files) const override;

 private:
  // A container without a limit reads the node's allocatable (the kubelet's rule).
  pod::NodeAllocatable node_;
};

// The plugins of one volumed, by the volume's source.
class VolumePlugins {
 public:
  VolumePlugins(const std::string& root_dir, Mounter& mounter, const Clock& clock);
  // The plugin of `v`: the first that supports it, in the order hostPath, configMap, secret,
  // downwardAPI, emptyDir; a volume without a source is an emptyDir.
  VolumePlugin& For(const pod::Volume& v) const;

 private:
  std::vector<std::unique_ptr<VolumePlugin>> plugins_;  // in the order above, emptyDir last
};

// Checks a hostPath volume's `type` (Directory, DirectoryOrCreate, File, FileOrCreate, Socket,
// CharDevice, BlockDevice; "" checks nothing) on an fd: the path is opened once (links followed
// as the kubelet's stat does, /proc magic links refused) and the type is read with fstat; what
// *OrCreate makes is created with mkdirat/openat(O_EXCL) on its parent's fd.
Status CheckHostPath(const std::string& path, const std::string& type, LookupOptions options = {});

}  // namespace nodelet::volumed
