#include "tests/testing/etcd_cluster.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>
#include <utility>

namespace nodelet::testing {
namespace {

using std::chrono::milliseconds;
using Steady = std::chrono::steady_clock;

constexpr const char* kEtcd = "/usr/bin/etcd";
constexpr int kStartAttempts = 3;
constexpr milliseconds kOpenSslTimeout{20000};
constexpr milliseconds kStopGrace{10000};
constexpr milliseconds kKillWait{10000};

milliseconds Left(Steady::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - Steady::now());
  return left.count() < 0 ? milliseconds(0) : left;
}

bool PollIn(int fd, milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  for (;;) {
    int r = poll(&p, 1, static_cast<int>(timeout.count()));
    if (r >= 0) return r > 0;
    if (errno != EINTR) return false;
  }
}

Status RunOpenSsl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/openssl"};
  argv.insert(argv.end(), args.begin(), args.end());
  CommandResult r = RunCommand(argv, kOpenSslTimeout);
  if (r.exit_code != 0) {
    std::string line;
    for (const auto& a : argv) line += a + " ";
    return Internal("openssl failed (" + line + "): " + r.output);
  }
  return Status::Ok();
}

std::string Tail(const std::string& text, size_t bytes) {
  return text.size() <= bytes ? text : text.substr(text.size() - bytes);
}

}  // namespace

EtcdCluster::EtcdCluster(EtcdClusterOptions options) : options_(std::move(options)) {
  members_.resize(static_cast<size_t>(std::max(1, options_.members)));
  for (size_t i = 0; i < members_.size(); ++i) {
    Member& m = members_[i];
    m.name = "m" + std::to_string(i);
    m.data_dir = dir_.Sub(m.name + ".etcd");
    m.log_path = dir_.Sub(m.name + ".log");
  }
}

EtcdCluster::~EtcdCluster() {
  status_clients_.clear();
  for (auto& m : members_) {
    if (m.pid > 0) (void)End(m, SIGKILL, kKillWait);
  }
  // dir_ removes the data and the logs.
}

std::vector<std::string> EtcdCluster::endpoints() const {
  std::vector<std::string> out;
  for (const auto& m : members_) out.push_back(m.client_url);
  return out;
}

std::string EtcdCluster::endpoints_string() const {
  std::string out;
  for (const auto& m : members_) out += (out.empty() ? "" : ",") + m.client_url;
  return out;
}

const std::string& EtcdCluster::endpoint(int i) const { return members_.at(i).client_url; }
bool EtcdCluster::running(int i) const { return members_.at(i).pid > 0; }
pid_t EtcdCluster::pid(int i) const { return members_.at(i).pid; }
const std::string& EtcdCluster::log_path(int i) const { return members_.at(i).log_path; }

