// Supervisor::Impl: the supervisor's state and its parts, shared by the files that implement it
// (not an API: supervisor.h is). supervisor.cc runs the loop (signals, reloads, the work after
// every iteration, the aggregate reported to systemd and /healthz); supervisor_setup.cc makes the
// parts, wires them on the loop and starts them; supervisor_control.cc serves the services'
// control socket (hello, heartbeats, the commands sent to them).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "lib/common/clock.h"
#include "lib/common/logging.h"
#include "lib/common/systemd_notify.h"
#include "lib/cri/grpc_cri_client.h"
#include "lib/ipc/codec.h"
#include "lib/ipc/message.h"
#include "lib/pleg/pleg_mirror.h"
#include "lib/service/config_reload.h"
#include "lib/service/event_loop.h"
#include "lib/status/status_client.h"
#include "supervisor/after_iteration_work.h"
#include "supervisor/ctl_server.h"
#include "supervisor/eviction_manager.h"
#include "supervisor/http_endpoint.h"
#include "supervisor/node_events.h"
#include "supervisor/node_status.h"
#include "supervisor/pleg_runtime_view.h"
#include "supervisor/pod_manager.h"
#include "supervisor/service_backend.h"
#include "supervisor/stats_collector.h"
#include "supervisor/stats_summary.h"
#include "supervisor/status_sink.h"
#include "supervisor/stream_relay.h"
#include "supervisor/supervised_services.h"
#include "supervisor/supervisor.h"
#include "supervisor/supervisor_options.h"

namespace nodelet::supervisor {

class Supervisor::Impl {
 public:
  explicit Impl(SupervisorOptions o) : options_(std::move(o)) {}

  int Run();

 private:
  // supervisor.cc: the loop and what it reports.
  int Loop();
  void HandleSignal(uint32_t signo);
  void Reload();
  Status ReloadFile();
  void Report();
  HttpSnapshot HttpSnapshotNow();
  void AfterIteration();

  // supervisor_setup.cc: the parts, made and started.
  Status Setup();
  Status StartStatusSinks();
  void OnStatusWatch();
  Result<std::unique_ptr<ServiceBackend>> CreateBackend();
  EventLoop::Handle Watch(const zmq::pollitem_t& item, EventLoop::Callback callback);

  // supervisor_control.cc: the services' control socket.
  void SendCommand(const std::string& peer, ipc::control::CommandKind kind,
                   const std::string& log_level = "");
  void SendReload(const std::string& name, const std::string& peer);
  void HandleControl();

  SupervisedServices& services() { return backend_->services(); }

  SupervisorOptions options_;
  FileSettings file_settings_;  // the config file as nodelet runs it (reloads compare with it)
  uint64_t reloads_ = 0;        // reloads applied
  std::map<std::string, uint64_t> reloaded_;  // service -> the reload it was last asked for
  int lock_fd_ = -1;           // ROOT-DIR/nodelet.lock, flocked for the process's lifetime
  std::string lock_conflict_;  // set when another nodelet holds the lock
  std::shared_ptr<spdlog::logger> log_ = GetLogger("supervisor");
  RealClock& clock_ = RealClock::Get();
  // Before every component that registers on it, so it is destroyed after them.
  EventLoop loop_{clock_};
  std::unique_ptr<ipc::Context> ctx_;
  // The mode's backend: the services, spawned (standalone) or systemd's units (systemd).
  std::unique_ptr<ServiceBackend> backend_;
  std::unique_ptr<ipc::RouterServer> control_;
  std::unique_ptr<ipc::EnvelopeWriter> envelope_;
  uint64_t incarnation_ = ipc::NewIncarnation();
  std::map<std::string, std::string> peers_;  // service name -> control routing id
  std::set<std::string> hello_seen_;
  std::map<std::string, std::map<std::string, uint64_t>> service_counters_;
  std::map<std::string, uint64_t> service_messages_;
  ipc::BadMessageCounter bad_control_;
  // Before ctl_, which uses it: destroyed after it.
  std::unique_ptr<StreamRelay> streams_;
  std::unique_ptr<CtlServer> ctl_;
  std::unique_ptr<pleg::PlegMirror> mirror_;
  std::unique_ptr<PlegRuntimeView> runtime_view_;
  std::unique_ptr<PodManager> pods_;
  std::unique_ptr<cri::GrpcCriClient> cri_client_;
  // The fleet's status sinks and the watch stream that feeds them (with --etcd-endpoints);
  // before the node status, whose thread hands them the node's: destroyed after it.
  std::unique_ptr<SinkWorker> sinks_;
  std::unique_ptr<status::StatusWatcher> status_watch_;
  std::unique_ptr<NodeStatusManager> node_;
  // Node pressure as the eviction manager holds it, read by the node status and admission.
  std::shared_ptr<NodePressure> pressure_ = std::make_shared<NodePressure>();
  std::unique_ptr<StatsCollector> stats_;
  std::unique_ptr<UsageSampler> usage_;  // over stats_; used by eviction_ and http_
  // After the pod manager, the mirror and the stats it uses: destroyed before them.
  std::unique_ptr<EvictionManager> eviction_;
  ServiceEventWatcher service_events_;  // ServiceRestarted, ServiceFatal node events
  // After the usage sampler it reads: destroyed first.
  std::unique_ptr<HttpEndpoint> http_;
  SystemdNotifierImpl notifier_;
  std::string last_summary_;
  bool ready_sent_ = false;
  bool stopping_ = false;
  // The loop's sources (declared last: removed before what their callbacks use goes).
  std::vector<EventLoop::Handle> sources_;
  AfterIterationWork after_;
};

}  // namespace nodelet::supervisor
