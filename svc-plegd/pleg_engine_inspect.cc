// PlegEngine's inspections: each queued pod's job goes to the inspectors' executor, which
// inspects the sandboxes and containers whose listed state differs from their last records (the
// others keep them); back on the loop the new records are kept for the pod's next inspection,
// the result is output, and the full relist waiting for it is told.
#include "svc-plegd/pleg_engine.h"

namespace nodelet::plegd {

void PlegEngine::DispatchJobs() {
  std::vector<Job> jobs = std::move(jobs_);
  jobs_.clear();
  for (auto& queued : jobs) {
    struct Inspection {
      Job job;
      InspectedPod known;
      PodResult result;
    };
    auto inspection = std::make_shared<Inspection>();
    inspection->job = std::move(queued);
    if (auto it = inspected_.find(inspection->job.view.uid); it != inspected_.end()) {
      inspection->known = std::move(it->second);
      inspected_.erase(it);
    }
    Call(
        inspectors_,
        [this, inspection] {
          inspection->result = Inspect(inspection->job, inspection->known);
          inspection->known = InspectedPod{};
        },
        [this, inspection] { OnInspected(inspection->job, std::move(inspection->result)); });
  }
}

void PlegEngine::OnInspected(const Job& job, PodResult result) {
  const std::string& uid = job.view.uid;
  in_flight_.erase(uid);
  if (result.inspect_failed) {
    // Try again at the next relist; the events already go out with this (stale) result.
    reinspect_.emplace(uid, std::vector<PlegEvent>{});
  } else {
    InspectedPod known;
    for (const auto& c : result.record.containers) known.containers.emplace(c->id, *c);
    for (const auto& s : result.record.sandboxes) known.sandboxes.emplace(s->id, *s);
    inspected_[uid] = std::move(known);
    if (reinspect_.count(uid) != 0) {
      // It changed again while this inspection ran: look at it again now.
      pod_requests_.insert(uid);
    }
  }
  Emit(std::move(result));
  bool relist_done = false;
  if (job.counted) {
    auto it = outstanding_.find(job.relist);
    if (it != outstanding_.end() && --it->second == 0) {
      outstanding_.erase(it);
      relist_done = full_ != nullptr && full_->relist == job.relist;
    }
  }
  if (relist_done) {
    FinishFullRelist();  // schedules what is due
  } else {
    Schedule();
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
