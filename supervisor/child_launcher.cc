#include "supervisor/child_launcher.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "lib/common/fs.h"
#include "lib/common/logging.h"
#include "lib/ipc/endpoints.h"

extern char** environ;

namespace nodelet::supervisor {

RotatingLog::RotatingLog(std::string path, size_t max_bytes, int backups)
    : path_(std::move(path)), max_bytes_(max_bytes), backups_(backups) {
  Open();
}

RotatingLog::~RotatingLog() {
  if (fd_ >= 0) close(fd_);
}

void RotatingLog::Open() {
  fd_ = open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  struct stat st {};
  size_ = (fd_ >= 0 && fstat(fd_, &st) == 0) ? static_cast<size_t>(st.st_size) : 0;
}

void RotatingLog::Rotate() {
  if (fd_ >= 0) close(fd_);
  for (int i = backups_; i >= 1; --i) {
    std::string from = i == 1 ? path_ : path_ + "." + std::to_string(i - 1);
    std::string to = path_ + "." + std::to_string(i);
    rename(from.c_str(), to.c_str());
  }
  if (backups_ <= 0) unlink(path_.c_str());
  Open();
}

void RotatingLog::Write(const char* data, size_t len) {
  if (max_bytes_ > 0 && size_ + len > max_bytes_ && size_ > 0) Rotate();
  if (fd_ < 0) return;  // the log directory is unusable; output is dropped, the child runs on
  ssize_t n = write(fd_, data, len);
  if (n > 0) size_ += static_cast<size_t>(n);
}

Result<std::unique_ptr<NotifySocket>> NotifySocket::Bind(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path)
    return InvalidArgument("notify socket path too long: " + path);
  std::strcpy(addr.sun_path, path.c_str());
  Result<int> lock = LockSocketPath(path);
  if (!lock.ok()) return lock.status();
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    int err = errno;
    close(*lock);
    return ErrnoStatus("socket", err);
  }
  unlink(path.c_str());
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    int err = errno;
    close(fd);
    close(*lock);
    return ErrnoStatus("Failed to bind notify socket '" + path + "'", err);
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof one);
  chmod(path.c_str(), 0600);
  return std::unique_ptr<NotifySocket>(new NotifySocket(fd, *lock, path));
}

NotifySocket::~NotifySocket() {
  close(fd_);
  unlink(path_.c_str());
  close(lock_fd_);
}

bool NotifySocket::Receive(std::string* text, pid_t* sender) {
  char buf[4096];
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred))];
  iovec iov{buf, sizeof buf - 1};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n = recvmsg(fd_, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0) return false;
  *sender = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
      ucred cred{};
      std::memcpy(&cred, CMSG_DATA(c), sizeof cred);
      *sender = cred.pid;
    }
  }
  text->assign(buf, static_cast<size_t>(n));
  return true;
}

ChildLauncher::ChildLauncher(std::string run_dir, std::string log_dir, size_t log_max_bytes,
                             int log_backups)
    : run_dir_(std::move(run_dir)),
      log_dir_(std::move(log_dir)),
      log_max_bytes_(log_max_bytes),
      log_backups_(log_backups) {}

ChildLauncher::~ChildLauncher() {
  for (auto& [_, c] : children_) {
    if (c.pipe_fd >= 0) close(c.pipe_fd);
  }
}

Status ChildLauncher::Add(ChildSpec spec) {
  const std::string notify_dir = run_dir_ + "/" + ipc::kNotifyDir;
  if (Status s = EnsureDirectory(notify_dir, 0700); !s.ok()) return s;
  auto sock = NotifySocket::Bind(notify_dir + "/" + spec.name + ".sock");
  if (!sock.ok()) return sock.status();
  Child c;
  c.notify = std::move(sock).value();
  c.log = std::make_unique<RotatingLog>(log_dir_ + "/" + spec.name + ".log", log_max_bytes_,
                                        log_backups_);
  if (StderrIsJournal()) {
    c.journal = JournalTee::Open("nodelet-" + spec.name);
    if (!c.journal) {
      GetLogger("supervisor")
          ->warn("journald takes no stream for {}: its output is in {} only", spec.name,
                 c.log->path());
    }
  }
  c.spec = std::move(spec);
  std::string name = c.spec.name;
  children_[name] = std::move(c);
  ++generation_;
  return Status::Ok();
}

