#include "ctl/stream_target.h"

#include "lib/logs/cri_log.h"

namespace nodelet::ctl {

Result<StreamTarget> ResolveStreamTarget(const std::vector<status::PodStatusRecord>& pods,
                                         const std::string& given) {
  if (auto slash = given.find('/'); slash != std::string::npos) {
    return StreamTarget{given.substr(0, slash), given.substr(slash + 1)};
  }
  auto found = logs::FindPod(pods, "", given);
  if (found.ok()) return StreamTarget{(*found)->pod.namespace_, (*found)->pod.name};
  if (found.status().code() == StatusCode::kNotFound) return StreamTarget{"default", given};
  return found.status();
}

}  // namespace nodelet::ctl
