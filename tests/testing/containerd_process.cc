// The containerd daemon of a private instance as a process: spawned in its own session (with
// the CNI slot's lock handed down), watched through a pidfd, restarted over the same config and
// state, stopped (SIGTERM, then SIGKILL); the shims that serve it.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/testing/containerd.h"
#include "tests/testing/containerd_internal.h"
#include "tests/testing/harness.h"

extern char** environ;

namespace nodelet::testing {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

// Where containerd finds the slot's lock: its descriptor number in containerd, which keeps the
// lock (an flock belongs to the open file) while it runs, also after our process is gone.
constexpr int kSlotFdInContainerd = 100;

bool PollReadable(int fd, milliseconds timeout) {
  auto end = steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<milliseconds>(end - steady_clock::now());
    if (left.count() < 0) left = milliseconds(0);
    pollfd p{fd, POLLIN, 0};
    int r = poll(&p, 1, static_cast<int>(left.count()));
    if (r > 0) return true;
    if (r == 0 || errno != EINTR) return false;
  }
}

std::vector<pid_t> AllPids() {
  std::vector<pid_t> pids;
  DIR* d = opendir("/proc");
  if (d == nullptr) return pids;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (end != e->d_name && *end == '\0' && pid > 0) pids.push_back(static_cast<pid_t>(pid));
  }
  closedir(d);
  return pids;
}

}  // namespace

namespace containerd_internal {

int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

milliseconds Remaining(steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - steady_clock::now());
  return left.count() > 0 ? left : milliseconds(0);
}

