// Streaming sessions for `nodeletctl exec`, `attach` and `port-forward` (docs/operate.md): the
// pod and container are found in plegd's view of the runtime (the kubelet resolves them in its
// runtime cache too), then the runtime is asked for the session (CRI Exec, Attach, PortForward).
// The session itself runs between nodeletctl and the runtime's streaming server: podworkerd only
// hands out its URL, so a podworkerd restart never ends a session.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lib/common/status.h"
#include "lib/cri/runtime_service.h"
#include "pleg_generated.h"
#include "podwork_generated.h"

namespace nodelet::podworkerd {

// What a StreamRequest asks, decoded.
struct StreamAsk {
  ipc::podwork::StreamKind kind = ipc::podwork::StreamKind::Exec;
  std::string namespace_name;
  std::string pod_name;
  std::string container;  // empty: the pod's only container
  std::vector<std::string> cmd;
  bool stdin = false, stdout = true, stderr = true, tty = false;
  std::vector<int32_t> ports;
};

StreamAsk DecodeStreamAsk(const ipc::podwork::StreamRequest& request);

// Where the session goes: the container (Exec, Attach) or the sandbox (PortForward).
struct StreamTarget {
  std::string container;  // the container's name
  std::string container_id;
  std::string sandbox_id;
};

// Finds the target in the runtime view (plegd's records by pod UID). Errors: InvalidArgument (an
// empty command, a bad port, several containers and none named), NotFound (no such pod or
// container), FailedPrecondition (the container is not running; no ready sandbox).
Result<StreamTarget> FindStreamTarget(const std::map<std::string, ipc::pleg::PodRecordT>& pods,
                                      const StreamAsk& ask);

// Asks the runtime for the session's URL.
Result<std::string> OpenStream(cri::RuntimeService& runtime, const StreamAsk& ask,
                               const StreamTarget& target);

}  // namespace nodelet::podworkerd
