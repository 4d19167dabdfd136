// Container lifecycle hooks (the kubelet's handler runner): postStart runs right after the
// container started, preStop right before it is sent SIGTERM, inside its grace period.
//
// A preStop hook must run also when the pod's spec is no longer at hand: a pod deleted while
// podworkerd was down, an orphan, a podworkerd restarted in the middle of a termination. So, as
// the kubelet does, the hook is stamped on the container at creation, as JSON in the annotation
// io.kubernetes.container.preStopHandler (named ports resolved to numbers), and every kill reads
// it from there.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "lib/common/clock.h"
#include "lib/cri/runtime_service.h"
#include "lib/pod/pod.h"

namespace nodelet::podworkerd {

inline constexpr char kPreStopAnnotation[] = "io.kubernetes.container.preStopHandler";
// The grace left for SIGTERM after a preStop hook is at least this (the kubelet's
// minimumGracePeriodInSeconds).
inline constexpr int64_t kMinimumGraceAfterPreStop = 2;
// A postStart hook's deadline (the kubelet has none; every wait here has one).
inline constexpr std::chrono::seconds kPostStartTimeout{120};
// The largest preStop annotation read back (a hook is small; anything larger is not ours).
inline constexpr size_t kMaxPreStopAnnotationBytes = 64 * 1024;

struct HookOutcome {
  bool ok = false;
  std::string message;  // why it failed
};

// Runs one hook against a running container within `timeout`: exec through CRI ExecSync
// (success: exit 0), httpGet to `host` (the pod IP unless the hook names one; 200-399 is a
// success, as for probes), sleep for its seconds (cut at the timeout).
HookOutcome RunHook(const Clock& clock, cri::RuntimeService& runtime,
                    const pod::LifecycleHandler& hook, const pod::Container& container,
                    const std::string& container_id, const std::string& host,
                    std::chrono::milliseconds timeout);

// The container's preStop hook as the annotation's JSON, its named port resolved to the number
// (the container's ports); "" when it has none.
std::string EncodePreStop(const pod::Container& container);
// The hook back from the annotation; nullopt (and `error` set) when it is not one.
std::optional<pod::LifecycleHandler> DecodePreStop(std::string_view json, std::string* error);

}  // namespace nodelet::podworkerd
