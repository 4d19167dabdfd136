#include "svc-plegd/plegd_service.h"

namespace nodelet::plegd {

Status PlegdService::Start(ServiceContext& ctx) {
  (void)ctx;
  return Status::Ok();
}

ServiceSpec MakeSpec() {
  ServiceSpec spec;
  spec.name = "plegd";
  spec.id = ipc::ServiceId::Plegd;
  spec.description = "nodelet-plegd: part of the nodelet node agent";
  spec.make_hooks = [](const CommonOptions&) { return std::make_unique<PlegdService>(); };
  return spec;
}

}  // namespace nodelet::plegd
