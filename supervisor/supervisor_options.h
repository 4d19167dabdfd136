// SupervisorOptions: nodelet's flags and config file (the shared options, the supervision
// policy, the mode, the services' commands, the sync loop's sources, the HTTP endpoint), and
// the services' command lines built from them.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lib/etcd/etcd_flags.h"
#include "lib/pod/eviction.h"
#include "lib/service/cgroup_flags.h"
#include "lib/service/container_log_flags.h"
#include "lib/service/options.h"
#include "supervisor/child_launcher.h"
#include "supervisor/process_manager.h"
#include "supervisor/supervisor_mode.h"

namespace nodelet::supervisor {

struct ServiceConfig {
  std::string name;
  // Replaces the default command (SERVICE_DIR/nodelet-NAME plus the shared flags) when set.
  std::vector<std::string> command;
  // Appended to the default command.
  std::vector<std::string> args;
};

struct SupervisorOptions {
  CommonOptions common;
  // The command line (without argv[0]): a reload reads the config file again, and a key given
  // here wins over the file (config_reload.h).
  std::vector<std::string> argv;
  // --mode: spawn and restart the services, or watch their systemd units over D-Bus.
  SupervisorMode mode = SupervisorMode::kStandalone;
  std::string unit_prefix = "nodelet-";  // systemd mode: PREFIX<service>.service
  SupervisorPolicy policy;
  std::string service_dir;  // where nodelet-<service> binaries are
  std::vector<ServiceConfig> services;
  size_t log_max_bytes = 10 * 1024 * 1024;
  int log_backups = 3;
  std::string runtime_endpoint;  // passed to plegd when set
  std::string relist_period;     // passed to plegd when set
  bool runtime_events = true;    // --runtime-events, passed to plegd when false
  // The sync loop's pod sources and admission (pod_manager.h).
  std::string pod_manifest_path;
  std::string manifest_url;
  std::string http_check_frequency = "20s";       // --http-check-frequency: URL read period
  std::string manifest_url_ca;                    // --manifest-url-ca
  std::vector<std::string> manifest_url_headers;  // --manifest-url-header 'Name: value'
  std::string node_name;                          // default: the hostname, lowercased
  // The fleet (docs/fleet.md): pods from etcd and statuses back to it (supervisor/status_sink.h).
  etcd::EtcdFlags etcd;
  // --node-ip as given (passed on to podworkerd when set); node_ip is the address chosen from
  // it (lib/common/node_ip.h).
  std::string node_ip_flag;
  std::string node_ip;
  int max_pods = 110;
  // --resync-period (the kubelet's --sync-frequency): passed to podworkerd, and the pod manager's
  // resend of an unchanged desired set; empty: their defaults (1m).
  std::string resync_period;
  // --allowed-unsafe-sysctls: sysctls (or prefixes ending in *) beyond the safe set that pods
  // may set.
  std::vector<std::string> allowed_unsafe_sysctls;
  // The HTTP endpoint (/healthz, /pods, /metrics); empty: none.
  std::string http_address = "127.0.0.1:10255";
  // --enable-debugging-handlers: /containerLogs on the HTTP endpoint. The kubelet's switch of
  // the same name defaults to true but its read-only port never serves logs; here the one port
  // is unauthenticated, so the default is false.
  bool enable_debugging_handlers = false;
  // The pods' DNS (passed to podworkerd): --cluster-dns (IPs), --cluster-domain, --resolv-conf
  // ("" means none, as the kubelet's).
  std::vector<std::string> cluster_dns;
  std::string cluster_domain;
  std::string resolv_conf = "/etc/resolv.conf";
  // Container log rotation (passed to podworkerd): --container-log-max-size,
  // --container-log-max-files, --container-log-monitor-interval.
  ContainerLogFlags container_logs;
  CgroupFlags cgroups;
  std::string system_reserved;  // "cpu=100m,memory=256Mi"
  std::string kube_reserved;
  // The eviction manager (eviction_manager.h): --eviction-hard (the kubelet's default unless
  // given; "" disables hard eviction), --eviction-soft, --eviction-soft-grace-period,
  // --eviction-minimum-reclaim,
  // --eviction-pressure-transition-period, --eviction-max-pod-grace-period, and nodelet's
  // --eviction-monitoring-period (the kubelet's fixed 10 s).
  std::string eviction_hard = pod::kDefaultEvictionHard;
  std::string eviction_soft;
  std::string eviction_soft_grace_period;
  std::string eviction_minimum_reclaim;
  std::string eviction_pressure_transition_period = "5m";
  int64_t eviction_max_pod_grace_period = 0;
  std::string eviction_monitoring_period = "10s";
};

// The four services, in the order they are listed.
const std::vector<std::string>& DefaultServiceNames();

// Builds the argv of each service from the options (default command or the configured one).
std::vector<ChildSpec> BuildChildSpecs(const SupervisorOptions& options);

// nodelet's CLI11 app, writing into the SupervisorOptions it was made for, and the flags' texts
// that ParseSupervisorOptions turns into options once parsed.
struct SupervisorFlags {
  CLI::App app{"nodelet: the node agent's supervisor and sync loop", "nodelet"};
  std::map<std::string, std::string> durations;  // the supervision policy's, by flag name
  std::string ctl_group;
  std::string mode;
  std::string address;                // --address
  std::optional<int> read_only_port;  // --read-only-port
};

// Adds every flag of nodelet to a new app (ParseSupervisorOptions, and the test that compares
// them with lib/service/config_keys.h).
std::unique_ptr<SupervisorFlags> MakeSupervisorFlags(SupervisorOptions* options);

// supervisor.services.NAME.{command,args} of the config file `file` (empty: none), for each of
// DefaultServiceNames(); an error names the file and the key.
Result<std::vector<ServiceConfig>> ReadServiceConfigs(const std::string& file);

// Parses nodelet's flags and config file into options; returns an exit code < 0 to go on.
int ParseSupervisorOptions(int argc, char** argv, SupervisorOptions* options);

}  // namespace nodelet::supervisor
