#include "svc-plegd/cri_pleg_runtime.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

namespace nodelet::plegd {
namespace {

ContainerState FromCri(cri::v1::ContainerState s) {
  switch (s) {
    case cri::v1::CONTAINER_CREATED:
      return ContainerState::Created;
    case cri::v1::CONTAINER_RUNNING:
      return ContainerState::Running;
    case cri::v1::CONTAINER_EXITED:
      return ContainerState::Exited;
    default:
      return ContainerState::Unknown;
  }
}

SandboxState FromCri(cri::v1::PodSandboxState s) {
  return s == cri::v1::SANDBOX_READY ? SandboxState::Ready : SandboxState::NotReady;
}

uint64_t ParseHash(const google::protobuf::Map<std::string, std::string>& annotations) {
  auto it = annotations.find(kContainerHashAnnotation);
  if (it == annotations.end()) return 0;
  return std::strtoull(it->second.c_str(), nullptr, 16);
}

}  // namespace

SandboxListing ToSandboxListing(const cri::v1::PodSandbox& sandbox) {
  SandboxListing out;
  out.id = sandbox.id();
  out.pod_uid = sandbox.metadata().uid();
  out.pod_name = sandbox.metadata().name();
  out.pod_namespace = sandbox.metadata().namespace_();
  out.attempt = sandbox.metadata().attempt();
  out.state = FromCri(sandbox.state());
  out.created_at_ns = sandbox.created_at();
  out.labels.insert(sandbox.labels().begin(), sandbox.labels().end());
  // A sandbox without a UID in its metadata (made by hand with crictl, say) still needs a key.
  if (out.pod_uid.empty()) {
    auto it = out.labels.find(kPodUidLabel);
    out.pod_uid = it != out.labels.end() ? it->second : "sandbox-" + out.id;
  }
  return out;
}

ContainerListing ToContainerListing(const cri::v1::Container& container) {
  ContainerListing out;
  out.id = container.id();
  out.sandbox_id = container.pod_sandbox_id();
  out.name = container.metadata().name();
  out.attempt = container.metadata().attempt();
  out.state = FromCri(container.state());
  out.created_at_ns = container.created_at();
  return out;
}

ipc::pleg::SandboxRecordT ToSandboxRecord(const cri::v1::PodSandboxStatus& status) {
  ipc::pleg::SandboxRecordT out;
  out.id = status.id();
  out.state = FromCri(status.state());
  out.attempt = status.metadata().attempt();
  out.created_at_ns = status.created_at();
  out.ip = status.network().ip();
  for (const auto& ip : status.network().additional_ips()) out.additional_ips.push_back(ip.ip());
  out.host_network = status.linux().namespaces().options().network() == cri::v1::NODE;
  return out;
}

ipc::pleg::ContainerRecordT ToContainerRecord(const cri::v1::ContainerStatus& status) {
  ipc::pleg::ContainerRecordT out;
  out.id = status.id();
  out.name = status.metadata().name();
  out.attempt = status.metadata().attempt();
  out.state = FromCri(status.state());
  out.created_at_ns = status.created_at();
  out.started_at_ns = status.started_at();
  out.finished_at_ns = status.finished_at();
  out.exit_code = status.exit_code();
  out.reason = status.reason();
  out.message = status.message();
  out.image = status.image().image();
  out.image_ref = status.image_ref();
  out.spec_hash = ParseHash(status.annotations());
  out.log_path = status.log_path();
  return out;
}

Result<RuntimeListing> CriPlegRuntime::List() {
  Count("ListPodSandbox");
  auto sandboxes = runtime_.ListPodSandbox(cri::v1::PodSandboxFilter());
  if (!sandboxes.ok()) return sandboxes.status();
  Count("ListContainers");
  auto containers = runtime_.ListContainers(cri::v1::ContainerFilter());
  if (!containers.ok()) return containers.status();
  RuntimeListing out;
  out.sandboxes.reserve(sandboxes->size());
  for (const auto& s : *sandboxes) out.sandboxes.push_back(ToSandboxListing(s));
  out.containers.reserve(containers->size());
  std::map<std::string, std::string> sandbox_of;
  for (const auto& c : *containers) {
    out.containers.push_back(ToContainerListing(c));
    sandbox_of[c.id()] = c.pod_sandbox_id();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    sandbox_of_.swap(sandbox_of);
  }
  return out;
}

Result<RuntimeListing> CriPlegRuntime::ListPod(const std::string& uid,
                                               const std::vector<std::string>& known_sandboxes) {
  // The pod's sandboxes as a full relist groups them (by the uid their metadata carries): those
  // labelled with the uid (every sandbox podworkerd makes), and those of the last view that the
  // label did not find (a hand-made one may lack it; a new one without it waits for the full
  // relist). Listing every sandbox instead cost each event's relist the whole node's sandboxes,
  // in containerd and here: at 100 pods starting, plegd took 2.3 s of CPU.
  cri::v1::PodSandboxFilter labelled;
  (*labelled.mutable_label_selector())[kPodUidLabel] = uid;
  Count("ListPodSandbox");
  auto sandboxes = runtime_.ListPodSandbox(labelled);
  if (!sandboxes.ok()) return sandboxes.status();
  for (const auto& id : known_sandboxes) {
    const bool found = std::any_of(sandboxes->begin(), sandboxes->end(),
                                   [&id](const auto& s) { return s.id() == id; });
    if (found) continue;
    cri::v1::PodSandboxFilter by_id;
    by_id.set_id(id);
    Count("ListPodSandbox");
    auto one = runtime_.ListPodSandbox(by_id);
    if (!one.ok()) return one.status();
    for (auto& s : *one) sandboxes->push_back(std::move(s));
  }
  RuntimeListing out;
  for (const auto& s : *sandboxes) {
    SandboxListing listing = ToSandboxListing(s);
    if (listing.pod_uid == uid) out.sandboxes.push_back(std::move(listing));
  }
  std::map<std::string, std::string> sandbox_of;
  for (const auto& sb : out.sandboxes) {
    cri::v1::ContainerFilter cf;
    cf.set_pod_sandbox_id(sb.id);
    Count("ListContainers");
    auto containers = runtime_.ListContainers(cf);
    if (!containers.ok()) return containers.status();
    for (const auto& c : *containers) {
      out.containers.push_back(ToContainerListing(c));
      sandbox_of[c.id()] = c.pod_sandbox_id();
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  sandbox_of_.insert(sandbox_of.begin(), sandbox_of.end());
  return out;
}

Result<PodRef> CriPlegRuntime::PodOf(const std::string& runtime_id) {
  // A container's pod is its sandbox's.
  std::string sandbox_id = runtime_id;
  cri::v1::ContainerFilter cf;
  cf.set_id(runtime_id);
  Count("ListContainers");
  auto containers = runtime_.ListContainers(cf);
  if (!containers.ok()) return containers.status();
  for (const auto& c : *containers) {
    if (c.id() == runtime_id) sandbox_id = c.pod_sandbox_id();
  }
  cri::v1::PodSandboxFilter sf;
  sf.set_id(sandbox_id);
  Count("ListPodSandbox");
  auto sandboxes = runtime_.ListPodSandbox(sf);
  if (!sandboxes.ok()) return sandboxes.status();
  for (const auto& sb : *sandboxes) {
    if (sb.id() != sandbox_id) continue;
    SandboxListing listing = ToSandboxListing(sb);
    if (listing.labels.count(kManagedLabel) == 0) {
      return Status(StatusCode::kFailedPrecondition, "not one of nodelet's pods");
    }
    return PodRef{listing.pod_uid, sb.id()};
  }
  return NotFound("no container or sandbox " + runtime_id);
}

Result<ipc::pleg::SandboxRecordT> CriPlegRuntime::InspectSandbox(const std::string& id) {
  Count("PodSandboxStatus");
  auto r = runtime_.PodSandboxStatus(id, false);
  if (!r.ok()) return r.status();
  return ToSandboxRecord(r->status());
}

Result<ipc::pleg::ContainerRecordT> CriPlegRuntime::InspectContainer(const std::string& id) {
  Count("ContainerStatus");
  auto r = runtime_.ContainerStatus(id, false);
  if (!r.ok()) return r.status();
  ipc::pleg::ContainerRecordT rec = ToContainerRecord(r->status());
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = sandbox_of_.find(id); it != sandbox_of_.end()) rec.sandbox_id = it->second;
  return rec;
}

void CriPlegRuntime::Count(const char* call) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = calls_.find(std::string_view(call));
  if (it == calls_.end()) it = calls_.emplace(call, 0).first;
  ++it->second;
}

std::map<std::string, uint64_t> CriPlegRuntime::CallCounts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {calls_.begin(), calls_.end()};
}

}  // namespace nodelet::plegd
