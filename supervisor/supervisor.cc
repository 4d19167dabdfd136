// The supervisor's loop: its start and its end at SIGTERM or SIGINT, SIGHUP's reload, the work
// after every iteration, and the aggregate health (sd_notify's READY=1, STATUS= and STOPPING=1;
// the snapshot /healthz and /metrics show). The parts are made in supervisor_setup.cc; the
// services' control socket is served in supervisor_control.cc.
#include "supervisor/supervisor.h"

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "lib/common/heap.h"
#include "supervisor/supervisor_impl.h"
#include "supervisor/supervisor_reload.h"

namespace nodelet::supervisor {

int Supervisor::Impl::Run() {
  if (Status s = Setup(); !s.ok()) {
    if (!lock_conflict_.empty()) {
      std::fprintf(stderr, "%s\n", lock_conflict_.c_str());
      return 1;
    }
    log_->error("Failed to start nodelet: {}", s.message());
    return 1;
  }
  return Loop();
}

int Supervisor::Impl::Loop() {
  WatchdogPinger watchdog(notifier_, clock_, WatchdogInterval());
  loop_.SetWatchdog(&watchdog);
  backend_->StartServices();
  after_ = AfterIterationWork(loop_, [this] { AfterIteration(); });
  after_.WakeAt(pods_->NextTick());
  EventLoop::Timer release_heap = loop_.AddTimer(ReleaseFreeHeap);
  release_heap.ArmRepeating(kHeapReleasePeriod);
  Report();
  Status run = loop_.Run();
  loop_.SetWatchdog(nullptr);
  if (!run.ok()) {
    log_->critical("{}", run.message());
    return 1;
  }
  log_->info("every service stopped; exiting");
  return 0;
}

void Supervisor::Impl::HandleSignal(uint32_t signo) {
  if (signo == SIGHUP) {
    Reload();
    return;
  }
  if (!stopping_) {
    log_->info("received {}, stopping every service", strsignal(static_cast<int>(signo)));
    stopping_ = true;
    notifier_.Notify("STOPPING=1\nSTATUS=stopping");
    backend_->StopServices();
    // Its runtime calls end within their timeout while the services stop.
    node_->RequestStop();
    eviction_->RequestStop();
  }
}

// SIGHUP: reads the config file again and applies what can change while nodelet runs (the log
// level, the manifest sources, the eviction settings); names what needs a restart. Then each
// service is asked to reload too, with the supervisor's log level (in standalone mode its
// command line holds the level the supervisor gave it). A file that does not parse, or a new
// value that is invalid, is refused whole and logged; nothing changes.
void Supervisor::Impl::Reload() {
  notifier_.Notify("RELOADING=1\nSTATUS=reloading the configuration");
  const std::string& file = options_.common.config_file;
  Status result = ReloadFile();
  if (!result.ok()) {
    log_->error("Reload of {} refused, nothing changed: {}", file.empty() ? "(no --config)" : file,
                result.message());
  }
  notifier_.Notify("READY=1\nSTATUS=running");
}

Status Supervisor::Impl::ReloadFile() {
  SupervisorOptions scratch;
  auto flags = MakeSupervisorFlags(&scratch);
  auto after = ReadFileSettings(options_.common.config_file, "supervisor", flags->app);
  if (!after.ok()) return after.status();
  ReloadPlan plan = PlanReload(file_settings_, *after, SupervisorLiveKeys(), options_.argv);
  SupervisorOptions next;
  auto reload = ParseSupervisorReload(plan, *after, flags->app, options_, next);
  if (!reload.ok()) return reload.status();
  if (Status s = ApplySupervisorReload(*reload, *pods_, *node_, *eviction_); !s.ok()) return s;
  options_ = std::move(next);
  file_settings_ = SettingsAfterReload(file_settings_, *after, plan);
  log_->info("Reloaded {}: {}", options_.common.config_file, plan.Summary());
  ++reloads_;
  for (const auto& [name, peer] : peers_) SendReload(name, peer);
  return Status::Ok();
}

void Supervisor::Impl::Report() {
  std::string summary = stopping_ ? "stopping" : services().Summary();
  if (summary != last_summary_) {
    last_summary_ = summary;
    log_->info("{}", summary);
    notifier_.Notify("STATUS=" + summary);
  }
  if (!ready_sent_ && !stopping_ && services().AllRunning()) {
    // Sending never blocks; READY=1 that found the queue full is sent again next iteration.
    ready_sent_ =
        notifier_.Notify("READY=1\nSTATUS=" + summary) || std::getenv("NOTIFY_SOCKET") == nullptr;
  }
}

// What /healthz and /metrics show, taken on the loop's thread when a request comes.
HttpSnapshot Supervisor::Impl::HttpSnapshotNow() {
  HttpSnapshot snap{services().List(), service_counters_, service_messages_, bad_control_.count()};
  snap.source_failures = pods_->source_failures();
  if (eviction_) snap.evictions = eviction_->evictions_by_signal();
  return snap;
}

// What the loop runs after every iteration, after the backend's own after-iteration work
// (reaping or reading the bus, the services' timers): the pod manager's timers, what the
// stats and the node status read, the summary. (The HTTP endpoint's snapshot is taken when a
// request asks for it: HttpSnapshotNow.)
void Supervisor::Impl::AfterIteration() {
  if (!stopping_) pods_->Tick();
  stats_->UpdateFromPleg(*mirror_);
  node_->SetServices(services().AllRunning(), services().Summary());
  for (auto& e :
       service_events_.Observe(services().List(), options_.node_name, clock_.WallSeconds())) {
    pods_->RecordNodeEvent(std::move(e));
  }
  after_.WakeAt(pods_->NextTick());
  Report();
  if (stopping_ && services().AllStopped()) loop_.Stop();
}

Supervisor::Supervisor(SupervisorOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
Supervisor::~Supervisor() = default;

int Supervisor::Run() { return impl_->Run(); }

}  // namespace nodelet::supervisor
