// The pod an `exec`, `attach` or `port-forward` is for, resolved as `logs` resolves it: NAME
// alone is looked up in every namespace of the node's pods (statusd's list), and a name that is
// in several namespaces is refused, listing them, rather than sent to whichever namespace a
// default picks.
#pragma once

#include <string>
#include <vector>

#include "lib/common/status.h"
#include "lib/status/pod_status.h"

namespace nodelet::ctl {

struct StreamTarget {
  std::string namespace_name, name;
};

// NAMESPACE/NAME as given; NAME: the namespace of the one pod of that name in `pods`, "default"
// when there is none (podworkerd then says it is not found); InvalidArgument naming every
// NAMESPACE/NAME when there are several.
Result<StreamTarget> ResolveStreamTarget(const std::vector<status::PodStatusRecord>& pods,
                                         const std::string& given);

}  // namespace nodelet::ctl
