// PodSyncer: one pod's sync (SyncPodOnce, the kubelet's SyncPod), events, and what it keeps per
// pod. The other jobs are in pod_sync_start.cc (images and container starts), pod_sync_stop.cc
// (stops, kills, removal), pod_sync_sandbox.cc, pod_sync_deadlines.cc (activeDeadlineSeconds,
// evictions) and pod_sync_status.cc (the v1 status from the records).
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
#include "svc-podworkerd/pod_records.h"
#include "svc-podworkerd/pull_secrets.h"
#include "svc-podworkerd/termination_message.h"

namespace nodelet::podworkerd {
namespace {

namespace v1 = cri::v1;

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

// The record of the pod the calling worker thread is syncing (SyncPodOnce), for the status sent
// while a pull runs.
thread_local const PodRecordT* PodSyncer::syncing_record_ = nullptr;

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
    explicit Syncing(const PodRecordT* r) { syncing_record_ = r; }
    ~Syncing() { syncing_record_ = nullptr; }
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

}  // namespace nodelet::podworkerd
