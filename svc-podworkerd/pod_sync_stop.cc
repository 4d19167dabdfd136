// PodSyncer's stops: a container within its grace period (preStop hook, SIGTERM, SIGKILL), a
// whole pod, and the removal of what is left of it.
#include <algorithm>
#include <set>
#include <vector>

#include "lib/common/fs.h"
#include "lib/common/logging.h"
#include "lib/common/utf8.h"
#include "lib/pod/canonical.h"
#include "lib/pod/qos.h"
#include "lib/pod/security.h"
#include "svc-podworkerd/container_log_manager.h"
#include "svc-podworkerd/cri_configs.h"
#include "svc-podworkerd/lifecycle_hooks.h"
#include "svc-podworkerd/pod_phase.h"
#include "svc-podworkerd/pod_records.h"
#include "svc-podworkerd/pod_sync.h"
#include "svc-podworkerd/pull_secrets.h"
#include "svc-podworkerd/side_by_side.h"
#include "svc-podworkerd/termination_message.h"

namespace nodelet::podworkerd {
namespace {

namespace v1 = cri::v1;

}  // namespace

PodSyncer::StopResult PodSyncer::StopContainerGracefully(
    const std::string& id, const std::string& name,
    const google::protobuf::Map<std::string, std::string>* annotations, int64_t grace,
    const std::function<std::string()>& host) {
  StopResult r;
  std::string hook_text;
  if (annotations != nullptr) {
    auto it = annotations->find(kPreStopAnnotation);
    if (it != annotations->end()) hook_text = it->second;
  } else if (grace > 0) {
    auto st = runtime_.ContainerStatus(id, false);
    if (st.ok() && st->status().state() == v1::CONTAINER_RUNNING) {
      auto it = st->status().annotations().find(kPreStopAnnotation);
      if (it != st->status().annotations().end()) hook_text = it->second;
    }
  }
  if (!hook_text.empty() && grace > 0) {
    std::string why;
    if (auto hook = DecodePreStop(hook_text, &why)) {
      const MonoTime began = clock_.Now();
      pod::Container named;
      named.name = name;
      HookOutcome outcome = RunHook(
          clock_, runtime_, *hook, named, id, host ? host() : "",
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::seconds(grace)));
      if (!outcome.ok) r.hook_error = "PreStopHook failed: " + outcome.message;
      const int64_t spent = std::chrono::duration_cast<std::chrono::seconds>(
                                clock_.Now() - began + std::chrono::milliseconds(999))
                                .count();
      grace = std::max(kMinimumGraceAfterPreStop, grace - spent);
    } else {
      r.hook_error = "PreStopHook not run: " + why;
    }
  }
  r.status = runtime_.StopContainer(id, grace);
  return r;
}

void PodSyncer::StopForSync(const pod::Pod& pod, const std::string& id, const std::string& name,
                            int64_t grace, const std::string& sandbox_id, SyncOutcome& out) {
  StopResult r =
      StopContainerGracefully(id, name, nullptr, grace, [&] { return SandboxHost(sandbox_id); });
  if (!r.hook_error.empty()) {
    out.events.push_back(MakeEvent(pod, "Warning", "FailedPreStopHook", r.hook_error));
  }
  out.changed_runtime = true;
}

Status PodSyncer::KillPod(const std::string& uid, int64_t grace_seconds,
                          std::vector<std::string>* hook_failures) {
  v1::ContainerFilter cf;
  (*cf.mutable_label_selector())[kPodUidLabel] = uid;
  auto containers = runtime_.ListContainers(cf);
  if (!containers.ok()) return containers.status();
  // An httpGet preStop hook without a host calls the pod's IP: asked of the runtime once, and
  // only then.
  std::string host;
  for (const auto& c : *containers) {
    auto it = c.annotations().find(kPreStopAnnotation);
    if (c.state() == v1::CONTAINER_RUNNING && it != c.annotations().end() &&
        it->second.find("\"httpGet\"") != std::string::npos && host.empty()) {
      host = SandboxHost(c.pod_sandbox_id());
    }
  }
  struct ContainerStop {
    std::string id;
    std::string name;
    const google::protobuf::Map<std::string, std::string>* annotations;
    int64_t grace;
  };
  std::vector<ContainerStop> stops;
  const google::protobuf::Map<std::string, std::string> none;
  for (const auto& c : *containers) {
    if (c.state() != v1::CONTAINER_RUNNING && c.state() != v1::CONTAINER_CREATED) continue;
    std::string id = c.id();
    int64_t grace = grace_seconds;
    if (grace < 0) {
      // An orphan: the grace period its pod had, as stamped on the container.
      auto it = c.annotations().find(kGracePeriodAnnotation);
      grace = pod::kDefaultTerminationGracePeriodSeconds;
      if (it != c.annotations().end()) grace = std::strtoll(it->second.c_str(), nullptr, 10);
    }
    // A created container never ran: it has no hook to run.
    const auto* annotations = c.state() == v1::CONTAINER_RUNNING ? &c.annotations() : &none;
    stops.push_back(ContainerStop{std::move(id), c.metadata().name(), annotations, grace});
  }
  // Side by side, so that every container's grace period runs at once, all joined before the
  // sandboxes stop.
  std::vector<StopResult> results(stops.size());
  RunSideBySide(stops.size(), [&](size_t i) {
    const ContainerStop& s = stops[i];
    results[i] =
        StopContainerGracefully(s.id, s.name, s.annotations, s.grace, [&] { return host; });
  });
  Status first = Status::Ok();
  for (const StopResult& r : results) {
    if (!r.hook_error.empty() && hook_failures) hook_failures->push_back(r.hook_error);
    if (!r.status.ok() && r.status.code() != StatusCode::kNotFound && first.ok()) first = r.status;
  }
  v1::PodSandboxFilter sf;
  (*sf.mutable_label_selector())[kPodUidLabel] = uid;
  auto sandboxes = runtime_.ListPodSandbox(sf);
  if (!sandboxes.ok()) return sandboxes.status();
  for (const auto& s : *sandboxes) {
    // Every sandbox, ready or not: one the runtime could not load after a restart is listed as
    // not ready while its shim may still run, and stopping a stopped sandbox is a no-op.
    Status st = runtime_.StopPodSandbox(s.id());
    if (!st.ok() && st.code() != StatusCode::kNotFound && first.ok()) first = st;
  }
  return first;
}

Status PodSyncer::RemovePod(const std::string& uid) {
  v1::PodSandboxFilter sf;
  (*sf.mutable_label_selector())[kPodUidLabel] = uid;
  auto sandboxes = runtime_.ListPodSandbox(sf);
  if (!sandboxes.ok()) return sandboxes.status();
  Status first = Status::Ok();
  for (const auto& s : *sandboxes) {
    Status st = runtime_.RemovePodSandbox(s.id());
    if (!st.ok() && st.code() != StatusCode::kNotFound && first.ok()) first = st;
  }
  // Every sandbox gone: the pod's cgroup goes too (an error leaves it to the next try and to
  // the periodic sweep).
  if (first.ok() && pod_cgroups_.enabled) {
    if (Status s = RemovePodCgroup(pod_cgroups_, uid); !s.ok()) {
      return Status(s.code(), "pod cgroup: " + s.message());
    }
  }
  return first;
}

}  // namespace nodelet::podworkerd
