// PlegEngine's frame: its executors and timers (started, stopped), the scheduler that picks on
// the loop between a full relist and a round of single-pod requests, the requests that wake it
// (Nudge, RelistPods, posted from any thread), the output that Drain empties, and the health.
// The relists themselves are in pleg_engine_relist.cc, the runtime events in
// pleg_engine_events.cc and the inspections in pleg_engine_inspect.cc.
#include "svc-plegd/pleg_engine.h"

#include <algorithm>

#include "lib/common/check.h"

namespace nodelet::plegd {

PlegEngine::PlegEngine(EventLoop& loop, PlegRuntime& runtime, PlegOptions options,
                       std::function<void()> on_output)
    : loop_(loop),
      runtime_(runtime),
      clock_(loop.clock()),
      options_(options),
      on_output_(std::move(on_output)),
      relist_timer_(loop.AddTimer([this] { Schedule(); })),
      inspect_timer_(loop.AddTimer([this] {
        // The relist's inspections are late: RelistDone goes out without them, and each late
        // one is output when it returns.
        if (full_) {
          outstanding_.erase(full_->relist);
          FinishFullRelist();
        }
      })),
      lister_(loop, 1),
      inspectors_(loop, std::max(1, options.inspect_workers)) {
  NODELET_CHECK(on_output_) << "PlegEngine needs an on_output callback";
  last_success_ = clock_.Now();
  if (options_.inspect_workers < 1) options_.inspect_workers = 1;
}

PlegEngine::~PlegEngine() { Stop(); }

void PlegEngine::Start() {
  started_ = true;
  next_full_ = clock_.Now();  // the first relist at once
  Schedule();
}

void PlegEngine::Stop() {
  if (!*alive_) return;
  *alive_ = false;
  relist_timer_.Cancel();
  inspect_timer_.Cancel();
  lister_.Stop();
  inspectors_.Stop();
}

void PlegEngine::OnLoop(std::function<void()> fn) {
  loop_.Post([alive = alive_, fn = std::move(fn)] {
    if (*alive) fn();
  });
}

void PlegEngine::Call(BlockingExecutor& executor, std::function<void()> work,
                      std::function<void()> then) {
  ++calls_in_flight_;
  executor.Submit(std::move(work), [this, then = std::move(then)] {
    --calls_in_flight_;
    then();
  });
}

void PlegEngine::Wake(bool was_empty) {
  if (was_empty) on_output_();
}

PlegOutput PlegEngine::Drain() {
  PlegOutput out = std::move(output_);
  output_ = {};
  return out;
}

void PlegEngine::Emit(PodResult result) {
  const bool was_empty = output_.pods.empty() && output_.relists.empty();
  output_.pods.push_back(std::move(result));
  Wake(was_empty);
}

void PlegEngine::EmitRelist(RelistResult result) {
  const bool was_empty = output_.pods.empty() && output_.relists.empty();
  output_.relists.push_back(std::move(result));
  Wake(was_empty);
}

void PlegEngine::Schedule() {
  if (!started_ || !*alive_ || busy_) return;
  const MonoTime now = clock_.Now();
  if (nudged_ || now >= next_full_) {
    if (nudged_) ++nudged_relists_;
    nudged_ = false;
    relist_timer_.Cancel();
    StartFullRelist();
    return;
  }
  // A round of single pods: asked for (RelistPods, or an inspection that ended after its pod
  // changed again), or the pods of runtime events whose time has come.
  Round round;
  round.pods.assign(pod_requests_.begin(), pod_requests_.end());
  pod_requests_.clear();
  MonoTime next_id = MonoTime::max();
  for (auto it = id_requests_.begin(); it != id_requests_.end();) {
    if (it->second.due <= now) {
      round.ids.emplace_back(it->first, it->second);
      it = id_requests_.erase(it);
    } else {
      next_id = std::min(next_id, it->second.due);
      ++it;
    }
  }
  if (!round.pods.empty() || !round.ids.empty()) {
    relist_timer_.Cancel();
    busy_ = true;
    round.wanted.insert(round.pods.begin(), round.pods.end());
    round_ = std::move(round);
    ContinueRound();
    return;
  }
  relist_timer_.ArmAt(std::min(next_full_, next_id));
}

void PlegEngine::RelistOnce() {
  if (busy_ || !*alive_) return;
  StartFullRelist();
}

void PlegEngine::Nudge() {
  OnLoop([this] {
    nudged_ = true;
    Schedule();
  });
}

void PlegEngine::RelistPods(const std::vector<std::string>& uids) {
  OnLoop([this, uids] {
    pod_requests_.insert(uids.begin(), uids.end());
    Schedule();
  });
}

PlegHealth PlegEngine::Health() const {
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
