#include "tests/testing/containerd.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "lib/common/fs.h"
#include "tests/testing/harness.h"
#include "tests/testing/leak_check.h"

extern char** environ;

namespace nodelet::testing {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

constexpr char kNamespace[] = "k8s.io";
constexpr char kCriPluginSection[] = "[plugins.\"io.containerd.grpc.v1.cri\"]";
constexpr char kRuncOptionsSection[] =
    "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]";
constexpr char kRegistrySection[] = "[plugins.\"io.containerd.grpc.v1.cri\".registry]";
constexpr char kCniSection[] = "[plugins.\"io.containerd.grpc.v1.cri\".cni]";
constexpr char kCniConfFile[] = "10-nodelet.conflist";
// Where containerd finds the slot's lock: its descriptor number in containerd, which keeps the
// lock (an flock belongs to the open file) while it runs, also after our process is gone.
constexpr int kSlotFdInContainerd = 100;
constexpr char kTaskStateDir[] = "io.containerd.runtime.v2.task";

int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

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

milliseconds Remaining(steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - steady_clock::now());
  return left.count() > 0 ? left : milliseconds(0);
}

std::string Trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// NUL-separated argv of a process, or empty when it is gone.
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

// The last `max_lines` lines of a log, for error messages.
std::string LogTail(const std::string& path, size_t max_lines = 15) {
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

// Kills `pid` with SIGKILL and waits (pidfd) until it is gone.
bool KillAndWait(pid_t pid, milliseconds timeout) {
  if (!ProcessAlive(pid)) return true;
  kill(pid, SIGKILL);
  return WaitProcessGone(pid, timeout);
}

// Starts containerd over `config_path` in its own session, so a terminal's ^C or the test's
// process group does not reach it; stdout and stderr to `log_path`, its pid into `pid_file`.
// `slot_fd`, when not -1, is handed down as descriptor kSlotFdInContainerd.
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

}  // namespace

std::vector<std::string> DefaultImageTarballs(const std::string& images_dir) {
  return {images_dir + "/pause.tar", images_dir + "/busybox.tar"};
}

std::string ImagesDir() {
  const char* dir = std::getenv("NODELET_IMAGES_DIR");
  if (dir == nullptr)
    throw std::runtime_error("NODELET_IMAGES_DIR is not set (run through meson test)");
  return dir;
}

Result<std::string> MakeContainerdConfig(const std::string& default_config, const std::string& dir,
                                         const std::string& sandbox_image,
                                         const std::string& registry_config_path) {
  struct Setting {
    std::string section;  // "" for the top level
    std::string key;
    std::string value;  // TOML value
    bool found = false;
  };
  std::vector<Setting> settings = {
      {"", "root", Quote(dir + "/root")},
      {"", "state", Quote(dir + "/state")},
      {"[grpc]", "address", Quote(dir + "/containerd.sock")},
      {kCriPluginSection, "sandbox_image", Quote(sandbox_image)},
      {kCriPluginSection, "restrict_oom_score_adj", "true"},
      {kCriPluginSection, "netns_mounts_under_state_dir", "true"},
      // The streaming server of exec, attach and port-forward (docs/operate.md): loopback only,
      // a free port, no TLS (sessions never leave the host).
      {kCriPluginSection, "stream_server_address", Quote("127.0.0.1")},
      {kCriPluginSection, "stream_server_port", Quote("0")},
      {kCriPluginSection, "enable_tls_streaming", "false"},
      // Writable layers measured every second (default 10 s), for the local-storage tests.
      {kCriPluginSection, "stats_collect_period", "1"},
      // runc's state (default /run/containerd/runc, shared by every instance) under ours too.
      {kRuncOptionsSection, "Root", Quote(dir + "/state/runc")},
      // CNI: Debian's plugins, a conf dir of our own (empty without a pod network).
      {kCniSection, "bin_dir", Quote(kCniBinDir)},
      {kCniSection, "conf_dir", Quote(dir + "/cni/net.d")},
      {kCniSection, "max_conf_num", "1"},
  };
  if (!registry_config_path.empty()) {
    settings.push_back({kRegistrySection, "config_path", Quote(registry_config_path)});
  }
  std::string out;
  std::string section;
  std::istringstream in(default_config);
  for (std::string line; std::getline(in, line);) {
    std::string trimmed = Trim(line);
    if (!trimmed.empty() && trimmed[0] == '[') section = trimmed;
    auto eq = trimmed.find('=');
    if (eq != std::string::npos && trimmed[0] != '#' && trimmed[0] != '[') {
      std::string key = Trim(trimmed.substr(0, eq));
      for (auto& s : settings) {
        if (s.section == section && s.key == key) {
          line = line.substr(0, line.find_first_not_of(" \t")) + key + " = " + s.value;
          s.found = true;
        }
      }
    }
    out += line + "\n";
  }
  for (const auto& s : settings) {
    if (!s.found) {
      return InvalidArgument("containerd's default config has no '" + s.key + "' in section '" +
                             (s.section.empty() ? "(top level)" : s.section) + "'");
    }
  }
  return out;
}

