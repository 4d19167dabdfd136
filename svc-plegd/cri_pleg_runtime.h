// CriPlegRuntime: plegd's PlegRuntime over the CRI RuntimeService (lib/cri): one relist is
// ListPodSandbox + ListContainers (a pod's alone: ListPodSandbox, then ListContainers of each
// of its sandboxes), an inspection is PodSandboxStatus or ContainerStatus. Each
// call carries the client's query deadline, so a hung runtime costs a relist at most that long.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "lib/cri/runtime_service.h"
#include "svc-plegd/pleg_runtime.h"

namespace nodelet::plegd {

// Annotation in which the pod worker records the hash of the container spec it created the
// container from (so a later sync can tell whether the spec changed).
inline constexpr const char* kContainerHashAnnotation = "nodelet.io/container-hash";

class CriPlegRuntime final : public PlegRuntime {
 public:
  // `runtime` must outlive this object unless it is owned through `owned`.
  explicit CriPlegRuntime(cri::RuntimeService& runtime) : runtime_(runtime) {}
  explicit CriPlegRuntime(std::unique_ptr<cri::RuntimeService> owned)
      : owned_(std::move(owned)), runtime_(*owned_) {}

  Result<RuntimeListing> List() override;
  Result<RuntimeListing> ListPod(const std::string& uid,
                                 const std::vector<std::string>& known_sandboxes) override;
  Result<PodRef> PodOf(const std::string& runtime_id) override;
  Result<ipc::pleg::SandboxRecordT> InspectSandbox(const std::string& id) override;
  Result<ipc::pleg::ContainerRecordT> InspectContainer(const std::string& id) override;
  std::map<std::string, uint64_t> CallCounts() const override;

 private:
  void Count(const char* call);

  std::unique_ptr<cri::RuntimeService> owned_;
  cri::RuntimeService& runtime_;
  // ContainerStatus does not name the sandbox; the last listing does.
  mutable std::mutex mu_;
  std::map<std::string, std::string> sandbox_of_;
  std::map<std::string, uint64_t, std::less<>> calls_;  // CRI call -> calls made
};

// Converters, public for unit tests.
SandboxListing ToSandboxListing(const cri::v1::PodSandbox& sandbox);
ContainerListing ToContainerListing(const cri::v1::Container& container);
ipc::pleg::SandboxRecordT ToSandboxRecord(const cri::v1::PodSandboxStatus& status);
ipc::pleg::ContainerRecordT ToContainerRecord(const cri::v1::ContainerStatus& status);

}  // namespace nodelet::plegd
