#include "svc-podworkerd/pod_sync.h"

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
#include "svc-podworkerd/pull_secrets.h"
#include "svc-podworkerd/termination_message.h"

namespace nodelet::podworkerd {
namespace {

namespace v1 = cri::v1;
using ipc::pleg::ContainerRecordT;
using ipc::pleg::ContainerState;
using ipc::pleg::PodRecordT;
using ipc::pleg::SandboxRecordT;

// The newest sandbox of the pod (by creation time), or nullptr.
const SandboxRecordT* NewestSandbox(const PodRecordT* rec) {
  if (rec == nullptr) return nullptr;
  const SandboxRecordT* best = nullptr;
  for (const auto& s : rec->sandboxes) {
    if (best == nullptr || s->created_at_ns > best->created_at_ns) best = s.get();
  }
  return best;
}

// The last instance of each container name (highest attempt, then newest), optionally only
// those in `sandbox_id`.
std::map<std::string, const ContainerRecordT*> Latest(const PodRecordT* rec,
                                                      const std::string* sandbox_id = nullptr) {
  std::map<std::string, const ContainerRecordT*> out;
  if (rec == nullptr) return out;
  for (const auto& c : rec->containers) {
    if (sandbox_id != nullptr && c->sandbox_id != *sandbox_id) continue;
    auto& slot = out[c->name];
    if (slot == nullptr || c->attempt > slot->attempt ||
        (c->attempt == slot->attempt && c->created_at_ns > slot->created_at_ns)) {
      slot = c.get();
    }
  }
  return out;
}

// A start that never ran the container because the caller went away mid-call: containerd
// marks a StartContainer whose request context was cancelled (podworkerd SIGKILLed while the
// call was in flight closes its connection) as exited with reason StartError, exit code 128 and
// the context error as the message, and the process never started (no start time). That is not
// a run of the container, so it is started again whatever the restartPolicy, and without
// crash-loop backoff: a fault in podworkerd must not fail a restartPolicy Never pod.
// `cut`: containers whose StartContainer the runtime cut off (PodSyncer::cut_starts_).
bool InterruptedStart(const ContainerRecordT& c, const std::set<std::string>& cut) {
  if (c.state != ContainerState::Exited || c.started_at_ns != 0) return false;
  return (c.reason == "StartError" && c.message.find("context canceled") != std::string::npos) ||
         cut.count(c.id) > 0;
}

bool ShouldRestart(const pod::Pod& pod, const ContainerRecordT& exited,
                   const std::set<std::string>& cut) {
  if (InterruptedStart(exited, cut)) return true;
  if (pod.spec.restart_policy == pod::kRestartPolicyNever) return false;
  if (pod.spec.restart_policy == pod::kRestartPolicyOnFailure) return exited.exit_code != 0;
  return true;
}

int64_t GraceSeconds(const pod::Pod& pod) {
  return pod.spec.termination_grace_period_seconds.value_or(
      pod::kDefaultTerminationGracePeriodSeconds);
}

status::RestartPolicy ToStatusPolicy(const std::string& p) {
  if (p == pod::kRestartPolicyNever) return status::RestartPolicy::kNever;
  if (p == pod::kRestartPolicyOnFailure) return status::RestartPolicy::kOnFailure;
  return status::RestartPolicy::kAlways;
}

status::ContainerState FromRecord(const ContainerRecordT& c, const std::set<std::string>& cut) {
  status::ContainerState s;
  if (InterruptedStart(c, cut)) {
    // Not a run: the container is being created again (not a terminated state that would make
    // a restartPolicy Never pod Failed for a moment).
    s.waiting = status::ContainerStateWaiting{"ContainerCreating", ""};
    return s;
  }
  switch (c.state) {
    case ContainerState::Running:
      s.running = status::ContainerStateRunning{c.started_at_ns / 1000000000};
      break;
    case ContainerState::Exited: {
      status::ContainerStateTerminated t;
      t.exit_code = c.exit_code;
      t.reason = !c.reason.empty() ? c.reason : (c.exit_code == 0 ? "Completed" : "Error");
      t.message = c.message;
      t.started_at_unix_s = c.started_at_ns / 1000000000;
      t.finished_at_unix_s = c.finished_at_ns / 1000000000;
      t.container_id = "containerd://" + c.id;
      s.terminated = t;
      break;
    }
    default:
      s.waiting = status::ContainerStateWaiting{"ContainerCreating", ""};
  }
  return s;
}

}  // namespace

status::PodEvent PodSyncer::MakeEvent(const pod::Pod& pod, const std::string& type,
                                      const std::string& reason, const std::string& message) const {
  status::PodEvent e;
  e.pod_uid = pod.metadata.uid;
  e.namespace_ = pod.metadata.namespace_name;
  e.pod_name = pod.metadata.name;
  e.type = type;
  e.reason = reason;
  // Hook and probe output, a runtime's error: text the pod controls, kept to 4 KiB of valid UTF-8.
  e.message = ValidUtf8(CutUtf8(message, kMaxEventMessageBytes));
  e.source = "podworkerd";
  e.last_unix_s = e.first_unix_s = clock_.WallSeconds();
  return e;
}

PodSyncer::PodSyncer(cri::RuntimeService& runtime, cri::ImageService& images, const Clock& clock,
                     CrashLoopPolicy backoff, std::string log_dir, VolumeLookup volumes,
                     ProbeManager* probes)
    : runtime_(runtime),
      images_(images),
      clock_(clock),
      log_dir_(std::move(log_dir)),
      volumes_(std::move(volumes)),
      probes_(probes),
      backoff_(clock, backoff),
      puller_(std::make_unique<ImagePuller>(images, clock)) {}

namespace {

// The record of the pod the calling worker thread is syncing (SyncPodOnce), for the status sent
// while a pull runs.
thread_local const PodRecordT* syncing_record = nullptr;

}  // namespace

Status PodSyncer::EnsureImage(const pod::Pod& pod, const pod::Container& c, WaitingMap& waiting,
                              SyncOutcome& out) {
  PodPullCredentials pull_secrets;
  if (!pod.spec.image_pull_secrets.empty()) {
    static const pod::ConfigObjectMap kNone;
    auto objects = ConfigObjects();
    pull_secrets = PullCredentialsFor(pod, objects ? objects->secrets : kNone, c.image);
    if (!pull_secrets.error.ok()) {
      // As a pull that failed: the kubelet's keyring is made before PullImage and its error is
      // the pull's.
      const std::string message = pull_secrets.error.message();
      waiting[c.name] = {"ErrImagePull", message};
      out.events.push_back(MakeEvent(pod, "Warning", "Failed",
                                     "Failed to pull image \"" + c.image + "\": " + message));
      out.events.push_back(MakeEvent(pod, "Warning", "Failed", "Error: ErrImagePull"));
      return pull_secrets.error;
    }
  }
  PullOptions pull;
  pull.pod_credentials = std::move(pull_secrets.credentials);
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
      if (progress_status_) progress_status_(pod, BuildStatus(pod, syncing_record, false));
    };
  }
  EnsureImageResult r = puller_->EnsureImage(c.image, c.image_pull_policy, pull);
  for (const auto& e : r.events) out.events.push_back(MakeEvent(pod, e.type, e.reason, e.message));
  if (r.retry_at) out.retry_at = out.retry_at ? std::min(*out.retry_at, *r.retry_at) : *r.retry_at;
  if (!r.status.ok()) waiting[c.name] = {r.reason, r.message};
  return r.status;
}

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

