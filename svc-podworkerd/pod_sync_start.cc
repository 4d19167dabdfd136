// PodSyncer's container starts: the image (pull policy, credentials, cancellation), crash-loop
// back-off, create and start with the environment, mounts, hooks and the pod's network facts.
#include <algorithm>
#include <future>
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
#include "svc-podworkerd/termination_message.h"

namespace nodelet::podworkerd {
namespace {

namespace v1 = cri::v1;

}  // namespace

Status PodSyncer::EnsureImage(const pod::Pod& pod, const pod::Container& c, WaitingMap& waiting,
                              SyncOutcome& out) {
  PodPullCredentials pull_secrets;
  if (!pod.spec.image_pull_secrets.empty()) {
    static const pod::ConfigObjectMap kNone;
    auto objects = ConfigObjects();
    pull_secrets = PullCredentialsFor(pod, objects ? objects->secrets : kNone, c.image);
  }
  PullOptions pull;
  pull.pod_credentials = std::move(pull_secrets.credentials);
  // Unreadable credentials fail only a pull (the kubelet makes its keyring in PullImage).
  pull.credentials_error = pull_secrets.error;
  // Held for the pull: ForgetPod may drop the pod's entry meanwhile.
  std::shared_ptr<cri::CallCancel> cancel = PullCancel(pod.metadata.uid);
  pull.cancel = cancel.get();
  if (progress_events_ || progress_status_ || !pull_secrets.missing.empty()) {
    pull.on_pulling = [&](const ImageEvent& e) {
      std::vector<status::PodEvent> events;
      if (!pull_secrets.missing.empty()) {
        events.push_back(MakeEvent(pod, "Warning", "FailedToRetrieveImagePullSecret",
                                   MissingPullSecretsMessage(pull_secrets.missing)));
      }
      events.push_back(MakeEvent(pod, e.type, e.reason, e.message));
      if (progress_events_) {
        progress_events_(std::move(events));
      } else {
        for (auto& ev : events) out.events.push_back(std::move(ev));
      }
      // What the pod is while the pull runs: the record's containers as they are, the ones not
      // made yet (this one among them) waiting in ContainerCreating.
      if (progress_status_) progress_status_(pod, BuildStatus(pod, syncing_record_, false));
    };
  }
  EnsureImageResult r = puller_->EnsureImage(c.image, c.image_pull_policy, pull);
  for (const auto& e : r.events) out.events.push_back(MakeEvent(pod, e.type, e.reason, e.message));
  if (r.retry_at) out.retry_at = out.retry_at ? std::min(*out.retry_at, *r.retry_at) : *r.retry_at;
  if (!r.status.ok()) waiting[c.name] = {r.reason, r.message};
  return r.status;
}

std::shared_ptr<cri::CallCancel> PodSyncer::PullCancel(const std::string& uid) {
  std::lock_guard<std::mutex> lock(pull_cancel_mu_);
  auto& slot = pull_cancels_[uid];
  if (!slot) slot = std::make_shared<cri::CallCancel>();
  return slot;
}

void PodSyncer::CancelPulls(const std::string& uid) { PullCancel(uid)->Cancel(); }

bool PodSyncer::InBackoff(const pod::Pod& pod, const pod::Container& c,
                          const ContainerRecordT& exited, WaitingMap& waiting, SyncOutcome& out) {
  if (InterruptedStart(exited, CutStarts())) return false;  // not a crash: no backoff
  const std::string key =
      CrashLoopBackoff::Key(pod.metadata.uid, c.name, pod::ContainerSpecHash(c));
  // The exit, on the monotonic clock.
  MonoTime finished = clock_.Now() - std::chrono::nanoseconds(std::max<int64_t>(
                                         0, clock_.WallNanos() - exited.finished_at_ns));
  Duration remaining{};
  std::lock_guard<std::mutex> lock(backoff_mu_);
  if (!backoff_.InBackoff(key, finished, &remaining)) return false;
  auto secs = std::chrono::duration_cast<std::chrono::seconds>(remaining).count() + 1;
  waiting[c.name] = {"CrashLoopBackOff",
                     "back-off " + std::to_string(secs) +
                         "s restarting failed container=" + c.name + " pod=" + pod.metadata.name +
                         "_" + pod.metadata.namespace_name + "(" + pod.metadata.uid + ")"};
  MonoTime at = clock_.Now() + remaining;
  out.retry_at = out.retry_at ? std::min(*out.retry_at, at) : at;
  out.events.push_back(MakeEvent(pod, "Warning", "BackOff",
                                 "Back-off restarting failed container " + c.name + " in pod " +
                                     pod.metadata.name + "_" + pod.metadata.namespace_name + "(" +
                                     pod.metadata.uid + ")"));
  return true;
}

bool PodSyncer::StartContainer(const pod::Pod& pod, const pod::Container& c,
                               const std::string& sandbox_id,
                               const v1::PodSandboxConfig& sandbox_config,
                               const ContainerRecordT* previous, uint32_t next_attempt,
                               const std::map<std::string, std::string>& volume_paths,
                               WaitingMap& waiting, SyncOutcome& out) {
  // Names are unique across a pod's init and regular containers (validation).
  const auto& init = pod.spec.init_containers;
  const bool is_init = std::any_of(init.begin(), init.end(),
                                   [&](const pod::Container& i) { return i.name == c.name; });
  const std::string type = is_init ? "init_container" : "container";
  ++out.container_starts[type];
  if (CreateAndStart(pod, c, sandbox_id, sandbox_config, previous, next_attempt, volume_paths,
                     waiting, out)) {
    return true;
  }
  auto w = waiting.find(c.name);
  ++out.container_start_errors[{type, w == waiting.end() ? "Unknown" : w->second.reason}];
  return false;
}

bool PodSyncer::CreateAndStart(const pod::Pod& pod, const pod::Container& c,
                               const std::string& sandbox_id,
                               const v1::PodSandboxConfig& sandbox_config,
                               const ContainerRecordT* previous, uint32_t next_attempt,
                               const std::map<std::string, std::string>& volume_paths,
                               WaitingMap& waiting, SyncOutcome& out) {
  if (Status s = EnsureImage(pod, c, waiting, out); !s.ok()) {
    out.error = "image for container " + c.name + ": " + s.message();
    return false;
  }
  // The sandbox's IPs, asked of the runtime once and only when something reads them (the
  // environment, /etc/hosts, an httpGet postStart hook); none on the node's network.
  std::optional<Result<std::vector<std::string>>> sandbox_ips;
  auto ips = [&]() -> const Result<std::vector<std::string>>& {
    if (!sandbox_ips) {
      sandbox_ips = pod.spec.host_network ? std::vector<std::string>() : SandboxIps(sandbox_id);
    }
    return *sandbox_ips;
  };
  // Where an httpGet hook goes: the pod's IP, 127.0.0.1 on the node's network or when the
  // runtime gives none (docs/network.md).
  auto host = [&] {
    return !ips().ok() || ips()->empty() ? std::string("127.0.0.1") : ips()->front();
  };
  EnvSources sources;
  if (auto shared = ConfigObjects()) sources = *shared;
  sources.node = node_;
  sources.runtime.host_ip = node_ip_;  // what the pod's status reports as hostIP
  for (const auto& e : c.env) {
    if (e.value_from && e.value_from->field_ref &&
        e.value_from->field_ref->field_path.rfind("status.podIP", 0) == 0) {
      // status.podIP: a host-network pod's is the node's.
      sources.runtime.pod_ip = pod.spec.host_network ? node_ip_ : host();
    }
  }
  auto env = MakeContainerEnvironment(pod, c, sources);
  if (!env.ok()) {
    waiting[c.name] = {"CreateContainerConfigError", env.status().message()};
    out.error = "container " + c.name + ": " + env.status().message();
    out.events.push_back(MakeEvent(pod, "Warning", "Failed", "Error: " + env.status().message()));
    return false;
  }
  for (const auto& w : env->warnings) {
    out.events.push_back(MakeEvent(pod, "Warning", "InvalidEnvironmentVariableNames", w));
  }
  // The image's user, asked only when it matters: runAsNonRoot is checked against it, and a
  // runAsGroup needs a user to go with it (the runtime refuses a group alone).
  std::optional<ImageUser> image_user;
  if (pod::EffectiveRunAsNonRoot(pod, c) ||
      (pod::EffectiveRunAsGroup(pod, c) && !pod::EffectiveRunAsUser(pod, c))) {
    v1::ImageSpec spec;
    spec.set_image(c.image);
    auto st = images_.ImageStatus(spec, false);
    if (!st.ok()) {
      waiting[c.name] = {"CreateContainerConfigError", st.status().message()};
      out.error = "image status for container " + c.name + ": " + st.status().message();
      return false;
    }
    image_user.emplace();
    if (st->image().has_uid()) {
      image_user->uid = st->image().uid().value();
    } else {
      image_user->username = st->image().username();
    }
    if (Status s = VerifyRunAsNonRoot(pod, c, *image_user); !s.ok()) {
      waiting[c.name] = {"CreateContainerConfigError", s.message()};
      out.error = "container " + c.name + ": " + s.message();
      out.events.push_back(MakeEvent(pod, "Warning", "Failed", "Error: " + s.message()));
      return false;
    }
  }
  v1::ContainerConfig config = MakeContainerConfig(
      pod, c, next_attempt, &*env, root_dir_.empty() ? std::string() : root_dir_ + "/seccomp",
      image_user ? &*image_user : nullptr);
  // The kubelet's OOM score adjustment by QoS (lib/pod/qos.h), against the node's memory.
  config.mutable_linux()->mutable_resources()->set_oom_score_adj(
      pod::ContainerOomScoreAdj(pod, c, node_.memory_bytes));
  auto mounts = MakeMounts(pod, c, volume_paths, root_dir_);
  if (!mounts.ok()) {
    waiting[c.name] = {"CreateContainerConfigError", mounts.status().message()};
    out.error = "container " + c.name + ": " + mounts.status().message();
    return false;
  }
  for (auto& m : *mounts) *config.add_mounts() = std::move(m);
  auto hosts = EtcHostsMount(pod, c, ips);
  if (!hosts.ok()) {
    const std::string why = "/etc/hosts: " + hosts.status().message();
    waiting[c.name] = {"CreateContainerConfigError", why};
    out.error = "container " + c.name + ": " + why;
    out.events.push_back(MakeEvent(pod, "Warning", "Failed", "Error: " + why));
    return false;
  }
  if (*hosts) *config.add_mounts() = std::move(**hosts);
  if (!root_dir_.empty() && !c.termination_message_path.empty()) {
    auto mount = TerminationMessageMount(root_dir_, pod, c, next_attempt);
    if (!mount.ok()) {
      waiting[c.name] = {"CreateContainerConfigError", mount.status().message()};
      out.error = "container " + c.name + ": " + mount.status().message();
      return false;
    }
    *config.add_mounts() = std::move(*mount);
  }
  auto id = runtime_.CreateContainer(sandbox_id, config, sandbox_config);
  out.changed_runtime = true;
  if (!id.ok()) {
    waiting[c.name] = {"CreateContainerError", id.status().message()};
    out.error = "create container " + c.name + ": " + id.status().message();
    out.events.push_back(MakeEvent(pod, "Warning", "Failed", "Error: " + id.status().message()));
    return false;
  }
  out.events.push_back(MakeEvent(pod, "Normal", "Created", "Created container " + c.name));
  // The /var/log/containers-style link for log shippers (container_log_manager.h); a failure
  // only costs the link, as the kubelet's.
  if (!log_dir_.empty()) {
    auto dir = PodLogDirectory(log_dir_, pod);
    Status linked = dir.ok() ? CreateContainerLogSymlink(log_dir_, pod.metadata.name,
                                                         pod.metadata.namespace_name, c.name, *id,
                                                         *dir + "/" + config.log_path())
                             : dir.status();
    if (!linked.ok()) {
      GetLogger("podworkerd")
          ->warn("Failed to create the log symlink of container {} of pod {}: {}", c.name,
                 pod.metadata.name, linked.message());
    }
  }
  if (previous != nullptr && previous->state == ContainerState::Exited &&
      !InterruptedStart(*previous, CutStarts())) {
    const std::string key =
        CrashLoopBackoff::Key(pod.metadata.uid, c.name, pod::ContainerSpecHash(c));
    auto ran = std::chrono::nanoseconds(
        std::max<int64_t>(0, previous->finished_at_ns - previous->started_at_ns));
    std::lock_guard<std::mutex> lock(backoff_mu_);
    backoff_.RecordRestart(key, std::chrono::duration_cast<Duration>(ran));
  }
  if (Status s = runtime_.StartContainer(*id); !s.ok()) {
    NoteCutStart(*id, s);
    waiting[c.name] = {"RunContainerError", s.message()};
    out.error = "start container " + c.name + ": " + s.message();
    out.events.push_back(MakeEvent(pod, "Warning", "Failed", "Error: " + s.message()));
    return false;
  }
  out.events.push_back(MakeEvent(pod, "Normal", "Started", "Started container " + c.name));
  if (c.lifecycle && c.lifecycle->post_start) {
    HookOutcome hook = RunHook(clock_, runtime_, *c.lifecycle->post_start, c, *id, host(),
                               std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::seconds(kPostStartTimeout)));
    if (!hook.ok) {
      // The kubelet kills the container (its preStop hook included); its exit is then handled
      // as any other, by the restartPolicy and the crash-loop backoff.
      out.events.push_back(MakeEvent(pod, "Warning", "FailedPostStartHook", hook.message));
      out.events.push_back(MakeEvent(pod, "Normal", "Killing",
                                     "FailedPostStartHook: container " + c.name +
                                         " will be killed and restarted as its restartPolicy "
                                         "says"));
      StopForSync(pod, *id, c.name, GraceSeconds(pod), sandbox_id, out);
      out.error = "container " + c.name + ": postStart hook failed: " + hook.message;
    }
  }
  return true;
}

