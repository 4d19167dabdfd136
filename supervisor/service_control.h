// ServiceControl: what the operator API (CtlServer, nodeletctl) may see and ask of the
// supervisor's process manager. Implemented by the process manager (standalone mode) and by
// SystemdServiceControl (systemd mode); faked in tests. All calls run on the supervisor's loop
// thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ctl_generated.h"
#include "pleg_generated.h"
#include "podwork_generated.h"

namespace nodelet::supervisor {

using ProcessState = ipc::ctl::ProcessState;

// One service as the operator sees it.
struct ServiceInfo {
  std::string name;  // "plegd"
  ProcessState state = ProcessState::Stopped;
  pid_t pid = 0;           // 0 unless STARTING, RUNNING or STOPPING
  uint64_t uptime_ms = 0;  // time RUNNING, 0 otherwise
  // supervisorctl-style: "pid 1234, uptime 0:01:02", "exit 1, restart in 0.4s", ...
  std::string description;
  uint32_t restarts = 0;  // automatic restarts since the supervisor started
  std::string health;     // "ok", "degraded: why", "failing: why", "" when unknown
  std::string log_path;
  int64_t state_since_epoch_s = 0;
};

// Called exactly once when a requested change has completed (ok, "started"/"stopped") or failed
// (false, why).
using DoneCallback = std::function<void(bool ok, const std::string& message)>;

class ServiceControl {
 public:
  virtual ~ServiceControl() = default;
  // Every service, in a stable order (plegd, statusd, volumed, podworkerd).
  virtual std::vector<ServiceInfo> List() const = 0;
  virtual bool Has(const std::string& name) const = 0;
  // Start: done(true, "started") once RUNNING; done(false, ...) when it cannot start (ends in
  // BACKOFF/FATAL) or is already running ("already started"). Clears FATAL at once.
  virtual void Start(const std::string& name, DoneCallback done) = 0;
  // Stop: done(true, "stopped") once STOPPED; "not running" when it already was.
  virtual void Stop(const std::string& name, DoneCallback done) = 0;
  // Restart: stop (if running) then start; done once RUNNING or failed. Only this service is
  // touched, and the restart does not count toward the restart-intensity limit.
  virtual void Restart(const std::string& name, DoneCallback done) = 0;
};

// The runtime as plegd last reported it, for `nodeletctl runtime`. Implemented by the
// supervisor over its PlegMirror.
struct RuntimeSnapshot {
  std::vector<ipc::pleg::PodRecordT> pods;
  uint64_t relist = 0;
  std::string error;  // why the view is missing or stale; empty when current
};

// The node's status as a v1 Node object in JSON (node_status.h), for nodeletctl and /node.
class NodeView {
 public:
  virtual ~NodeView() = default;
  virtual std::string NodeJson() const = 0;
};

class RuntimeView {
 public:
  virtual ~RuntimeView() = default;
  virtual RuntimeSnapshot Runtime() const = 0;
};

// Streaming sessions (exec, attach, port-forward) asked of podworkerd for nodeletctl: the only
// way to one (podworkerd opens them only for the supervisor). Implemented by StreamRelay
// (stream_relay.h). `done` is called exactly once, on the caller's thread (the loop's), with
// podworkerd's reply or why there is none; never from within Open.
class StreamOpener {
 public:
  using Done = std::function<void(const ipc::podwork::StreamReplyT&)>;
  virtual ~StreamOpener() = default;
  virtual void Open(const ipc::podwork::StreamRequestT& request, Done done) = 0;
};

// What each manifest of each pod source became, for `nodeletctl manifests`. Implemented by the
// pod manager (its ManifestBook).
struct ManifestReport {
  std::vector<ipc::ctl::ManifestSourceT> sources;
  std::vector<ipc::ctl::ManifestStatusT> manifests;  // by source, then origin
};

class ManifestsView {
 public:
  virtual ~ManifestsView() = default;
  virtual ManifestReport Manifests() const = 0;
};

}  // namespace nodelet::supervisor
