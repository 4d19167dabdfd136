#include "svc-volumed/volume_plugin.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "lib/common/fs.h"
#include "lib/common/safe_path.h"
#include "lib/pod/canonical.h"
#include "lib/pod/downward_api.h"
#include "svc-volumed/mounter.h"

namespace nodelet::volumed {
namespace {

// The keys of a ConfigMap or Secret as files: every key, or only `items` (key -> path, mode).
Status AddItems(const ConfigObject& obj, const std::vector<pod::KeyToPath>& items, int default_mode,
                Payload* files) {
  if (items.empty()) {
    for (const auto& [k, val] : obj.data) (*files)[k] = {val, default_mode};
    return Status::Ok();
  }
  for (const auto& item : items) {
    auto it = obj.data.find(item.key);
    if (it == obj.data.end()) {
      return NotFound("key " + item.key + " not found in " + obj.namespace_name + "/" + obj.name);
    }
    if (!IsSafePayloadPath(item.path))
      return InvalidArgument("item path " + item.path + " is not safe");
    (*files)[item.path] = {it->second, item.mode.value_or(default_mode)};
  }
  return Status::Ok();
}

// Whether the object `key` differs between the two maps (changed, came or went).
bool ObjectDiffers(const std::map<std::string, ConfigObject>& before,
                   const std::map<std::string, ConfigObject>& after, const std::string& key) {
  auto b = before.find(key);
  auto a = after.find(key);
  if (b == before.end() || a == after.end()) return (b == before.end()) != (a == after.end());
  return !(b->second == a->second);
}

std::string PayloadHash(const Payload& files) {
  std::string text;
  for (const auto& [k, f] : files)
    text += k + '\0' + f.first + '\0' + std::to_string(f.second) + '\0';
  return pod::Hex128(pod::Fnv1a128(text));
}

}  // namespace

Status CheckHostPath(const std::string& path, const std::string& type, LookupOptions options) {
  if (type.empty()) return Status::Ok();  // the kubelet's default: no check
  if (path.empty() || path[0] != '/')
    return InvalidArgument("hostPath " + path + " must be absolute");
  options.scope = BeneathScope::kInRoot;  // from the real `/`: an ordinary lookup, no magic links
  UniqueFd root(open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root.valid()) return PathErrno("open", "/");
  const std::string rel = path.substr(1);
  const std::string what = "hostPath " + path;
  if (type == "DirectoryOrCreate") {
    auto fd = OpenOrCreateBeneath(root.get(), rel, 0755, what, nullptr, options);
    if (!fd.ok()) {
      if (fd.status().message().find("not a directory") != std::string::npos) {
        return FailedPrecondition(what + ": exists and is not a directory");
      }
      return FailedPrecondition(fd.status().message());
    }
    struct stat st {};
    if (fstat(fd->get(), &st) != 0) return PathErrno("hostPath: stat", path);
    if (!S_ISDIR(st.st_mode)) return FailedPrecondition(what + ": exists and is not a directory");
    return Status::Ok();
  }
  if (type == "FileOrCreate") {
    const size_t slash = rel.rfind('/');
    const std::string parent = slash == std::string::npos ? "" : rel.substr(0, slash);
    const std::string base = slash == std::string::npos ? rel : rel.substr(slash + 1);
    if (base.empty() || base == "." || base == "..")
      return InvalidArgument(what + " names no file");
    auto dir = OpenBeneath(root.get(), parent, O_DIRECTORY, what + ": parent", options);
    if (!dir.ok()) return FailedPrecondition(dir.status().message());
    UniqueFd made(openat(dir->get(), base.c_str(),
                         O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (made.valid()) {
      if (fchmod(made.get(), 0644) != 0) return PathErrno("hostPath: chmod", path);
      return Status::Ok();
    }
    if (errno != EEXIST) return PathErrno("hostPath: create", path);
  }
  int fd = OpenBeneathRaw(root.get(), rel, 0, options);
  struct stat st {};
  bool exists = fd >= 0 && fstat(fd, &st) == 0;
  if (fd >= 0) close(fd);
  if (type == "Directory") {
    if (!exists || !S_ISDIR(st.st_mode)) return FailedPrecondition(what + ": not a directory");
  } else if (type == "FileOrCreate") {
    if (!exists || !S_ISREG(st.st_mode))
      return FailedPrecondition(what + ": exists and is not a file");
  } else if (type == "File") {
    if (!exists || !S_ISREG(st.st_mode)) return FailedPrecondition(what + ": not a file");
  } else if (type == "Socket") {
    if (!exists || !S_ISSOCK(st.st_mode)) return FailedPrecondition(what + ": not a socket");
  } else if (type == "CharDevice") {
    if (!exists || !S_ISCHR(st.st_mode))
      return FailedPrecondition(what + ": not a character device");
  } else if (type == "BlockDevice") {
    if (!exists || !S_ISBLK(st.st_mode)) return FailedPrecondition(what + ": not a block device");
  }
  return Status::Ok();
}

PodDirectoryPlugin::PodDirectoryPlugin(std::string name, std::string root_dir, Mounter& mounter)
    : root_(std::move(root_dir)), mounter_(mounter), name_(std::move(name)) {}

Result<std::string> PodDirectoryPlugin::VolumeDir(const std::string& uid,
                                                  const std::string& name) const {
  auto pod_dir = JoinComponent(root_ + "/pods", uid);
  if (!pod_dir.ok()) return pod_dir.status();
  return JoinComponent(*pod_dir + "/volumes/kubernetes.io~" + name_, name);
}

Result<UniqueFd> PodDirectoryPlugin::MakeVolumeDir(const std::string& uid, const std::string& name,
                                                   mode_t mode) const {
  // Made on directory fds beneath ROOT/pods, no link followed out of it: a component swapped for
  // a link is refused, not followed (lib/common/beneath.h).
  if (Status s = EnsureDirectory(root_ + "/pods", 0755); !s.ok()) return s;
  UniqueFd pods_fd(open((root_ + "/pods").c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (pods_fd.get() < 0) return PathErrno("open", root_ + "/pods");
  auto parent = OpenOrCreateBeneath(pods_fd.get(), uid + "/volumes/kubernetes.io~" + name_, 0755,
                                    "volume directory of " + name);
  if (!parent.ok()) return parent.status();
  return OpenOrCreateBeneath(parent->get(), name, mode, "volume directory of " + name);
}

// The pod's fsGroup, or -1.
static int FsGroup(const pod::Pod& pod) {
  const auto& sc = pod.spec.security_context;
  return sc && sc->fs_group ? static_cast<int>(*sc->fs_group) : -1;
}

Status PodDirectoryPlugin::EnsureTmpfs(const std::string& dir, int64_t size_bytes) const {
  auto mounted = IsMountedOn(mounter_, dir);
  if (!mounted.ok()) return mounted.status();
  if (*mounted) return Status::Ok();  // already (e.g. before a restart)
  std::string options = "mode=0777";
  if (size_bytes > 0) options += ",size=" + std::to_string(size_bytes);
  return mounter_.MountTmpfs(dir, options);
}

Status PodDirectoryPlugin::TearDown(const std::string& uid, const std::string& name) {
  auto dir = VolumeDir(uid, name);
  if (!dir.ok()) return dir.status();
  return UnmountAndRemoveTree(mounter_, *dir);
}

Status PodDirectoryPlugin::Unmount(const std::string& uid, const std::string& name) {
  auto dir = VolumeDir(uid, name);
  if (!dir.ok()) return dir.status();
  return UnmountUnder(mounter_, *dir);
}

EmptyDirPlugin::EmptyDirPlugin(std::string root_dir, Mounter& mounter)
    : PodDirectoryPlugin("empty-dir", std::move(root_dir), mounter) {}

Status EmptyDirPlugin::SetUp(const VolumeSpec& spec, PluginVolumeState& state,
                             bool* content_changed) {
  (void)content_changed;  // an emptyDir's content is its containers', not volumed's
  const pod::Volume& v = spec.volume;
  auto dir = VolumeDir(spec.pod.metadata.uid, v.name);
  if (!dir.ok()) return dir.status();
  state.host_path = *dir;
  auto made = MakeVolumeDir(spec.pod.metadata.uid, v.name, 0777);
  if (!made.ok()) return made.status();
  // World-writable as the kubelet makes it, also when it was there already (an O_PATH fd is
  // changed through its /proc/self/fd link, which names the opened inode, not a path).
  const std::string by_fd = "/proc/self/fd/" + std::to_string(made->get());
  if (chmod(by_fd.c_str(), 0777) != 0) return PathErrno("chmod", *dir);
  if (v.empty_dir && v.empty_dir->medium == "Memory") {
    int64_t size = v.empty_dir->size_limit ? v.empty_dir->size_limit->Value() : 0;
    if (Status s = EnsureTmpfs(*dir, size); !s.ok()) return s;
  }
  // fsGroup: the directory (the tmpfs's root for Memory) in that group, set-group-ID so that
  // what the containers create there is in it too (the kubelet's 0777 | setgid). Only the
  // directory itself: its content is the containers'.
  if (const int fs_group = FsGroup(spec.pod); fs_group >= 0) {
    UniqueFd root(open(dir->c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!root.valid()) return PathErrno("open", *dir);
    if (fchown(root.get(), static_cast<uid_t>(-1), static_cast<gid_t>(fs_group)) != 0) {
      return PathErrno("chown to fsGroup " + std::to_string(fs_group) + ":", *dir);
    }
    if (fchmod(root.get(), 02777) != 0) return PathErrno("chmod", *dir);
  }
  return Status::Ok();
}

Status HostPathPlugin::SetUp(const VolumeSpec& spec, PluginVolumeState& state,
                             bool* content_changed) {
  (void)content_changed;  // the host's path: volumed writes nothing into it
  state.host_path = spec.volume.host_path->path;
  return CheckHostPath(spec.volume.host_path->path, spec.volume.host_path->type);
}

Status HostPathPlugin::TearDown(const std::string& uid, const std::string& name) {
  (void)uid;
  (void)name;
  return Status::Ok();  // the path is the host's; nothing was made for the pod
}

Status FilePayloadPlugin::SetUp(const VolumeSpec& spec, PluginVolumeState& state,
                                bool* content_changed) {
  const std::string& uid = spec.pod.metadata.uid;
  auto dir = VolumeDir(uid, spec.volume.name);
  if (!dir.ok()) return dir.status();
  state.host_path = *dir;
  auto made = MakeVolumeDir(uid, spec.volume.name, 0755);
  if (!made.ok()) return made.status();
  if (OnTmpfs()) {
    if (Status s = EnsureTmpfs(*dir, 0); !s.ok()) return s;
  }
  Payload files;
  if (Status s = MakePayload(spec, &files); !s.ok()) return s;
  std::string hash = PayloadHash(files);
  // The fsGroup is part of what was written: a change writes the payload again.
  const int fs_group = FsGroup(spec.pod);
  hash += "/" + std::to_string(fs_group);
  if (hash == state.content_hash) return Status::Ok();
  if (Status s = AtomicWriteFiles(clock_, *dir, files, fs_group); !s.ok()) return s;
  state.content_hash = std::move(hash);
  *content_changed = true;
  return Status::Ok();
}

ConfigMapPlugin::ConfigMapPlugin(std::string root_dir, Mounter& mounter, const Clock& clock)
    : FilePayloadPlugin("configmap", std::move(root_dir), mounter, clock) {}

bool ConfigMapPlugin::ReadsChangedObject(const pod::Volume& v, const std::string& ns,
                                         const ConfigObjects& before,
                                         const ConfigObjects& after) const {
  return ObjectDiffers(before.config_maps, after.config_maps, ns + "/" + v.config_map->name);
}

Status ConfigMapPlugin::MakePayload(const VolumeSpec& spec, Payload* files) const {
  const auto& c = *spec.volume.config_map;
  const auto& objects = spec.objects.config_maps;
  auto it = objects.find(spec.pod.metadata.namespace_name + "/" + c.name);
  if (it == objects.end()) {
    if (c.optional.value_or(false)) return Status::Ok();
    return NotFound("configmap \"" + c.name + "\" not found");
  }
  return AddItems(it->second, c.items, c.default_mode.value_or(pod::kDefaultFileMode), files);
}

SecretPlugin::SecretPlugin(std::string root_dir, Mounter& mounter, const Clock& clock)
    : FilePayloadPlugin("secret", std::move(root_dir), mounter, clock) {}

bool SecretPlugin::ReadsChangedObject(const pod::Volume& v, const std::string& ns,
                                      const ConfigObjects& before,
                                      const ConfigObjects& after) const {
  return ObjectDiffers(before.secrets, after.secrets, ns + "/" + v.secret->secret_name);
}

Status SecretPlugin::MakePayload(const VolumeSpec& spec, Payload* files) const {
  const auto& s = *spec.volume.secret;
  const auto& objects = spec.objects.secrets;
  auto it = objects.find(spec.pod.metadata.namespace_name + "/" + s.secret_name);
  if (it == objects.end()) {
    if (s.optional.value_or(false)) return Status::Ok();
    return NotFound("secret \"" + s.secret_name + "\" not found");
  }
  return AddItems(it->second, s.items, s.default_mode.value_or(pod::kDefaultFileMode), files);
}

DownwardApiPlugin::DownwardApiPlugin(std::string root_dir, Mounter& mounter, const Clock& clock)
    : FilePayloadPlugin("downward-api", root_dir, mounter, clock),
      node_(pod::ReadNodeAllocatable(root_dir)) {}

Status DownwardApiPlugin::MakePayload(const VolumeSpec& spec, Payload* files) const {
  const auto& d = *spec.volume.downward_api;
  for (const auto& item : d.items) {
    if (!IsSafePayloadPath(item.path))
      return InvalidArgument("item path " + item.path + " is not safe");
    // Only metadata fields and container resources pass validation for a volume.
    auto value = item.field_ref ? pod::PodFieldValue(spec.pod, item.field_ref->field_path,
                                                     pod::PodRuntimeFields{})
                 : item.resource_field_ref
                     ? pod::ResourceFieldValue(spec.pod, *item.resource_field_ref, "", node_)
                     : Result<std::string>(
                           InvalidArgument("downwardAPI item " + item.path + " has no field"));
    if (!value.ok()) {
      return InvalidArgument("downwardAPI item " + item.path + ": " + value.status().message());
    }
    (*files)[item.path] = {*value,
                           item.mode.value_or(d.default_mode.value_or(pod::kDefaultFileMode))};
  }
  return Status::Ok();
}

VolumePlugins::VolumePlugins(const std::string& root_dir, Mounter& mounter, const Clock& clock) {
  plugins_.push_back(std::make_unique<HostPathPlugin>());
  plugins_.push_back(std::make_unique<ConfigMapPlugin>(root_dir, mounter, clock));
  plugins_.push_back(std::make_unique<SecretPlugin>(root_dir, mounter, clock));
  plugins_.push_back(std::make_unique<DownwardApiPlugin>(root_dir, mounter, clock));
  plugins_.push_back(std::make_unique<EmptyDirPlugin>(root_dir, mounter));
}

VolumePlugin& VolumePlugins::For(const pod::Volume& v) const {
  for (const auto& p : plugins_) {
    if (p->CanSupport(v)) return *p;
  }
  return *plugins_.back();  // no source: an emptyDir
}

}  // namespace nodelet::volumed
