#include "tests/testing/harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

extern char** environ;

namespace nodelet::testing {
namespace {

int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

bool PollIn(int fd, milliseconds timeout) {
  auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() < 0) left = milliseconds(0);
    pollfd p{fd, POLLIN, 0};
    int r = poll(&p, 1, static_cast<int>(left.count()));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

}  // namespace

namespace {

namespace fs = std::filesystem;

void RemoveDeepestFirst(const std::string& dir, std::vector<std::string>& stayed) {
  std::error_code ec;
  std::vector<std::string> children;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::error_code ec2;
    if (e.is_directory(ec2) && !e.is_symlink(ec2)) children.push_back(e.path().string());
  }
  for (const auto& c : children) RemoveDeepestFirst(c, stayed);
  if (rmdir(dir.c_str()) != 0 && errno != ENOENT) stayed.push_back(dir);
}

}  // namespace

std::vector<std::string> CgroupHierarchyDirs() {
  std::vector<std::string> out = {"/sys/fs/cgroup"};
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/sys/fs/cgroup", ec)) {
    std::error_code ec2;
    if (e.is_directory(ec2) && !e.is_symlink(ec2)) out.push_back(e.path().string());
  }
  return out;
}

std::vector<std::string> RemoveCgroupTree(const std::string& path) {
  std::vector<std::string> stayed;
  const std::string parent = fs::path(path).parent_path().string();
  for (const auto& h : CgroupHierarchyDirs()) {
    std::error_code ec;
    if (fs::exists(h + path, ec)) RemoveDeepestFirst(h + path, stayed);
    // The parent alone, when nothing else is in it (another test's tree keeps it).
    if (parent != "/" && !parent.empty()) (void)rmdir((h + parent).c_str());
  }
  return stayed;
}

TempDir::TempDir() {
  char tmpl[] = "/tmp/nodelet-test.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  // The cgroups a nodelet of this test made under its --cgroup-root (TestCgroupRoot), if any.
  (void)RemoveCgroupTree(TestCgroupRoot(path_));
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string BinDir() {
  const char* dir = std::getenv("NODELET_BIN_DIR");
  if (dir == nullptr)
    throw std::runtime_error("NODELET_BIN_DIR is not set (run through meson test)");
  return dir;
}

Subprocess::Subprocess(std::vector<std::string> argv, std::map<std::string, std::string> extra_env,
                       std::string log_path) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (auto& [k, v] : extra_env) {
    if (v.empty()) {
      env.erase(k);
    } else {
      env[k] = v;
    }
  }
  std::vector<std::string> env_strings;
  for (auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  for (auto& s : argv) args.push_back(s.data());
  args.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (!log_path.empty()) {
    posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
  }
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t empty;
  sigemptyset(&empty);
  posix_spawnattr_setsigmask(&attr, &empty);
  int rc = posix_spawn(&pid_, args[0], &fa, &attr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) throw std::runtime_error("posix_spawn " + argv[0] + ": " + strerror(rc));
  pidfd_ = PidfdOpen(pid_);
}

Subprocess::~Subprocess() {
  if (!exited_) {
    kill(-pid_, SIGKILL);
    kill(pid_, SIGKILL);
    Wait(milliseconds(10000));
  }
  if (pidfd_ >= 0) close(pidfd_);
}

void Subprocess::Signal(int sig) {
  if (!exited_) kill(pid_, sig);
}

std::optional<int> Subprocess::Wait(milliseconds timeout) {
  if (exited_) return status_;
  if (pidfd_ >= 0 && !PollIn(pidfd_, timeout)) return std::nullopt;
  int status = 0;
  pid_t r = waitpid(pid_, &status, pidfd_ >= 0 ? WNOHANG : 0);
  if (r != pid_) return std::nullopt;
  exited_ = true;
  status_ = status;
  return status_;
}

NotifyListener::NotifyListener(const std::string& path) : path_(path) {
  fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) throw std::runtime_error("notify path too long");
  std::strcpy(addr.sun_path, path.c_str());
  unlink(path.c_str());
  if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    throw std::runtime_error("bind " + path + ": " + strerror(errno));
  }
}

NotifyListener::~NotifyListener() {
  close(fd_);
  unlink(path_.c_str());
}

std::optional<std::string> NotifyListener::Receive(milliseconds timeout) {
  if (!PollIn(fd_, timeout)) return std::nullopt;
  char buf[4096];
  ssize_t n = recv(fd_, buf, sizeof buf, 0);
  if (n < 0) return std::nullopt;
  history_.emplace_back(buf, static_cast<size_t>(n));
  return history_.back();
}

std::optional<std::string> NotifyListener::WaitFor(const std::string& needle,
                                                   milliseconds timeout) {
  auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    auto d = Receive(left);
    if (!d) return std::nullopt;
    if (d->find(needle) != std::string::npos) return d;
  }
}

CommandResult RunCommand(const std::vector<std::string>& argv, milliseconds timeout) {
  CommandResult result;
  char tmpl[] = "/tmp/nodelet-cmd.XXXXXX";
  int fd = mkstemp(tmpl);
  if (fd < 0) throw std::runtime_error("mkstemp failed");
  close(fd);
  {
    Subprocess p(argv, {}, tmpl);
    auto status = p.Wait(timeout);
    if (!status) {
      result.timed_out = true;
    } else if (WIFEXITED(*status)) {
      result.exit_code = WEXITSTATUS(*status);
    }
  }
  std::ifstream in(tmpl);
  result.output.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  unlink(tmpl);
  return result;
}

bool ProcessAlive(pid_t pid) {
  const std::string line = ReadTextFile("/proc/" + std::to_string(pid) + "/stat");
  if (line.empty()) return false;
  auto close_paren = line.rfind(')');
  if (close_paren == std::string::npos || close_paren + 2 >= line.size()) return false;
  return line[close_paren + 2] != 'Z';
}

bool WaitProcessGone(pid_t pid, milliseconds timeout) {
  int fd = PidfdOpen(pid);
  if (fd < 0) return errno == ESRCH;
  bool gone = PollIn(fd, timeout);
  close(fd);
  return gone || !ProcessAlive(pid);
}

int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

std::string ReadTextFile(const std::string& path) {
  // read(2), not a filebuf: a /proc file of a process that exits meanwhile fails with ESRCH,
  // which libstdc++'s filebuf throws as an ios_failure (once aborting a whole suite).
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

void WriteTextFile(const std::string& path, const std::string& content) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << content;
}

void WriteDataFile(const std::string& path, size_t bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  const std::string chunk(4096, 'x');
  for (size_t done = 0; done < bytes; done += chunk.size()) {
    out.write(chunk.data(), static_cast<std::streamsize>(std::min(chunk.size(), bytes - done)));
  }
}

}  // namespace nodelet::testing
