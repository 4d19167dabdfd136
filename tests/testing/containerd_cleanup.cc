// ContainerdInstance::Stop: every sandbox and container removed through CRI, the daemon stopped,
// then whatever is left cleaned by hand (shims and their processes, its containers' cgroups and
// shim sockets, the mounts under its directory) and its pod network.
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <set>
#include <sstream>
#include <thread>

#include "tests/testing/containerd.h"
#include "tests/testing/containerd_internal.h"
#include "tests/testing/harness.h"
#include "tests/testing/leak_check.h"

namespace nodelet::testing {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

constexpr char kTaskStateDir[] = "io.containerd.runtime.v2.task";

// The children of `pid` (every thread's), from /proc/PID/task/*/children.
std::vector<pid_t> ChildrenOf(pid_t pid) {
  std::vector<pid_t> children;
  std::error_code ec;
  for (const auto& task : fs::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::istringstream in(ReadTextFile(task.path().string() + "/children"));
    pid_t child;
    while (in >> child) children.push_back(child);
  }
  return children;
}

// Kills `pid` with SIGKILL and waits (pidfd) until it is gone.
bool KillAndWait(pid_t pid, milliseconds timeout) {
  if (!ProcessAlive(pid)) return true;
  kill(pid, SIGKILL);
  return WaitProcessGone(pid, timeout);
}

}  // namespace

using containerd_internal::Trim;

Status ContainerdInstance::Stop() {
  if (stopped_) return Status::Ok();
  Status first;
  auto keep = [&](Status s) {
    if (first.ok() && !s.ok()) first = std::move(s);
  };
  if (running()) keep(RemoveEverythingThroughCri());
  keep(StopContainerd());
  keep(CleanLeftovers());
  keep(CleanPodNetwork());
  unlink((dir_ + "/containerd.pid").c_str());
  stopped_ = true;
  return first;
}

Status ContainerdInstance::RemoveEverythingThroughCri() {
  cri::CriTimeouts timeouts;
  timeouts.call = std::chrono::seconds(20);
  timeouts.query = std::chrono::seconds(5);
  auto client = cri::GrpcCriClient::Create(endpoint(), timeouts);
  if (!client.ok()) return client.status();
  Status first;
  auto keep = [&](Status s) {
    if (first.ok() && !s.ok()) first = std::move(s);
  };
  auto sandboxes = (*client)->ListPodSandbox({});
  if (!sandboxes.ok()) return sandboxes.status();
  for (const auto& sandbox : *sandboxes) {
    // A stop can fail for a moment when the test's own processes were stopping the same sandbox
    // as they were killed ("failed to kill sandbox container: ttrpc: closed" while the shim
    // exits). What counts is that the sandbox is removed: stop and remove are retried until
    // the removal succeeds or the deadline passes.
    const auto deadline = steady_clock::now() + seconds(20);
    for (;;) {
      (void)(*client)->StopPodSandbox(sandbox.id());
      Status removed = (*client)->RemovePodSandbox(sandbox.id());
      if (removed.ok() || removed.code() == StatusCode::kNotFound) break;
      if (steady_clock::now() >= deadline) {
        keep(removed);
        break;
      }
      std::this_thread::sleep_for(milliseconds(200));  // a retry, bounded by the deadline
    }
  }
  // Containers left over, or made meanwhile by an agent still running against this containerd
  // (a test's nodelet restarting its pod): one that is starting cannot be removed for a
  // moment ("container is in starting state"), so the removals are retried until none is left
  // or the deadline passes.
  const auto deadline = steady_clock::now() + seconds(20);
  for (;;) {
    auto containers = (*client)->ListContainers({});
    if (!containers.ok()) return containers.status();
    Status last;
    for (const auto& container : *containers) {
      Status removed = (*client)->RemoveContainer(container.id());
      if (!removed.ok() && removed.code() != StatusCode::kNotFound && last.ok()) last = removed;
    }
    if (last.ok()) break;
    if (steady_clock::now() >= deadline) {
      keep(last);
      break;
    }
    std::this_thread::sleep_for(milliseconds(200));  // a retry, bounded by the deadline
  }
  return first;
}

Status ContainerdInstance::CleanLeftovers() {
  Status first;
  auto keep = [&](Status s) {
    if (first.ok() && !s.ok()) first = std::move(s);
  };
  // Container ids that still have a task bundle (normally none after the CRI removal).
  std::set<std::string> ids;
  std::error_code ec;
  for (const auto& ns : fs::directory_iterator(dir_ + "/state/" + kTaskStateDir, ec)) {
    std::error_code ec2;
    for (const auto& bundle : fs::directory_iterator(ns.path(), ec2))
      ids.insert(bundle.path().filename());
  }
  // Shims and whatever they still run, by pid.
  for (pid_t shim : ShimPids()) {
    for (pid_t child : ChildrenOf(shim)) KillAndWait(child, milliseconds(5000));
    if (!KillAndWait(shim, milliseconds(5000))) {
      keep(Internal("containerd shim pid " + std::to_string(shim) + " survived SIGKILL"));
    }
  }
  // Processes left in the cgroups of our containers; then the cgroups themselves.
  if (!ids.empty()) {
    std::vector<fs::path> cgroups;
    for (const auto& hierarchy : fs::directory_iterator("/sys/fs/cgroup", ec)) {
      std::error_code ec2;
      for (auto it = fs::recursive_directory_iterator(hierarchy.path(), ec2);
           it != fs::recursive_directory_iterator(); it.increment(ec2)) {
        if (ec2) break;
        if (it.depth() > 3) {
          it.disable_recursion_pending();
          continue;
        }
        if (it->is_directory() && ids.count(it->path().filename().string()) > 0) {
          cgroups.push_back(it->path());
          it.disable_recursion_pending();
        }
      }
    }
    for (const auto& cgroup : cgroups) {
      std::istringstream procs(ReadTextFile((cgroup / "cgroup.procs").string()));
      pid_t pid;
      while (procs >> pid) KillAndWait(pid, milliseconds(5000));
    }
    for (const auto& cgroup : cgroups) {
      if (rmdir(cgroup.c_str()) != 0 && errno != ENOENT) {
        keep(ErrnoStatus("remove cgroup '" + cgroup.string() + "'", errno));
      }
    }
    // Shim sockets live under /run/containerd/s/, shared by every containerd; each bundle
    // records its own.
    for (const auto& ns : fs::directory_iterator(dir_ + "/state/" + kTaskStateDir, ec)) {
      for (const auto& id : ids) {
        std::string address = Trim(ReadTextFile((ns.path() / id / "address").string()));
        if (address.rfind("unix://", 0) == 0) unlink(address.substr(7).c_str());
      }
    }
  }
  // Mounts under our directory (rootfs overlays, sandbox /dev/shm, netns).
  for (int round = 0; round < 8; ++round) {
    auto mounts = MountsUnder(dir_);
    if (mounts.empty()) break;
    for (const auto& m : mounts) umount2(m.c_str(), MNT_DETACH);
  }
  if (auto left = MountsUnder(dir_); !left.empty()) {
    keep(Internal("cannot unmount '" + left.front() + "'"));
  }
  return first;
}

}  // namespace nodelet::testing