void PodSyncer::set_root_dir(std::string dir) {
  root_dir_ = std::move(dir);
  node_ = pod::ReadNodeAllocatable(root_dir_);
  if (root_dir_.empty()) return;
  const std::string ledger = root_dir_ + "/podworkerd/cut-starts";
  if (Status s = cut_starts_.Open(ledger); !s.ok()) {
    GetLogger("podworkerd")
        ->warn("Cut starts are noted in memory only, not in '{}': {}", ledger, s.message());
  }
}

void PodSyncer::SetConfigObjects(std::shared_ptr<const EnvSources> objects) {
  std::lock_guard<std::mutex> lock(env_mu_);
  env_sources_ = std::move(objects);
}

std::shared_ptr<const EnvSources> PodSyncer::ConfigObjects() const {
  std::lock_guard<std::mutex> lock(env_mu_);
  return env_sources_;
}

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

Result<std::string> PodSyncer::CreateSandbox(const pod::Pod& pod, const PodRecordT* rec,
                                             SandboxDecision& decision, int64_t grace,
                                             SyncOutcome& out) {
  // plegd's record may be older or less complete than the runtime (a relist that ran while the
  // runtime was restarting, a pod inspected by a plegd that just started). The runtime's own
  // listing of this pod's sandboxes is checked first, before anything is killed: a ready
  // sandbox that the record does not show as ready means the record is stale, so nothing is
  // done and the sync waits for plegd to report it; sandboxes the record missed count for the
  // attempt, so the new sandbox's name cannot collide with one containerd still holds.
  v1::PodSandboxFilter filter;
  (*filter.mutable_label_selector())[kPodUidLabel] = pod.metadata.uid;
  auto listed = runtime_.ListPodSandbox(filter);
  if (!listed.ok()) {
    out.error = "create sandbox: list the pod's sandboxes: " + listed.status().message();
    return listed.status();
  }
  std::set<std::string> known_ready;
  for (const auto& s : SandboxViews(rec)) {
    if (s.ready) known_ready.insert(s.id);
  }
  for (const auto& s : *listed) {
    if (s.state() == v1::SANDBOX_READY && known_ready.count(s.id()) == 0) {
      out.changed_runtime = true;  // the next sync waits for a relist newer than this one
      out.error = "the runtime lists sandbox " + s.id().substr(0, 12) +
                  " of the pod as ready, which plegd has not reported yet; waiting for it";
      return FailedPrecondition(out.error);
    }
    decision.attempt = std::max(decision.attempt, s.metadata().attempt() + 1);
  }
  if (!decision.reason.empty()) {
    // The kubelet's KillPod before a new sandbox: every container, then the sandboxes.
    out.events.push_back(MakeEvent(
        pod, "Normal", "SandboxChanged",
        "Pod sandbox changed, it will be killed and re-created (" + decision.reason + ")"));
    std::vector<std::future<StopResult>> stops;
    for (const auto& c : rec->containers) {
      if (c->state != ContainerState::Running && c->state != ContainerState::Created) continue;
      std::string id = c->id, name = c->name, sandbox = c->sandbox_id;
      stops.push_back(std::async(std::launch::async, [this, id, name, sandbox, grace] {
        return StopContainerGracefully(id, name, nullptr, grace,
                                       [&] { return SandboxHost(sandbox); });
      }));
    }
    for (auto& f : stops) {
      StopResult r = f.get();
      if (!r.hook_error.empty()) {
        out.events.push_back(MakeEvent(pod, "Warning", "FailedPreStopHook", r.hook_error));
      }
    }
    out.changed_runtime = true;
  }
  // Every old sandbox is stopped: the ready ones being replaced, and the not-ready ones too (one
  // the runtime could not load after a restart is listed as not ready while its shim may still
  // run; stopping a stopped sandbox does nothing).
  if (auto dir = PodLogDirectory(log_dir_, pod); !dir.ok()) {
    out.error = "pod log directory: " + dir.status().message();
    return InvalidArgument(out.error);
  }
  // The hostname and DNS (the kubelet's generatePodSandboxConfig): an error fails the creation
  // before anything is stopped; the DNS events are recorded with the sandbox's creation.
  std::vector<DnsEvent> dns_events;
  auto network = MakeSandboxNetwork(pod, dns_, &dns_events);
  if (!network.ok()) {
    out.error = "sandbox config: " + network.status().message();
    out.events.push_back(MakeEvent(pod, "Warning", "FailedCreatePodSandBox",
                                   "Failed to create pod sandbox: " + network.status().message()));
    return InvalidArgument(out.error);
  }
  for (const auto& e : dns_events)
    out.events.push_back(MakeEvent(pod, e.type, e.reason, e.message));
  for (const auto& s : *listed) (void)runtime_.StopPodSandbox(s.id());
  // The pod's cgroup, before its sandbox (pod_cgroups.h), as the kubelet's EnsureExists.
  if (pod_cgroups_.enabled) {
    auto name = PodCgroupName(pod_cgroups_, pod);
    Status made = name.ok() ? EnsurePodCgroup(pod_cgroups_, *name, PodLimits(pod)) : name.status();
    if (!made.ok()) {
      out.error = "pod cgroup: " + made.message();
      out.events.push_back(MakeEvent(pod, "Warning", "FailedCreatePodSandBox",
                                     "Failed to create the pod's cgroup: " + made.message()));
      return made;
    }
  }
  out.changed_runtime = true;
  auto created = runtime_.RunPodSandbox(SandboxConfig(pod, decision.attempt, &*network),
                                        pod.spec.runtime_class_name);
  if (!created.ok()) {
    // The name is still held by a sandbox the listing did not show (the runtime answered before
    // it had loaded every sandbox): step over the holder's attempt and try once more.
    const std::string holder = SandboxNameHolder(created.status().message());
    if (!holder.empty()) {
      auto held = runtime_.PodSandboxStatus(holder, false);
      if (held.ok() && held->status().state() == v1::SANDBOX_READY) {
        out.error = "sandbox " + holder.substr(0, 12) +
                    " holds the pod's sandbox name and is ready; waiting for plegd to report it";
        return FailedPrecondition(out.error);
      }
      if (held.ok()) {
        (void)runtime_.StopPodSandbox(holder);
        decision.attempt = std::max(decision.attempt, held->status().metadata().attempt() + 1);
        created = runtime_.RunPodSandbox(SandboxConfig(pod, decision.attempt, &*network),
                                         pod.spec.runtime_class_name);
      }
    }
  }
  if (!created.ok()) {
    out.error = "create sandbox: " + created.status().message();
    out.events.push_back(MakeEvent(pod, "Warning", "FailedCreatePodSandBox",
                                   "Failed to create pod sandbox: " + created.status().message()));
    return created.status();
  }
  return *created;
}

