// PlegEngine's frame: its threads (started, stopped), the relist thread's loop that chooses
// between a full relist and a round of single-pod requests, the requests that wake it (Nudge,
// RelistPods), the output queue that Drain empties, and the health. The relists themselves are
// in pleg_engine_relist.cc, the runtime events in pleg_engine_events.cc and the inspections in
// pleg_engine_inspect.cc.
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
  MonoTime next_full = clock_.Now();  // the first relist at once
  // What a wait that ran out was waiting for is due, whatever the clock reads after it.
  bool full_due = false;
  MonoTime ids_due_by{};
  while (!stopping_) {
    const MonoTime now = clock_.Now();
    if (nudged_ || full_due || now >= next_full) {
      const bool nudged = nudged_;
      nudged_ = false;
      full_due = false;
      if (nudged) ++nudged_relists_;
      lock.unlock();
      const MonoTime started = clock_.Now();
      RelistOnce();
      lock.lock();
      next_full = started + options_.relist_period;
      continue;
    }
    // A relist of single pods: asked for (RelistPods, or an inspection that ended after its
    // pod changed again), or the pods of runtime events whose time has come.
    std::set<std::string> pods = std::move(pod_requests_);
    pod_requests_.clear();
    std::vector<std::pair<std::string, IdRequest>> ids;
    MonoTime next_id = MonoTime::max();
    const MonoTime ids_due = std::max(now, ids_due_by);
    for (auto it = id_requests_.begin(); it != id_requests_.end();) {
      if (it->second.due <= ids_due) {
        ids.emplace_back(it->first, it->second);
        it = id_requests_.erase(it);
      } else {
        next_id = std::min(next_id, it->second.due);
        ++it;
      }
    }
    if (!pods.empty() || !ids.empty()) {
      lock.unlock();
      HandleRound(pods, ids);
      lock.lock();
      continue;
    }
    woken_ = false;
    const MonoTime target = std::min(next_full, next_id);
    if (!stop_cv_.wait_for(lock, TimeUntil(clock_, target),
                           [this] { return stopping_ || nudged_ || woken_; })) {
      if (target == next_full) {
        full_due = true;
      } else {
        ids_due_by = target;
      }
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

void PlegEngine::RelistPods(const std::vector<std::string>& uids) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pod_requests_.insert(uids.begin(), uids.end());
    woken_ = true;
  }
  stop_cv_.notify_all();
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