ContainerdInstance::ContainerdInstance(std::string dir, pid_t pid, bool is_child,
                                       milliseconds stop_timeout)
    : dir_(std::move(dir)), pid_(pid), is_child_(is_child), stop_timeout_(stop_timeout) {
  pidfd_ = PidfdOpen(pid_);
  auto client = cri::GrpcCriClient::Create(endpoint());
  if (client.ok()) cri_ = std::move(client).value();
}

ContainerdInstance::~ContainerdInstance() {
  // A destructor cannot report: a failed stop shows in the leak checks of the test that ran.
  if (!released_) (void)Stop();
  // Released: containerd keeps the slot's lock (and its file) for whoever attaches later.
  if (released_) slot_.Close();
  if (pidfd_ >= 0) close(pidfd_);
}

bool ContainerdInstance::running() const {
  if (stopped_ || pid_ <= 0) return false;
  if (pidfd_ >= 0) return !PollReadable(pidfd_, milliseconds(0));
  return ProcessAlive(pid_);
}

Result<std::unique_ptr<ContainerdInstance>> ContainerdInstance::Start(
    const ContainerdOptions& options) {
  auto deadline = steady_clock::now() + options.start_timeout;
  if (options.dir.empty() || options.dir[0] != '/') {
    return InvalidArgument("containerd dir '" + options.dir + "' must be an absolute path");
  }
  const std::string& dir = options.dir;
  if ((dir + "/containerd.sock.ttrpc").size() > 107) {
    return InvalidArgument("containerd dir '" + dir + "' is too long for a unix socket path");
  }
  for (const char* sub : {"", "/root", "/state"}) {
    if (Status s = EnsureDirectory(dir + sub, 0700); !s.ok()) return s;
  }
  std::string pid_file = dir + "/containerd.pid";
  if (std::string old = ReadTextFile(pid_file); !old.empty()) {
    pid_t old_pid = static_cast<pid_t>(std::atoi(old.c_str()));
    if (old_pid > 0 && ProcessAlive(old_pid)) {
      return Status(StatusCode::kAlreadyExists, "containerd already runs in '" + dir + "' (pid " +
                                                    std::to_string(old_pid) + ")");
    }
  }
  for (const auto& tarball : options.image_tarballs) {
    if (access(tarball.c_str(), R_OK) != 0) {
      return NotFound("image tarball '" + tarball + "' is missing (run images/build-images)");
    }
  }
  std::string containerd = FindOnPath(options.containerd_bin);
  std::string ctr = FindOnPath(options.ctr_bin);
  if (containerd.empty())
    return NotFound("'" + options.containerd_bin + "' is not installed (package containerd)");
  if (ctr.empty())
    return NotFound("'" + options.ctr_bin + "' is not installed (package containerd)");
  if (FindOnPath("runc").empty()) return NotFound("'runc' is not installed (package runc)");

  auto defaults = RunCommand({containerd, "config", "default"}, Remaining(deadline));
  if (defaults.exit_code != 0) {
    return Internal("'containerd config default' failed: " + defaults.output);
  }
  auto config = MakeContainerdConfig(defaults.output, dir, options.sandbox_image,
                                     options.registry_config_path);
  if (!config.ok()) return config.status();
  std::string config_path = dir + "/config.toml";
  {
    std::ofstream out(config_path, std::ios::trunc);
    out << *config;
    if (!out.flush()) return ErrnoStatus("write '" + config_path + "'", errno);
  }

  // A small image filesystem: a tmpfs over root/ (unmounted by Stop() through CleanLeftovers,
  // or right here when containerd cannot be started).
  bool root_mounted = false;
  if (options.root_tmpfs_bytes > 0) {
    std::string root = dir + "/root";
    std::string data = "size=" + std::to_string(options.root_tmpfs_bytes) + ",mode=0700";
    if (mount("tmpfs", root.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, data.c_str()) != 0) {
      return ErrnoStatus("mount a tmpfs of " + std::to_string(options.root_tmpfs_bytes) +
                             " bytes at '" + root + "'",
                         errno);
    }
    root_mounted = true;
  }

  // The pod network: a slot of our own, its conf list, its FORWARD rule. Cleaned by Stop() once
  // the instance exists, or right here when containerd cannot be started.
  std::string cni_dir = dir + "/cni";
  PodNetwork network;
  CniSlot slot;
  auto undo_network = [&] {
    if (network.slot >= 0) {
      (void)CleanPodNetworkLeftovers(network);
      std::error_code ec;
      fs::remove_all(cni_dir + "/ipam", ec);
      unlink((cni_dir + "/slot").c_str());
    }
    slot.Release();
  };
  auto undo_all = [&] {
    undo_network();
    if (root_mounted) umount2((dir + "/root").c_str(), MNT_DETACH);
  };
  Status cni_ready = [&]() -> Status {
    for (const std::string& sub : {cni_dir, cni_dir + "/net.d"}) {
      if (Status s = EnsureDirectory(sub, 0700); !s.ok()) return s;
    }
    std::error_code ec;
    for (const auto& old : fs::directory_iterator(cni_dir + "/net.d", ec))
      fs::remove(old.path(), ec);
    if (!options.pod_network) return Status::Ok();
    auto acquired = CniSlot::Acquire(dir);
    if (!acquired.ok()) return acquired.status();
    slot = std::move(acquired).value();
    network = PodNetworkForSlot(slot.slot());
    std::string ipam = cni_dir + "/ipam";
    fs::remove_all(ipam, ec);
    if (Status s = EnsureDirectory(ipam, 0700); !s.ok()) return s;
    {
      std::ofstream out(cni_dir + "/slot", std::ios::trunc);
      out << network.slot << "\n";
      if (!out.flush()) return ErrnoStatus("write '" + cni_dir + "/slot'", errno);
    }
    if (Status s = AddForwardAcceptRule(network); !s.ok()) return s;
    // Written last, through a rename: containerd watches the directory.
    std::string conf = cni_dir + "/net.d/" + kCniConfFile;
    {
      std::ofstream out(conf + ".tmp", std::ios::trunc);
      out << MakeCniConfList(network, ipam);
      if (!out.flush()) return ErrnoStatus("write '" + conf + ".tmp'", errno);
    }
    if (rename((conf + ".tmp").c_str(), conf.c_str()) != 0) {
      return ErrnoStatus("rename to '" + conf + "'", errno);
    }
    return Status::Ok();
  }();
  if (!cni_ready.ok()) {
    undo_all();
    return cni_ready;
  }

  std::string log_path = dir + "/containerd.log";
  auto spawned = SpawnContainerd(containerd, config_path, log_path, pid_file, slot.fd());
  if (!spawned.ok()) {
    undo_all();
    return spawned.status();
  }
  pid_t pid = *spawned;
  std::unique_ptr<ContainerdInstance> instance(
      new ContainerdInstance(dir, pid, /*is_child=*/true, options.stop_timeout));
  instance->network_ = network;
  instance->slot_ = std::move(slot);
  if (instance->cri_ == nullptr) return Internal("cannot create a CRI client for '" + dir + "'");
  instance->containerd_path_ = containerd;

  // Wait for CRI Version. The wait itself is gRPC's wait-for-ready (it connects as soon as the
  // socket answers); slicing it lets us notice a containerd that exits at startup.
  for (;;) {
    auto left = Remaining(deadline);
    if (left.count() == 0) {
      return DeadlineExceeded("containerd in '" + dir + "' did not answer CRI Version within " +
                              std::to_string(options.start_timeout.count()) +
                              " ms; log:" + LogTail(log_path));
    }
    auto version = instance->cri_->WaitForReady(std::min(left, milliseconds(500)));
    if (version.ok()) break;
    if (!instance->running()) {
      return Unavailable("containerd in '" + dir + "' exited at startup; log:" + LogTail(log_path));
    }
  }

  for (const auto& tarball : options.image_tarballs) {
    auto imported = RunCommand(
        {ctr, "-a", instance->socket_path(), "-n", kNamespace, "images", "import", tarball},
        Remaining(deadline));
    if (imported.exit_code != 0) {
      return Internal("ctr images import '" + tarball + "' failed" +
                      (imported.timed_out ? std::string(" (timed out)") : std::string()) + ": " +
                      imported.output);
    }
  }

  // CRI learns of imported images from containerd's event stream, a moment after `ctr` returns.
  // There is no event a client can wait on, so check with a short backoff, bounded.
  if (!options.image_tarballs.empty()) {
    cri::v1::ImageSpec sandbox_image;
    sandbox_image.set_image(options.sandbox_image);
    milliseconds backoff(2);
    for (;;) {
      auto status = instance->cri_->ImageStatus(sandbox_image, false);
      if (status.ok() && status->has_image()) break;
      if (Remaining(deadline).count() == 0) {
        return DeadlineExceeded("CRI does not see the sandbox image '" + options.sandbox_image +
                                "' after the import" +
                                (status.ok() ? std::string() : ": " + status.status().message()));
      }
      std::this_thread::sleep_for(std::min(backoff, Remaining(deadline)));
      backoff = std::min(backoff * 2, milliseconds(100));
    }
  }
  return instance;
}

