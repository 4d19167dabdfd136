// The soak's checks while it runs and once it converged: statusd's history sampled (versions
// never go back, a terminal phase is never left), long-running containers followed across the
// faults (never replaced nor started again), pod-network sandboxes keeping their IP, and the
// runtime's end state against the desired pods.
#include <algorithm>
#include <fstream>
#include <sstream>

#include "lib/ipc/sockets.h"
#include "lib/status/status_client.h"
#include "tests/chaos/chaos_soak_impl.h"

namespace nodelet::chaos::soak_internal {
namespace {

// What podworkerd stamps on what it creates (svc-podworkerd/cri_configs.h; a test does not
// include a service's code).
constexpr char kManagedLabel[] = "nodelet.io/managed";
constexpr char kPodUidLabel[] = "io.kubernetes.pod.uid";
constexpr char kContainerNameLabel[] = "io.kubernetes.container.name";
constexpr char kContainerHashAnnotation[] = "nodelet.io/container-hash";

std::string Label(const google::protobuf::Map<std::string, std::string>& m, const std::string& k) {
  auto it = m.find(k);
  return it == m.end() ? "" : it->second;
}

}  // namespace

void Soak::StatusLoop() {
  ipc::Context ctx;
  status::StatusClientOptions sopts;
  sopts.attempt_timeout = milliseconds(500);
  sopts.deadline = milliseconds(1500);
  status::StatusClient client(ctx, run_, sopts);
  if (Status s = client.Connect(); !s.ok()) {
    Log("statusd sampler cannot connect: " + s.ToString(), true);
    return;
  }
  struct Seen {
    uint64_t max_version = 0;
    bool terminal = false;
    status::PodPhase terminal_phase = status::PodPhase::kPending;
    std::string name;
  };
  std::map<std::string, Seen> seen;
  auto terminal = [](status::PodPhase p) {
    return p == status::PodPhase::kSucceeded || p == status::PodPhase::kFailed;
  };
  while (!stop_status_) {
    auto list = client.ListPodStatuses();
    if (list.ok()) {
      for (const auto& r : list->records) {
        Seen& s = seen[r.pod.uid];
        s.name = r.pod.name;
        if (r.version < s.max_version) {
          Violation(figures_.status_violations,
                    "statusd: pod " + r.pod.name + " (" + r.pod.uid + ") version went back from " +
                        std::to_string(s.max_version) + " to " + std::to_string(r.version));
        }
        s.max_version = std::max(s.max_version, r.version);
        if (s.terminal && r.status.phase != s.terminal_phase) {
          Violation(figures_.status_violations,
                    "statusd: pod " + r.pod.name + " left its terminal phase (" +
                        std::to_string(static_cast<int>(s.terminal_phase)) + " -> " +
                        std::to_string(static_cast<int>(r.status.phase)) + ")");
        }
        if (!s.terminal && terminal(r.status.phase)) {
          s.terminal = true;
          s.terminal_phase = r.status.phase;
        }
      }
      std::lock_guard<std::mutex> lock(mu_);
      ++figures_.status_samples;
      figures_.status_pods_tracked = static_cast<int>(seen.size());
    }
    std::unique_lock<std::mutex> lock(wake_mu_);
    wake_.wait_for(lock, milliseconds(250), [&] { return stop_status_.load(); });
  }
}

std::optional<Snapshot> Soak::TakeSnapshot() {
  auto containers = cri_->ListContainers(v1::ContainerFilter());
  auto sandboxes = cri_->ListPodSandbox(v1::PodSandboxFilter());
  if (!containers.ok() || !sandboxes.ok()) return std::nullopt;
  Snapshot snap;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& s : *sandboxes) seen_ids_.insert(s.id());
  for (const auto& c : *containers) {
    seen_ids_.insert(c.id());
    if (c.state() != v1::CONTAINER_RUNNING || Label(c.labels(), kManagedLabel).empty()) continue;
    std::string uid = Label(c.labels(), kPodUidLabel);
    std::string name = Label(c.labels(), kContainerNameLabel);
    auto it = desired_.find(uid);
    if (it == desired_.end() || !IsLongRunning(it->second.pod.kind)) continue;
    auto hash = it->second.expected.container_hashes.find(name);
    std::string stamped = Label(c.annotations(), kContainerHashAnnotation);
    // A container of an older spec is about to be replaced: not a baseline.
    if (hash == it->second.expected.container_hashes.end() || hash->second != stamped) continue;
    ContainerRecord rec;
    rec.id = c.id();
    rec.sandbox_id = c.pod_sandbox_id();
    rec.hash = stamped;
    rec.restart_edits = it->second.restart_edits;
    snap[{uid, name}] = rec;
    tracked_ids_.insert(rec.id);
  }
  figures_.containers_tracked = static_cast<int>(tracked_ids_.size());
  for (auto& [key, rec] : snap) {
    auto st = cri_->ContainerStatus(rec.id, false);
    if (st.ok()) rec.started_at = st->status().started_at();
  }
  return snap;
}

