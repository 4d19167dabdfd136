#include "svc-volumed/volume_manager.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "lib/common/beneath.h"
#include "lib/common/fs.h"
#include "lib/common/safe_path.h"
#include "lib/pod/canonical.h"

namespace nodelet::volumed {
namespace {

namespace fs = std::filesystem;

constexpr std::chrono::milliseconds kBackoffInitial{500};
constexpr std::chrono::milliseconds kBackoffMax{128000};

std::string Unescape(const std::string& s) {
  // mountinfo escapes space, tab, newline and backslash as \ooo.
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      int v = 0;
      bool ok = true;
      for (size_t k = 1; k <= 3; ++k) {
        if (i + k >= s.size() || s[i + k] < '0' || s[i + k] > '7')
          ok = false;
        else
          v = v * 8 + (s[i + k] - '0');
      }
      if (ok) {
        out.push_back(static_cast<char>(v));
        i += 3;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

std::string PluginOf(const pod::Volume& v) {
  if (v.host_path) return "host-path";
  if (v.config_map) return "configmap";
  if (v.secret) return "secret";
  if (v.downward_api) return "downward-api";
  return "empty-dir";
}

Status Errno(const std::string& what, const std::string& path) {
  return FailedPrecondition(what + " " + path + ": " + std::strerror(errno));
}

Status MountTmpfs(const std::string& path, int64_t size_bytes) {
  if (IsMountPoint(path)) return Status::Ok();  // already (e.g. before a restart)
  std::string opts = "mode=0777";
  if (size_bytes > 0) opts += ",size=" + std::to_string(size_bytes);
  if (mount("tmpfs", path.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, opts.c_str()) != 0) {
    return Errno("mount tmpfs on", path);
  }
  return Status::Ok();
}

std::string LabelsText(const std::map<std::string, std::string>& m) {
  std::string out;
  for (const auto& [k, v] : m) out += k + "=\"" + v + "\"\n";
  return out;
}

// A field of the downward API, or an error for what is not supported.
Result<std::string> FieldValue(const pod::Pod& pod, const std::string& path) {
  const auto& md = pod.metadata;
  if (path == "metadata.name") return md.name;
  if (path == "metadata.namespace") return md.namespace_name;
  if (path == "metadata.uid") return md.uid;
  if (path == "metadata.labels") return LabelsText(md.labels);
  if (path == "metadata.annotations") return LabelsText(md.annotations);
  for (const auto& [prefix, map] :
       {std::pair{std::string("metadata.labels['"), &md.labels},
        std::pair{std::string("metadata.annotations['"), &md.annotations}}) {
    if (path.rfind(prefix, 0) == 0 && path.size() > prefix.size() + 2 &&
        path.substr(path.size() - 2) == "']") {
      auto key = path.substr(prefix.size(), path.size() - prefix.size() - 2);
      auto it = map->find(key);
      return it == map->end() ? std::string() : it->second;
    }
  }
  if (path == "spec.nodeName") return pod.spec.node_name;
  return InvalidArgument("downwardAPI field " + path + " is not supported");
}

}  // namespace

std::vector<std::string> MountsUnder(const std::string& prefix) {
  std::vector<std::string> out;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, dev, root, mount_point;
    if (!(fields >> id >> parent >> dev >> root >> mount_point)) continue;
    mount_point = Unescape(mount_point);
    if (mount_point == prefix || mount_point.rfind(prefix + "/", 0) == 0)
      out.push_back(mount_point);
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.size() > b.size(); });
  return out;
}

bool IsMountPoint(const std::string& path) {
  for (const auto& m : MountsUnder(path)) {
    if (m == path) return true;
  }
  return false;
}

Status CheckHostPath(const std::string& path, const std::string& type, LookupOptions options) {
  if (type.empty()) return Status::Ok();  // the kubelet's default: no check
  if (path.empty() || path[0] != '/')
    return InvalidArgument("hostPath " + path + " must be absolute");
  options.scope = BeneathScope::kInRoot;  // from the real `/`: an ordinary lookup, no magic links
  UniqueFd root(open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root.valid()) return Errno("open", "/");
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
    if (fstat(fd->get(), &st) != 0) return Errno("hostPath: stat", path);
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
      if (fchmod(made.get(), 0644) != 0) return Errno("hostPath: chmod", path);
      return Status::Ok();
    }
    if (errno != EEXIST) return Errno("hostPath: create", path);
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

VolumeManager::VolumeManager(std::string root_dir, const Clock& clock)
    : root_(std::move(root_dir)), clock_(clock) {}

void VolumeManager::SetDesired(DesiredState desired) { desired_ = std::move(desired); }

Result<std::string> VolumeManager::PodDir(const std::string& uid) const {
  return JoinComponent(root_ + "/pods", uid);
}

Result<std::string> VolumeManager::VolumeDir(const std::string& uid, const std::string& plugin,
                                             const std::string& name) const {
  auto pod_dir = PodDir(uid);
  if (!pod_dir.ok()) return pod_dir.status();
  return JoinComponent(*pod_dir + "/volumes/kubernetes.io~" + plugin, name);
}

Status VolumeManager::Files(const pod::Pod& pod, const pod::Volume& v,
                            std::map<std::string, std::pair<std::string, int>>* files) const {
  auto add_items = [&](const ConfigObject& obj, const std::vector<pod::KeyToPath>& items,
                       int default_mode) -> Status {
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
  };
  const std::string ns = pod.metadata.namespace_name;
  if (v.config_map) {
    const auto& c = *v.config_map;
    auto it = desired_.config_maps.find(ns + "/" + c.name);
    if (it == desired_.config_maps.end()) {
      if (c.optional.value_or(false)) return Status::Ok();
      return NotFound("configmap \"" + c.name + "\" not found");
    }
    return add_items(it->second, c.items, c.default_mode.value_or(pod::kDefaultFileMode));
  }
  if (v.secret) {
    const auto& s = *v.secret;
    auto it = desired_.secrets.find(ns + "/" + s.secret_name);
    if (it == desired_.secrets.end()) {
      if (s.optional.value_or(false)) return Status::Ok();
      return NotFound("secret \"" + s.secret_name + "\" not found");
    }
    return add_items(it->second, s.items, s.default_mode.value_or(pod::kDefaultFileMode));
  }
  if (v.downward_api) {
    for (const auto& item : v.downward_api->items) {
      if (!IsSafePayloadPath(item.path))
        return InvalidArgument("item path " + item.path + " is not safe");
      if (!item.field_ref)
        return InvalidArgument("downwardAPI item " + item.path + ": only fieldRef");
      auto value = FieldValue(pod, item.field_ref->field_path);
      if (!value.ok()) return value.status();
      (*files)[item.path] = {
          *value, item.mode.value_or(v.downward_api->default_mode.value_or(pod::kDefaultFileMode))};
    }
  }
  return Status::Ok();
}

Status VolumeManager::SetUp(const pod::Pod& pod, const pod::Volume& v, Vol& state, bool* changed) {
  const std::string& uid = pod.metadata.uid;
  if (v.host_path) {
    state.host_path = v.host_path->path;
    if (Status s = CheckHostPath(v.host_path->path, v.host_path->type); !s.ok()) return s;
    if (!state.ready) *changed = true;
    return Status::Ok();
  }
  const std::string plugin = PluginOf(v);
  auto volume_dir = VolumeDir(uid, plugin, v.name);
  if (!volume_dir.ok()) return volume_dir.status();
  const std::string dir = *volume_dir;
  state.host_path = dir;
  // Made on directory fds beneath ROOT/pods, no link followed out of it: a component swapped for
  // a link is refused, not followed (lib/common/beneath.h).
  if (Status s = EnsureDirectory(root_ + "/pods", 0755); !s.ok()) return s;
  UniqueFd pods_fd(open((root_ + "/pods").c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (pods_fd.get() < 0) return Errno("open", root_ + "/pods");
  auto parent = OpenOrCreateBeneath(pods_fd.get(), uid + "/volumes/kubernetes.io~" + plugin, 0755,
                                    "volume directory of " + v.name);
  if (!parent.ok()) return parent.status();
  auto made = OpenOrCreateBeneath(parent->get(), v.name, plugin == "empty-dir" ? 0777 : 0755,
                                  "volume directory of " + v.name);
  if (!made.ok()) return made.status();
  if (plugin == "empty-dir") {
    // World-writable as the kubelet makes it, also when it was there already (an O_PATH fd is
    // changed through its /proc/self/fd link, which names the opened inode, not a path).
    const std::string by_fd = "/proc/self/fd/" + std::to_string(made->get());
    if (chmod(by_fd.c_str(), 0777) != 0) return Errno("chmod", dir);
    if (v.empty_dir && v.empty_dir->medium == "Memory") {
      int64_t size = v.empty_dir->size_limit ? v.empty_dir->size_limit->Value() : 0;
      if (Status s = MountTmpfs(dir, size); !s.ok()) return s;
    }
    if (!state.ready) *changed = true;
    return Status::Ok();
  }
  if (plugin == "secret") {
    if (Status s = MountTmpfs(dir, 0); !s.ok()) return s;
  }
  std::map<std::string, std::pair<std::string, int>> files;
  if (Status s = Files(pod, v, &files); !s.ok()) return s;
  std::string hash;
  for (const auto& [k, f] : files)
    hash += k + '\0' + f.first + '\0' + std::to_string(f.second) + '\0';
  hash = pod::Hex128(pod::Fnv1a128(hash));
  if (hash == state.content_hash && state.ready) return Status::Ok();
  if (Status s = AtomicWriteFiles(clock_, dir, files); !s.ok()) return s;
  state.content_hash = hash;
  *changed = true;
  return Status::Ok();
}

Status VolumeManager::TearDownPod(const std::string& uid) {
  auto pod_dir = PodDir(uid);
  if (!pod_dir.ok()) return pod_dir.status();
  const std::string dir = *pod_dir;
  for (const auto& m : MountsUnder(dir)) {
    if (umount2(m.c_str(), 0) != 0 && umount2(m.c_str(), MNT_DETACH) != 0) {
      return Errno("unmount", m);
    }
  }
  if (!MountsUnder(dir).empty()) return FailedPrecondition(dir + " still has mounts");
  // The pod's emptyDirs were writable by its containers: no link in them is followed.
  return RemoveTreeNoFollow(dir);
}

std::set<std::string> VolumeManager::Reconcile() {
  std::set<std::string> changed;
  // Tear down first: pods volumed holds that are no longer desired.
  for (auto it = pods_.begin(); it != pods_.end();) {
    if (desired_.pods.count(it->first)) {
      ++it;
      continue;
    }
    ++operations_;
    if (Status s = TearDownPod(it->first); !s.ok()) {
      ++failures_;
      ++it;
      continue;
    }
    changed.insert(it->first);
    it = pods_.erase(it);
  }
  // Pod directories on disk that nobody wants (left by a previous run): only once every source
  // has reported, and reported once when they cannot be removed.
  if (desired_.sources_ready) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(root_ + "/pods", ec)) {
      std::string uid = entry.path().filename();
      if (desired_.pods.count(uid) || pods_.count(uid)) continue;
      if (Status s = TearDownPod(uid); !s.ok()) {
        if (cleanup_reported_.insert(uid).second) ++failures_;
      } else {
        cleanup_reported_.erase(uid);
      }
    }
  }
  // Then set up what is desired.
  const MonoTime now = clock_.Now();
  for (const auto& [uid, pod] : desired_.pods) {
    PodState& ps = pods_[uid];
    bool was_ready = true;
    for (const auto& [_, v] : ps.volumes) was_ready = was_ready && v.ready;
    was_ready = was_ready && ps.volumes.size() == pod->spec.volumes.size();
    std::set<std::string> names;
    bool pod_changed = false;
    for (const auto& v : pod->spec.volumes) {
      names.insert(v.name);
      Vol& state = ps.volumes[v.name];
      state.plugin = PluginOf(v);
      if (state.retry_at > now) continue;
      ++operations_;
      bool content_changed = false;
      Status s = SetUp(*pod, v, state, &content_changed);
      if (s.ok()) {
        state.ready = true;
        state.error.clear();
        state.backoff = std::chrono::milliseconds(0);
        pod_changed = pod_changed || content_changed;
      } else {
        ++failures_;
        if (state.ready || state.error != s.message()) pod_changed = true;
        state.ready = false;
        state.error = s.message();
        state.backoff =
            state.backoff.count() == 0 ? kBackoffInitial : std::min(state.backoff * 2, kBackoffMax);
        state.retry_at = now + state.backoff;
      }
    }
    std::erase_if(ps.volumes, [&](const auto& kv) { return !names.count(kv.first); });
    bool ready = true;
    for (const auto& [_, v] : ps.volumes) ready = ready && v.ready;
    if (pod_changed || ready != was_ready) changed.insert(uid);
  }
  return changed;
}

PodVolumesInfo VolumeManager::Get(const std::string& uid) const {
  PodVolumesInfo info;
  auto d = desired_.pods.find(uid);
  auto it = pods_.find(uid);
  if (d == desired_.pods.end()) return info;
  info.known = true;
  info.ready = it != pods_.end();
  for (const auto& v : d->second->spec.volumes) {
    VolumeInfo vi;
    vi.pod_name = d->second->metadata.name;
    vi.name = v.name;
    vi.plugin = PluginOf(v);
    const Vol* st = nullptr;
    if (it != pods_.end()) {
      auto s = it->second.volumes.find(v.name);
      if (s != it->second.volumes.end()) st = &s->second;
    }
    if (st == nullptr || !st->ready) {
      info.ready = false;
      if (info.reason.empty()) {
        info.reason = "volume \"" + v.name +
                      "\": " + (st && !st->error.empty() ? st->error : "not set up yet");
      }
    }
    vi.host_path = st ? st->host_path : "";
    vi.state = st == nullptr       ? "desired"
               : st->ready         ? "mounted"
               : st->error.empty() ? "desired"
                                   : "failing";
    vi.error = st ? st->error : "";
    info.volumes.push_back(vi);
  }
  return info;
}

std::vector<std::pair<std::string, VolumeInfo>> VolumeManager::Report(
    const std::string& uid) const {
  std::vector<std::pair<std::string, VolumeInfo>> out;
  for (const auto& [id, _] : desired_.pods) {
    if (!uid.empty() && id != uid) continue;
    for (auto& v : Get(id).volumes) out.emplace_back(id, v);
  }
  return out;
}

}  // namespace nodelet::volumed
