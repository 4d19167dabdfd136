// ChildLauncher: starts nodelet's services as real child processes. Each child gets its own
// process group, PR_SET_PDEATHSIG(SIGKILL) so it never outlives the supervisor, an empty signal
// mask, its own NOTIFY_SOCKET (a datagram socket the supervisor binds in RUN_DIR/notify/, so
// the same binaries work unchanged as systemd Type=notify units), and a pipe for stdout and
// stderr that the supervisor copies into a rotating log file, LOG_DIR/<service>.log.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lib/common/status.h"
#include "supervisor/journal_tee.h"
#include "supervisor/process_manager.h"

namespace nodelet::supervisor {

struct ChildSpec {
  std::string name;
  std::vector<std::string> argv;  // argv[0] is the executable's path
};

// A log file that rotates by size: NAME.log → NAME.log.1 → ... → NAME.log.<backups>.
class RotatingLog {
 public:
  RotatingLog(std::string path, size_t max_bytes, int backups);
  ~RotatingLog();
  void Write(const char* data, size_t len);
  const std::string& path() const { return path_; }

 private:
  void Open();
  void Rotate();
  std::string path_;
  size_t max_bytes_;
  int backups_;
  int fd_ = -1;
  size_t size_ = 0;
};

// The datagram socket a child sends sd_notify messages to.
class NotifySocket {
 public:
  static Result<std::unique_ptr<NotifySocket>> Bind(const std::string& path);
  ~NotifySocket();
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  // Reads one datagram: its text and the sender's pid (from SCM_CREDENTIALS). False when none.
  bool Receive(std::string* text, pid_t* sender);

 private:
  NotifySocket(int fd, int lock_fd, std::string path)
      : fd_(fd), lock_fd_(lock_fd), path_(std::move(path)) {}
  int fd_;
  int lock_fd_;  // PATH.lock (LockSocketPath): only its holder unlinks PATH
  std::string path_;
};

class ChildLauncher : public ProcessLauncher {
 public:
  ChildLauncher(std::string run_dir, std::string log_dir, size_t log_max_bytes, int log_backups);
  ~ChildLauncher() override;

  // Registers a service and binds its notify socket.
  Status Add(ChildSpec spec);

  Result<pid_t> Spawn(const std::string& name) override;
  void SignalGroup(pid_t pid, int sig) override;
  std::string LogPath(const std::string& name) const override;

  // For the supervisor's poll loop: every notify socket and open log pipe.
  struct Pollable {
    int fd;
    std::string name;
    bool is_notify;
  };
  std::vector<Pollable> Pollables() const;
  // Grows whenever Pollables() changes (a service added, a process spawned, a pipe closed).
  uint64_t generation() const { return generation_; }
  // Copies what is in a log pipe to the log file; closes the pipe at EOF.
  void PumpLog(const std::string& name);
  NotifySocket* Notify(const std::string& name);

 private:
  struct Child {
    ChildSpec spec;
    std::unique_ptr<NotifySocket> notify;
    std::unique_ptr<RotatingLog> log;
    // In standalone mode under systemd: the output to the journal too (journal_tee.h).
    std::unique_ptr<JournalTee> journal;
    int pipe_fd = -1;  // read end of the current process's stdout/stderr
  };
  std::string run_dir_;
  std::string log_dir_;
  size_t log_max_bytes_;
  int log_backups_;
  std::map<std::string, Child> children_;
  uint64_t generation_ = 0;
};

}  // namespace nodelet::supervisor
