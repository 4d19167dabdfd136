// CtlServer: the supervisor's end of the operator API (ipc-schemas/ctl.fbs). It binds the ctl
// endpoint in the run directory, verifies every request, answers status, pid, version, log
// path, runtime, node and manifests at once, answers start/stop/restart when ServiceControl
// reports them done, and a stream request when podworkerd (through StreamOpener) has. Garbage gets
// an error reply (or is dropped when it cannot be answered) and never stops the server.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>

#include "lib/common/clock.h"
#include "lib/common/status.h"
#include "lib/ipc/sockets.h"
#include "supervisor/service_control.h"

namespace nodelet::supervisor {

struct CtlServerOptions {
  // The socket file is 0600, or 0660 and owned by the admin group when the context has a
  // PeerPolicy with one (ipc::Context::RequirePeerPolicy), which also checks every peer.
  std::string run_dir;
  pid_t supervisor_pid = 0;
  std::string version;
  // Serves `runtime` requests when set.
  const RuntimeView* runtime = nullptr;
  // Serves `node` requests when set.
  const NodeView* node = nullptr;
  // Serves `manifests` requests when set.
  const ManifestsView* manifests = nullptr;
  // Serves `stream` requests (exec, attach, port-forward) when set: asks podworkerd, answers
  // when it has.
  StreamOpener* streams = nullptr;
};

class CtlServer {
 public:
  CtlServer(ipc::Context& ctx, ServiceControl& services, const Clock& clock,
            CtlServerOptions options);
  ~CtlServer();
  Status Bind();
  // For the supervisor's poll loop.
  zmq::pollitem_t PollItem();
  // Handles every queued request (call when PollItem is readable).
  void OnReadable();
  uint64_t bad_requests() const;
  uint64_t requests() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared with the done-callbacks of pending requests
};

}  // namespace nodelet::supervisor
