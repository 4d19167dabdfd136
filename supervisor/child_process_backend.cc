#include "supervisor/child_process_backend.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "nodelet_version.h"

namespace nodelet::supervisor {

Result<std::unique_ptr<ChildProcessBackend>> ChildProcessBackend::Create(
    EventLoop& loop, ChildProcessBackendOptions options) {
  // Orphaned grandchildren are ours to reap.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  auto launcher = std::make_unique<ChildLauncher>(options.run_dir, options.log_dir,
                                                  options.log_max_bytes, options.log_backups);
  for (const auto& spec : options.children) {
    if (Status s = launcher->Add(spec); !s.ok()) return s;
  }
  std::unique_ptr<ChildProcessBackend> backend(
      new ChildProcessBackend(loop, std::move(options), std::move(launcher)));
  backend->Register();
  return backend;
}

ChildProcessBackend::ChildProcessBackend(EventLoop& loop, ChildProcessBackendOptions options,
                                         std::unique_ptr<ChildLauncher> launcher)
    : loop_(loop), options_(std::move(options)), launcher_(std::move(launcher)) {
  std::vector<std::string> names;
  for (const auto& spec : options_.children) names.push_back(spec.name);
  manager_ = std::make_unique<ProcessManager>(loop_.clock(), *launcher_, options_.policy, names);
}

ChildProcessBackend::~ChildProcessBackend() {
  for (;;) {
    int st = 0;
    if (waitpid(-1, &st, WNOHANG) <= 0) break;
  }
}

void ChildProcessBackend::Register() {
  // Nothing to do on the signal itself: it wakes the loop, and AfterIteration reaps.
  sources_.push_back(loop_.AddSignal(SIGCHLD, [](const signalfd_siginfo&) {}));
  after_ = AfterIterationWork(loop_, [this] { AfterIteration(); });
  WatchChildren();
}

void ChildProcessBackend::StartServices() {
  manager_->StartAll();
  log_->info("nodelet {} supervising {} services (run dir {})", NODELET_VERSION,
             options_.children.size(), options_.run_dir);
  WatchChildren();
  after_.WakeAt(manager_->NextDeadline());
}

void ChildProcessBackend::StopServices() {
  stopping_ = true;
  manager_->StopAll();
}

void ChildProcessBackend::HandleNotify(const std::string& name) {
  NotifySocket* sock = launcher_->Notify(name);
  std::string text;
  pid_t sender = 0;
  for (int i = 0; i < 64 && sock->Receive(&text, &sender); ++i) {
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
      if (line == "READY=1") manager_->OnReady(name, sender);
    }
  }
}

void ChildProcessBackend::Reap() {
  for (;;) {
    int st = 0;
    pid_t pid = waitpid(-1, &st, WNOHANG);
    if (pid <= 0) break;
    if (const std::string* name = manager_->NameOf(pid)) {
      std::string n = *name;
      launcher_->PumpLog(n);
      log_->log(stopping_ ? spdlog::level::info : spdlog::level::warn, "{} (pid {}) exited: {}", n,
                pid, DescribeWaitStatus(st));
    }
    manager_->OnExit(pid, st);
  }
}

void ChildProcessBackend::WatchChildren() {
  watched_generation_ = launcher_->generation();
  std::set<std::tuple<int, std::string, bool>> now;
  for (const auto& p : launcher_->Pollables()) {
    auto key = std::make_tuple(p.fd, p.name, p.is_notify);
    now.insert(key);
    if (child_sources_.count(key) != 0) continue;
    std::string name = p.name;
    EventLoop::Callback cb;
    if (p.is_notify) {
      cb = [this, name] { HandleNotify(name); };
    } else {
      cb = [this, name] { launcher_->PumpLog(name); };
    }
    child_sources_[key] = loop_.AddFd(p.fd, std::move(cb));
  }
  std::erase_if(child_sources_, [&](const auto& kv) { return now.count(kv.first) == 0; });
}

void ChildProcessBackend::AfterIteration() {
  Reap();
  manager_->Tick();
  if (launcher_->generation() != watched_generation_) WatchChildren();
  after_.WakeAt(manager_->NextDeadline());
}

}  // namespace nodelet::supervisor
