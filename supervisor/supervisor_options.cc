#include "supervisor/supervisor_options.h"

#include <limits.h>
#include <unistd.h>

#include <cstdio>
#include <map>

#include "lib/common/logging.h"
#include "lib/common/node_ip.h"
#include "lib/pod/security.h"
#include "lib/pod/static_pod.h"
#include "lib/service/container_log_flags.h"
#include "lib/service/dns_flags.h"
#include "lib/service/kubelet_names.h"

namespace nodelet::supervisor {
namespace {

std::string SelfDir() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string path(buf, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/'));
}

}  // namespace

const std::vector<std::string>& DefaultServiceNames() {
  static const std::vector<std::string> kNames = {"plegd", "statusd", "volumed", "podworkerd"};
  return kNames;
}

std::vector<ChildSpec> BuildChildSpecs(const SupervisorOptions& o) {
  std::vector<ChildSpec> specs;
  for (const auto& svc : o.services) {
    ChildSpec spec;
    spec.name = svc.name;
    if (!svc.command.empty()) {
      spec.argv = svc.command;
    } else {
      spec.argv = {o.service_dir + "/nodelet-" + svc.name,
                   "--root-dir",
                   o.common.root_dir,
                   "--run-dir",
                   o.common.run_dir,
                   "--log-dir",
                   o.common.log_dir,
                   "--log-level",
                   o.common.log_level,
                   "--log-format",
                   o.common.log_format,
                   "--heartbeat-interval",
                   std::to_string(o.common.heartbeat_interval_ms)};
      if (!o.common.config_file.empty()) {
        spec.argv.push_back("--config");
        spec.argv.push_back(o.common.config_file);
      }
      if (o.common.admin_group) {
        // The gid, resolved once here, so every process applies the same group.
        spec.argv.push_back("--admin-group");
        spec.argv.push_back(std::to_string(*o.common.admin_group));
      }
      if ((svc.name == "plegd" || svc.name == "podworkerd") && !o.runtime_endpoint.empty()) {
        spec.argv.push_back("--runtime-endpoint");
        spec.argv.push_back(o.runtime_endpoint);
      }
      // The operator's --node-ip only: without it podworkerd chooses as the supervisor did
      // (a 127.0.0.1 fallback would not pass as a --node-ip).
      if (svc.name == "podworkerd" && !o.node_ip_flag.empty()) {
        spec.argv.push_back("--node-ip");
        spec.argv.push_back(o.node_ip_flag);
      }
      if (svc.name == "podworkerd") {
        for (const auto& ip : o.cluster_dns) {
          spec.argv.push_back("--cluster-dns");
          spec.argv.push_back(ip);
        }
        if (!o.cluster_domain.empty()) {
          spec.argv.push_back("--cluster-domain");
          spec.argv.push_back(o.cluster_domain);
        }
        // As one argument, so that "" (no resolver config) passes too.
        spec.argv.push_back("--resolv-conf=" + o.resolv_conf);
        spec.argv.push_back("--container-log-max-size=" + o.container_logs.max_size);
        spec.argv.push_back("--container-log-max-files=" +
                            std::to_string(o.container_logs.max_files));
        spec.argv.push_back("--container-log-monitor-interval=" +
                            o.container_logs.monitor_interval);
        spec.argv.push_back(std::string("--cgroups-per-qos=") +
                            (o.cgroups.per_qos ? "true" : "false"));
        spec.argv.push_back("--cgroup-driver=" + o.cgroups.driver);
        spec.argv.push_back("--cgroup-root=" + o.cgroups.root);
        std::string enforce;
        for (const auto& e : o.cgroups.enforce_node_allocatable) {
          enforce += (enforce.empty() ? "" : ",") + e;
        }
        spec.argv.push_back("--enforce-node-allocatable=" + (enforce.empty() ? "none" : enforce));
        // Only when given: an empty "--system-reserved=" is not an empty value to CLI11.
        if (!o.system_reserved.empty()) {
          spec.argv.push_back("--system-reserved=" + o.system_reserved);
        }
        if (!o.kube_reserved.empty()) spec.argv.push_back("--kube-reserved=" + o.kube_reserved);
        if (!o.resync_period.empty()) spec.argv.push_back("--resync-period=" + o.resync_period);
      }
      if (svc.name == "plegd") {
        if (!o.runtime_events) spec.argv.push_back("--runtime-events=false");
        if (!o.relist_period.empty()) {
          spec.argv.push_back("--relist-period");
          spec.argv.push_back(o.relist_period);
        }
      }
    }
    spec.argv.insert(spec.argv.end(), svc.args.begin(), svc.args.end());
    specs.push_back(std::move(spec));
  }
  return specs;
}

std::unique_ptr<SupervisorFlags> MakeSupervisorFlags(SupervisorOptions* o) {
  auto flags = std::make_unique<SupervisorFlags>();
  CLI::App& app = flags->app;
  AddCommonOptions(app, o->common, "supervisor");
  flags->durations = {
      {"backoff-initial", "100ms"}, {"backoff-max", "10s"},       {"backoff-reset-after", "60s"},
      {"restart-period", "60s"},    {"fatal-cooldown", "5m"},     {"start-timeout", "10s"},
      {"stop-timeout", "10s"},      {"heartbeat-deadline", "5s"}, {"failing-grace", "30s"}};
  for (auto& [name, value] : flags->durations) {
    app.add_option("--" + name, value, "Supervision policy (duration)")
        ->check(DurationValidator())
        ->capture_default_str();
  }
  app.add_option("--restart-intensity", o->policy.restart_intensity,
                 "More restarts than this within --restart-period is FATAL")
      ->capture_default_str();
  app.add_option("--service-dir", o->service_dir,
                 "Where the nodelet-<service> binaries are (default: next to nodelet)");
  app.add_option("--log-max-bytes", o->log_max_bytes, "Rotate a service's log at this size")
      ->capture_default_str();
  app.add_option("--log-backups", o->log_backups, "Rotated logs kept per service")
      ->capture_default_str();
  app.add_option("--ctl-group", flags->ctl_group, "Deprecated: --admin-group");
  app.add_option("--runtime-endpoint,--container-runtime-endpoint", o->runtime_endpoint,
                 "CRI endpoint, passed to plegd and podworkerd");
  app.add_option("--runtime-events", o->runtime_events,
                 "plegd relists at once on each runtime event (false: on its period only)")
      ->capture_default_str();
  app.add_option("--relist-period", o->relist_period, "plegd's relist period")
      ->check(DurationValidator());
  app.add_option("--pod-manifest-path", o->pod_manifest_path,
                 "Directory of static pod manifests (watched; re-read every 20 s)");
  app.add_option(
      "--manifest-url", o->manifest_url,
      "http:// or https:// URL of static pod manifests (read every --http-check-frequency)");
  app.add_option("--http-check-frequency", o->http_check_frequency,
                 "How often --manifest-url is read (the kubelet's flag)")
      ->check(DurationValidator())
      ->capture_default_str();
  app.add_option("--manifest-url-ca", o->manifest_url_ca,
                 "PEM file of CAs to verify an https --manifest-url with (default: the system's)");
  app.add_option("--manifest-url-header", o->manifest_url_headers,
                 "'Name: value' header sent with every --manifest-url request (repeatable)")
      ->allow_extra_args(false);
  app.add_option("--node-name,--hostname-override", o->node_name,
                 "This node's name (default: the hostname)");
  app.add_option("--resync-period,--sync-frequency", o->resync_period,
                 "How often each pod is synced at the least and the desired set sent again "
                 "(default 1m), passed to podworkerd")
      ->check(DurationValidator());
  // The kubelet's --address and --read-only-port, which make --http-address (command line only:
  // the file's key is http-address).
  app.add_option("--address", flags->address, "The kubelet's --address: the host of --http-address")
      ->configurable(false);
  app.add_option("--read-only-port", flags->read_only_port,
                 "The kubelet's --read-only-port: the port of --http-address (0: no endpoint)")
      ->check(CLI::Range(0, 65535))
      ->configurable(false);
  etcd::AddEtcdFlags(app, &o->etcd, /*node=*/true);
  app.add_option("--node-ip", o->node_ip_flag,
                 "The node's IP (hostIP of every pod, podIP of host-network pods, the Node's "
                 "InternalIP); default: the address of the default route's interface");
  app.add_option("--max-pods", o->max_pods, "Pods admitted at most")->capture_default_str();
  app.add_option("--allowed-unsafe-sysctls", o->allowed_unsafe_sysctls,
                 "Comma-separated sysctls or prefixes ending in '*' (e.g. 'kernel.msg*,"
                 "net.core.somaxconn') that pods may set besides the safe set; a pod asking for "
                 "another is rejected with SysctlForbidden")
      ->delimiter(',')
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            std::string dotted = pod::SysctlDotted(text);
            if (!dotted.empty() && dotted.back() == '*') dotted.pop_back();
            if (pod::SysctlNamespace(dotted).empty()) {
              return "\"" + text +
                     "\" is not a namespaced sysctl (only kernel.shm*, kernel.msg*, kernel.sem, "
                     "fs.mqueue.* and net.* are)";
            }
            return std::string();
          },
          "SYSCTL"));
  AddDnsOptions(app, o->cluster_dns, o->cluster_domain, o->resolv_conf);
  AddContainerLogOptions(app, o->container_logs);
  AddCgroupOptions(app, o->cgroups);
  app.add_option("--system-reserved", o->system_reserved,
                 "Resources kept for the system, e.g. cpu=100m,memory=256Mi,ephemeral-storage=1Gi");
  app.add_option("--kube-reserved", o->kube_reserved,
                 "Resources kept for nodelet itself (same syntax)");
  app.add_option("--eviction-hard", o->eviction_hard,
                 "Hard eviction thresholds, e.g. "
                 "memory.available<100Mi,nodefs.available<10%,imagefs.available<15% (signals: "
                 "memory.available, nodefs.available, nodefs.inodesFree, imagefs.available, "
                 "imagefs.inodesFree)")
      ->capture_default_str();
  app.add_option("--eviction-soft", o->eviction_soft,
                 "Soft eviction thresholds (same syntax, e.g. memory.available<500Mi), each with "
                 "a grace period");
  app.add_option("--eviction-soft-grace-period", o->eviction_soft_grace_period,
                 "Grace period of each soft threshold (a duration in Go's grammar), e.g. "
                 "memory.available=1m30s");
  app.add_option("--eviction-minimum-reclaim", o->eviction_minimum_reclaim,
                 "The least each eviction must win back beyond its threshold, e.g. "
                 "nodefs.available=500Mi,imagefs.available=5%");
  app.add_option("--eviction-pressure-transition-period", o->eviction_pressure_transition_period,
                 "How long a pressure condition stays after its thresholds are no longer met")
      ->check(DurationValidator())
      ->capture_default_str();
  app.add_option("--eviction-max-pod-grace-period", o->eviction_max_pod_grace_period,
                 "Longest grace period (s) of a pod evicted for a soft threshold (<= 0: the "
                 "pod's own)")
      ->capture_default_str();
  app.add_option("--eviction-monitoring-period", o->eviction_monitoring_period,
                 "How often the eviction manager measures the node")
      ->check(DurationValidator())
      ->capture_default_str();
  app.add_option("--http-address", o->http_address,
                 "HOST:PORT of /healthz, /pods and /metrics (empty: none)")
      ->capture_default_str();
  app.add_flag("--enable-debugging-handlers", o->enable_debugging_handlers,
               "Serve /containerLogs/NAMESPACE/POD/CONTAINER on --http-address (default off: "
               "the port has no authentication)");
  flags->mode = std::string(SupervisorModeName(o->mode));
  app.add_option("--mode", flags->mode,
                 "standalone (spawn the services) or systemd (each service is a systemd unit; "
                 "watch them over D-Bus)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            auto parsed = ParseSupervisorMode(text);
            return parsed.ok() ? std::string() : parsed.status().message();
          },
          "MODE"))
      ->capture_default_str();
  app.add_option("--unit-prefix", o->unit_prefix,
                 "systemd mode: the units are PREFIX<service>.service")
      ->capture_default_str();
  return flags;
}

