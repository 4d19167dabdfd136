#include "svc-podworkerd/cri_configs.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "lib/common/fs.h"
#include "lib/common/safe_path.h"
#include "lib/pod/canonical.h"
#include "svc-podworkerd/lifecycle_hooks.h"

namespace nodelet::podworkerd {
namespace {

namespace v1 = cri::v1;

void SetNamespaces(const pod::Pod& pod, v1::NamespaceOption* ns) {
  ns->set_network(pod.spec.host_network ? v1::NODE : v1::POD);
  ns->set_pid(v1::CONTAINER);
  ns->set_ipc(v1::POD);
}

void SetResources(const pod::Container& c, v1::LinuxContainerResources* r) {
  // The kubelet's mapping: requests.cpu → shares, limits.cpu → CFS quota over a 100 ms period,
  // limits.memory → the memory limit.
  constexpr int64_t kPeriodUs = 100000;
  auto req = c.resources.requests.find("cpu");
  int64_t milli = req != c.resources.requests.end() ? req->second.MilliValue() : 0;
  auto lim = c.resources.limits.find("cpu");
  if (milli == 0 && lim != c.resources.limits.end()) milli = lim->second.MilliValue();
  r->set_cpu_shares(milli == 0 ? 2 : std::max<int64_t>(2, milli * 1024 / 1000));
  if (lim != c.resources.limits.end()) {
    r->set_cpu_period(kPeriodUs);
    r->set_cpu_quota(std::max<int64_t>(1000, lim->second.MilliValue() * kPeriodUs / 1000));
  }
  auto mem = c.resources.limits.find("memory");
  if (mem != c.resources.limits.end()) r->set_memory_limit_in_bytes(mem->second.Value());
}

}  // namespace

Result<std::string> PodLogDirectory(const std::string& log_dir, const pod::Pod& pod) {
  return JoinComponent(log_dir + "/pods", pod.metadata.namespace_name + "_" + pod.metadata.name +
                                              "_" + pod.metadata.uid);
}

v1::PodSandboxConfig MakeSandboxConfig(const pod::Pod& pod, uint32_t attempt,
                                       const std::string& log_dir) {
  v1::PodSandboxConfig config;
  auto* md = config.mutable_metadata();
  md->set_name(pod.metadata.name);
  md->set_namespace_(pod.metadata.namespace_name);
  md->set_uid(pod.metadata.uid);
  md->set_attempt(attempt);
  if (!pod.spec.host_network) config.set_hostname(pod.metadata.name.substr(0, 63));
  // A name that is not one path component gets no log directory here; PodSync refuses such a
  // pod before it creates a sandbox, so this config is never used then.
  if (auto dir = PodLogDirectory(log_dir, pod); dir.ok()) config.set_log_directory(*dir);
  auto& labels = *config.mutable_labels();
  for (const auto& [k, v] : pod.metadata.labels) labels[k] = v;
  labels[kManagedLabel] = "true";
  labels[kPodNameLabel] = pod.metadata.name;
  labels[kPodNamespaceLabel] = pod.metadata.namespace_name;
  labels[kPodUidLabel] = pod.metadata.uid;
  auto& annotations = *config.mutable_annotations();
  for (const auto& [k, v] : pod.metadata.annotations) annotations[k] = v;
  SetNamespaces(pod,
                config.mutable_linux()->mutable_security_context()->mutable_namespace_options());
  return config;
}

v1::ContainerConfig MakeContainerConfig(const pod::Pod& pod, const pod::Container& c,
                                        uint32_t restart_count, const ContainerEnvironment* env) {
  v1::ContainerConfig config;
  config.mutable_metadata()->set_name(c.name);
  config.mutable_metadata()->set_attempt(restart_count);
  config.mutable_image()->set_image(c.image);
  for (const auto& a : env ? env->command : c.command) config.add_command(a);
  for (const auto& a : env ? env->args : c.args) config.add_args(a);
  config.set_working_dir(c.working_dir);
  if (env) {
    for (const auto& [name, value] : env->env) {
      auto* kv = config.add_envs();
      kv->set_key(name);
      kv->set_value(value);
    }
  } else {
    for (const auto& e : c.env) {
      auto* kv = config.add_envs();
      kv->set_key(e.name);
      kv->set_value(e.value);
    }
  }
  config.set_log_path(c.name + "/" + std::to_string(restart_count) + ".log");
  auto& labels = *config.mutable_labels();
  labels[kManagedLabel] = "true";
  labels[kPodNameLabel] = pod.metadata.name;
  labels[kPodNamespaceLabel] = pod.metadata.namespace_name;
  labels[kPodUidLabel] = pod.metadata.uid;
  labels[kContainerNameLabel] = c.name;
  auto& annotations = *config.mutable_annotations();
  annotations[kContainerHashAnnotation] = pod::ContainerSpecHashHex(c);
  annotations[kRestartCountAnnotation] = std::to_string(restart_count);
  if (std::string pre_stop = EncodePreStop(c); !pre_stop.empty()) {
    annotations[kPreStopAnnotation] = std::move(pre_stop);
  }
  annotations[kGracePeriodAnnotation] =
      std::to_string(pod.spec.termination_grace_period_seconds.value_or(
          pod::kDefaultTerminationGracePeriodSeconds));
  auto* linux = config.mutable_linux();
  SetResources(c, linux->mutable_resources());
  auto* sc = linux->mutable_security_context();
  SetNamespaces(pod, sc->mutable_namespace_options());
  if (c.security_context) {
    const auto& s = *c.security_context;
    if (s.run_as_user) sc->mutable_run_as_user()->set_value(*s.run_as_user);
    if (s.run_as_group) sc->mutable_run_as_group()->set_value(*s.run_as_group);
    if (s.privileged) sc->set_privileged(*s.privileged);
    if (s.read_only_root_filesystem) sc->set_readonly_rootfs(*s.read_only_root_filesystem);
    if (s.allow_privilege_escalation) sc->set_no_new_privs(!*s.allow_privilege_escalation);
  }
  return config;
}

Result<std::string> SubPathStagingPath(const std::string& root_dir, const std::string& pod_uid,
                                       const std::string& volume, const std::string& container,
                                       size_t index) {
  if (root_dir.empty()) return FailedPrecondition("subPath needs nodelet's root directory");
  auto path = JoinComponent(root_dir + "/pods", pod_uid);
  if (path.ok()) path = JoinComponent(*path + "/volume-subpaths", volume);
  if (path.ok()) path = JoinComponent(*path, container);
  if (!path.ok()) return path.status();
  return *path + "/" + std::to_string(index);
}

Result<UniqueFd> OpenSubPath(const std::string& volume_path, const std::string& sub_path,
                             const SubPathOptions& options) {
  const std::string what = "subPath \"" + sub_path + "\"";
  std::vector<std::string> parts;
  if (!SplitRelative(sub_path, &parts)) {
    return InvalidArgument(what + " must be a relative path without '..'");
  }
  UniqueFd volume(open(volume_path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!volume.valid()) return ErrnoStatus("volume path " + volume_path, errno);
  return OpenOrCreateBeneath(volume.get(), sub_path, 0755, what, options.while_creating,
                             options.lookup);
}

Result<std::string> StageSubPath(const std::string& volume_path, const std::string& sub_path,
                                 const std::string& staging, const SubPathOptions& options) {
  auto fd = OpenSubPath(volume_path, sub_path, options);
  if (!fd.ok()) return fd.status();
  if (options.before_use) options.before_use(sub_path);
  struct stat st {};
  if (fstat(fd->get(), &st) != 0) return ErrnoStatus("subPath \"" + sub_path + "\": stat", errno);
  const bool dir = S_ISDIR(st.st_mode);
  // The staging path is nodelet's (no container sees ROOT/pods/UID itself).
  if (Status s = EnsureDirectory(staging.substr(0, staging.rfind('/')), 0750); !s.ok()) return s;
  while (umount2(staging.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) == 0) {
  }
  struct stat old {};
  if (lstat(staging.c_str(), &old) == 0 && (S_ISDIR(old.st_mode) != dir || S_ISLNK(old.st_mode))) {
    if ((S_ISDIR(old.st_mode) ? rmdir(staging.c_str()) : unlink(staging.c_str())) != 0) {
      return ErrnoStatus("subPath staging " + staging + ": remove", errno);
    }
  }
  if (dir) {
    if (mkdir(staging.c_str(), 0750) != 0 && errno != EEXIST) {
      return ErrnoStatus("subPath staging " + staging + ": create", errno);
    }
  } else {
    UniqueFd f(open(staging.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0640));
    if (!f.valid()) return ErrnoStatus("subPath staging " + staging + ": create", errno);
  }
  const std::string source = "/proc/self/fd/" + std::to_string(fd->get());
  if (mount(source.c_str(), staging.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    return ErrnoStatus("subPath \"" + sub_path + "\": bind mount on " + staging, errno);
  }
  return staging;
}

Result<std::vector<v1::Mount>> MakeMounts(const pod::Pod& pod, const pod::Container& c,
                                          const std::map<std::string, std::string>& volume_paths,
                                          const std::string& root_dir,
                                          const SubPathOptions& options) {
  std::vector<v1::Mount> mounts;
  for (size_t i = 0; i < c.volume_mounts.size(); ++i) {
    const auto& vm = c.volume_mounts[i];
    auto it = volume_paths.find(vm.name);
    if (it == volume_paths.end() || it->second.empty()) {
      return FailedPrecondition("volume \"" + vm.name + "\" is not set up");
    }
    const pod::Volume* volume = nullptr;
    for (const auto& v : pod.spec.volumes) {
      if (v.name == vm.name) volume = &v;
    }
    std::string host = it->second;
    if (!vm.sub_path.empty()) {
      auto staging = SubPathStagingPath(root_dir, pod.metadata.uid, vm.name, c.name, i);
      if (!staging.ok()) return staging.status();
      auto staged = StageSubPath(host, vm.sub_path, *staging, options);
      if (!staged.ok()) {
        return Status(staged.status().code(),
                      "volume \"" + vm.name + "\": " + staged.status().message());
      }
      host = *staged;
    }
    // Files that nodelet writes are never the container's to change.
    const bool nodelet_written =
        volume != nullptr && (volume->config_map || volume->secret || volume->downward_api);
    v1::Mount m;
    m.set_container_path(vm.mount_path);
    m.set_host_path(host);
    m.set_readonly(vm.read_only || nodelet_written);
    mounts.push_back(std::move(m));
  }
  return mounts;
}

}  // namespace nodelet::podworkerd