void PodSyncer::NoteCutStart(const std::string& id, const Status& failure) {
  const StatusCode code = failure.code();
  if (code != StatusCode::kUnavailable && code != StatusCode::kAlreadyExists &&
      code != StatusCode::kDeadlineExceeded && code != StatusCode::kCancelled) {
    return;
  }
  if (Status s = cut_starts_.Note(id); !s.ok()) {
    GetLogger("podworkerd")
        ->warn("The cut start of container {} is noted in memory only: {}", id, s.message());
  }
}

std::set<std::string> PodSyncer::CutStarts() const { return cut_starts_.Ids(); }

Result<std::vector<std::string>> PodSyncer::SandboxIps(const std::string& sandbox_id) {
  std::vector<std::string> ips;
  auto st = runtime_.PodSandboxStatus(sandbox_id, false);
  if (!st.ok()) return st.status();
  const auto& net = st->status().network();
  if (!net.ip().empty()) ips.push_back(net.ip());
  for (const auto& extra : net.additional_ips()) {
    if (!extra.ip().empty()) ips.push_back(extra.ip());
  }
  return ips;
}

std::string PodSyncer::SandboxHost(const std::string& sandbox_id) {
  auto ips = SandboxIps(sandbox_id);
  return !ips.ok() || ips->empty() ? "127.0.0.1" : ips->front();
}

