#include "svc-podworkerd/container_log_manager.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <map>

#include "lib/common/logging.h"
#include "lib/common/tree_remover.h"
#include "lib/common/unique_fd.h"
#include "svc-podworkerd/cri_configs.h"

namespace nodelet::podworkerd {
namespace {

namespace v1 = ::runtime::v1;

constexpr char kCompressSuffix[] = ".gz";
constexpr char kTmpSuffix[] = ".tmp";
// How deep a pod's log directory may nest when it is deleted (it holds CONTAINER/N.log files).

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// One path component: not empty, ".", ".."; no '/' or NUL; at most NAME_MAX bytes.
bool IsComponent(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.size() <= 255 &&
         name.find('/') == std::string::npos && name.find('\0') == std::string::npos;
}

// Opens the directory `name` in `parent` without following a symlink.
Result<UniqueFd> OpenDirAt(int parent, const std::string& name) {
  UniqueFd fd(openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return ErrnoStatus("open directory '" + name + "'", errno);
  return fd;
}

// The names in the directory `dir` (without "." and "..").
Result<std::vector<std::string>> ListDir(int dir) {
  int copy = fcntl(dir, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return ErrnoStatus("dup", errno);
  DIR* d = fdopendir(copy);
  if (d == nullptr) {
    int err = errno;
    close(copy);
    return ErrnoStatus("fdopendir", err);
  }
  rewinddir(d);
  std::vector<std::string> names;
  while (struct dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(std::move(n));
  }
  closedir(d);
  return names;
}

// lstat of `name` in `dir`; nullopt when it does not exist.
Result<std::optional<struct stat>> StatAt(int dir, const std::string& name) {
  struct stat st {};
  if (fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return std::optional<struct stat>();
    return ErrnoStatus("stat '" + name + "'", errno);
  }
  return std::optional<struct stat>(st);
}

// Removes `name` in `dir` and, when it is a directory, everything in it at any depth, never
// following a symlink (a symlink is removed as the link): TreeRemover.
Status RemoveTreeAt(int dir, const std::string& name) {
  return TreeRemover(dir, name, "'" + name + "'").RemoveAll();
}

// Gzips the regular file `name` in `dir` into NAME.gz (written as NAME.tmp, then renamed) and
// removes it.
Status CompressAt(int dir, const std::string& name) {
  UniqueFd in(openat(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!in) return ErrnoStatus("open '" + name + "'", errno);
  struct stat st {};
  if (fstat(in.get(), &st) != 0) return ErrnoStatus("stat '" + name + "'", errno);
  if (!S_ISREG(st.st_mode)) return InvalidArgument("'" + name + "' is not a regular file");
  const std::string tmp = name + kTmpSuffix;
  if (unlinkat(dir, tmp.c_str(), 0) != 0 && errno != ENOENT) {
    return ErrnoStatus("remove '" + tmp + "'", errno);
  }
  UniqueFd out(
      openat(dir, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640));
  if (!out) return ErrnoStatus("create '" + tmp + "'", errno);
  // gzclose closes the fd it was given: a duplicate, so `out` stays for the fsync.
  int gz_fd = fcntl(out.get(), F_DUPFD_CLOEXEC, 0);
  if (gz_fd < 0) return ErrnoStatus("dup", errno);
  gzFile gz = gzdopen(gz_fd, "wb");
  if (gz == nullptr) {
    close(gz_fd);
    unlinkat(dir, tmp.c_str(), 0);
    return Internal("gzdopen '" + tmp + "' failed");
  }
  Status failed = Status::Ok();
  std::vector<char> buf(1 << 16);
  for (;;) {
    ssize_t n = read(in.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      failed = ErrnoStatus("read '" + name + "'", errno);
      break;
    }
    if (n == 0) break;
    if (gzwrite(gz, buf.data(), static_cast<unsigned>(n)) != static_cast<int>(n)) {
      failed = Internal("compress '" + name + "': gzwrite failed");
      break;
    }
  }
  if (gzclose(gz) != Z_OK && failed.ok()) failed = Internal("compress '" + name + "': gzclose");
  if (failed.ok() && fsync(out.get()) != 0) failed = ErrnoStatus("fsync '" + tmp + "'", errno);
  if (!failed.ok()) {
    unlinkat(dir, tmp.c_str(), 0);
    return failed;
  }
  const std::string gz_name = name + kCompressSuffix;
  if (renameat(dir, tmp.c_str(), dir, gz_name.c_str()) != 0) {
    int err = errno;
    unlinkat(dir, tmp.c_str(), 0);
    return ErrnoStatus("rename '" + tmp + "'", err);
  }
  if (unlinkat(dir, name.c_str(), 0) != 0 && errno != ENOENT) {
    return ErrnoStatus("remove '" + name + "'", errno);
  }
  return Status::Ok();
}

// The UTC stamp of a rotated file's name: YYYYMMDD-HHMMSS.
std::string RotationStamp(WallTime now) {
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  struct tm tm {};
  gmtime_r(&t, &tm);
  char buf[32];
  strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

std::string LabelOf(const google::protobuf::Map<std::string, std::string>& labels,
                    const char* key) {
  auto it = labels.find(key);
  return it == labels.end() ? std::string() : it->second;
}

// The container id in a symlink's name POD_NS_CONTAINER-ID.log; "" when it has none.
std::string SymlinkContainerId(const std::string& name) {
  if (!EndsWith(name, ".log")) return "";
  const std::string stem = name.substr(0, name.size() - 4);
  auto dash = stem.rfind('-');
  return dash == std::string::npos ? std::string() : stem.substr(dash + 1);
}

void Note(Status& first, const Status& s) {
  if (!s.ok() && first.ok()) first = s;
}

}  // namespace

Result<std::string> ContainerLogSymlinkPath(const std::string& log_dir, const std::string& pod_name,
                                            const std::string& pod_namespace,
                                            const std::string& container_name,
                                            const std::string& container_id) {
  const std::string name =
      pod_name + "_" + pod_namespace + "_" + container_name + "-" + container_id + ".log";
  if (!IsComponent(pod_name) || !IsComponent(pod_namespace) || !IsComponent(container_name) ||
      !IsComponent(container_id) || !IsComponent(name)) {
    return InvalidArgument("container log symlink name '" + name + "' is not a file name");
  }
  return log_dir + "/containers/" + name;
}

Status CreateContainerLogSymlink(const std::string& log_dir, const std::string& pod_name,
                                 const std::string& pod_namespace,
                                 const std::string& container_name, const std::string& container_id,
                                 const std::string& target) {
  auto path =
      ContainerLogSymlinkPath(log_dir, pod_name, pod_namespace, container_name, container_id);
  if (!path.ok()) return path.status();
  const std::string name = path->substr(path->rfind('/') + 1);
  auto dir = OpenDirAt(AT_FDCWD, log_dir + "/containers");
  if (!dir.ok()) return dir.status();
  // As the kubelet: whatever was there under that name goes (a link of an earlier attempt).
  if (unlinkat(dir->get(), name.c_str(), 0) != 0 && errno != ENOENT) {
    return ErrnoStatus("remove '" + *path + "'", errno);
  }
  if (symlinkat(target.c_str(), dir->get(), name.c_str()) != 0) {
    return ErrnoStatus("symlink '" + *path + "'", errno);
  }
  return Status::Ok();
}

Result<int> RemoveContainerLogSymlinks(const std::string& log_dir,
                                       const std::string& container_id) {
  if (!IsComponent(container_id)) return InvalidArgument("bad container id '" + container_id + "'");
  const std::string path = log_dir + "/containers";
  UniqueFd dir(open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir) {
    if (errno == ENOENT) return 0;
    return ErrnoStatus("open directory '" + path + "'", errno);
  }
  auto names = ListDir(dir.get());
  if (!names.ok()) return names.status();
  int removed = 0;
  for (const auto& n : *names) {
    if (SymlinkContainerId(n) != container_id) continue;
    auto st = StatAt(dir.get(), n);
    if (!st.ok() || !st->has_value() || !S_ISLNK((*st)->st_mode)) continue;
    if (unlinkat(dir.get(), n.c_str(), 0) == 0) ++removed;
  }
  return removed;
}

ContainerLogManager::ContainerLogManager(EventLoop& loop, cri::RuntimeService& runtime,
                                         std::string log_dir, ContainerLogPolicy policy)
    : runtime_(runtime),
      clock_(loop.clock()),
      log_dir_(std::move(log_dir)),
      policy_(policy),
      timer_(loop.AddTimer([this] { StartPass(); })),
      executor_(loop, 1) {
  // The runtime reports cleaned paths (Go's filepath.Join): no trailing slash to compare with.
  while (log_dir_.size() > 1 && log_dir_.back() == '/') log_dir_.pop_back();
  policy_.max_files = std::max(2, policy_.max_files);
  policy_.max_size_bytes = std::max<int64_t>(1, policy_.max_size_bytes);
}

ContainerLogManager::~ContainerLogManager() { executor_.Stop(); }

LogRotationResult ContainerLogManager::RotateLogs() {
  LogRotationResult result;
  // The running containers nodelet manages: plegd's view when podworkerd has handed it over,
  // else the runtime's list.
  std::optional<std::set<std::string>> running;
  {
    std::lock_guard<std::mutex> lock(mu_);
    running = running_;
  }
  if (!running) {
    v1::ContainerFilter filter;
    filter.mutable_state()->set_state(v1::CONTAINER_RUNNING);
    auto list = runtime_.ListContainers(filter);
    if (!list.ok()) {
      result.status = list.status();
      return result;
    }
    running.emplace();
    for (const auto& c : *list) {
      if (c.state() == v1::CONTAINER_RUNNING && !LabelOf(c.labels(), kManagedLabel).empty()) {
        running->insert(c.id());
      }
    }
  }
  std::lock_guard<std::mutex> one_pass(rotate_mu_);
  std::map<std::string, std::string> paths;  // this pass's running containers
  for (const auto& id : *running) {
    // A container's log path is fixed when it is created: asked of the runtime once per
    // container, not every pass (at 100 pods those calls were a tenth of an idle podworkerd).
    std::string log_path;
    if (auto known = log_paths_.find(id); known != log_paths_.end()) {
      log_path = known->second;
    } else {
      auto st = runtime_.ContainerStatus(id, false);
      if (!st.ok()) {
        // Gone meanwhile: nothing to rotate.
        if (st.status().code() != StatusCode::kNotFound) Note(result.status, st.status());
        continue;
      }
      if (st->status().state() != v1::CONTAINER_RUNNING) continue;
      log_path = st->status().log_path();
    }
    paths[id] = log_path;
    if (log_path.empty()) continue;
    LogRotationResult r = RotateLog(id, log_path);
    result.rotated += r.rotated;
    result.compressed += r.compressed;
    result.removed += r.removed;
    Note(result.status, r.status);
  }
  log_paths_ = std::move(paths);  // containers no longer running are forgotten
  return result;
}

LogRotationResult ContainerLogManager::RotateLog(const std::string& container_id,
                                                 const std::string& log_path) {
  LogRotationResult result;
  auto fail = [&](Status s) {
    result.status = Status(s.code(), "container " + container_id + " log: " + s.message());
    return result;
  };
  // LOG-DIR/pods/POD-DIR/CONTAINER/N.log, each component a plain name.
  const std::string prefix = log_dir_ + "/pods/";
  if (log_path.compare(0, prefix.size(), prefix) != 0) {
    return fail(InvalidArgument("'" + log_path + "' is not under " + prefix));
  }
  std::vector<std::string> parts;
  {
    std::string rest = log_path.substr(prefix.size());
    size_t start = 0;
    for (;;) {
      size_t slash = rest.find('/', start);
      parts.push_back(rest.substr(start, slash == std::string::npos ? slash : slash - start));
      if (slash == std::string::npos) break;
      start = slash + 1;
    }
  }
  if (parts.size() != 3 || !std::all_of(parts.begin(), parts.end(), IsComponent) ||
      !EndsWith(parts[2], ".log")) {
    return fail(InvalidArgument("'" + log_path + "' is not POD/CONTAINER/N.log"));
  }
  // Each directory opened without following a symlink: what is renamed and removed below is
  // what is in this directory, whatever is swapped meanwhile.
  auto pods = OpenDirAt(AT_FDCWD, log_dir_ + "/pods");
  if (!pods.ok()) return fail(pods.status());
  auto pod_dir = OpenDirAt(pods->get(), parts[0]);
  if (!pod_dir.ok()) return fail(pod_dir.status());
  auto dir_fd = OpenDirAt(pod_dir->get(), parts[1]);
  if (!dir_fd.ok()) return fail(dir_fd.status());
  const int dir = dir_fd->get();
  const std::string& log = parts[2];

  auto current = StatAt(dir, log);
  if (!current.ok()) return fail(current.status());
  if (!current->has_value()) {
    // As the kubelet: a missing log (a rename whose reopen and rename back both failed) is
    // reopened, so the container's output has a file again.
    if (Status s = runtime_.ReopenContainerLog(container_id); !s.ok()) return fail(s);
    return result;
  }
  if (!S_ISREG((*current)->st_mode)) {
    return fail(InvalidArgument("'" + log_path + "' is not a regular file"));
  }
  if ((*current)->st_size < policy_.max_size_bytes) return result;

  // The rotated files N.log.*, regular files only (anything else is left alone).
  auto names = ListDir(dir);
  if (!names.ok()) return fail(names.status());
  std::set<std::string> all;
  for (const auto& n : *names) {
    if (n.size() <= log.size() + 1 || n.compare(0, log.size() + 1, log + ".") != 0) continue;
    auto st = StatAt(dir, n);
    if (st.ok() && st->has_value() && S_ISREG((*st)->st_mode)) all.insert(n);
  }
  // Unused: leftover temporary files, and uncompressed files whose compressed copy was made.
  std::vector<std::string> rotated;
  for (const auto& n : all) {
    if (EndsWith(n, kTmpSuffix) || (!EndsWith(n, kCompressSuffix) && all.count(n + ".gz") > 0)) {
      if (unlinkat(dir, n.c_str(), 0) != 0 && errno != ENOENT) {
        Note(result.status, ErrnoStatus("remove '" + n + "'", errno));
      }
      continue;
    }
    rotated.push_back(n);
  }
  // Oldest first (the stamps sort by time); with the file rotated now and the new one the
  // runtime opens, max_files - 2 older ones stay.
  std::sort(rotated.begin(), rotated.end());
  const size_t keep = static_cast<size_t>(policy_.max_files - 2);
  size_t first_kept = 0;
  while (rotated.size() - first_kept > keep) {
    const std::string& n = rotated[first_kept++];
    if (unlinkat(dir, n.c_str(), 0) != 0 && errno != ENOENT) {
      return fail(ErrnoStatus("remove '" + n + "'", errno));
    }
    ++result.removed;
  }
  for (size_t i = first_kept; i < rotated.size(); ++i) {
    if (EndsWith(rotated[i], kCompressSuffix)) continue;
    if (Status s = CompressAt(dir, rotated[i]); !s.ok()) return fail(s);
    ++result.compressed;
  }

  // Renamed, never replacing a file of the same stamp (two rotations within a second: the
  // next pass rotates).
  const std::string stamped = log + "." + RotationStamp(clock_.WallNow());
  if (renameat2(dir, log.c_str(), dir, stamped.c_str(), RENAME_NOREPLACE) != 0) {
    if (errno == EEXIST) return result;
    return fail(ErrnoStatus("rename '" + log + "'", errno));
  }
  if (Status s = runtime_.ReopenContainerLog(container_id); !s.ok()) {
    // Back, so the next pass tries again (and a reader still finds the log where it was).
    if (renameat(dir, stamped.c_str(), dir, log.c_str()) != 0) {
      return fail(ErrnoStatus(
          "rename '" + stamped + "' back after a failed reopen (" + s.message() + ")", errno));
    }
    return fail(s);
  }
  ++result.rotated;
  return result;
}

LogCleanupResult ContainerLogManager::CleanUp(const std::set<std::string>& live_pods) {
  LogCleanupResult result;
  // The directories and links are read before the runtime is listed: a pod or container made
  // after the listing has nothing here yet.
  std::vector<std::pair<std::string, std::string>> pod_dirs;  // name, uid
  UniqueFd pods;
  if (auto fd = OpenDirAt(AT_FDCWD, log_dir_ + "/pods"); fd.ok()) {
    pods = std::move(*fd);
    auto names = ListDir(pods.get());
    if (!names.ok()) {
      result.status = names.status();
      return result;
    }
    for (const auto& n : *names) {
      auto underscore = n.rfind('_');
      if (underscore == std::string::npos || underscore + 1 == n.size()) continue;
      pod_dirs.emplace_back(n, n.substr(underscore + 1));
    }
  }
  std::vector<std::string> links;
  UniqueFd containers;
  if (auto fd = OpenDirAt(AT_FDCWD, log_dir_ + "/containers"); fd.ok()) {
    containers = std::move(*fd);
    auto names = ListDir(containers.get());
    if (!names.ok()) {
      result.status = names.status();
      return result;
    }
    for (const auto& n : *names) {
      auto st = StatAt(containers.get(), n);
      if (st.ok() && st->has_value() && S_ISLNK((*st)->st_mode)) links.push_back(n);
    }
  }
  if (pod_dirs.empty() && links.empty()) return result;

  auto sandboxes = runtime_.ListPodSandbox({});
  if (!sandboxes.ok()) {
    result.status = sandboxes.status();
    return result;
  }
  auto all_containers = runtime_.ListContainers({});
  if (!all_containers.ok()) {
    result.status = all_containers.status();
    return result;
  }
  std::set<std::string> in_runtime = live_pods;
  std::map<std::string, v1::ContainerState> container_states;
  for (const auto& s : *sandboxes) {
    in_runtime.insert(s.metadata().uid());
    in_runtime.insert(LabelOf(s.labels(), kPodUidLabel));
  }
  for (const auto& c : *all_containers) {
    in_runtime.insert(LabelOf(c.labels(), kPodUidLabel));
    container_states[c.id()] = c.state();
  }
  in_runtime.erase("");
  for (const auto& entry : pod_dirs) {
    // Named copies: a lambda may not capture a structured binding (C++20 before P1091, clang).
    const std::string& name = entry.first;
    const std::string& uid = entry.second;
    // The uid is what follows the last '_' (the kubelet's parse); a uid that itself holds a
    // '_' is matched as the name's whole ending, so no live pod's directory is taken for
    // another's.
    const bool in_use = in_runtime.count(uid) > 0 ||
                        std::any_of(in_runtime.begin(), in_runtime.end(),
                                    [&](const std::string& u) { return EndsWith(name, "_" + u); });
    if (in_use) continue;
    if (Status s = RemoveTreeAt(pods.get(), name); !s.ok()) {
      Note(result.status, Status(s.code(), "pod log directory " + name + ": " + s.message()));
      continue;
    }
    result.removed_pod_dirs.push_back(name);
    ++result.pod_dirs_removed;
  }
  for (const auto& name : links) {
    // As the kubelet: a link goes when its container is gone, or when it dangles and its
    // container exited (a running one's log is missing for a moment while it is rotated, a
    // created one's until it starts).
    const std::string id = SymlinkContainerId(name);
    auto state = container_states.find(id);
    bool remove = id.empty() || state == container_states.end();
    if (!remove && state->second == v1::CONTAINER_EXITED) {
      // The target is only looked at, never written.
      char target[4096];
      ssize_t n = readlinkat(containers.get(), name.c_str(), target, sizeof target - 1);
      if (n > 0) {
        target[n] = '\0';
        struct stat st {};
        remove = stat(target, &st) != 0 && errno == ENOENT;
      }
    }
    if (!remove) continue;
    if (unlinkat(containers.get(), name.c_str(), 0) != 0 && errno != ENOENT) {
      Note(result.status, ErrnoStatus("remove container log symlink '" + name + "'", errno));
      continue;
    }
    ++result.symlinks_removed;
  }
  return result;
}

void ContainerLogManager::Start() { timer_.ArmAfter(policy_.monitor_interval); }

void ContainerLogManager::SetDesired(std::set<std::string> pod_uids) {
  std::lock_guard<std::mutex> lock(mu_);
  desired_pods_ = std::move(pod_uids);
}

void ContainerLogManager::SetRunning(std::set<std::string> container_ids) {
  std::lock_guard<std::mutex> lock(mu_);
  running_ = std::move(container_ids);
}

std::vector<std::pair<std::string, uint64_t>> ContainerLogManager::Counters() const {
  return {
      {"container_log_rotations", rotations_.load()},
      {"container_log_rotation_failures", rotation_failures_.load()},
      {"container_logs_compressed", compressed_.load()},
      {"container_logs_removed", removed_.load()},
      {"pod_log_directories_removed", pod_dirs_removed_.load()},
      {"container_log_symlinks_removed", symlinks_removed_.load()},
  };
}

void ContainerLogManager::StartPass() {
  if (pass_running_) return;
  pass_running_ = true;
  std::optional<std::set<std::string>> live;
  {
    std::lock_guard<std::mutex> lock(mu_);
    live = desired_pods_;
  }
  executor_.Submit([this, live = std::move(live)] { Pass(live); },
                   [this] {
                     pass_running_ = false;
                     timer_.ArmAfter(policy_.monitor_interval);
                   });
}

void ContainerLogManager::Pass(const std::optional<std::set<std::string>>& live) {
  auto log = GetLogger("podworkerd");
  LogRotationResult r = RotateLogs();
  rotations_ += static_cast<uint64_t>(r.rotated);
  compressed_ += static_cast<uint64_t>(r.compressed);
  removed_ += static_cast<uint64_t>(r.removed);
  if (!r.status.ok()) {
    ++rotation_failures_;
    // Once per distinct failure: a log that cannot be rotated is retried every interval.
    if (r.status.message() != last_rotation_error_) {
      log->warn("Container log rotation: {}", r.status.message());
    }
  }
  last_rotation_error_ = r.status.ok() ? "" : r.status.message();
  // Until the desired pods are known, no pod's logs may be taken for a removed pod's.
  if (live && --passes_to_cleanup_ <= 0) {
    passes_to_cleanup_ = kLogCleanupEveryPasses;
    LogCleanupResult c = CleanUp(*live);
    pod_dirs_removed_ += static_cast<uint64_t>(c.pod_dirs_removed);
    symlinks_removed_ += static_cast<uint64_t>(c.symlinks_removed);
    for (const auto& name : c.removed_pod_dirs) {
      log->info("Removed the log directory {} of a removed pod", name);
    }
    if (!c.status.ok() && c.status.message() != last_cleanup_error_) {
      log->warn("Container log clean-up: {}", c.status.message());
    }
    last_cleanup_error_ = c.status.ok() ? "" : c.status.message();
  }
  ++passes_;
}

}  // namespace nodelet::podworkerd
