#include "svc-podworkerd/cri_configs.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "lib/common/fs.h"
#include "lib/common/safe_path.h"
#include "lib/pod/canonical.h"
#include "lib/pod/security.h"
#include "svc-podworkerd/lifecycle_hooks.h"
#include "svc-podworkerd/termination_message.h"

namespace nodelet::podworkerd {
namespace {

namespace v1 = cri::v1;

// The kubelet's namespaces: the node's with hostNetwork/hostPID/hostIPC; one PID namespace
// for the pod with shareProcessNamespace, else one per container.
void SetNamespaces(const pod::Pod& pod, v1::NamespaceOption* ns) {
  ns->set_network(pod.spec.host_network ? v1::NODE : v1::POD);
  ns->set_pid(pod.spec.host_pid                                  ? v1::NODE
              : pod.spec.share_process_namespace.value_or(false) ? v1::POD
                                                                 : v1::CONTAINER);
  ns->set_ipc(pod.spec.host_ipc ? v1::NODE : v1::POD);
}

void SetProfile(const pod::SecurityProfile& p, const std::string& localhost_dir,
                v1::SecurityProfile* out) {
  if (p.type == pod::kProfileRuntimeDefault) {
    out->set_profile_type(v1::SecurityProfile::RuntimeDefault);
  } else if (p.type == pod::kProfileLocalhost) {
    out->set_profile_type(v1::SecurityProfile::Localhost);
    out->set_localhost_ref(localhost_dir.empty() ? p.localhost_profile
                                                 : localhost_dir + "/" + p.localhost_profile);
  } else {
    out->set_profile_type(v1::SecurityProfile::Unconfined);
  }
}

// fsGroup and supplementalGroups, the groups every container of the pod gets.
std::vector<int64_t> PodGroups(const pod::Pod& pod) {
  std::vector<int64_t> groups;
  if (const auto& sc = pod.spec.security_context) {
    if (sc->fs_group) groups.push_back(*sc->fs_group);
    for (int64_t g : sc->supplemental_groups) {
      if (std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(g);
    }
  }
  return groups;
}

bool AnyPrivileged(const pod::Pod& pod) {
  for (const auto* list : {&pod.spec.init_containers, &pod.spec.containers}) {
    for (const auto& c : *list) {
      if (c.security_context && c.security_context->privileged.value_or(false)) return true;
    }
  }
  return false;
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

Result<std::string> SandboxHostname(const pod::Pod& pod, const std::string& cluster_domain) {
  if (pod.spec.host_network) return std::string();
  auto name = GeneratePodHostnameAndDomain(pod, cluster_domain);
  if (!name.ok()) return name.status();
  return KernelHostname(*name, pod.spec.set_hostname_as_fqdn);
}

Result<SandboxNetwork> MakeSandboxNetwork(const pod::Pod& pod, const NodeDnsSettings& settings,
                                          std::vector<DnsEvent>* events) {
  auto host = ReadResolvConf(settings.resolv_conf);
  if (!host.ok()) return host.status();
  PodDns dns = ComposePodDns(pod, settings, *host);
  SandboxNetwork out;
  out.dns = std::move(dns.config);
  auto hostname = SandboxHostname(pod, settings.cluster_domain);
  if (!hostname.ok()) return hostname.status();
  out.hostname = *hostname;
  if (events != nullptr) events->insert(events->end(), dns.events.begin(), dns.events.end());
  return out;
}

v1::PodSandboxConfig MakeSandboxConfig(const pod::Pod& pod, uint32_t attempt,
                                       const std::string& log_dir, const SandboxNetwork* network) {
  v1::PodSandboxConfig config;
  auto* md = config.mutable_metadata();
  md->set_name(pod.metadata.name);
  md->set_namespace_(pod.metadata.namespace_name);
  md->set_uid(pod.metadata.uid);
  md->set_attempt(attempt);
  if (network != nullptr) {
    if (!network->hostname.empty()) config.set_hostname(network->hostname);
    if (!network->dns.servers.empty() || !network->dns.searches.empty() ||
        !network->dns.options.empty()) {
      auto* dns = config.mutable_dns_config();
      for (const auto& s : network->dns.servers) dns->add_servers(s);
      for (const auto& s : network->dns.searches) dns->add_searches(s);
      for (const auto& s : network->dns.options) dns->add_options(s);
    }
  }
  // The node's ports forwarded to the pod's (the runtime's CNI portmap); with the node's
  // network the container listens on the node's port itself.
  if (!pod.spec.host_network) {
    for (const auto& c : pod.spec.containers) {
      for (const auto& p : c.ports) {
        if (p.host_port <= 0) continue;
        auto* m = config.add_port_mappings();
        m->set_protocol(p.protocol == pod::kProtocolUdp    ? v1::UDP
                        : p.protocol == pod::kProtocolSctp ? v1::SCTP
                                                           : v1::TCP);
        m->set_container_port(p.container_port);
        m->set_host_port(p.host_port);
        m->set_host_ip(p.host_ip);
      }
    }
  }
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
  auto* linux = config.mutable_linux();
  auto* sc = linux->mutable_security_context();
  SetNamespaces(pod, sc->mutable_namespace_options());
  if (const auto& psc = pod.spec.security_context) {
    if (psc->run_as_user) sc->mutable_run_as_user()->set_value(*psc->run_as_user);
    if (psc->run_as_group) sc->mutable_run_as_group()->set_value(*psc->run_as_group);
    for (const auto& y : psc->sysctls)
      (*linux->mutable_sysctls())[pod::SysctlDotted(y.name)] = y.value;
  }
  for (int64_t g : PodGroups(pod)) sc->add_supplemental_groups(g);
  sc->set_privileged(AnyPrivileged(pod));
  // The pause container: the pod's own profile, or none (a Localhost profile is the
  // containers': pause runs under the runtime's default then).
  pod::SecurityProfile seccomp =
      pod.spec.security_context && pod.spec.security_context->seccomp_profile
          ? *pod.spec.security_context->seccomp_profile
          : pod::SecurityProfile{pod::kProfileUnconfined, ""};
  if (seccomp.type == pod::kProfileLocalhost) seccomp = {pod::kProfileRuntimeDefault, ""};
  SetProfile(seccomp, "", sc->mutable_seccomp());
  return config;
}

void SetContainerSecurity(const pod::Pod& pod, const pod::Container& c,
                          const std::string& seccomp_dir, const ImageUser* image,
                          v1::LinuxContainerSecurityContext* sc) {
  SetNamespaces(pod, sc->mutable_namespace_options());
  const pod::SecurityContext none;
  const pod::SecurityContext& s = c.security_context ? *c.security_context : none;
  if (auto uid = pod::EffectiveRunAsUser(pod, c)) {
    sc->mutable_run_as_user()->set_value(*uid);
  } else if (image != nullptr && image->uid) {
    sc->mutable_run_as_user()->set_value(*image->uid);
  } else if (image != nullptr && !image->username.empty()) {
    sc->set_run_as_username(image->username);
  }
  if (auto gid = pod::EffectiveRunAsGroup(pod, c)) sc->mutable_run_as_group()->set_value(*gid);
  for (int64_t g : PodGroups(pod)) sc->add_supplemental_groups(g);
  if (s.privileged) sc->set_privileged(*s.privileged);
  if (s.read_only_root_filesystem) sc->set_readonly_rootfs(*s.read_only_root_filesystem);
  // As the kubelet: no_new_privs only when allowPrivilegeEscalation is false.
  if (s.allow_privilege_escalation) sc->set_no_new_privs(!*s.allow_privilege_escalation);
  if (s.capabilities) {
    auto* caps = sc->mutable_capabilities();
    for (const auto& name : s.capabilities->add) {
      if (auto n = pod::CanonicalCapability(name)) caps->add_add_capabilities(*n);
    }
    for (const auto& name : s.capabilities->drop) {
      if (auto n = pod::CanonicalCapability(name)) caps->add_drop_capabilities(*n);
    }
  }
  SetProfile(pod::EffectiveSeccomp(pod, c), seccomp_dir, sc->mutable_seccomp());
  if (auto apparmor = pod::EffectiveAppArmor(pod, c)) {
    SetProfile(*apparmor, "", sc->mutable_apparmor());
  }
}

Status VerifyRunAsNonRoot(const pod::Pod& pod, const pod::Container& c, const ImageUser& image) {
  if (!pod::EffectiveRunAsNonRoot(pod, c)) return Status::Ok();
  const std::string where = " (pod: \"" + pod.metadata.name + "_" + pod.metadata.namespace_name +
                            "(" + pod.metadata.uid + ")\", container: " + c.name + ")";
  if (auto uid = pod::EffectiveRunAsUser(pod, c)) {
    if (*uid == 0)
      return FailedPrecondition("container's runAsUser breaks non-root policy" + where);
    return Status::Ok();
  }
  if (image.uid) {
    if (*image.uid == 0) {
      return FailedPrecondition("container has runAsNonRoot and image will run as root" + where);
    }
    return Status::Ok();
  }
  if (!image.username.empty()) {
    return FailedPrecondition("container has runAsNonRoot and image has non-numeric user (" +
                              image.username + "), cannot verify user is non-root" + where);
  }
  // No user in the image: it runs as root.
  return FailedPrecondition("container has runAsNonRoot and image will run as root" + where);
}

v1::ContainerConfig MakeContainerConfig(const pod::Pod& pod, const pod::Container& c,
                                        uint32_t restart_count, const ContainerEnvironment* env,
                                        const std::string& seccomp_dir, const ImageUser* image) {
  v1::ContainerConfig config;
  config.mutable_metadata()->set_name(c.name);
  config.mutable_metadata()->set_attempt(restart_count);
  config.mutable_image()->set_image(c.image);
  for (const auto& a : env ? env->command : c.command) config.add_command(a);
  for (const auto& a : env ? env->args : c.args) config.add_args(a);
  config.set_working_dir(c.working_dir);
  config.set_stdin(c.stdin);
  config.set_stdin_once(c.stdin_once);
  config.set_tty(c.tty);
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
  SetContainerSecurity(pod, c, seccomp_dir, image, linux->mutable_security_context());
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

Result<v1::Mount> EtcHostsFileMount(const std::string& root_dir, const std::string& pod_uid,
                                    const std::string& content) {
  auto path = WriteEtcHostsFile(root_dir, pod_uid, content);
  if (!path.ok()) return path.status();
  v1::Mount m;
  m.set_container_path("/etc/hosts");
  m.set_host_path(*path);
  m.set_readonly(false);
  return m;
}

Result<v1::Mount> TerminationMessageMount(const std::string& root_dir, const pod::Pod& pod,
                                          const pod::Container& container, uint32_t attempt) {
  auto file = TerminationMessagePath(root_dir, pod.metadata.uid, container.name, attempt);
  if (!file.ok()) return file.status();
  if (Status s = CreateTerminationMessageFile(*file); !s.ok()) return s;
  v1::Mount m;
  m.set_container_path(container.termination_message_path);
  m.set_host_path(*file);
  m.set_readonly(false);
  return m;
}

}  // namespace nodelet::podworkerd