void Soak::CheckPodIps() {
  if (!containerd_->has_pod_network()) return;
  auto sandboxes = cri_->ListPodSandbox(v1::PodSandboxFilter());
  if (!sandboxes.ok()) return;
  std::vector<std::string> followed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& s : *sandboxes) {
      if (s.state() != v1::SANDBOX_READY) continue;
      auto it = desired_.find(Label(s.labels(), kPodUidLabel));
      if (it != desired_.end() && it->second.pod.pod_network) followed.push_back(s.id());
    }
  }
  std::string prefix = testing::PodNetworkForSlot(containerd_->cni_slot()).ip_prefix;
  std::vector<std::string> problems;
  for (const auto& id : followed) {
    auto st = cri_->PodSandboxStatus(id, false);
    // Gone or stopped meanwhile (churn, a fault): nothing to compare.
    if (!st.ok() || st->status().state() != v1::SANDBOX_READY) continue;
    std::string ip = st->status().network().ip();
    std::string what = "sandbox " + id.substr(0, 12) + " (" + st->status().metadata().name() + ")";
    std::lock_guard<std::mutex> lock(mu_);
    ++figures_.pod_ip_checks;
    auto [it, first] = sandbox_ips_.emplace(id, ip);
    if (first) {
      ++figures_.pod_ip_sandboxes;
      if (ip.rfind(prefix, 0) != 0) {
        problems.push_back(what + " has IP '" + ip + "', not in " + containerd_->pod_subnet());
      }
    } else if (it->second != ip) {
      problems.push_back(what + " changed its IP from " + it->second + " to '" + ip + "'");
      it->second = ip;
    }
  }
  for (const auto& p : problems) Violation(figures_.ip_violations, p);
}

std::optional<std::set<std::string>> Soak::LivePodIps() {
  auto sandboxes = cri_->ListPodSandbox(v1::PodSandboxFilter());
  if (!sandboxes.ok()) return std::nullopt;
  std::set<std::string> ips;
  for (const auto& s : *sandboxes) {
    if (s.state() != v1::SANDBOX_READY) continue;
    auto st = cri_->PodSandboxStatus(s.id(), false);
    if (!st.ok()) return std::nullopt;
    if (!st->status().network().ip().empty()) ips.insert(st->status().network().ip());
  }
  return ips;
}

void Soak::CompareSnapshots(const Snapshot& before, const Snapshot& after) {
  std::optional<std::set<std::string>> lost_at_boot;  // read once, when first needed
  auto runtime_lost = [&](const ContainerRecord& rec) {
    if (!lost_at_boot) {
      std::ifstream in(containerd_->dir() + "/containerd.log");
      std::stringstream text;
      text << in.rdbuf();
      lost_at_boot = ShimsLostAtBoot(text.str());
    }
    return lost_at_boot->count(rec.id) > 0 || lost_at_boot->count(rec.sandbox_id) > 0;
  };
  for (const auto& [key, rec] : before) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = desired_.find(key.first);
      if (it == desired_.end() || it->second.restart_edits != rec.restart_edits) continue;
      auto hash = it->second.expected.container_hashes.find(key.second);
      if (hash == it->second.expected.container_hashes.end() || hash->second != rec.hash) continue;
      ++figures_.continuity_checks;
    }
    auto now = after.find(key);
    std::string what =
        "container " + key.second + " of pod " + key.first + " (" + rec.id.substr(0, 12) + ")";
    std::string problem;
    if (now == after.end()) {
      problem = what + " is no longer running";
    } else if (now->second.id != rec.id) {
      problem = what + " was replaced by " + now->second.id.substr(0, 12);
    } else if (rec.started_at != 0 && now->second.started_at != 0 &&
               now->second.started_at != rec.started_at) {
      problem = what + " was started again";
    }
    if (problem.empty()) continue;
    if (runtime_lost(rec)) {
      ++figures_.runtime_losses;
      Log(problem + ": containerd cleaned up its shim when it booted again (not a violation)",
          true);
      continue;
    }
    Violation(figures_.restart_violations, problem);
  }
}