Status EtcdCluster::MakeCertificates() {
  ca_file_ = dir_.Sub("ca.crt");
  ca_key_ = dir_.Sub("ca.key");
  server_cert_ = dir_.Sub("server.crt");
  server_key_ = dir_.Sub("server.key");
  // P-256 keys: made in milliseconds, where RSA takes a noticeable part of a second.
  Status s =
      RunOpenSsl({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                  "-nodes", "-keyout", ca_key_, "-out", ca_file_, "-days", "2", "-subj",
                  "/CN=nodelet-test-etcd-ca", "-addext", "basicConstraints=critical,CA:TRUE",
                  "-addext", "keyUsage=critical,keyCertSign,cRLSign"});
  if (!s.ok()) return s;
  const std::string csr = dir_.Sub("server.csr");
  const std::string ext = dir_.Sub("server.ext");
  WriteTextFile(ext,
                "basicConstraints=CA:FALSE\n"
                "keyUsage=critical,digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=serverAuth,clientAuth\n"
                "subjectAltName=IP:127.0.0.1,DNS:localhost\n");
  s = RunOpenSsl({"req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                  "-nodes", "-keyout", server_key_, "-out", csr, "-subj", "/CN=etcd-server"});
  if (!s.ok()) return s;
  return RunOpenSsl({"x509", "-req", "-in", csr, "-CA", ca_file_, "-CAkey", ca_key_,
                     "-CAcreateserial", "-CAserial", dir_.Sub("ca.srl"), "-out", server_cert_,
                     "-days", "2", "-extfile", ext});
}

Result<EtcdCluster::CertFiles> EtcdCluster::ClientCert(const std::string& common_name) {
  if (!options_.tls) return FailedPrecondition("EtcdCluster: ClientCert needs TLS mode");
  if (ca_file_.empty()) {
    Status s = MakeCertificates();
    if (!s.ok()) return s;
  }
  if (common_name.empty() || common_name.find_first_of("/\\=,+\"<>;") != std::string::npos) {
    return InvalidArgument("EtcdCluster: unsuitable CN '" + common_name + "'");
  }
  CertFiles files{dir_.Sub("client-" + common_name + ".crt"),
                  dir_.Sub("client-" + common_name + ".key")};
  if (std::filesystem::exists(files.cert_file)) return files;
  const std::string csr = dir_.Sub("client-" + common_name + ".csr");
  const std::string ext = dir_.Sub("client.ext");
  WriteTextFile(ext,
                "basicConstraints=CA:FALSE\n"
                "keyUsage=critical,digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=clientAuth\n");
  Status s =
      RunOpenSsl({"req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                  "-nodes", "-keyout", files.key_file, "-out", csr, "-subj", "/CN=" + common_name});
  if (!s.ok()) return s;
  s = RunOpenSsl({"x509", "-req", "-in", csr, "-CA", ca_file_, "-CAkey", ca_key_, "-CAcreateserial",
                  "-CAserial", dir_.Sub("ca.srl"), "-out", files.cert_file, "-days", "2",
                  "-extfile", ext});
  if (!s.ok()) return s;
  return files;
}

Result<etcd::ClientOptions> EtcdCluster::ClientOptionsFor(const std::string& common_name) {
  etcd::ClientOptions o;
  o.endpoints = endpoints();
  if (options_.tls) {
    auto cert = ClientCert(common_name);
    if (!cert.ok()) return cert.status();
    o.ca_file = ca_file_;
    o.cert_file = cert->cert_file;
    o.key_file = cert->key_file;
  }
  return o;
}

std::vector<std::string> EtcdCluster::MemberArgs(const Member& m) const {
  std::string initial_cluster;
  for (const auto& other : members_) {
    initial_cluster += (initial_cluster.empty() ? "" : ",") + other.name + "=" + other.peer_url;
  }
  const std::vector<std::pair<const char*, std::string>> flags = {
      {"--name", m.name},
      {"--data-dir", m.data_dir},
      {"--listen-client-urls", m.client_url},
      {"--advertise-client-urls", m.client_url},
      {"--listen-peer-urls", m.peer_url},
      {"--initial-advertise-peer-urls", m.peer_url},
      {"--initial-cluster", initial_cluster},
      {"--initial-cluster-state", "new"},
      // Unique per cluster: members of two tests' clusters never take each other for peers.
      {"--initial-cluster-token", std::filesystem::path(dir_.path()).filename().string()},
      // Elections in about half a second (etcd's defaults: 100 and 1000).
      {"--heartbeat-interval", "50"},
      {"--election-timeout", "500"},
      // History stays until a test compacts it.
      {"--auto-compaction-retention", "0"},
      {"--logger", "zap"},
      {"--log-outputs", "stderr"},
  };
  std::vector<std::string> args = {kEtcd};
  for (const auto& [flag, value] : flags) {
    args.push_back(flag);
    args.push_back(value);
  }
  if (options_.tls) {
    args.insert(args.end(), {"--client-cert-auth", "--trusted-ca-file", ca_file_, "--cert-file",
                             server_cert_, "--key-file", server_key_});
  }
  args.insert(args.end(), options_.extra_args.begin(), options_.extra_args.end());
  return args;
}

Status EtcdCluster::Spawn(Member& m) {
  std::vector<std::string> args = MemberArgs(m);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // A clean environment: ETCD_* variables of the caller would override the flags.
  std::string path_env = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
  std::vector<char*> envp = {path_env.data(), nullptr};
  const int log_fd = open(m.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return ErrnoStatus("open " + m.log_path, errno);
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = getpid();
  // Between fork and exec only async-signal-safe calls: gRPC's threads run in this process.
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(log_fd);
    if (null_fd >= 0) close(null_fd);
    return ErrnoStatus("fork", err);
  }
  if (pid == 0) {
    // Dies with the thread that started it, so a crashed test leaves no etcd behind.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (null_fd >= 0) dup2(null_fd, 0);
    dup2(log_fd, 1);
    dup2(log_fd, 2);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  close(log_fd);
  if (null_fd >= 0) close(null_fd);
  m.pid = pid;
  m.pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  return Status::Ok();
}

bool EtcdCluster::Exited(Member& m) {
  if (m.pid <= 0) return true;
  int status = 0;
  if (waitpid(m.pid, &status, WNOHANG) != m.pid) return false;
  if (m.pidfd >= 0) close(m.pidfd);
  m.pid = -1;
  m.pidfd = -1;
  return true;
}

Status EtcdCluster::End(Member& m, int signal, milliseconds grace) {
  if (m.pid <= 0) return FailedPrecondition("etcd member " + m.name + " is not running");
  kill(m.pid, signal);
  if (m.pidfd >= 0 && !PollIn(m.pidfd, grace) && signal != SIGKILL) {
    kill(m.pid, SIGKILL);
    (void)PollIn(m.pidfd, kKillWait);
  }
  int status = 0;
  // The pidfd said it exited (or we are out of patience: SIGKILL is not refused).
  const pid_t r = waitpid(m.pid, &status, 0);
  if (m.pidfd >= 0) close(m.pidfd);
  const pid_t was = m.pid;
  m.pid = -1;
  m.pidfd = -1;
  if (r != was) return ErrnoStatus("waitpid " + std::to_string(was), errno);
  return Status::Ok();
}

Status EtcdCluster::WaitReady(const std::vector<int>& which, milliseconds timeout) {
  const auto deadline = Steady::now() + timeout;
  std::vector<int> pending = which;
  milliseconds pause{20};
  std::string last;
  while (!pending.empty()) {
    std::vector<int> still;
    for (int i : pending) {
      Member& m = members_[i];
      if (Exited(m)) {
        return Unavailable("etcd member " + m.name + " exited while starting; its log:\n" +
                           Tail(ReadTextFile(m.log_path), 4096));
      }
      auto st = status_clients_[i]->GetMemberStatus(m.client_url);
      if (st.ok() && st->leader_id != 0) continue;
      last = m.name + ": " + (st.ok() ? std::string("no leader yet") : st.status().ToString());
      still.push_back(i);
    }
    pending = std::move(still);
    if (pending.empty()) break;
    if (Left(deadline).count() == 0) {
      return DeadlineExceeded("etcd members not ready within " + std::to_string(timeout.count()) +
                              " ms (" + last + ")\n" + Logs());
    }
    // An external process's readiness: polled, with a short bounded pause.
    std::this_thread::sleep_for(std::min(pause, Left(deadline)));
    pause = std::min(pause * 2, milliseconds(200));
  }
  return Status::Ok();
}

Status EtcdCluster::PickPortsAndStart() {
  std::set<int> taken;
  for (auto& m : members_) {
    for (int* port : {&m.client_port, &m.peer_port}) {
      int p = FreeLoopbackPort();
      for (int tries = 0; (p <= 0 || taken.count(p) != 0) && tries < 20; ++tries) {
        p = FreeLoopbackPort();
      }
      if (p <= 0 || taken.count(p) != 0) return Internal("no free loopback port");
      taken.insert(p);
      *port = p;
    }
    m.client_url = std::string(options_.tls ? "https" : "http") +
                   "://127.0.0.1:" + std::to_string(m.client_port);
    m.peer_url = "http://127.0.0.1:" + std::to_string(m.peer_port);
  }
  status_clients_.clear();
  for (auto& m : members_) {
    auto o = ClientOptionsFor("root");
    if (!o.ok()) return o.status();
    o->endpoints = {m.client_url};
    o->timeout = milliseconds(1000);
    o->attempt_timeout = milliseconds(1000);
    auto c = etcd::Client::Connect(*o, RealClock::Get());
    if (!c.ok()) return c.status();
    status_clients_.push_back(std::move(*c));
  }
  for (auto& m : members_) {
    Status s = Spawn(m);
    if (!s.ok()) return s;
  }
  std::vector<int> all;
  for (int i = 0; i < size(); ++i) all.push_back(i);
  return WaitReady(all, options_.start_timeout);
}

Status EtcdCluster::Start() {
  if (options_.tls && ca_file_.empty()) {
    Status s = MakeCertificates();
    if (!s.ok()) return s;
  }
  Status s;
  for (int attempt = 1; attempt <= kStartAttempts; ++attempt) {
    s = PickPortsAndStart();
    if (s.ok()) return s;
    // A port another process took between our probe and etcd's bind: start again elsewhere.
    bool collision = false;
    for (auto& m : members_) {
      if (ReadTextFile(m.log_path).find("address already in use") != std::string::npos) {
        collision = true;
      }
    }
    for (auto& m : members_) {
      if (m.pid > 0) (void)End(m, SIGKILL, kKillWait);
    }
    if (!collision) return s;
    for (auto& m : members_) {
      std::error_code ec;
      std::filesystem::remove_all(m.data_dir, ec);
      std::filesystem::rename(m.log_path, m.log_path + ".attempt" + std::to_string(attempt), ec);
    }
  }
  return s;
}

Status EtcdCluster::Kill(int i) { return End(members_.at(i), SIGKILL, kKillWait); }

Status EtcdCluster::Stop(int i) { return End(members_.at(i), SIGTERM, kStopGrace); }

Status EtcdCluster::Restart(int i) {
  Member& m = members_.at(i);
  if (m.pid > 0) {
    Status s = Stop(i);
    if (!s.ok()) return s;
  }
  Status s = Spawn(m);
  if (!s.ok()) return s;
  return WaitReady({i}, options_.start_timeout);
}

Status EtcdCluster::StopAll() {
  Status first;
  for (int i = 0; i < size(); ++i) {
    if (members_[i].pid <= 0) continue;
    Status s = Stop(i);
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

Status EtcdCluster::StartAll() {
  std::vector<int> started;
  for (int i = 0; i < size(); ++i) {
    if (members_[i].pid > 0) continue;
    Status s = Spawn(members_[i]);
    if (!s.ok()) return s;
    started.push_back(i);
  }
  return WaitReady(started, options_.start_timeout);
}

Result<int> EtcdCluster::Leader(milliseconds timeout) {
  const auto deadline = Steady::now() + timeout;
  milliseconds pause{20};
  std::string last = "no member running";
  for (;;) {
    for (int i = 0; i < size(); ++i) {
      if (members_[i].pid <= 0) continue;
      auto st = status_clients_[i]->GetMemberStatus(members_[i].client_url);
      if (st.ok() && st->is_leader()) return i;
      last = members_[i].name + ": " +
             (st.ok() ? "leader id " + std::to_string(st->leader_id) : st.status().ToString());
    }
    if (Left(deadline).count() == 0) {
      return DeadlineExceeded("no etcd leader within " + std::to_string(timeout.count()) + " ms (" +
                              last + ")");
    }
    std::this_thread::sleep_for(std::min(pause, Left(deadline)));
    pause = std::min(pause * 2, milliseconds(200));
  }
}

std::string EtcdCluster::Logs(size_t bytes_per_member) const {
  std::string out;
  for (const auto& m : members_) {
    out += "---- etcd " + m.name + " (" + m.log_path + ") ----\n" +
           Tail(ReadTextFile(m.log_path), bytes_per_member) + "\n";
  }
  return out;
}

}  // namespace nodelet::testing