constexpr char kDeadlineMessage[] = "Pod was active on the node longer than the specified deadline";

void PodSyncer::SeedStartTime(const std::string& uid, int64_t unix_s) {
  if (unix_s <= 0) return;
  std::lock_guard<std::mutex> lock(deadline_mu_);
  auto [it, added] = start_times_.emplace(uid, unix_s);
  if (!added) it->second = std::min(it->second, unix_s);
}

int64_t PodSyncer::StartTime(const pod::Pod& pod, const PodRecordT* rec) {
  int64_t start = clock_.WallSeconds();
  if (rec != nullptr) {
    for (const auto& sb : rec->sandboxes) {
      const int64_t created = sb->created_at_ns / 1000000000;
      if (created > 0) start = std::min(start, created);
    }
  }
  std::lock_guard<std::mutex> lock(deadline_mu_);
  auto [it, added] = start_times_.emplace(pod.metadata.uid, start);
  if (!added) it->second = std::min(it->second, start);
  return it->second;
}

bool PodSyncer::DeadlineExceeded(const std::string& uid) const {
  std::lock_guard<std::mutex> lock(deadline_mu_);
  return deadline_exceeded_.count(uid) != 0;
}

SyncOutcome PodSyncer::FailDeadlineExceeded(const pod::Pod& pod, const PodRecordT* rec,
                                            int64_t grace) {
  SyncOutcome out;
  const bool first = [&] {
    std::lock_guard<std::mutex> lock(deadline_mu_);
    return deadline_exceeded_.insert(pod.metadata.uid).second;
  }();
  if (first) {
    out.events.push_back(MakeEvent(pod, "Warning", "DeadlineExceeded", kDeadlineMessage));
  }
  // The kubelet kills the pod (its containers with their grace period, then the sandbox); the
  // containers are kept, as for any finished pod.
  if (Status s = KillPod(pod.metadata.uid, grace); !s.ok()) {
    out.error = "stop the pod past its deadline: " + s.message();
  }
  out.changed_runtime = true;
  out.pod_finished = out.error.empty();
  out.status = MakeStatus(pod, rec, {}, true);
  return out;
}

