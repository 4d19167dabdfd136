// The runtime every nodelet service runs on (plegd, statusd, volumed, podworkerd).
//
// It owns what the four have in common: flags and config, logging, SIGTERM/SIGINT/SIGHUP, the
// control connection to the supervisor (hello, heartbeats with health and counters, commands),
// and sd_notify (READY=1 once bound and connected, WATCHDOG=1 from the main loop, STOPPING=1).
// A service plugs its own work in through ServiceHooks; it never blocks the main loop, so
// heartbeats and watchdog pings stop only when the service is really stuck.
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
#include "lib/service/options.h"

namespace nodelet {

struct HealthReport {
  ipc::control::Health health = ipc::control::Health::Ok;
  std::string reason;
};

using CounterList = std::vector<std::pair<std::string, uint64_t>>;

// What the runtime gives a service.
struct ServiceContext {
  const CommonOptions& options;
  ipc::Context& ipc;
  const Clock& clock;
  uint64_t incarnation;
};

// A service's work, driven by the runtime's single-threaded main loop.
class ServiceHooks {
 public:
  virtual ~ServiceHooks() = default;
  // Binds sockets, opens stores. Runs before READY=1; an error ends the process with exit 1.
  virtual Status Start(ServiceContext& ctx) = 0;
  // zmq sockets or fds the main loop should wait on; queried every iteration.
  virtual std::vector<zmq::pollitem_t> PollItems() { return {}; }
  // After each poll, with PollItems()' items and their revents, in the same order.
  virtual void OnPoll(const std::vector<zmq::pollitem_t>& items) { (void)items; }
  // When OnTimer wants to run next.
  virtual MonoTime NextTimer() const { return MonoTime::max(); }
  virtual void OnTimer(MonoTime now) { (void)now; }
  // Reported in every heartbeat.
  virtual HealthReport Health() const { return {}; }
  virtual CounterList Counters() const { return {}; }
  // ReloadConfig command or SIGHUP, with the freshly read file.
  virtual Status Reload(const YAML::Node& config) {
    (void)config;
    return Status::Ok();
  }
  // Before exit: flush, close.
  virtual void Stop() {}
};

struct ServiceSpec {
  std::string name;         // "plegd"
  ipc::ServiceId id;        // ServiceId::Plegd
  std::string description;  // one line for --help
  // Adds the service's own flags; may be empty.
  std::function<void(CLI::App&)> add_flags;
  // Builds the hooks once flags are parsed.
  std::function<std::unique_ptr<ServiceHooks>(const CommonOptions&)> make_hooks;
};

// Parses flags, runs the service until SIGTERM/SIGINT or a Stop command, and returns the exit
// code: 0 on a requested stop, 1 on a start failure, 2 on bad flags.
int RunService(const ServiceSpec& spec, int argc, char** argv);

}  // namespace nodelet
