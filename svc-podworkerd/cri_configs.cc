#include "svc-podworkerd/cri_configs.h"

#include <limits.h>
#include <stdlib.h>

#include <filesystem>
#include <sstream>

#include "lib/pod/canonical.h"

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

std::string PodLogDirectory(const std::string& log_dir, const pod::Pod& pod) {
  return log_dir + "/pods/" + pod.metadata.namespace_name + "_" + pod.metadata.name + "_" +
         pod.metadata.uid;
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
  config.set_log_directory(PodLogDirectory(log_dir, pod));
  auto& labels = *config.mutable_labels();
  for (const auto& [k, v] : pod.metadata.labels) labels[k] = v;
  labels[kManagedLabel] = "true";
  labels[kPodNameLabel] = pod.metadata.name;
  labels[kPodNamespaceLabel] = pod.metadata.namespace_name;
  labels[kPodUidLabel] = pod.metadata.uid;
  auto& annotations = *config.mutable_annotations();
  for (const auto& [k, v] : pod.metadata.annotations) annotations[k] = v;
  SetNamespaces(pod, config.mutable_linux()->mutable_security_context()->mutable_namespace_options());
  return config;
}

v1::ContainerConfig MakeContainerConfig(const pod::Pod& pod, const pod::Container& c,
                                        uint32_t restart_count) {
  v1::ContainerConfig config;
  config.mutable_metadata()->set_name(c.name);
  config.mutable_metadata()->set_attempt(restart_count);
  config.mutable_image()->set_image(c.image);
  for (const auto& a : c.command) config.add_command(a);
  for (const auto& a : c.args) config.add_args(a);
  config.set_working_dir(c.working_dir);
  for (const auto& e : c.env) {
    auto* kv = config.add_envs();
    kv->set_key(e.name);
    kv->set_value(e.value);
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
  annotations[kGracePeriodAnnotation] = std::to_string(
      pod.spec.termination_grace_period_seconds.value_or(pod::kDefaultTerminationGracePeriodSeconds));
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

Result<std::string> ResolveSubPath(const std::string& base, const std::string& sub_path) {
  if (sub_path.empty()) return base;
  if (sub_path[0] == '/') return InvalidArgument("subPath " + sub_path + " must be relative");
  std::stringstream parts(sub_path);
  for (std::string part; std::getline(parts, part, '/');) {
    if (part == "..") return InvalidArgument("subPath " + sub_path + " must not contain '..'");
  }
  char real_base[PATH_MAX];
  if (realpath(base.c_str(), real_base) == nullptr) {
    return FailedPrecondition("volume path " + base + " does not exist");
  }
  const std::string root = real_base;
  const std::string want = root + "/" + sub_path;
  auto inside = [&](const std::string& p) { return p == root || p.rfind(root + "/", 0) == 0; };
  // The deepest existing ancestor must resolve inside the volume before anything is created.
  std::filesystem::path probe = want;
  std::error_code ec;
  while (!std::filesystem::exists(probe, ec) && probe.has_parent_path() && probe != root) {
    probe = probe.parent_path();
  }
  char real[PATH_MAX];
  if (realpath(probe.c_str(), real) == nullptr || !inside(real)) {
    return InvalidArgument("subPath " + sub_path + " resolves outside its volume");
  }
  if (!std::filesystem::exists(want, ec)) std::filesystem::create_directories(want, ec);
  if (realpath(want.c_str(), real) == nullptr || !inside(real)) {
    return InvalidArgument("subPath " + sub_path + " resolves outside its volume");
  }
  return std::string(real);
}

Result<std::vector<v1::Mount>> MakeMounts(const pod::Container& c,
                                          const std::map<std::string, std::string>& volume_paths) {
  std::vector<v1::Mount> mounts;
  for (const auto& vm : c.volume_mounts) {
    auto it = volume_paths.find(vm.name);
    if (it == volume_paths.end() || it->second.empty()) {
      return FailedPrecondition("volume \"" + vm.name + "\" is not set up");
    }
    auto host = ResolveSubPath(it->second, vm.sub_path);
    if (!host.ok()) return host.status();
    v1::Mount m;
    m.set_container_path(vm.mount_path);
    m.set_host_path(*host);
    m.set_readonly(vm.read_only);
    mounts.push_back(std::move(m));
  }
  return mounts;
}

}  // namespace nodelet::podworkerd
