// What the cri-integration suite's two files (cri_containerd_test.cc,
// containerd_harness_test.cc) both use: the label that marks the tests' sandboxes and
// containers, a host-network sandbox and a busybox container to run in it, and the cgroup
// directories of a container.
#pragma once

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "lib/cri/grpc_cri_client.h"
#include "tests/testing/containerd.h"

namespace nodelet::testing {

namespace v1 = ::runtime::v1;

inline constexpr char kManagedLabel[] = "nodelet.io/test";

inline v1::PodSandboxConfig HostNetworkSandbox(const std::string& name,
                                               const std::string& log_dir) {
  v1::PodSandboxConfig config;
  config.mutable_metadata()->set_name(name);
  config.mutable_metadata()->set_uid("uid-" + name);
  config.mutable_metadata()->set_namespace_("default");
  config.set_log_directory(log_dir);
  (*config.mutable_labels())[kManagedLabel] = name;
  auto* ns = config.mutable_linux()->mutable_security_context()->mutable_namespace_options();
  ns->set_network(v1::NODE);
  ns->set_pid(v1::CONTAINER);
  ns->set_ipc(v1::POD);
  return config;
}

inline v1::ContainerConfig BusyboxContainer(const std::string& name,
                                            std::vector<std::string> command) {
  v1::ContainerConfig config;
  config.mutable_metadata()->set_name(name);
  config.mutable_image()->set_image(kBusyboxImage);
  for (auto& arg : command) config.add_command(arg);
  config.set_log_path(name + ".log");
  (*config.mutable_labels())[kManagedLabel] = name;
  auto* ns = config.mutable_linux()->mutable_security_context()->mutable_namespace_options();
  ns->set_network(v1::NODE);
  ns->set_pid(v1::CONTAINER);
  return config;
}

// cgroup directories named `id`, in any hierarchy, at most three levels down.
inline std::vector<std::string> CgroupsNamed(const std::string& id) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& hierarchy : std::filesystem::directory_iterator("/sys/fs/cgroup", ec)) {
    std::error_code ec2;
    for (auto it = std::filesystem::recursive_directory_iterator(hierarchy.path(), ec2);
         it != std::filesystem::recursive_directory_iterator(); it.increment(ec2)) {
      if (ec2) break;
      if (it.depth() >= 2) it.disable_recursion_pending();
      if (it->path().filename() == id) found.push_back(it->path());
    }
  }
  return found;
}

}  // namespace nodelet::testing