void PodSyncer::MarkEvicted(const std::string& uid, const std::string& message,
                            int64_t grace_seconds) {
  std::lock_guard<std::mutex> lock(deadline_mu_);
  evicted_.emplace(
      uid, Eviction{message, std::max<int64_t>(0, grace_seconds), clock_.WallSeconds(), false});
}

std::optional<PodSyncer::Eviction> PodSyncer::EvictionOf(const std::string& uid) const {
  std::lock_guard<std::mutex> lock(deadline_mu_);
  auto it = evicted_.find(uid);
  if (it == evicted_.end()) return std::nullopt;
  return it->second;
}

SyncOutcome PodSyncer::FailEvicted(const pod::Pod& pod, const PodRecordT* rec) {
  SyncOutcome out;
  Eviction e;
  {
    std::lock_guard<std::mutex> lock(deadline_mu_);
    auto& held = evicted_.at(pod.metadata.uid);
    e = held;
    held.reported = true;
  }
  if (!e.reported) out.events.push_back(MakeEvent(pod, "Warning", "Evicted", e.message));
  // As the kubelet's killPodFunc: every container with the eviction's grace period (0 for a
  // hard threshold), then the sandbox; the containers are kept, as for any finished pod.
  if (Status s = KillPod(pod.metadata.uid, e.grace_seconds); !s.ok()) {
    out.error = "stop the evicted pod: " + s.message();
  }
  out.changed_runtime = true;
  out.pod_finished = out.error.empty();
  out.status = MakeStatus(pod, rec, {}, true);
  return out;
}

SyncOutcome PodSyncer::SyncPod(const pod::Pod& pod, const PodRecordT* rec) {
  if (EvictionOf(pod.metadata.uid)) return FailEvicted(pod, rec);
  if (!pod.spec.active_deadline_seconds) return SyncPodOnce(pod, rec);
  const int64_t deadline = StartTime(pod, rec) + *pod.spec.active_deadline_seconds;
  const int64_t now = clock_.WallSeconds();
  if (now >= deadline || DeadlineExceeded(pod.metadata.uid)) {
    return FailDeadlineExceeded(pod, rec, GraceSeconds(pod));
  }
  SyncOutcome out = SyncPodOnce(pod, rec);
  // Synced again when the deadline comes, not at the next periodic resync.
  const MonoTime at = clock_.Now() + std::chrono::seconds(deadline - now);
  if (!out.retry_at || at < *out.retry_at) out.retry_at = at;
  return out;
}

