// Test helpers for integration tests: temporary directories, child processes ended by pid,
// a NOTIFY_SOCKET listener, and running a command with a deadline. Every wait has a deadline
// and waits on the event itself (pidfd, socket), never on a sleep.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace nodelet::testing {

using std::chrono::milliseconds;

// A fresh directory under /tmp, removed with everything in it on destruction. Mounts below it
// are not expected (tests that mount clean up their own mounts first).
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// The --cgroup-root of a test's nodelet or podworkerd: "/nodelet-test/<last component of dir>",
// so that tests running at once never share a kubepods cgroup (nor sweep each other's pod
// cgroups). RemoveCgroupTree (leak_check.h) removes it; `./dev test` removes trees whose test
// directory (/tmp/<that component>) is gone.
inline std::string TestCgroupRoot(const std::string& dir) {
  return "/nodelet-test/" + dir.substr(dir.find_last_of('/') + 1);
}

// /sys/fs/cgroup and each hierarchy directory in it (symlinked aliases left out).
std::vector<std::string> CgroupHierarchyDirs();

// Removes the cgroupfs path `path` with everything below it, deepest first, in every hierarchy
// under /sys/fs/cgroup (rmdir only: a cgroup with a process stays), then its parent where that
// is empty. Returns what stayed. TempDir's destructor does it for TestCgroupRoot(its path).
std::vector<std::string> RemoveCgroupTree(const std::string& path);

// The build tree's bin/ directory (where meson copies every binary), from the
// NODELET_BIN_DIR environment variable that meson's test() sets.
std::string BinDir();

// A child process started with posix_spawn in its own process group; stdout and stderr go to
// `log_path` (or are inherited when empty). Destruction kills the group with SIGKILL and reaps.
class Subprocess {
 public:
  Subprocess(std::vector<std::string> argv, std::map<std::string, std::string> extra_env = {},
             std::string log_path = "");
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  bool running() const { return !exited_; }
  // Sends `sig` to the process (not the group).
  void Signal(int sig);
  // Waits for the exit up to `timeout`; returns the wait status, or nullopt on timeout.
  std::optional<int> Wait(milliseconds timeout);

 private:
  pid_t pid_ = -1;
  int pidfd_ = -1;
  bool exited_ = false;
  int status_ = 0;
};

// Binds a datagram socket, to be passed to a child as NOTIFY_SOCKET, and reads sd_notify
// datagrams from it.
class NotifyListener {
 public:
  explicit NotifyListener(const std::string& path);
  ~NotifyListener();
  const std::string& path() const { return path_; }
  // The next datagram, or nullopt after `timeout`.
  std::optional<std::string> Receive(milliseconds timeout);
  // Reads datagrams until one contains `needle`; returns it, or nullopt at the deadline.
  // Every datagram read is kept in history().
  std::optional<std::string> WaitFor(const std::string& needle, milliseconds timeout);
  const std::vector<std::string>& history() const { return history_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::vector<std::string> history_;
};

struct CommandResult {
  int exit_code = -1;  // -1 when killed by a signal or timed out
  std::string output;  // stdout and stderr, interleaved
  bool timed_out = false;
};

// Runs argv to completion (killing it at the deadline) and returns its exit code and output.
CommandResult RunCommand(const std::vector<std::string>& argv, milliseconds timeout);

// True when a process with this pid exists (and is not a zombie).
bool ProcessAlive(pid_t pid);

// Waits for `pid`, not a child of ours, to disappear (pidfd); false at the deadline.
bool WaitProcessGone(pid_t pid, milliseconds timeout);

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, read, released), for a
// test server or probe target.
int FreeLoopbackPort();

// The whole file as text; "" when it cannot be read, and what was read before a read error (a
// /proc file of a process that exits meanwhile).
std::string ReadTextFile(const std::string& path);
// Writes `content` to `path`, making its parent directories (stand-in trees: cgroups, /proc).
void WriteTextFile(const std::string& path, const std::string& content);
// A file of `bytes` bytes of data (written, not sparse, so that it has blocks), parents made.
void WriteDataFile(const std::string& path, size_t bytes);

}  // namespace nodelet::testing
