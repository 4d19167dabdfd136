#include "svc-plegd/pleg_engine.h"

#include <algorithm>

#include "lib/common/check.h"

namespace nodelet::plegd {

PlegEngine::PlegEngine(PlegRuntime& runtime, const Clock& clock, PlegOptions options,
                       std::function<void()> on_output)
    : runtime_(runtime), clock_(clock), options_(options), on_output_(std::move(on_output)) {
  NODELET_CHECK(on_output_) << "PlegEngine needs an on_output callback";
  last_success_ = clock_.Now();
  if (options_.inspect_workers < 1) options_.inspect_workers = 1;
}

PlegEngine::~PlegEngine() { Stop(); }

void PlegEngine::StartInspectors() {
  for (int i = 0; i < options_.inspect_workers; ++i) {
    inspectors_.emplace_back([this] { InspectorLoop(); });
  }
}

void PlegEngine::Start() {
  StartInspectors();
  relist_thread_ = std::thread([this] { RelistLoop(); });
}

void PlegEngine::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  work_cv_.notify_all();
  done_cv_.notify_all();
  stop_cv_.notify_all();
  if (relist_thread_.joinable()) relist_thread_.join();
  for (auto& t : inspectors_) {
    if (t.joinable()) t.join();
  }
}

void PlegEngine::Wake() { on_output_(); }

bool PlegEngine::PushLocked(PodResult result) {
  const bool was_empty = output_.pods.empty() && output_.relists.empty();
  output_.pods.push_back(std::move(result));
  return was_empty;
}

PlegOutput PlegEngine::Drain() {
  std::lock_guard<std::mutex> lock(mu_);
  PlegOutput out = std::move(output_);
  output_ = {};
  return out;
}

void PlegEngine::Emit(PodResult result) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    wake = PushLocked(std::move(result));
  }
  if (wake) Wake();
}

void PlegEngine::EmitRelist(RelistResult result) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    wake = output_.pods.empty() && output_.relists.empty();
    output_.relists.push_back(std::move(result));
  }
  if (wake) Wake();
}

void PlegEngine::RelistLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    lock.unlock();
    const MonoTime started = clock_.Now();
    RelistOnce();
    lock.lock();
    // Wait for the next period; Stop() and Nudge() wake us at once. For a second after a
    // nudge, relist every 100 ms too: an event can come before the runtime's CRI view has
    // taken it in (containerd's CRI plugin handles a task exit from the same event stream).
    MonoTime next = started + options_.relist_period;
    if (eager_until_ > started) next = std::min(next, started + kEagerPeriod);
    stop_cv_.wait_for(lock, TimeUntil(clock_, next), [this] { return stopping_ || nudged_; });
    if (nudged_) {
      nudged_ = false;
      ++nudged_relists_;
      eager_until_ = clock_.Now() + kEagerWindow;
    }
  }
}

void PlegEngine::Nudge() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    nudged_ = true;
  }
  stop_cv_.notify_all();
}