std::string PodSyncer::NetworkError() {
  std::lock_guard<std::mutex> lock(network_mu_);
  const MonoTime now = clock_.Now();
  if (network_checked_ && now - *network_checked_ < std::chrono::seconds(1)) {
    return network_error_;
  }
  auto st = runtime_.RuntimeStatus(false);
  network_checked_ = now;
  network_error_ = st.ok() ? cri::NetworkError(*st) : "";
  return network_error_;
}

Result<std::optional<v1::Mount>> PodSyncer::EtcHostsMount(
    const pod::Pod& pod, const pod::Container& c,
    const std::function<const Result<std::vector<std::string>>&()>& sandbox_ips) {
  if (root_dir_.empty() || !ShouldMountHostsFile(c)) return std::optional<v1::Mount>();
  std::string content;
  if (pod.spec.host_network) {
    auto node_hosts = ReadFileBounded(node_hosts_file_, 10 << 20);
    if (!node_hosts.ok()) return node_hosts.status();
    content = HostNetworkHostsFileContent(*node_hosts, pod.spec.host_aliases);
  } else {
    const Result<std::vector<std::string>>& ips = sandbox_ips();
    if (!ips.ok()) return ips.status();
    if (ips->empty()) return std::optional<v1::Mount>();
    auto name = GeneratePodHostnameAndDomain(pod, dns_.cluster_domain);
    if (!name.ok()) return name.status();
    content = ManagedHostsFileContent(*ips, *name, pod.spec.host_aliases);
  }
  auto m = EtcHostsFileMount(root_dir_, pod.metadata.uid, content);
  if (!m.ok()) return m.status();
  return std::optional<v1::Mount>(std::move(*m));
}

}  // namespace nodelet::podworkerd