SyncOutcome PodSyncer::SyncPodOnce(const pod::Pod& pod, const PodRecordT* rec) {
  struct Syncing {
    explicit Syncing(const PodRecordT* r) { syncing_record = r; }
    ~Syncing() { syncing_record = nullptr; }
  } syncing(rec);
  SyncOutcome out;
  const std::set<std::string> cut = CutStarts();
  WaitingMap waiting;
  const int64_t grace = GraceSeconds(pod);
  const auto latest_any = Latest(rec);
  // The kubelet's SyncPod: while the runtime's network is not ready only host-network pods are
  // synced; the others wait (what runs keeps running), retried with the sync's back-off.
  if (!pod.spec.host_network) {
    if (std::string net = NetworkError(); !net.empty()) {
      const std::string why = "network is not ready: " + net;
      for (const auto* list : {&pod.spec.init_containers, &pod.spec.containers}) {
        for (const auto& c : *list) {
          if (latest_any.count(c.name) == 0) waiting[c.name] = {"ContainerCreating", why};
        }
      }
      out.error = why;
      out.events.push_back(MakeEvent(pod, "Warning", "NetworkNotReady", why));
      out.status = MakeStatus(pod, rec, waiting, false);
      out.status.reason = "NetworkNotReady";
      out.status.message = why;
      return out;
    }
  }
  // Volumes first (the kubelet's WaitForAttachAndMount, but never blocking: volumed tells us
  // when they are ready, and the sync returns at once meanwhile).
  std::map<std::string, std::string> volume_paths;
  if (!pod.spec.volumes.empty()) {
    auto v = volumes_ ? volumes_(pod.metadata.uid)
                      : Result<PodVolumeSet>(Unavailable("no volume manager"));
    if (!v.ok() || !v->ready) {
      std::string why = !v.ok() ? "volumed: " + v.status().message() : v->reason;
      for (const auto& c : pod.spec.init_containers)
        waiting[c.name] = {"ContainerCreating", "volumes not ready: " + why};
      for (const auto& c : pod.spec.containers)
        waiting[c.name] = {"ContainerCreating", "volumes not ready: " + why};
      out.error = "volumes not ready: " + why;
      out.events.push_back(
          MakeEvent(pod, "Warning", "FailedMount", "MountVolume.SetUp failed: " + why));
      out.retry_at = clock_.Now() + std::chrono::seconds(1);
      out.status = MakeStatus(pod, rec, waiting, false);
      return out;
    }
    volume_paths = std::move(v->paths);
  }
  auto next_attempt = [&](const std::string& name) -> uint32_t {
    auto it = latest_any.find(name);
    return it == latest_any.end() ? 0 : it->second->attempt + 1;
  };

  std::string sandbox_id;
  std::map<std::string, const ContainerRecordT*> latest;
  const std::vector<SandboxView> known = SandboxViews(rec);
  SandboxDecision decision = DecideSandbox(pod, known);
  if (!decision.create) {
    sandbox_id = decision.keep_id;
    latest = Latest(rec, &sandbox_id);
  } else {
    // No usable sandbox. A pod that already ran and has nothing left to restart stays done
    // (the kubelet does not re-create the sandbox of a finished pod).
    if (!known.empty()) {
      bool anything_to_run = false;
      for (const auto& c : pod.spec.containers) {
        auto it = latest_any.find(c.name);
        if (it == latest_any.end() || it->second->state != ContainerState::Exited ||
            ShouldRestart(pod, *it->second, cut)) {
          anything_to_run = true;
        }
      }
      if (!anything_to_run) {
        out.pod_finished = true;
        out.status = MakeStatus(pod, rec, waiting, true);
        return out;
      }
    }
    auto created = CreateSandbox(pod, rec, decision, grace, out);
    if (!created.ok()) {
      for (const auto& c : pod.spec.init_containers) waiting[c.name] = {"ContainerCreating", ""};
      for (const auto& c : pod.spec.containers) waiting[c.name] = {"ContainerCreating", ""};
      out.status = MakeStatus(pod, rec, waiting, false);
      // Waiting for plegd to report a sandbox the runtime already has is not a failure.
      if (created.status().code() != StatusCode::kFailedPrecondition) {
        out.status.reason = "CreatePodSandboxError";
        out.status.message = "Failed to create pod sandbox: " + created.status().message();
      }
      return out;
    }
    sandbox_id = *created;
  }
  const uint32_t sandbox_attempt = decision.attempt;
  // The sandbox's config as containers are created with it: containerd gives them its hostname
  // as $HOSTNAME, so the hostname is the one the sandbox got (the DNS config is the sandbox's
  // own business: the node's resolver config is not read again on every sync for it).
  SandboxNetwork named;
  if (auto hostname = SandboxHostname(pod, dns_.cluster_domain); hostname.ok()) {
    named.hostname = *hostname;
  }
  const v1::PodSandboxConfig sandbox_config = SandboxConfig(pod, sandbox_attempt, &named);

  // A container CRI reports as CONTAINER_UNKNOWN: containerd could not load its task after a
  // restart (a shim that did not answer in time), and it stays unknown until containerd restarts
  // again, so waiting would be forever. The kubelet's rule: we do not know whether it runs, so
  // kill it (whatever is left of it) and start a new instance, whatever the restartPolicy.
  auto replace_unknown = [&](const pod::Container& c, const ContainerRecordT& s) {
    out.events.push_back(MakeEvent(
        pod, "Normal", "Killing",
        "Container " + c.name + " is in \"unknown\" state, try killing it before restart"));
    StopForSync(pod, s.id, c.name, grace, sandbox_id, out);
    return StartContainer(pod, c, sandbox_id, sandbox_config, nullptr, next_attempt(c.name),
                          volume_paths, waiting, out);
  };
  // A container created but never started (its StartContainer lost to a runtime restart or to
  // podworkerd's own death): start it now.
  auto start_created = [&](const pod::Container& c, const ContainerRecordT& s) {
    out.changed_runtime = true;
    if (Status st = runtime_.StartContainer(s.id); !st.ok()) {
      NoteCutStart(s.id, st);
      waiting[c.name] = {"RunContainerError", st.message()};
      out.error = "start container " + c.name + ": " + st.message();
      return false;
    }
    out.events.push_back(MakeEvent(pod, "Normal", "Started", "Started container " + c.name));
    return true;
  };

  // Init containers, one at a time, in order.
  bool inits_done = true;
  for (const auto& ic : pod.spec.init_containers) {
    auto it = latest.find(ic.name);
    const ContainerRecordT* s = it == latest.end() ? nullptr : it->second;
    if (s == nullptr) {
      StartContainer(pod, ic, sandbox_id, sandbox_config,
                     latest_any.count(ic.name) ? latest_any.at(ic.name) : nullptr,
                     next_attempt(ic.name), volume_paths, waiting, out);
      inits_done = false;
      break;
    }
    if (s->state == ContainerState::Exited && s->exit_code == 0) continue;
    inits_done = false;
    if (s->state == ContainerState::Created) {
      start_created(ic, *s);
      break;
    }
    if (s->state == ContainerState::Unknown) {
      replace_unknown(ic, *s);
      break;
    }
    if (s->state != ContainerState::Exited) break;  // still running: wait for it
    // Failed init container.
    if (!ShouldRestart(pod, *s, cut)) {
      out.pod_finished = true;
      break;
    }
    if (!InBackoff(pod, ic, *s, waiting, out)) {
      StartContainer(pod, ic, sandbox_id, sandbox_config, s, next_attempt(ic.name), volume_paths,
                     waiting, out);
    }
    break;
  }
  if (!inits_done) {
    for (const auto& c : pod.spec.containers) {
      if (!waiting.count(c.name)) waiting[c.name] = {"PodInitializing", ""};
    }
    out.status = MakeStatus(pod, rec, waiting, out.pod_finished);
    return out;
  }

  // App containers.
  bool any_running = false, any_to_restart = false;
  for (const auto& c : pod.spec.containers) {
    auto it = latest.find(c.name);
    const ContainerRecordT* s = it == latest.end() ? nullptr : it->second;
    const uint64_t want_hash = pod::ContainerSpecHash(c);
    if (s == nullptr) {
      if (StartContainer(pod, c, sandbox_id, sandbox_config,
                         latest_any.count(c.name) ? latest_any.at(c.name) : nullptr,
                         next_attempt(c.name), volume_paths, waiting, out)) {
        any_running = true;
      } else {
        any_to_restart = true;
      }
      continue;
    }
    switch (s->state) {
      case ContainerState::Running:
        if (auto failed = probes_ != nullptr ? probes_->FailedToRestart(s->id) : std::nullopt) {
          // The kubelet's rule: a failed liveness probe, or a startup probe that never passed,
          // kills the container; the exit is then handled like any other (restartPolicy,
          // crash-loop backoff).
          const std::string kind = *failed == ProbeKind::kStartup ? "startup" : "liveness";
          out.events.push_back(MakeEvent(pod, "Warning", "Unhealthy",
                                         std::string(ProbeKindName(*failed)) + " probe failed"));
          out.events.push_back(
              MakeEvent(pod, "Normal", "Killing",
                        "Container " + c.name + " failed " + kind + " probe, will be restarted"));
          StopForSync(pod, s->id, c.name, grace, sandbox_id, out);
          out.error = "container " + c.name + " failed its " + kind + " probe and was killed";
          any_running = true;
          break;
        }
        if (s->spec_hash != 0 && s->spec_hash != want_hash) {
          // Its spec changed: restart it (not a crash, so no backoff).
          out.events.push_back(
              MakeEvent(pod, "Normal", "Killing",
                        "Container " + c.name + " definition changed, will be restarted"));
          StopForSync(pod, s->id, c.name, grace, sandbox_id, out);
          StartContainer(pod, c, sandbox_id, sandbox_config, nullptr, next_attempt(c.name),
                         volume_paths, waiting, out);
        }
        any_running = true;
        break;
      case ContainerState::Created:
        start_created(c, *s);
        any_running = true;
        break;
      case ContainerState::Exited: {
        if (s->reason == "OOMKilled") {
          std::lock_guard<std::mutex> lock(backoff_mu_);
          if (oom_reported_.insert(s->id).second) {
            out.events.push_back(
                MakeEvent(pod, "Warning", "OOMKilling",
                          "Container " + c.name + " was killed by the OOM killer"));
          }
        }
        bool spec_changed = s->spec_hash != 0 && s->spec_hash != want_hash;
        if (!ShouldRestart(pod, *s, cut) && !spec_changed) break;
        any_to_restart = true;
        if (!spec_changed && InBackoff(pod, c, *s, waiting, out)) break;
        if (StartContainer(pod, c, sandbox_id, sandbox_config, s, next_attempt(c.name),
                           volume_paths, waiting, out)) {
          any_running = true;
        }
        break;
      }
      default:
        if (replace_unknown(c, *s)) {
          any_running = true;
        } else {
          any_to_restart = true;
        }
        break;
    }
  }
  out.pod_finished = !any_running && !any_to_restart && !pod.spec.containers.empty();
  out.status = MakeStatus(pod, rec, waiting, out.pod_finished);

  // Garbage collection of dead containers: keep the newest max_dead_per_container_ exited
  // instances of each container (the newest gives lastState and restartCount), remove older ones.
  if (rec != nullptr) {
    std::map<std::string, std::vector<const ContainerRecordT*>> dead;
    for (const auto& ctr : rec->containers) {
      if (ctr->state == ContainerState::Exited) dead[ctr->name].push_back(ctr.get());
    }
    for (auto& [name, list] : dead) {
      std::sort(list.begin(), list.end(),
                [](const auto* a, const auto* b) { return a->attempt > b->attempt; });
      for (size_t i = static_cast<size_t>(std::max(1, max_dead_per_container_)); i < list.size();
           ++i) {
        if (runtime_.RemoveContainer(list[i]->id).ok()) {
          ++out.containers_removed;
          if (!log_dir_.empty()) (void)RemoveContainerLogSymlinks(log_dir_, list[i]->id);
        }
      }
    }
  }
  return out;
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
  std::vector<std::future<StopResult>> stops;
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
    std::string name = c.metadata().name();
    stops.push_back(std::async(std::launch::async, [this, id, name, annotations, grace, &host] {
      return StopContainerGracefully(id, name, annotations, grace, [&] { return host; });
    }));
  }
  Status first = Status::Ok();
  for (auto& f : stops) {
    StopResult r = f.get();
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

v1::PodSandboxConfig PodSyncer::SandboxConfig(const pod::Pod& pod, uint32_t attempt,
                                              const SandboxNetwork* network) const {
  v1::PodSandboxConfig config = MakeSandboxConfig(pod, attempt, log_dir_, network);
  if (pod_cgroups_.enabled) {
    if (auto name = PodCgroupName(pod_cgroups_, pod); name.ok()) {
      config.mutable_linux()->set_cgroup_parent(*name);
    }
  }
  return config;
}

std::shared_ptr<cri::CallCancel> PodSyncer::PullCancel(const std::string& uid) {
  std::lock_guard<std::mutex> lock(pull_cancel_mu_);
  auto& slot = pull_cancels_[uid];
  if (!slot) slot = std::make_shared<cri::CallCancel>();
  return slot;
}

void PodSyncer::CancelPulls(const std::string& uid) { PullCancel(uid)->Cancel(); }

void PodSyncer::ForgetPod(const std::string& uid) {
  {
    std::lock_guard<std::mutex> lock(pull_cancel_mu_);
    pull_cancels_.erase(uid);
  }
  {
    std::lock_guard<std::mutex> lock(backoff_mu_);
    backoff_.ForgetPod(uid);
  }
  std::lock_guard<std::mutex> lock(deadline_mu_);
  start_times_.erase(uid);
  deadline_exceeded_.erase(uid);
  evicted_.erase(uid);
}

status::PodStatus PodSyncer::BuildStatus(const pod::Pod& pod, const PodRecordT* record,
                                         bool terminal) const {
  return MakeStatus(pod, record, {}, terminal);
}

void PodSyncer::AddTerminationMessage(const pod::Pod& pod, const pod::Container& c,
                                      const ContainerRecordT& record,
                                      status::ContainerState& state) const {
  if (!state.terminated || root_dir_.empty()) return;
  std::string message;
  if (!c.termination_message_path.empty()) {
    auto file = TerminationMessagePath(root_dir_, pod.metadata.uid, c.name, record.attempt);
    if (file.ok()) message = ReadTerminationMessage(*file);
  }
  if (message.empty() && record.exit_code != 0 &&
      c.termination_message_policy == pod::kTerminationMessageFallbackToLogsOnError) {
    if (auto dir = PodLogDirectory(log_dir_, pod); dir.ok()) {
      message =
          ReadLastLogLines(*dir + "/" + c.name + "/" + std::to_string(record.attempt) + ".log");
    }
  }
  if (message.empty()) return;
  std::string& m = state.terminated->message;
  m += (m.empty() ? "" : ": ") + message;
  // The pod's messages together stay within 12 KiB, each keeping its start as the kubelet's
  // status manager does, cut on a character boundary.
  const size_t cap =
      TerminationMessageCap(pod.spec.containers.size() + pod.spec.init_containers.size());
  m = std::string(CutUtf8(ValidUtf8(m), cap));
}

status::PodStatus PodSyncer::MakeStatus(const pod::Pod& pod, const PodRecordT* rec,
                                        const WaitingMap& waiting, bool terminal) const {
  status::PodStatus st;
  const std::set<std::string> cut = CutStarts();
  const auto latest = Latest(rec);
  // Previous instance of each name (for lastState).
  auto previous = [&](const std::string& name, const ContainerRecordT* current) {
    const ContainerRecordT* best = nullptr;
    if (rec == nullptr || current == nullptr) return best;
    for (const auto& c : rec->containers) {
      if (c->name != name || c.get() == current || c->attempt >= current->attempt) continue;
      if (best == nullptr || c->attempt > best->attempt) best = c.get();
    }
    return best;
  };
  auto one = [&](const pod::Container& c) {
    status::ContainerStatus cs;
    cs.name = c.name;
    cs.image = c.image;
    auto it = latest.find(c.name);
    const ContainerRecordT* cur = it == latest.end() ? nullptr : it->second;
    if (cur != nullptr) {
      cs.container_id = "containerd://" + cur->id;
      cs.image_id = cur->image_ref;
      cs.restart_count = static_cast<int32_t>(cur->attempt);
      cs.state = FromRecord(*cur, cut);
      AddTerminationMessage(pod, c, *cur, cs.state);
      cs.ready = cur->state == ContainerState::Running &&
                 (probes_ == nullptr || probes_->Ready(cur->id, c.readiness_probe.has_value(),
                                                       c.startup_probe.has_value()));
      cs.started = cur->state == ContainerState::Running;
      if (const auto* prev = previous(c.name, cur)) {
        cs.last_state = FromRecord(*prev, cut);
        AddTerminationMessage(pod, c, *prev, cs.last_state);
      }
    }
    auto w = waiting.find(c.name);
    if (w != waiting.end()) {
      // Waiting to (re)start: the exited instance moves to lastState.
      if (cs.state.terminated) cs.last_state = cs.state;
      cs.state = status::ContainerState{};
      cs.state.waiting = status::ContainerStateWaiting{w->second.reason, w->second.message};
      cs.ready = false;
      cs.started = false;
    } else if (cs.state.empty()) {
      cs.state.waiting = status::ContainerStateWaiting{"ContainerCreating", ""};
    }
    return cs;
  };
  for (const auto& c : pod.spec.init_containers) st.init_container_statuses.push_back(one(c));
  for (const auto& c : pod.spec.containers) st.container_statuses.push_back(one(c));

  PhaseInput in;
  in.restart_policy = ToStatusPolicy(pod.spec.restart_policy);
  for (const auto& c : pod.spec.init_containers) in.init_containers.push_back(c.name);
  for (const auto& c : pod.spec.containers) in.containers.push_back(c.name);
  in.init_statuses = &st.init_container_statuses;
  in.statuses = &st.container_statuses;
  in.pod_is_terminal = terminal;
  st.phase = ComputePhase(in);
  const bool past_deadline = DeadlineExceeded(pod.metadata.uid);
  const auto evicted = EvictionOf(pod.metadata.uid);
  if (past_deadline || evicted) st.phase = status::PodPhase::kFailed;
  const int64_t now_s = clock_.WallSeconds();
  st.conditions = ComputeConditions(in, st.phase, {}, now_s);
  if (past_deadline) {
    st.reason = "DeadlineExceeded";
    st.message = kDeadlineMessage;
  }
  if (evicted) {
    // The kubelet's eviction: Failed, reason Evicted, and the DisruptionTarget condition.
    st.reason = "Evicted";
    st.message = evicted->message;
    status::PodCondition disruption;
    disruption.type = "DisruptionTarget";
    disruption.status = status::ConditionStatus::kTrue;
    disruption.last_transition_time_unix_s = evicted->at_unix_s;
    disruption.reason = "TerminationByKubelet";
    disruption.message = evicted->message;
    st.conditions.push_back(std::move(disruption));
  }
  const SandboxRecordT* sandbox = NewestSandbox(rec);
  if (sandbox != nullptr) {
    st.start_time_unix_s = sandbox->created_at_ns / 1000000000;
    st.pod_ip = sandbox->ip;
    if (!st.pod_ip.empty()) st.pod_ips = {st.pod_ip};
    for (const auto& ip : sandbox->additional_ips) {
      if (!st.pod_ip.empty() && ip != st.pod_ip) st.pod_ips.push_back(ip);
    }
  }
  // As the kubelet: a host-network pod's IP is the node's; a pod-network pod has none until
  // its sandbox has one.
  if (pod.spec.host_network) {
    st.pod_ip = node_ip_;
    st.pod_ips = {st.pod_ip};
  }
  st.host_ip = node_ip_;
  st.host_ips = {st.host_ip};
  st.qos_class = std::string(pod::QosClassName(pod::PodQos(pod)));
  return st;
}

}  // namespace nodelet::podworkerd
