#include "supervisor/eviction_manager.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "lib/common/fs.h"
#include "lib/common/json_text.h"
#include "lib/common/logging.h"
#include "lib/pod/qos.h"
#include "lib/service/options.h"

namespace nodelet::supervisor {

namespace {

constexpr size_t kMaxRecordBytes = 4 << 20;
// Rounds an eviction waits for every pod's figures.
constexpr int kBlindRounds = 3;

int64_t GraceOf(const pod::Pod& p) {
  return p.spec.termination_grace_period_seconds.value_or(
      pod::kDefaultTerminationGracePeriodSeconds);
}

// Memory first, then nodefs, then imagefs (the kubelet's signal order for reclaim).
int SignalOrder(pod::EvictionSignal s) { return static_cast<int>(s); }

bool IsDiskSignal(pod::EvictionSignal s) { return pod::SignalCondition(s) == "DiskPressure"; }

}  // namespace

Result<std::vector<pod::EvictionThreshold>> EvictionThresholdsFromFlags(
    const std::string& hard, const std::string& soft, const std::string& soft_grace,
    const std::string& minimum_reclaim) {
  auto h = pod::ParseEvictionThresholds(hard, true);
  if (!h.ok()) return InvalidArgument("--eviction-hard: " + h.status().message());
  auto s = pod::ParseEvictionThresholds(soft, false);
  if (!s.ok()) return InvalidArgument("--eviction-soft: " + s.status().message());
  if (Status g = pod::ApplySoftGracePeriods(soft_grace, ParseDuration, &*s); !g.ok()) {
    // Its own errors name the flags; an entry's does not.
    if (g.message().rfind("--", 0) == 0) return g;
    return InvalidArgument("--eviction-soft-grace-period: " + g.message());
  }
  std::vector<pod::EvictionThreshold> all = std::move(*h);
  all.insert(all.end(), s->begin(), s->end());
  if (Status m = pod::ApplyMinimumReclaims(minimum_reclaim, &all); !m.ok()) {
    return InvalidArgument("--eviction-minimum-reclaim: " + m.message());
  }
  return all;
}

pod::EvictionObservations ObserveSignals(const NodeStats& sample) {
  using pod::EvictionSignal;
  pod::EvictionObservations o;
  if (sample.memory && sample.memory->capacity_bytes > 0) {
    o[EvictionSignal::kMemoryAvailable] = {sample.memory->available_bytes,
                                           sample.memory->capacity_bytes};
  }
  auto fs = [&o](const std::optional<stats::FsStats>& f, EvictionSignal bytes,
                 EvictionSignal inodes) {
    if (!f) return;
    if (f->capacity_bytes > 0) o[bytes] = {f->available_bytes, f->capacity_bytes};
    if (f->inodes > 0) o[inodes] = {f->inodes_free, f->inodes};
  };
  fs(sample.nodefs, EvictionSignal::kNodeFsAvailable, EvictionSignal::kNodeFsInodesFree);
  fs(sample.imagefs, EvictionSignal::kImageFsAvailable, EvictionSignal::kImageFsInodesFree);
  if (sample.pids && sample.pids->max > 0) {
    o[EvictionSignal::kPidAvailable] = {sample.pids->max - sample.pids->in_use, sample.pids->max};
  }
  return o;
}

EvictionManager::EvictionManager(EventLoop& loop, const Clock& clock,
                                 EvictionManagerOptions options, StatsSource& stats,
                                 std::unique_ptr<EvictionPods> owned, EvictionPods* pods,
                                 const RuntimeView& runtime, std::shared_ptr<NodePressure> pressure)
    : clock_(clock),
      options_(std::move(options)),
      stats_(stats),
      owned_pods_(std::move(owned)),
      pods_(pods != nullptr ? *pods : *owned_pods_),
      runtime_(runtime),
      pressure_(std::move(pressure)),
      state_(options_.thresholds, options_.pressure_transition_period),
      timer_(loop.AddTimer([this] { TakeSample(); })),
      executor_(loop, 1) {}

EvictionManager::~EvictionManager() { executor_.Stop(); }

void EvictionManager::RequestStop() {
  stopping_ = true;
  timer_.Cancel();
}

Status EvictionManager::Start() {
  auto log = GetLogger("supervisor");
  auto content = ReadFileBounded(options_.records_path, kMaxRecordBytes);
  if (!content.ok() && content.status().code() != StatusCode::kNotFound) {
    return Internal("eviction records: " + content.status().message());
  }
  if (content.ok()) {
    auto doc = nlohmann::json::parse(*content, nullptr, false);
    bool bad = !doc.is_object();
    if (!bad) {
      for (const auto& [uid, r] : doc.items()) {
        if (!r.is_object() || !r.contains("message") || !r["message"].is_string() ||
            !r.value("grace", nlohmann::json()).is_number_integer()) {
          bad = true;
          continue;
        }
        Record rec;
        rec.eviction.message = r["message"].get<std::string>();
        rec.eviction.grace_seconds = r["grace"].get<int64_t>();
        rec.at_unix_ms = r.value("at", int64_t{0});
        if (rec.eviction.message.empty()) continue;
        records_[uid] = rec;
        pods_.Evict(uid, rec.eviction);
      }
    }
    if (bad) {
      log->error("eviction records {}: not what nodelet writes; kept what could be read",
                 options_.records_path);
      if (Status s = SaveRecords(); !s.ok()) return s;
    }
    // The newest eviction may not be done yet: no other before it is (or 30 s pass).
    for (const auto& [uid, r] : records_) {
      const int64_t deadline = r.at_unix_ms + options_.pod_cleanup_timeout.count();
      if (deadline > clock_.WallSeconds() * 1000 && (!pending_ || pending_->second < deadline)) {
        pending_ = std::make_pair(uid, deadline);
      }
    }
  }
  TakeSample();
  return Status::Ok();
}

void EvictionManager::TakeSample() {
  if (stopping_ || sampling_) return;
  sampling_ = true;
  const bool with_pods = want_pods_;
  want_pods_now_ = false;
  auto sample = std::make_shared<NodeStats>();
  executor_.Submit(
      [this, with_pods, sample] { *sample = with_pods ? stats_.Sample() : stats_.SampleNode(); },
      [this, sample] {
        sampling_ = false;
        if (stopping_) return;
        Decide(*sample);
        // The period counts from the end of the sample; a round (or a reload meanwhile) that
        // asked for a sample at once has it now.
        timer_.ArmAfter(want_pods_now_ ? Duration::zero() : Duration(options_.monitoring_period));
      });
}

void EvictionManager::Reconfigure(std::vector<pod::EvictionThreshold> thresholds,
                                  std::chrono::milliseconds pressure_transition_period,
                                  int64_t max_pod_grace_seconds,
                                  std::chrono::milliseconds monitoring_period) {
  state_.Reconfigure(thresholds, pressure_transition_period);
  options_.thresholds = std::move(thresholds);
  options_.pressure_transition_period = pressure_transition_period;
  options_.max_pod_grace_seconds = max_pod_grace_seconds;
  options_.monitoring_period = monitoring_period;
  WantPods(want_pods_, true);
}

void EvictionManager::WantPods(bool want, bool now) {
  want_pods_ = want;
  if (!now) return;
  want_pods_now_ = true;
  // A sample in flight has its successor armed by its continuation.
  if (!sampling_ && !stopping_) timer_.ArmAfter(Duration::zero());
}

bool NodePressure::Get(std::string_view condition) const {
  if (condition == "MemoryPressure") return memory_.load();
  if (condition == "DiskPressure") return disk_.load();
  if (condition == "PIDPressure") return pid_.load();
  return false;
}

AdmissionResult NodePressure::Admit(const pod::Pod& p) const {
  AdmissionResult r;
  const bool memory = memory_.load(), disk = disk_.load(), pid = pid_.load();
  if (!memory && !disk && !pid) return r;
  if (pod::IsEvictionExempt(pod::PodPriority(p))) return r;
  // Memory pressure alone refuses only BestEffort pods; any other condition every pod.
  if (!disk && !pid && pod::PodQos(p) != pod::QosClass::kBestEffort) return r;
  std::string conditions;
  for (const auto& [on, name] : {std::pair{memory, "MemoryPressure"},
                                 std::pair{disk, "DiskPressure"}, std::pair{pid, "PIDPressure"}}) {
    if (on) conditions += std::string(conditions.empty() ? "" : " ") + name;
  }
  r.admitted = false;
  r.reason = "Evicted";
  r.message = "The node had condition: [" + conditions + "]. ";  // Go's %v of the list
  return r;
}

Status EvictionManager::SaveRecords() {
  nlohmann::json doc = nlohmann::json::object();
  for (const auto& [uid, r] : records_) {
    doc[uid] = {
        {"message", r.eviction.message}, {"grace", r.eviction.grace_seconds}, {"at", r.at_unix_ms}};
  }
  return WriteFileAtomically(options_.records_path, JsonText(doc) + "\n", 0600);
}

bool EvictionManager::CleanedUp(const std::string& uid) const {
  RuntimeSnapshot snap = runtime_.Runtime();
  if (!snap.error.empty()) return false;
  for (const auto& p : snap.pods) {
    if (p.uid != uid) continue;
    for (const auto& c : p.containers) {
      if (c->state == ipc::pleg::ContainerState::Running) return false;
    }
  }
  return true;
}

void EvictionManager::Decide(const NodeStats& sample) {
  auto log = GetLogger("supervisor");
  const int64_t now = clock_.WallSeconds() * 1000;
  const pod::EvictionObservations observations = ObserveSignals(sample);
  std::vector<pod::EvictionThreshold> act = state_.Observe(observations, now);
  pressure_->Set(state_.Pressure("MemoryPressure", now), state_.Pressure("DiskPressure", now),
                 state_.Pressure("PIDPressure", now));

  bool changed = false;
  for (const auto& uid : pods_.ForgetGoneEvictions()) changed = records_.erase(uid) > 0 || changed;
  if (changed) {
    if (Status s = SaveRecords(); !s.ok()) log->error("eviction records: {}", s.message());
  }

  if (pending_) {
    if (CleanedUp(pending_->first) || now >= pending_->second) {
      if (now >= pending_->second && !CleanedUp(pending_->first)) {
        log->warn(
            "evicted pod {} still has running containers after {} s; going on", pending_->first,
            std::chrono::duration_cast<std::chrono::seconds>(options_.pod_cleanup_timeout).count());
      }
      pending_.reset();
      // What the pod held is freed only in samples taken from now on.
      decide_after_ms_ = now;
    }
    return;
  }
  // The pods are read only for a round that may evict: a threshold met, or a pod with a
  // local-storage limit to check. A node-only sample that finds one asks for a whole sample at
  // once, and this round decides nothing more.
  const bool need_pods = !act.empty() || AnyLocalStorageLimits();
  WantPods(need_pods, need_pods && !sample.pods_sampled);
  if (sample.time_unix_ms < decide_after_ms_) return;
  if (act.empty()) {
    reclaimed_ = false;
    last_refusal_.clear();
  }
  if (!sample.pods_sampled) return;
  // Pods past their own local-storage limits go first, whatever the node's state (the kubelet's
  // localStorageEviction); the thresholds wait for the next round.
  if (EvictPastLocalStorageLimits(sample)) return;
  if (act.empty()) return;
  std::stable_sort(act.begin(), act.end(), [](const auto& a, const auto& b) {
    return SignalOrder(a.signal) < SignalOrder(b.signal);
  });
  const pod::EvictionThreshold& t = act.front();
  if (IsDiskSignal(t.signal) && !reclaimed_) {
    log->info("eviction: {} below {}: asking podworkerd to reclaim (container and image GC)",
              pod::SignalName(t.signal), t.text);
    pods_.RequestReclaim();
    reclaimed_ = true;
    decide_after_ms_ = now + 1;
    return;
  }
  reclaimed_ = false;
  EvictOne(t, observations.at(t.signal), sample);
}

void EvictionManager::EvictOne(const pod::EvictionThreshold& t,
                               const pod::SignalObservation& observed, const NodeStats& sample) {
  auto log = GetLogger("supervisor");
  std::map<std::string, const PodStats*> by_uid;
  for (const auto& p : sample.pods) by_uid[p.uid] = &p;
  std::vector<pod::EvictionCandidate> candidates;
  std::vector<const pod::Pod*> specs;
  for (const auto& [uid, p] : Evictable()) {
    pod::EvictionCandidate c;
    c.uid = uid;
    c.name = p->metadata.namespace_name + "/" + p->metadata.name;
    c.priority = pod::PodPriority(*p);
    c.memory_request = pod::PodResourceTotal(*p, "memory", true, false);
    c.storage_request = pod::PodResourceTotal(*p, "ephemeral-storage", true, false);
    auto it = by_uid.find(uid);
    if (it != by_uid.end()) {
      const PodStats& s = *it->second;
      c.has_stats = t.signal == pod::EvictionSignal::kPidAvailable ? s.processes.has_value()
                    : IsDiskSignal(t.signal)                       ? true
                                                                   : s.memory.has_value();
      c.processes = s.processes.value_or(0);
      if (s.memory) c.memory_usage = s.memory->working_set_bytes;
      const stats::DirUsage disk = PodDiskUseFor(t.signal, sample.dedicated_image_fs, s);
      c.storage_usage = disk.used_bytes;
      c.inodes_usage = disk.inodes_used;
      // A container's part follows the same split: logs on nodefs, the writable layer on
      // imagefs.
      const bool split = sample.dedicated_image_fs && IsDiskSignal(t.signal);
      const bool imagefs_signal = t.signal == pod::EvictionSignal::kImageFsAvailable ||
                                  t.signal == pod::EvictionSignal::kImageFsInodesFree;
      for (const auto& spec : p->spec.containers) {
        pod::EvictionCandidate::Container cc;
        cc.name = spec.name;
        auto request = [&spec](const char* resource) -> int64_t {
          auto r = spec.resources.requests.find(resource);
          return r == spec.resources.requests.end() ? 0 : r->second.Value();
        };
        cc.memory_request = request("memory");
        cc.storage_request = request("ephemeral-storage");
        for (const auto& cs : s.containers) {
          if (cs.name != spec.name) continue;
          if (cs.memory) cc.memory_usage = cs.memory->working_set_bytes;
          if (cs.logs && !(split && imagefs_signal)) cc.storage_usage += cs.logs->used_bytes;
          if (cs.rootfs && !(split && !imagefs_signal)) cc.storage_usage += cs.rootfs->used_bytes;
        }
        c.containers.push_back(std::move(cc));
      }
    }
    candidates.push_back(std::move(c));
    specs.push_back(p);
  }
  // Right after a start the sample may not cover every pod yet: ranking then would be blind.
  // Wait a few rounds for the figures, then go on with what there is.
  const bool blind = std::any_of(candidates.begin(), candidates.end(),
                                 [](const pod::EvictionCandidate& c) { return !c.has_stats; });
  if (blind && ++blind_rounds_ <= kBlindRounds) return;
  blind_rounds_ = 0;
  const std::vector<size_t> order = pod::RankForEviction(t.signal, candidates);
  if (order.empty()) {
    const std::string why = std::string(pod::SignalName(t.signal)) + " below " + t.text +
                            " and no pod that may be evicted";
    if (why != last_refusal_) log->warn("eviction: {}", why);
    last_refusal_ = why;
    return;
  }
  const pod::EvictionCandidate& victim = candidates[order.front()];
  const pod::Pod& spec = *specs[order.front()];
  PodEviction eviction;
  eviction.message = pod::EvictionMessage(t, observed, victim);
  // The kubelet's immediateEvictionGracePeriodSeconds for hard thresholds.
  eviction.grace_seconds = kImmediateGraceSeconds;
  if (!t.hard) {
    eviction.grace_seconds = GraceOf(spec);
    if (options_.max_pod_grace_seconds > 0) {
      eviction.grace_seconds = std::min(eviction.grace_seconds, options_.max_pod_grace_seconds);
    }
  }
  Evict(victim.uid, victim.name, eviction, std::string(pod::SignalName(t.signal)));
}

bool EvictionManager::Evict(const std::string& uid, const std::string& name,
                            const PodEviction& eviction, const std::string& signal) {
  auto log = GetLogger("supervisor");
  Record rec;
  rec.eviction = eviction;
  rec.at_unix_ms = clock_.WallSeconds() * 1000;
  records_[uid] = rec;
  // On disk before podworkerd hears of it: a crash now cannot lose it.
  if (Status s = SaveRecords(); !s.ok()) {
    records_.erase(uid);
    log->error("eviction of pod {} not done: {}", name, s.message());
    return false;
  }
  log->warn("Evicting pod {} ({}): {}", name, uid, rec.eviction.message);
  pods_.Evict(uid, rec.eviction);
  ++evictions_total_;
  ++by_signal_[signal];
  pending_ = std::make_pair(uid, rec.at_unix_ms + options_.pod_cleanup_timeout.count());
  return true;
}

std::vector<std::pair<std::string, const pod::Pod*>> EvictionManager::Evictable(
    const std::function<bool(const std::string&, const pod::Pod&)>& want) {
  std::vector<std::pair<std::string, const pod::Pod*>> out;
  for (const auto& [uid, p] : pods_.admitted()) {
    if (pods_.evictions().count(uid) > 0 || p->metadata.deletion_timestamp) continue;
    if (!want || want(uid, *p)) out.emplace_back(uid, p.get());
  }
  if (out.empty()) return out;
  // Asked of statusd only when there is a pod to ask about.
  const std::set<std::string> terminal = pods_.TerminalPods();
  std::erase_if(out, [&terminal](const auto& e) { return terminal.count(e.first) > 0; });
  return out;
}

bool EvictionManager::AnyLocalStorageLimits() const {
  for (const auto& [_, p] : pods_.admitted()) {
    if (pod::HasLocalStorageLimits(*p)) return true;
  }
  return false;
}

bool EvictionManager::EvictPastLocalStorageLimits(const NodeStats& sample) {
  std::map<std::string, const PodStats*> by_uid;
  for (const auto& p : sample.pods) by_uid[p.uid] = &p;
  std::map<std::string, std::string> messages;
  auto past_a_limit = [&](const std::string& uid, const pod::Pod& p) {
    auto it = by_uid.find(uid);
    if (it == by_uid.end() || pod::IsEvictionExempt(pod::PodPriority(p))) return false;
    const PodStats& s = *it->second;
    pod::PodStorageUsage usage;
    for (const auto& v : s.volumes) usage.volumes[v.name] = v.used.used_bytes;
    for (const auto& c : s.containers) {
      int64_t& used = usage.containers[c.name];
      if (c.logs) used += c.logs->used_bytes;
      // The writable layer counts against the container's own limit only when it is on nodefs
      // (the kubelet's containerEphemeralStorageLimitEviction); the pod's total always has it.
      if (c.rootfs && !sample.dedicated_image_fs) used += c.rootfs->used_bytes;
    }
    usage.total = s.ephemeral_storage.used_bytes;
    auto message = pod::LocalStorageViolation(p, usage);
    if (message) messages[uid] = std::move(*message);
    return message.has_value();
  };
  bool evicted = false;
  for (const auto& [uid, p] : Evictable(past_a_limit)) {
    PodEviction eviction;
    eviction.message = messages[uid];
    eviction.grace_seconds = kImmediateGraceSeconds;
    // The kubelet's signal names for the three limits (its localStorageEviction).
    const std::string& m = eviction.message;
    const char* signal = m.rfind("Usage of EmptyDir", 0) == 0 ? "emptydirfs.limit"
                         : m.rfind("Container ", 0) == 0      ? "ephemeralcontainerfs.limit"
                                                              : "ephemeralpodfs.limit";
    evicted = Evict(uid, p->metadata.namespace_name + "/" + p->metadata.name, eviction, signal) ||
              evicted;
  }
  return evicted;
}

}  // namespace nodelet::supervisor