std::pair<std::vector<std::string>, std::vector<std::string>> Soak::CheckRuntime() {
  std::vector<std::string> desired_problems, undesired_problems;
  auto sandboxes = cri_->ListPodSandbox(v1::PodSandboxFilter());
  auto containers = cri_->ListContainers(v1::ContainerFilter());
  if (!sandboxes.ok() || !containers.ok()) {
    desired_problems.push_back(
        "CRI list failed: " +
        (sandboxes.ok() ? containers.status() : sandboxes.status()).ToString());
    return {desired_problems, undesired_problems};
  }
  std::map<std::string, Desired> desired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    desired = desired_;
    for (const auto& s : *sandboxes) seen_ids_.insert(s.id());
    for (const auto& c : *containers) seen_ids_.insert(c.id());
  }
  std::map<std::string, std::vector<const v1::PodSandbox*>> ready_by_uid;
  for (const auto& s : *sandboxes) {
    if (Label(s.labels(), kManagedLabel).empty()) continue;
    std::string uid = Label(s.labels(), kPodUidLabel);
    if (desired.count(uid) == 0) {
      undesired_problems.push_back("sandbox " + s.id().substr(0, 12) + " of undesired pod " +
                                   s.metadata().name() + " is left");
    } else if (s.state() == v1::SANDBOX_READY) {
      ready_by_uid[uid].push_back(&s);
    }
  }
  std::map<ContainerKey, std::vector<const v1::Container*>> by_key;
  for (const auto& c : *containers) {
    if (Label(c.labels(), kManagedLabel).empty()) continue;
    std::string uid = Label(c.labels(), kPodUidLabel);
    if (desired.count(uid) == 0) {
      undesired_problems.push_back("container " + c.id().substr(0, 12) + " of undesired pod " +
                                   uid + " is left");
      continue;
    }
    by_key[{uid, Label(c.labels(), kContainerNameLabel)}].push_back(&c);
  }
  for (const auto& [uid, d] : desired) {
    std::string pod = d.expected.full_name + " (" + PodKindName(d.pod.kind) + ")";
    auto ready = ready_by_uid[uid];
    bool completing =
        d.pod.kind == PodKind::kCompleteNever || d.pod.kind == PodKind::kCompleteOnFailure;
    if (!completing && ready.size() != 1) {
      desired_problems.push_back(pod + ": " + std::to_string(ready.size()) +
                                 " ready sandboxes, want 1");
      continue;
    }
    for (const auto& [name, hash] : d.expected.container_hashes) {
      const auto& list = by_key[{uid, name}];
      int running_current = 0, running_other = 0, exited_current = 0;
      for (const v1::Container* c : list) {
        bool current = Label(c->annotations(), kContainerHashAnnotation) == hash;
        if (c->state() == v1::CONTAINER_RUNNING) {
          (current && c->pod_sandbox_id() == (ready.empty() ? "" : ready[0]->id())
               ? running_current
               : running_other)++;
        } else if (c->state() == v1::CONTAINER_EXITED && current) {
          if (completing) {
            auto st = cri_->ContainerStatus(c->id(), false);
            if (st.ok() && st->status().exit_code() == 0) ++exited_current;
          } else {
            ++exited_current;
          }
        }
      }
      std::string what = pod + " container " + name;
      if (IsLongRunning(d.pod.kind)) {
        if (running_current != 1 || running_other != 0) {
          desired_problems.push_back(
              what + ": " + std::to_string(running_current) + " running with the current spec, " +
              std::to_string(running_other) + " other running; want exactly 1 of the current spec");
        }
      } else if (d.pod.kind == PodKind::kCrashLooping) {
        if (running_current + exited_current == 0 || running_other != 0) {
          desired_problems.push_back(what + ": no container of the current spec");
        }
      } else if (exited_current == 0 || running_current + running_other != 0) {
        desired_problems.push_back(what + ": not completed with exit code 0 on the current spec");
      }
    }
  }
  return {desired_problems, undesired_problems};
}

}  // namespace nodelet::chaos::soak_internal