Result<std::unique_ptr<ContainerdInstance>> ContainerdInstance::Attach(const std::string& dir,
                                                                       milliseconds stop_timeout) {
  std::string pid_file = dir + "/containerd.pid";
  std::string text = ReadTextFile(pid_file);
  if (text.empty()) return NotFound("no containerd pid file in '" + dir + "'");
  pid_t pid = static_cast<pid_t>(std::atoi(text.c_str()));
  if (pid <= 0) return InvalidArgument("bad containerd pid file '" + pid_file + "'");
  // Only adopt the process if it really is our containerd (pids are reused).
  bool ours = false;
  if (ProcessAlive(pid)) {
    auto argv = Cmdline(pid);
    ours = argv.size() >= 3 && fs::path(argv[0]).filename() == "containerd" &&
           std::find(argv.begin(), argv.end(), dir + "/config.toml") != argv.end();
  }
  std::unique_ptr<ContainerdInstance> instance(
      new ContainerdInstance(dir, ours ? pid : -1, /*is_child=*/false, stop_timeout));
  // The pod network's slot, as Start() recorded it; its lock is held by containerd.
  std::string slot_text = ReadTextFile(dir + "/cni/slot");
  if (!slot_text.empty()) {
    int slot = std::atoi(slot_text.c_str());
    if (slot < 0 || slot >= kCniSlots) {
      return InvalidArgument("bad CNI slot file '" + dir + "/cni/slot'");
    }
    instance->network_ = PodNetworkForSlot(slot);
  }
  return instance;
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

std::string ContainerdInstance::cni_conf_list() const {
  return has_pod_network() ? ReadTextFile(cni_conf_dir() + "/" + kCniConfFile) : "";
}

Status ContainerdInstance::CleanPodNetwork() {
  if (!has_pod_network()) return Status::Ok();
  // An attached instance does not hold the slot (its containerd did, and is gone now): take it,
  // unless another instance took it over after ours died (the lock file names its owner).
  if (!slot_.held()) {
    std::string owner = Trim(ReadTextFile(CniSlotLockPath(network_.slot)));
    while (!owner.empty() && owner.back() == '\n') owner.pop_back();
    if (!owner.empty() && owner != dir_) {
      return FailedPrecondition("CNI slot " + std::to_string(network_.slot) + " belongs to '" +
                                owner + "' now; left alone");
    }
    auto taken = CniSlot::AcquireSlot(network_.slot, dir_);  // cleans leftovers too
    if (taken.ok()) slot_ = std::move(taken).value();
  }
  Status first = CleanPodNetworkLeftovers(network_);
  std::error_code ec;
  fs::remove_all(ipam_data_dir(), ec);
  if (ec && first.ok()) first = Internal("remove '" + ipam_data_dir() + "': " + ec.message());
  unlink((dir_ + "/cni/slot").c_str());
  slot_.Release();
  return first;
}

pid_t ContainerPid(cri::RuntimeService& cri, const std::string& container_id) {
  auto st = cri.ContainerStatus(container_id, true);
  if (!st.ok()) return -1;
  auto it = st->info().find("info");
  if (it == st->info().end()) return -1;
  auto info = nlohmann::json::parse(it->second, nullptr, false);
  if (info.is_discarded() || !info.contains("pid") || !info["pid"].is_number_integer()) return -1;
  return info["pid"].get<pid_t>();
}

}  // namespace nodelet::testing
