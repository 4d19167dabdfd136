// HttpEndpoint: the supervisor's HTTP endpoint (`--http-address`, default
// 127.0.0.1:10255): /healthz (200 when every service is RUNNING, 503 otherwise, one line per
// service), /pods (a v1 PodList from statusd), /node (the v1 Node), /metrics (Prometheus text: the
// kubelet's metric names where it has them, from the services' heartbeat counters, and nodelet's
// own); with a `log_dir` (`--enable-debugging-handlers`, off by default as the kubelet's
// read-only port has no logs), /containerLogs/NAMESPACE/POD/CONTAINER (the kubelet's route and
// query parameters: follow, previous, tailLines, timestamps, sinceSeconds, limitBytes; a follow
// is streamed until the container ends or the client goes away). With a StatsSource, also
// /stats/summary (the kubelet's Summary API) and the kubelet's resource metrics on /metrics
// (stats_summary.h), from a sample at most 10 s old for /metrics and kSummaryMaxAge (2 s) for
// /stats/summary, taken when asked and shared by the requests that come meanwhile; the bound
// address is written to RUN-DIR/http-address for `nodeletctl top`.
//
// It is served by HttpServer (http_server.h: connections accepted and their heads read on the
// supervisor's loop, a pool of 4 workers, deadlines per request, per write and in the queue,
// caps on connections in all and per peer, and /healthz on a lane of its own, so idle or slow
// clients cannot hold /healthz back); the supervisor's loop takes the services' snapshot when a
// request asks for it. Construct, Start and destroy it on the loop's thread (or while no thread
// runs the loop).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lib/common/status.h"
#include "lib/ipc/sockets.h"
#include "lib/service/event_loop.h"
#include "lib/status/status_client.h"
#include "supervisor/http_server.h"
#include "supervisor/metrics_text.h"
#include "supervisor/service_control.h"
#include "supervisor/stats_summary.h"

namespace nodelet::supervisor {

// How long a request waits for the loop to take a snapshot.
inline constexpr std::chrono::milliseconds kSnapshotWait{2000};

class HttpEndpoint {
 public:
  // Serves on `loop`, the supervisor's, whose clock it uses.
  HttpEndpoint(ipc::Context& ctx, EventLoop& loop, std::string run_dir, std::string address,
               const NodeView* node = nullptr, HttpServerOptions server_options = {},
               std::string log_dir = "", UsageSampler* usage = nullptr);
  ~HttpEndpoint();
  // Binds and starts serving; an error names the address.
  Status Start();
  // /containerLogs/NAMESPACE/POD/CONTAINER (exposed for tests).
  HttpReply ContainerLogs(const HttpRequest& request);
  // Where /healthz and /metrics get the services' state: `take` runs on the loop's thread
  // (posted there when a request comes), so nothing is copied while nobody asks. Set before
  // Start.
  void SetSnapshotSource(std::function<HttpSnapshot()> take);
  int port() const { return port_; }

 private:
  // Every pod status from statusd, through this thread's client.
  Result<status::PodStatusList> ListPodStatuses();
  // A snapshot taken on the loop's thread; the last one taken when the loop does not answer
  // within kSnapshotWait (a loop that hangs is ended by its watchdog).
  HttpSnapshot Snapshot();

  ipc::Context& ctx_;
  EventLoop& loop_;
  const Clock& clock_;
  std::string run_dir_;
  std::string address_;
  const NodeView* node_ = nullptr;
  std::string log_dir_;            // "": no /containerLogs
  UsageSampler* usage_ = nullptr;  // null: no /stats/summary nor usage metrics
  std::string address_file_;       // RUN-DIR/http-address, once written
  int port_ = 0;
  std::function<HttpSnapshot()> take_;  // empty: no snapshot source
  std::mutex mu_;
  HttpSnapshot last_;  // the last snapshot taken
  HttpServerOptions server_options_;
  std::unique_ptr<HttpServer> server_;
};

}  // namespace nodelet::supervisor
