#include "svc-statusd/statusd_service.h"

namespace nodelet::statusd {

Status StatusdService::Start(ServiceContext& ctx) {
  (void)ctx;
  return Status::Ok();
}

ServiceSpec MakeSpec() {
  ServiceSpec spec;
  spec.name = "statusd";
  spec.id = ipc::ServiceId::Statusd;
  spec.description = "nodelet-statusd: part of the nodelet node agent";
  spec.make_hooks = [](const CommonOptions&) { return std::make_unique<StatusdService>(); };
  return spec;
}

}  // namespace nodelet::statusd
