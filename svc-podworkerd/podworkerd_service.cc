#include "svc-podworkerd/podworkerd_service.h"

namespace nodelet::podworkerd {

Status PodworkerdService::Start(ServiceContext& ctx) {
  (void)ctx;
  return Status::Ok();
}

ServiceSpec MakeSpec() {
  ServiceSpec spec;
  spec.name = "podworkerd";
  spec.id = ipc::ServiceId::Podworkerd;
  spec.description = "nodelet-podworkerd: part of the nodelet node agent";
  spec.make_hooks = [](const CommonOptions&) { return std::make_unique<PodworkerdService>(); };
  return spec;
}

}  // namespace nodelet::podworkerd