Result<pid_t> ChildLauncher::Spawn(const std::string& name) {
  auto it = children_.find(name);
  if (it == children_.end()) return NotFound("no service '" + name + "'");
  Child& c = it->second;
  if (access(c.spec.argv[0].c_str(), X_OK) != 0) {
    return ErrnoStatus("cannot execute '" + c.spec.argv[0] + "'", errno);
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return ErrnoStatus("pipe", errno);

  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "NOTIFY_SOCKET=", 14) == 0 || std::strncmp(*e, "WATCHDOG_", 9) == 0 ||
        std::strncmp(*e, "LISTEN_", 7) == 0) {
      continue;  // those were meant for the supervisor itself
    }
    env_strings.emplace_back(*e);
  }
  env_strings.push_back("NOTIFY_SOCKET=" + c.notify->path());
  std::vector<char*> envp, argv;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  for (auto& s : c.spec.argv) argv.push_back(s.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  // Upper bound for the fallback below, computed here: sysconf is not async-signal-safe.
  long open_max = sysconf(_SC_OPEN_MAX);
  const int fd_limit = open_max > 0 && open_max < 65536 ? static_cast<int>(open_max) : 65536;

  pid_t pid = fork();
  if (pid < 0) {
    int err = errno;
    close(fds[0]);
    close(fds[1]);
    return ErrnoStatus("fork", err);
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the supervisor died between fork and prctl
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig = 1; sig < NSIG; ++sig) signal(sig, SIG_DFL);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    // The child keeps only 0, 1 and 2: every other fd (listeners, the lock, pipes of other
    // children) closes at exec, whether or not whoever opened it asked for CLOEXEC.
    if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
      for (int fd = 3; fd < fd_limit; ++fd) fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
    execve(argv[0], argv.data(), envp.data());
    const char msg[] = "nodelet: exec failed\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(127);
  }
  // Also set the group from the parent, so a signal to the group cannot race the child's setpgid.
  setpgid(pid, pid);
  close(fds[1]);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  if (c.pipe_fd >= 0) {
    PumpLog(name);  // what the previous instance left
    if (c.pipe_fd >= 0) close(c.pipe_fd);
  }
  c.pipe_fd = fds[0];
  ++generation_;
  return pid;
}

void ChildLauncher::SignalGroup(pid_t pid, int sig) {
  if (pid <= 0) return;
  if (kill(-pid, sig) != 0) kill(pid, sig);
}

std::string ChildLauncher::LogPath(const std::string& name) const {
  auto it = children_.find(name);
  return it == children_.end() ? "" : it->second.log->path();
}

std::vector<ChildLauncher::Pollable> ChildLauncher::Pollables() const {
  std::vector<Pollable> out;
  for (const auto& [name, c] : children_) {
    out.push_back({c.notify->fd(), name, true});
    if (c.pipe_fd >= 0) out.push_back({c.pipe_fd, name, false});
  }
  return out;
}

void ChildLauncher::PumpLog(const std::string& name) {
  auto it = children_.find(name);
  if (it == children_.end() || it->second.pipe_fd < 0) return;
  Child& c = it->second;
  char buf[65536];
  for (int i = 0; i < 16; ++i) {
    ssize_t n = read(c.pipe_fd, buf, sizeof buf);
    if (n > 0) {
      c.log->Write(buf, static_cast<size_t>(n));
      if (c.journal) c.journal->Write(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) {  // every writer closed it: the process (and its children) are gone
      close(c.pipe_fd);
      c.pipe_fd = -1;
      ++generation_;
    }
    break;
  }
}

NotifySocket* ChildLauncher::Notify(const std::string& name) {
  auto it = children_.find(name);
  return it == children_.end() ? nullptr : it->second.notify.get();
}

}  // namespace nodelet::supervisor
