// The runtime every nodelet service runs on (plegd, statusd, volumed, podworkerd).
//
// It owns what the four have in common: flags and config, logging, SIGTERM/SIGINT/SIGHUP, the
// control connection to the supervisor (hello, heartbeats with health and counters, commands),
// and sd_notify (READY=1 once bound and connected, WATCHDOG=1 from the main loop, STOPPING=1).
// Everything runs on one EventLoop (lib/service/event_loop.h). A service is created with the
// ServiceContext, the loop included, and registers its own sources on it; it never blocks the
// loop, so heartbeats and watchdog pings stop only when the service is really stuck.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "control_generated.h"
#include "lib/common/clock.h"
#include "lib/common/status.h"
#include "lib/ipc/sockets.h"
#include "lib/service/event_loop.h"
#include "lib/service/options.h"

namespace nodelet {

struct HealthReport {
  ipc::control::Health health = ipc::control::Health::Ok;
  std::string reason;
};

using CounterList = std::vector<std::pair<std::string, uint64_t>>;

// What the runtime gives a service; it outlives the service.
struct ServiceContext {
  const CommonOptions& options;
  ipc::Context& ipc;
  const Clock& clock;
  uint64_t incarnation;
  EventLoop& loop;
};

// A running service. It registers its sources (sockets, fds, timers, posts from its threads) on
// ctx.loop when it is created and keeps their handles; the runtime asks it only for these.
class Service {
 public:
  virtual ~Service() = default;
  // Reported in every heartbeat.
  virtual HealthReport Health() const { return {}; }
  virtual CounterList Counters() const { return {}; }
  // ReloadConfig command or SIGHUP, with the freshly read file.
  virtual Status Reload(const YAML::Node& config) {
    (void)config;
    return Status::Ok();
  }
  // Before exit, once the loop has stopped: flush, close, join threads.
  virtual void Stop() {}
};

struct ServiceSpec {
  std::string name;         // "plegd"
  ipc::ServiceId id;        // ServiceId::Plegd
  std::string description;  // one line for --help
  // Adds the service's own flags; may be empty.
  std::function<void(CLI::App&)> add_flags;
  // Creates the service once flags are parsed: binds sockets, opens stores, starts threads and
  // registers its sources on ctx.loop. Runs before READY=1; an error ends the process with
  // exit 1.
  std::function<Result<std::unique_ptr<Service>>(ServiceContext& ctx)> create;
};

// The service's CLI11 app: the shared flags (into `opts`) and the service's own.
std::unique_ptr<CLI::App> MakeServiceApp(const ServiceSpec& spec, CommonOptions& opts);

// Parses flags, runs the service until SIGTERM/SIGINT or a Stop command, and returns the exit
// code: 0 on a requested stop, 1 on a start failure, 2 on bad flags.
int RunService(const ServiceSpec& spec, int argc, char** argv);

}  // namespace nodelet
