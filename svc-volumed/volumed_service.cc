#include "svc-volumed/volumed_service.h"

namespace nodelet::volumed {

Status VolumedService::Start(ServiceContext& ctx) {
  (void)ctx;
  return Status::Ok();
}

ServiceSpec MakeSpec() {
  ServiceSpec spec;
  spec.name = "volumed";
  spec.id = ipc::ServiceId::Volumed;
  spec.description = "nodelet-volumed: part of the nodelet node agent";
  spec.make_hooks = [](const CommonOptions&) { return std::make_unique<VolumedService>(); };
  return spec;
}

}  // namespace nodelet::volumed
