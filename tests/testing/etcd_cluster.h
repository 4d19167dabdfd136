// EtcdCluster: a private etcd v3 cluster for tests (Debian's /usr/bin/etcd, 3.4): N members on
// 127.0.0.1 with free ports, bootstrapped statically, their data and logs in a temporary
// directory that the cluster owns and removes. Fast elections (heartbeat 50 ms, election
// timeout 500 ms), no automatic compaction. Optionally TLS on the client URLs with client
// certificates required (--client-cert-auth), from a CA the cluster makes with the openssl CLI;
// the peers talk plain http on loopback.
//
// Every member is a child of the thread that started it, ended by its pid (never by name) and
// reaped. A member also dies with that thread (PR_SET_PDEATHSIG), so a test that crashes leaves
// no etcd running: start and restart members from the test's own thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "lib/common/status.h"
#include "lib/etcd/etcd_client.h"
#include "tests/testing/harness.h"

namespace nodelet::testing {

struct EtcdClusterOptions {
  int members = 3;
  // https client URLs, --client-cert-auth; the peers stay on http.
  bool tls = false;
  // For Start, StartAll and Restart: every member answers and knows a leader by then.
  std::chrono::milliseconds start_timeout{30000};
  std::vector<std::string> extra_args;  // appended to every member's command line
};

class EtcdCluster {
 public:
  explicit EtcdCluster(EtcdClusterOptions options = {});
  // Kills every member (SIGKILL by pid), reaps it and removes the directory.
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  // Picks the ports, starts every member and waits (start_timeout) until each one answers
  // Maintenance.Status and knows a leader. A port taken meanwhile by someone else (the member
  // exits with "address already in use") starts the whole cluster again on new ports, up to 3
  // times.
  Status Start();

  int size() const { return static_cast<int>(members_.size()); }
  const std::string& dir() const { return dir_.path(); }
  // The members' client URLs ("http://127.0.0.1:PORT" or "https://..."), in member order.
  std::vector<std::string> endpoints() const;
  std::string endpoints_string() const;  // comma-joined
  const std::string& endpoint(int i) const;
  bool running(int i) const;
  pid_t pid(int i) const;  // -1 when not running
  const std::string& log_path(int i) const;

  // SIGKILL, reaped.
  Status Kill(int i);
  // SIGTERM, reaped (SIGKILL after 10 s).
  Status Stop(int i);
  // Starts a stopped or killed member again (its data directory, its ports) and waits until it
  // answers and knows a leader.
  Status Restart(int i);
  Status StopAll();
  // Starts every member that is not running, then waits as Start does.
  Status StartAll();
  // The index of the member that says it is the leader, waiting up to `timeout` for one (after
  // a leader was killed: the election).
  Result<int> Leader(std::chrono::milliseconds timeout = std::chrono::seconds(10));

  // TLS mode: the CA's certificate (PEM), for clients.
  const std::string& ca_file() const { return ca_file_; }
  struct CertFiles {
    std::string cert_file, key_file;
  };
  // TLS mode: a client certificate and key signed by the cluster's CA with CN=`common_name`
  // (with etcd auth enabled, the CN is the etcd user). Made once per name.
  Result<CertFiles> ClientCert(const std::string& common_name);
  // Options for a client of every member; in TLS mode with the CA and the certificate of
  // `common_name` ("root", the user the harness itself checks the members as).
  Result<etcd::ClientOptions> ClientOptionsFor(const std::string& common_name = "root");

  // The end of each member's log, for a failed test's output.
  std::string Logs(size_t bytes_per_member = 4096) const;

 private:
  struct Member {
    std::string name;
    int client_port = 0, peer_port = 0;
    std::string client_url, peer_url, data_dir, log_path;
    pid_t pid = -1;
    int pidfd = -1;
  };

  Status MakeCertificates();
  std::vector<std::string> MemberArgs(const Member& m) const;
  Status Spawn(Member& m);
  // SIGKILL or SIGTERM, then waits for the exit (SIGKILL after `grace`) and reaps.
  Status End(Member& m, int signal, std::chrono::milliseconds grace);
  // True when the member's process has exited (reaped then).
  bool Exited(Member& m);
  // Polls the members in `which` until each answers with a leader, or one exits, or the
  // deadline passes.
  Status WaitReady(const std::vector<int>& which, std::chrono::milliseconds timeout);
  Status PickPortsAndStart();

  EtcdClusterOptions options_;
  TempDir dir_;
  std::string ca_file_, ca_key_, server_cert_, server_key_;
  std::vector<Member> members_;
  // One single-endpoint client per member, for Status.
  std::vector<std::unique_ptr<etcd::Client>> status_clients_;
};

}  // namespace nodelet::testing
