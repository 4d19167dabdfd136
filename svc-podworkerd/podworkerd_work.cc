// A pod's work on a worker thread (sync, kill, removal) with its result posted back to the loop;
// probes, readiness carried over from statusd, and podworkerd's health and counters.
#include <signal.h>
#include <unistd.h>

#include <set>

#include "lib/common/check.h"
#include "lib/common/fs.h"
#include "lib/common/logging.h"
#include "lib/common/node_ip.h"
#include "lib/common/rfc3339.h"
#include "lib/ipc/endpoints.h"
#include "lib/ipc/message.h"
#include "lib/ipc/router_receive.h"
#include "lib/ipc/supervisor_peer.h"
#include "lib/pod/config_objects.h"
#include "lib/pod/downward_api.h"
#include "lib/pod/node_resources.h"
#include "lib/pod/pod_flatbuffers.h"
#include "lib/pod/static_pod.h"
#include "lib/service/cgroup_flags.h"
#include "lib/service/container_log_flags.h"
#include "lib/service/dns_flags.h"
#include "lib/status/status_client.h"
#include "svc-podworkerd/podworkerd_service.h"
#include "svc-podworkerd/registry_credentials.h"
#include "volume_generated.h"

namespace nodelet::podworkerd {

void PodworkerdService::RunWork(DispatchedWork dispatched) {
  const uint64_t arrival = dispatched.arrival;
  auto job = [this, d = std::move(dispatched)]() {
    const Work<pod::Pod>& work = d.work;
    WorkDone done;
    done.uid = work.uid;
    done.kind = work.kind;
    const MonoTime began = ctx_.clock.Now();
    switch (work.kind) {
      case WorkKind::kSync:
        if (d.seed_readiness) SeedReadiness(work.uid);
        done.outcome = syncer_->SyncPod(*work.pod, d.record ? &*d.record : nullptr);
        break;
      case WorkKind::kTerminating: {
        std::vector<std::string> hook_failures;
        done.error =
            syncer_->KillPod(work.uid, work.pod ? work.grace_period_seconds : -1, &hook_failures);
        for (const auto& why : hook_failures) {
          if (work.pod) {
            done.outcome.events.push_back(
                syncer_->MakeEvent(*work.pod, "Warning", "FailedPreStopHook", why));
          }
        }
        break;
      }
      case WorkKind::kTerminated:
        if (!d.desired) done.error = syncer_->RemovePod(work.uid);
        break;
    }
    done.completed_mono_ns = ctx_.clock.MonoNanos();
    done.took = std::chrono::duration_cast<std::chrono::microseconds>(ctx_.clock.Now() - began);
    // Shared: a posted callback must be copyable.
    ctx_.loop.Post([this, result = std::make_shared<WorkDone>(std::move(done))] {
      dispatcher_->HandleDone(*result);
      dispatcher_->RunParked();
      WakeTick();
    });
  };
  // Before the work of pods that came later; stream requests (priority 0) go first of all.
  pool_->Submit(std::move(job), arrival);
}

void PodworkerdService::EnsureProbes(const std::string& uid, const pod::Pod& p) {
  auto rec = mirror_->pods().find(uid);
  if (rec == mirror_->pods().end()) return;
  // Host-network pods are probed on 127.0.0.1 (docs/network.md says why).
  std::string host = "127.0.0.1";
  if (!p.spec.host_network && !rec->second.sandboxes.empty() &&
      !rec->second.sandboxes[0]->ip.empty()) {
    host = rec->second.sandboxes[0]->ip;
  }
  for (const auto& c : p.spec.containers) {
    if (!c.liveness_probe && !c.readiness_probe && !c.startup_probe) continue;
    for (const auto& r : rec->second.containers) {
      if (r->name == c.name && r->state == ipc::pleg::ContainerState::Running) {
        probes_->Ensure(uid, p, c, r->id, host);
      }
    }
  }
}

void PodworkerdService::SeedReadiness(const std::string& uid) {
  // One client for every worker thread, used by one at a time (a ZeroMQ socket may move between
  // threads across the lock's barrier): each connection costs both sides buffers, about 100 KiB,
  // and a client per thread was 16 of them.
  Result<status::PodStatusRecord> prior = Unavailable("statusd not connected");
  {
    std::lock_guard<std::mutex> lock(seed_mu_);
    if (!seed_client_) {
      status::StatusClientOptions opts;
      opts.sender = ipc::ServiceId::Podworkerd;
      opts.attempt_timeout = std::chrono::milliseconds(300);
      opts.deadline = std::chrono::milliseconds(600);
      auto client = std::make_unique<status::StatusClient>(ctx_.ipc, ctx_.options.run_dir, opts);
      if (!client->Connect().ok()) return;
      seed_client_ = std::move(client);
    }
    prior = seed_client_->GetPodStatus(uid);
  }
  if (!prior.ok()) return;
  // activeDeadlineSeconds counts from the start time statusd kept, across restarts.
  syncer_->SeedStartTime(uid, prior->status.start_time_unix_s);
  for (const auto& cs : prior->status.container_statuses) {
    const std::string prefix = "containerd://";
    if (cs.container_id.rfind(prefix, 0) != 0) continue;
    probes_->SeedReady(cs.container_id.substr(prefix.size()), cs.ready);
  }
}

HealthReport PodworkerdService::Health() const {
  if (!mirror_->ready()) {
    return {ipc::control::Health::Degraded, "waiting for plegd's pod cache"};
  }
  return {};
}

CounterList PodworkerdService::Counters() const {
  CounterList c;
  const DispatcherCounters& d = dispatcher_->counters();
  c.emplace_back("pods", dispatcher_->pods());
  c.emplace_back("syncs", d.syncs);
  c.emplace_back("desired_unchanged", desired_unchanged_);
  c.emplace_back("sync_errors", d.sync_errors);
  c.emplace_back("kills", d.kills);
  c.emplace_back("orphans_killed", d.orphans_killed);
  c.emplace_back("orphan_shims_ended", orphan_shims_ended_.load());
  c.emplace_back("bad_messages", bad_messages_.count());
  c.emplace_back("desired_refused", foreign_desired_.count());
  c.emplace_back("streams_refused", foreign_streams_.count());
  c.emplace_back("parked", dispatcher_->parked());
  if (container_logs_) {
    for (const auto& [name, value] : container_logs_->Counters()) c.emplace_back(name, value);
  }
  if (gc_) {
    uint64_t node_wide = 0;
    for (const auto& [name, value] : gc_->Counters()) {
      if (name == "containers_garbage_collected_node") node_wide = value;
      c.emplace_back(name, value);
    }
    // Removed by pod syncs and by the node-wide pass alike.
    c.emplace_back("containers_garbage_collected", d.containers_gc + node_wide);
  } else {
    c.emplace_back("containers_garbage_collected", d.containers_gc);
  }
  if (probes_) {
    for (auto& kv : probes_->Counters()) c.push_back(std::move(kv));
  }
  for (const auto& [type, n] : d.container_starts) c.emplace_back("started_containers:" + type, n);
  for (const auto& [key, n] : d.container_start_errors) {
    c.emplace_back("started_containers_errors:" + key.first + ":" + key.second, n);
  }
  syncer_->ExportPullDurations(c);
  dispatcher_->pod_start().Export("pod_start_duration_seconds", c);
  dispatcher_->worker_duration().Export("pod_worker_duration_seconds", c);
  if (counting_) {
    for (const auto& [op, n] : counting_->Snapshot()) {
      c.emplace_back("runtime_operations:" + op, n.first);
      c.emplace_back("runtime_operations_errors:" + op, n.second);
    }
  }
  if (status_) {
    c.emplace_back("statuses_sent", status_->sent());
    c.emplace_back("status_failures", status_->failed());
  }
  return c;
}

}  // namespace nodelet::podworkerd
