// nodelet-plegd's service hooks: what the process does inside the shared service runtime
// (lib/service). Its domain work arrives with its own issue; today it runs the runtime alone:
// hello, heartbeats, commands, sd_notify.
#pragma once

#include <memory>

#include "lib/service/service_runtime.h"

namespace nodelet::plegd {

class PlegdService : public ServiceHooks {
 public:
  Status Start(ServiceContext& ctx) override;
};

// The ServiceSpec that main.cc runs.
ServiceSpec MakeSpec();

}  // namespace nodelet::plegd
