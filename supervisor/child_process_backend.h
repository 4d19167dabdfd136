// ChildProcessBackend: the standalone mode's ServiceBackend. nodelet spawns each service as its
// own child (ChildLauncher: process group, NOTIFY_SOCKET, log pipe) and keeps it running by the
// ProcessManager's rules (start timeout, backoff, FATAL, hang detection). It owns its sources on
// the supervisor's loop: SIGCHLD, each service's notify socket (READY=1) and the log pipe of its
// current process, a timer at the process manager's next deadline, and an after-iteration
// callback that reaps every exited child (nodelet is a child subreaper, so orphaned
// grandchildren too), runs the process manager's timers and watches the pipes of new processes.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "lib/common/clock.h"
#include "lib/common/logging.h"
#include "lib/common/status.h"
#include "lib/service/event_loop.h"
#include "supervisor/after_iteration_work.h"
#include "supervisor/child_launcher.h"
#include "supervisor/process_manager.h"
#include "supervisor/service_backend.h"

namespace nodelet::supervisor {

struct ChildProcessBackendOptions {
  std::string run_dir;  // the notify sockets are RUN_DIR/notify/<service>.sock
  std::string log_dir;  // each service's output goes to LOG_DIR/<service>.log
  size_t log_max_bytes = 10 * 1024 * 1024;
  int log_backups = 3;
  SupervisorPolicy policy;
  std::vector<ChildSpec> children;  // the services, in the order they are listed
};

class ChildProcessBackend : public ServiceBackend {
 public:
  // Makes nodelet a child subreaper, binds every service's notify socket and registers the
  // backend's sources on `loop`; spawns nothing yet (StartServices).
  static Result<std::unique_ptr<ChildProcessBackend>> Create(EventLoop& loop,
                                                             ChildProcessBackendOptions options);
  // Reaps whatever descendant is left (the services themselves are gone by then).
  ~ChildProcessBackend() override;

  SupervisedServices& services() override { return *manager_; }
  void StartServices() override;
  void StopServices() override;

 private:
  ChildProcessBackend(EventLoop& loop, ChildProcessBackendOptions options,
                      std::unique_ptr<ChildLauncher> launcher);
  void Register();
  void HandleNotify(const std::string& name);
  void Reap();
  // Matches the loop's readers to the notify sockets and the open log pipes as they are now.
  void WatchChildren();
  void AfterIteration();

  EventLoop& loop_;
  ChildProcessBackendOptions options_;
  std::shared_ptr<spdlog::logger> log_ = GetLogger("supervisor");
  std::unique_ptr<ChildLauncher> launcher_;
  std::unique_ptr<ProcessManager> manager_;
  bool stopping_ = false;
  // The loop's sources, last: removed before what their callbacks use.
  std::vector<EventLoop::Handle> sources_;
  // By (fd, service, is the notify socket): the log pipes change as the services restart.
  std::map<std::tuple<int, std::string, bool>, EventLoop::Handle> child_sources_;
  uint64_t watched_generation_ = 0;  // the launcher's generation child_sources_ follows
  AfterIterationWork after_;
};

}  // namespace nodelet::supervisor