std::vector<std::string> Cmdline(pid_t pid) {
  std::string raw = ReadTextFile("/proc/" + std::to_string(pid) + "/cmdline");
  std::vector<std::string> argv;
  std::string cur;
  for (char c : raw) {
    if (c == '\0') {
      argv.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) argv.push_back(cur);
  return argv;
}

std::string LogTail(const std::string& path, size_t max_lines) {
  std::string text = ReadTextFile(path);
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::string out;
  for (size_t i = lines.size() > max_lines ? lines.size() - max_lines : 0; i < lines.size(); ++i) {
    out += "\n  " + lines[i];
  }
  return out;
}

std::string FindOnPath(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::istringstream in(path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin");
  for (std::string dir; std::getline(in, dir, ':');) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  // Debian puts runc in /usr/sbin, which a non-login PATH may lack.
  for (const char* dir : {"/usr/sbin", "/sbin", "/usr/local/sbin"}) {
    std::string candidate = std::string(dir) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

Result<pid_t> SpawnContainerd(const std::string& containerd, const std::string& config_path,
                              const std::string& log_path, const std::string& pid_file,
                              int slot_fd) {
  std::vector<std::string> argv = {containerd, "--config", config_path};
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  int spare_fd = -1;
  if (slot_fd >= 0) {
    // dup2 onto itself would keep close-on-exec: move it first.
    if (slot_fd == kSlotFdInContainerd) slot_fd = spare_fd = fcntl(slot_fd, F_DUPFD_CLOEXEC, 3);
    posix_spawn_file_actions_adddup2(&fa, slot_fd, kSlotFdInContainerd);
  }
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t empty;
  sigemptyset(&empty);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK);
  // The CNI plugins that containerd runs look up iptables on PATH; Debian keeps it in /usr/sbin,
  // which a test's PATH may lack.
  std::vector<std::string> env_strings;
  bool has_path = false;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string var = *e;
    if (var.rfind("PATH=", 0) == 0) {
      has_path = true;
      if (var.find("/usr/sbin") == std::string::npos) var += ":/usr/sbin:/sbin";
    }
    env_strings.push_back(var);
  }
  if (!has_path) env_strings.push_back("PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin");
  std::vector<char*> env;
  for (auto& var : env_strings) env.push_back(var.data());
  env.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, args[0], &fa, &attr, args.data(), env.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (spare_fd >= 0) close(spare_fd);
  if (rc != 0) return ErrnoStatus("start '" + containerd + "'", rc);
  std::ofstream out(pid_file, std::ios::trunc);
  out << pid << "\n";
  return pid;
}

}  // namespace containerd_internal

using containerd_internal::Cmdline;
using containerd_internal::FindOnPath;
using containerd_internal::LogTail;
using containerd_internal::PidfdOpen;
using containerd_internal::Remaining;
using containerd_internal::SpawnContainerd;

bool ContainerdInstance::running() const {
  if (stopped_ || pid_ <= 0) return false;
  if (pidfd_ >= 0) return !PollReadable(pidfd_, milliseconds(0));
  return ProcessAlive(pid_);
}

std::vector<pid_t> ContainerdInstance::ShimPids() const {
  std::vector<pid_t> shims;
  std::string socket = socket_path();
  for (pid_t pid : AllPids()) {
    auto argv = Cmdline(pid);
    if (argv.empty() || fs::path(argv[0]).filename().string().rfind("containerd-shim", 0) != 0)
      continue;
    for (size_t i = 0; i + 1 < argv.size(); ++i) {
      if (argv[i] == "-address" && argv[i + 1] == socket) {
        shims.push_back(pid);
        break;
      }
    }
  }
  return shims;
}

Status ContainerdInstance::Restart(milliseconds start_timeout,
                                   const std::function<void()>& while_down) {
  if (stopped_) return FailedPrecondition("containerd in '" + dir_ + "' was stopped");
  if (Status s = StopContainerd(); !s.ok()) return s;
  if (pidfd_ >= 0) close(pidfd_);
  pidfd_ = -1;
  if (while_down) while_down();
  std::string containerd = containerd_path_.empty() ? FindOnPath("containerd") : containerd_path_;
  if (containerd.empty()) return NotFound("'containerd' is not installed (package containerd)");
  std::string log_path = dir_ + "/containerd.log";
  auto spawned = SpawnContainerd(containerd, dir_ + "/config.toml", log_path,
                                 dir_ + "/containerd.pid", slot_.fd());
  if (!spawned.ok()) return spawned.status();
  pid_ = *spawned;
  is_child_ = true;
  pidfd_ = PidfdOpen(pid_);
  auto deadline = steady_clock::now() + start_timeout;
  for (;;) {
    auto left = Remaining(deadline);
    if (left.count() == 0) {
      return DeadlineExceeded(
          "restarted containerd in '" + dir_ + "' did not answer CRI Version within " +
          std::to_string(start_timeout.count()) + " ms; log:" + LogTail(log_path));
    }
    if (cri_->WaitForReady(std::min(left, milliseconds(500))).ok()) return Status::Ok();
    if (!running())
      return Unavailable("restarted containerd in '" + dir_ + "' exited; log:" + LogTail(log_path));
  }
}

Status ContainerdInstance::StopContainerd() {
  if (pid_ <= 0) return Status::Ok();
  Status result;
  if (running()) {
    kill(pid_, SIGTERM);
    bool gone =
        pidfd_ >= 0 ? PollReadable(pidfd_, stop_timeout_) : WaitProcessGone(pid_, stop_timeout_);
    if (!gone) {
      kill(pid_, SIGKILL);
      gone = pidfd_ >= 0 ? PollReadable(pidfd_, milliseconds(10000))
                         : WaitProcessGone(pid_, milliseconds(10000));
      result = Status(StatusCode::kDeadlineExceeded,
                      "containerd (pid " + std::to_string(pid_) + ") ignored SIGTERM for " +
                          std::to_string(stop_timeout_.count()) + " ms; killed");
      if (!gone)
        result = Internal("containerd (pid " + std::to_string(pid_) + ") survived SIGKILL");
    }
  }
  if (is_child_) {
    int status = 0;
    waitpid(pid_, &status, WNOHANG);
  }
  return result;
}

}  // namespace nodelet::testing