Result<std::vector<ServiceConfig>> ReadServiceConfigs(const std::string& file) {
  auto yaml = LoadYamlFile(file);
  if (!yaml.ok()) return yaml.status();
  std::vector<ServiceConfig> out;
  for (const auto& name : DefaultServiceNames()) {
    ServiceConfig svc;
    svc.name = name;
    try {
      YAML::Node node = (*yaml)["supervisor"]["services"][name];
      if (node && node["command"]) svc.command = node["command"].as<std::vector<std::string>>();
      if (node && node["args"]) svc.args = node["args"].as<std::vector<std::string>>();
    } catch (const YAML::Exception& e) {
      return InvalidArgument(file + ": supervisor.services." + name + ": " + e.what());
    }
    out.push_back(std::move(svc));
  }
  return out;
}

int ParseSupervisorOptions(int argc, char** argv, SupervisorOptions* o) {
  auto flags = MakeSupervisorFlags(o);
  CLI::App& app = flags->app;
  auto& durations = flags->durations;
  const std::string& mode = flags->mode;
  const std::string& ctl_group = flags->ctl_group;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return ExitOnParseError(app, e);
  }
  o->common.config_file = app.get_config_ptr()->as<std::string>();
  o->argv.assign(argv + std::min(argc, 1), argv + argc);
  o->mode = *ParseSupervisorMode(mode);  // the check above refused anything else
  auto& p = o->policy;
  p.backoff_initial = *ParseDuration(durations["backoff-initial"]);
  p.backoff_max = *ParseDuration(durations["backoff-max"]);
  p.backoff_reset_after = *ParseDuration(durations["backoff-reset-after"]);
  p.restart_period = *ParseDuration(durations["restart-period"]);
  p.fatal_cooldown = *ParseDuration(durations["fatal-cooldown"]);
  p.start_timeout = *ParseDuration(durations["start-timeout"]);
  p.stop_timeout = *ParseDuration(durations["stop-timeout"]);
  p.heartbeat_deadline = *ParseDuration(durations["heartbeat-deadline"]);
  p.failing_grace = *ParseDuration(durations["failing-grace"]);
  if (o->service_dir.empty()) o->service_dir = SelfDir();
  if (o->node_name.empty()) {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    o->node_name = host;
  }
  o->node_name = pod::NormalizeNodeName(o->node_name);
  // The kubelet's --address and --read-only-port replace the host and the port of --http-address.
  if (!flags->address.empty() || flags->read_only_port) {
    auto colon = o->http_address.rfind(':');
    std::string host = colon == std::string::npos ? "127.0.0.1" : o->http_address.substr(0, colon);
    std::string port = colon == std::string::npos ? "10255" : o->http_address.substr(colon + 1);
    if (!flags->address.empty()) host = flags->address;
    if (flags->read_only_port) port = std::to_string(*flags->read_only_port);
    o->http_address = HttpAddressOf(host, port);
  }
  if (Status s = o->etcd.Check(); !s.ok()) {
    std::fprintf(stderr, "nodelet: %s\n", s.message().c_str());
    return 2;
  }

  if (auto ip = NodeIP(o->node_ip_flag); ip.ok()) {
    o->node_ip = *ip;
  } else {
    std::fprintf(stderr, "nodelet: %s\n", ip.status().message().c_str());
    return 2;
  }
  if (!ctl_group.empty()) {
    // --ctl-group opened only ctl.sock, inside a run directory of mode 0700: it now means
    // --admin-group, which opens the run directory and every socket to the group.
    std::fprintf(stderr, "nodelet: --ctl-group is deprecated; it is read as --admin-group\n");
    if (o->common.admin_group_flag.empty()) o->common.admin_group_flag = ctl_group;
  }
  if (Status s = ResolveCommonOptions(o->common); !s.ok()) {
    std::fprintf(stderr, "nodelet: %s\n", s.message().c_str());
    return 2;
  }
  auto services = ReadServiceConfigs(o->common.config_file);
  if (!services.ok()) {
    std::fprintf(stderr, "nodelet: %s\n", services.status().message().c_str());
    return 2;
  }
  o->services = std::move(*services);
  InitLogging("nodelet", o->common.log_level, o->common.log_format);
  return -1;
}

}  // namespace nodelet::supervisor
