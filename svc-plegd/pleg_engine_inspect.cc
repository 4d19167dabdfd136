// PlegEngine's inspector pool: each worker takes a pod's job, inspects the sandboxes and
// containers whose listed state differs from their last records (the others keep them), keeps
// the new records for the pod's next inspection, and queues the result for Drain.
#include "svc-plegd/pleg_engine.h"

namespace nodelet::plegd {

void PlegEngine::InspectorLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
    if (stopping_) return;
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    InspectedPod known;
    if (auto it = inspected_.find(job.view.uid); it != inspected_.end()) {
      known = std::move(it->second);
      inspected_.erase(it);
    }
    lock.unlock();
    PodResult result = Inspect(job, known);
    known = InspectedPod{};
    if (!result.inspect_failed) {
      for (const auto& c : result.record.containers) known.containers.emplace(c->id, *c);
      for (const auto& s : result.record.sandboxes) known.sandboxes.emplace(s->id, *s);
    }
    lock.lock();
    in_flight_.erase(job.view.uid);
    if (!result.inspect_failed) inspected_[job.view.uid] = std::move(known);
    if (result.inspect_failed) {
      // Try again at the next relist; the events already go out with this (stale) result.
      reinspect_.emplace(job.view.uid, std::vector<PlegEvent>{});
    } else if (reinspect_.count(job.view.uid) != 0) {
      // It changed again while this inspection ran: look at it again now.
      pod_requests_.insert(job.view.uid);
      woken_ = true;
      stop_cv_.notify_all();
    }
    if (job.counted) {
      auto it = outstanding_.find(job.relist);
      if (it != outstanding_.end() && --it->second == 0) {
        outstanding_.erase(it);
        done_cv_.notify_all();
      }
    }
    const bool wake = PushLocked(std::move(result));
    lock.unlock();
    if (wake) Wake();
    lock.lock();
  }
}

PodResult PlegEngine::Inspect(const Job& job, const InspectedPod& known) {
  ++inspections_;
  PodResult r;
  r.events = job.events;
  r.record.uid = job.view.uid;
  r.record.name = job.view.name;
  r.record.namespace_ = job.view.pod_namespace;
  r.record.foreign = job.view.foreign;
  r.record.relist = job.relist;
  r.record.listed_at_mono_ns = job.listed_at_mono_ns;
  for (const auto& id : job.view.sandbox_ids) {
    auto listed = job.view.sandboxes.find(id);
    auto last = known.sandboxes.find(id);
    if (listed != job.view.sandboxes.end() && last != known.sandboxes.end() &&
        last->second.state == listed->second) {
      r.record.sandboxes.push_back(std::make_unique<ipc::pleg::SandboxRecordT>(last->second));
      continue;
    }
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
      auto listed = job.view.containers.find(id);
      auto last = known.containers.find(id);
      if (listed != job.view.containers.end() && last != known.containers.end() &&
          listed->second != ipc::pleg::ContainerState::Unknown &&
          last->second.state == listed->second) {
        ++containers_reused_;
        r.record.containers.push_back(std::make_unique<ipc::pleg::ContainerRecordT>(last->second));
        continue;
      }
      ++containers_inspected_;
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

}  // namespace nodelet::plegd