void PlegEngine::RelistOnce() {
  const uint64_t relist = ++relist_seq_;
  const MonoTime t0 = clock_.Now();
  RelistResult done;
  done.relist = relist;
  done.started_at_ns = clock_.WallNanos();
  done.started_at_mono_ns = clock_.MonoNanos();

  auto listing = runtime_.List();
  if (!listing.ok()) {
    ++relist_errors_;
    done.error = listing.status().ToString();
    done.duration = std::chrono::duration_cast<std::chrono::microseconds>(clock_.Now() - t0);
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_error_ = done.error;
      runtime_unreachable_ = listing.status().code() == StatusCode::kUnavailable ||
                             listing.status().code() == StatusCode::kDeadlineExceeded;
    }
    EmitRelist(std::move(done));
    return;
  }
  done.containers = static_cast<uint32_t>(listing->containers.size());
  std::vector<PodChange> changes = diff_.Update(*listing);
  done.pods = static_cast<uint32_t>(diff_.pod_count());

  std::vector<Job> to_queue;
  std::vector<PodResult> removed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::map<std::string, std::vector<PlegEvent>> wanted;
    for (auto& change : changes) {
      if (change.removed) {
        PodResult r;
        r.record.uid = change.view.uid;
        r.record.name = change.view.name;
        r.record.namespace_ = change.view.pod_namespace;
        r.record.foreign = change.view.foreign;
        r.record.removed = true;
        r.record.relist = relist;
        r.events = std::move(change.events);
        reinspect_.erase(change.view.uid);
        removed.push_back(std::move(r));
        continue;
      }
      auto& ev = wanted[change.view.uid];
      ev.insert(ev.end(), change.events.begin(), change.events.end());
    }
    // Pods that failed before, or changed while their inspection was in flight.
    for (auto it = reinspect_.begin(); it != reinspect_.end();) {
      if (diff_.Find(it->first) == nullptr) {
        it = reinspect_.erase(it);
        continue;
      }
      auto& ev = wanted[it->first];
      ev.insert(ev.begin(), it->second.begin(), it->second.end());
      ++it;
    }
    for (auto& [uid, events] : wanted) {
      if (in_flight_.count(uid) != 0) {
        // Still being inspected (maybe hung): deliver these events with the next inspection.
        reinspect_[uid] = events;  // includes what was pending before
        continue;
      }
      reinspect_.erase(uid);
      const PodView* view = diff_.Find(uid);
      if (view == nullptr) continue;
      in_flight_.insert(uid);
      to_queue.push_back(Job{*view, std::move(events), relist});
    }
    if (!to_queue.empty()) outstanding_[relist] = static_cast<int>(to_queue.size());
    for (auto& job : to_queue) jobs_.push_back(std::move(job));
    last_success_ = clock_.Now();
    last_error_.clear();
    runtime_unreachable_ = false;
  }
  work_cv_.notify_all();
  for (auto& r : removed) Emit(std::move(r));
  ++relists_;

  // Wait for this relist's inspections, but never past inspect_wait: a hung pod is reported
  // when it returns and does not hold back the RelistDone or the next relist.
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait_for(lock, TimeUntil(clock_, t0 + options_.inspect_wait),
                      [&] { return stopping_ || outstanding_.count(relist) == 0; });
    // Late jobs of this relist still count down their own entry; drop ours.
    outstanding_.erase(relist);
  }
  done.duration = std::chrono::duration_cast<std::chrono::microseconds>(clock_.Now() - t0);
  last_duration_us_ = done.duration.count();
  EmitRelist(std::move(done));
}

void PlegEngine::InspectorLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
    if (stopping_) return;
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    PodResult result = Inspect(job);
    lock.lock();
    in_flight_.erase(job.view.uid);
    if (result.inspect_failed) {
      // Try again at the next relist; the events already go out with this (stale) result.
      reinspect_.emplace(job.view.uid, std::vector<PlegEvent>{});
    }
    auto it = outstanding_.find(job.relist);
    if (it != outstanding_.end() && --it->second == 0) {
      outstanding_.erase(it);
      done_cv_.notify_all();
    }
    const bool wake = PushLocked(std::move(result));
    lock.unlock();
    if (wake) Wake();
    lock.lock();
  }
}

PodResult PlegEngine::Inspect(const Job& job) {
  ++inspections_;
  PodResult r;
  r.events = job.events;
  r.record.uid = job.view.uid;
  r.record.name = job.view.name;
  r.record.namespace_ = job.view.pod_namespace;
  r.record.foreign = job.view.foreign;
  r.record.relist = job.relist;
  for (const auto& id : job.view.sandbox_ids) {
    auto s = runtime_.InspectSandbox(id);
    if (!s.ok()) {
      if (s.status().code() == StatusCode::kNotFound) continue;  // removed meanwhile
      r.inspect_failed = true;
      r.record.inspect_error = "PodSandboxStatus " + id + ": " + s.status().ToString();
      break;
    }
    r.record.sandboxes.push_back(std::make_unique<ipc::pleg::SandboxRecordT>(std::move(*s)));
  }
  if (!r.inspect_failed) {
    for (const auto& id : job.view.container_ids) {
      auto c = runtime_.InspectContainer(id);
      if (!c.ok()) {
        if (c.status().code() == StatusCode::kNotFound) continue;
        r.inspect_failed = true;
        r.record.inspect_error = "ContainerStatus " + id + ": " + c.status().ToString();
        break;
      }
      r.record.containers.push_back(std::make_unique<ipc::pleg::ContainerRecordT>(std::move(*c)));
    }
  }
  if (r.inspect_failed) ++inspection_errors_;
  return r;
}

PlegHealth PlegEngine::Health() const {
  std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(mu_));
  PlegHealth h;
  if (runtime_unreachable_) {
    h.ok = false;
    h.reason = "runtime unreachable: " + last_error_;
    return h;
  }
  auto since = clock_.Now() - last_success_;
  if (since > options_.relist_threshold) {
    h.ok = false;
    h.reason = "no successful relist for " +
               std::to_string(std::chrono::duration_cast<std::chrono::seconds>(since).count()) +
               "s" + (last_error_.empty() ? "" : " (last error: " + last_error_ + ")");
  }
  return h;
}

}  // namespace nodelet::plegd
