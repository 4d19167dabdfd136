// podworkerd's flags and config keys (docs/flags.md is generated from them).
#include <signal.h>
#include <unistd.h>

#include <set>

#include "lib/common/check.h"
#include "lib/common/fs.h"
#include "lib/common/logging.h"
#include "lib/common/node_ip.h"
#include "lib/common/rfc3339.h"
#include "lib/ipc/endpoints.h"
#include "lib/ipc/message.h"
#include "lib/ipc/router_receive.h"
#include "lib/ipc/supervisor_peer.h"
#include "lib/pod/config_objects.h"
#include "lib/pod/downward_api.h"
#include "lib/pod/node_resources.h"
#include "lib/pod/pod_flatbuffers.h"
#include "lib/pod/static_pod.h"
#include "lib/service/cgroup_flags.h"
#include "lib/service/container_log_flags.h"
#include "lib/service/dns_flags.h"
#include "lib/status/status_client.h"
#include "svc-podworkerd/podworkerd_service.h"
#include "svc-podworkerd/registry_credentials.h"
#include "volume_generated.h"

namespace nodelet::podworkerd {

ServiceSpec MakeSpec() {
  auto config = std::make_shared<PodworkerdConfig>();
  auto timeout = std::make_shared<std::string>("2m");
  auto initial = std::make_shared<std::string>("10s");
  auto max = std::make_shared<std::string>("5m");
  auto resync = std::make_shared<std::string>("1m");
  auto pull_initial = std::make_shared<std::string>("10s");
  auto pull_max = std::make_shared<std::string>("5m");
  auto container_gc_period = std::make_shared<std::string>("1m");
  auto image_gc_period = std::make_shared<std::string>("5m");
  auto image_min_age = std::make_shared<std::string>("2m");
  auto orphan_shim_period = std::make_shared<std::string>("1m");
  auto container_logs = std::make_shared<ContainerLogFlags>();
  auto cgroups = std::make_shared<CgroupFlags>();
  ServiceSpec spec;
  spec.name = "podworkerd";
  spec.id = ipc::ServiceId::Podworkerd;
  spec.description = "nodelet-podworkerd: one serialized worker per pod, the podKiller";
  spec.add_flags = [=](CLI::App& app) {
    app.add_option("--runtime-endpoint,--container-runtime-endpoint", config->runtime_endpoint,
                   "CRI endpoint of the container runtime")
        ->capture_default_str();
    app.add_option("--node-ip", config->node_ip,
                   "The node's IP: every pod's hostIP, the podIP of host-network pods (default: "
                   "the address of the default route's interface)");
    AddDnsOptions(app, config->dns.cluster_dns, config->dns.cluster_domain,
                  config->dns.resolv_conf);
    AddContainerLogOptions(app, *container_logs);
    AddCgroupOptions(app, *cgroups);
    app.add_option("--system-reserved", config->system_reserved,
                   "Resources kept for the system, e.g. cpu=100m,memory=256Mi (left out of the "
                   "kubepods cgroup's limits)");
    app.add_option("--kube-reserved", config->kube_reserved,
                   "Resources kept for nodelet itself (same syntax)");
    app.add_option("--runtime-request-timeout", *timeout,
                   "Deadline of CRI calls that change state, but not of PullImage, which has "
                   "none (as the kubelet's)")
        ->check(DurationValidator())
        ->capture_default_str();
    app.add_option("--crashloop-initial", *initial, "First crash-loop back-off delay")
        ->check(DurationValidator())
        ->capture_default_str();
    app.add_option("--crashloop-max", *max, "Longest crash-loop back-off delay")
        ->check(DurationValidator())
        ->capture_default_str();
    app.add_option("--pod-workers", config->workers, "Threads that run pod work")
        ->capture_default_str();
    app.add_option("--maximum-dead-containers-per-container", config->max_dead_per_container,
                   "Dead instances kept per container of a pod (at least 1)")
        ->capture_default_str();
    app.add_option("--maximum-dead-containers", config->gc.containers.max_containers,
                   "Dead containers kept on the node (-1: no limit); the newest instance of a "
                   "running pod's container always stays")
        ->capture_default_str();
    app.add_option("--orphan-shim-period", *orphan_shim_period,
                   "How often shims of the runtime that neither CRI nor containerd knows are "
                   "looked for; one found in two sweeps in a row is ended")
        ->check(DurationValidator())
        ->capture_default_str();
    app.add_option("--container-gc-period", *container_gc_period,
                   "How often the node-wide dead-container pass runs")
        ->check(DurationValidator())
        ->capture_default_str();
    app.add_option("--image-gc-high-threshold", config->gc.image.high_threshold_percent,
                   "Image filesystem usage (percent) at which image GC runs; 100 disables it")
        ->check(CLI::Range(0, 100))
        ->capture_default_str();
    app.add_option("--image-gc-low-threshold", config->gc.image.low_threshold_percent,
                   "Image filesystem usage (percent) image GC frees down to")
        ->check(CLI::Range(0, 100))
        ->capture_default_str();
    app.add_option("--image-minimum-gc-age,--minimum-image-ttl-duration", *image_min_age,
                   "Minimum age of an unused image before it may be removed")
        ->check(DurationValidator())
        ->capture_default_str();
    app.add_option("--image-gc-period", *image_gc_period, "How often image GC checks the usage")
        ->check(DurationValidator())
        ->capture_default_str();
    app.add_option("--pod-infra-container-image", config->gc.pod_infra_container_image,
                   "The sandbox image, never removed by image GC (default: the runtime's)")
        ->capture_default_str();
    app.add_option("--resync-period,--sync-frequency", *resync,
                   "Each pod is synced at least this often")
        ->check(DurationValidator())
        ->capture_default_str();
    app.add_option("--serialize-image-pulls", config->image_pulls.serialize,
                   "Pull one image at a time (true/false)")
        ->default_str("true");
    app.add_option("--max-parallel-image-pulls", config->image_pulls.max_parallel,
                   "Most image pulls at once without serialization (0: no limit)")
        ->capture_default_str();
    app.add_option("--image-pull-backoff-initial", *pull_initial,
                   "First back-off delay after a failed image pull")
        ->check(DurationValidator())
        ->capture_default_str();
    app.add_option("--image-pull-backoff-max", *pull_max,
                   "Longest back-off delay after failed image pulls")
        ->check(DurationValidator())
        ->capture_default_str();
  };
  spec.create = [=](ServiceContext& ctx) -> Result<std::unique_ptr<Service>> {
    PodworkerdConfig c = *config;
    c.cri_timeouts.call = *ParseDuration(*timeout);
    c.backoff.initial = *ParseDuration(*initial);
    c.backoff.max = *ParseDuration(*max);
    c.resync_period = *ParseDuration(*resync);
    c.image_pulls.backoff_initial = *ParseDuration(*pull_initial);
    c.image_pulls.backoff_max = *ParseDuration(*pull_max);
    c.gc.container_gc_period =
        std::max(*ParseDuration(*container_gc_period), std::chrono::milliseconds(100));
    c.gc.image_gc_period =
        std::max(*ParseDuration(*image_gc_period), std::chrono::milliseconds(100));
    c.gc.image.minimum_age = *ParseDuration(*image_min_age);
    c.orphan_shim_period =
        std::max(*ParseDuration(*orphan_shim_period), std::chrono::milliseconds(100));
    c.workers = std::max(1, c.workers);
    c.container_logs.max_size_bytes = *ParseContainerLogMaxSize(container_logs->max_size);
    c.container_logs.max_files = container_logs->max_files;
    c.container_logs.monitor_interval =
        std::max(*ParseDuration(container_logs->monitor_interval), std::chrono::milliseconds(100));
    c.pod_cgroups.enabled = cgroups->per_qos;
    c.pod_cgroups.root = cgroups->root;
    c.pod_cgroups.systemd = cgroups->driver == "systemd";
    if (c.pod_cgroups.enabled && c.pod_cgroups.systemd) {
      // As the kubelet: with the systemd driver systemd must be there to make the slices.
      auto slices = OpenSystemdSlices(ctx.clock, std::chrono::seconds(10));
      if (!slices.ok()) {
        return FailedPrecondition("--cgroup-driver systemd needs systemd on the system bus: " +
                                  slices.status().message());
      }
      c.pod_cgroups.slices = *slices;
    }
    c.enforce_pods_allocatable = cgroups->EnforcePods();
    if (c.enforce_pods_allocatable && !c.pod_cgroups.enabled) {
      return InvalidArgument(
          "--enforce-node-allocatable=pods needs --cgroups-per-qos=true (as the kubelet); give "
          "--enforce-node-allocatable=none with --cgroups-per-qos=false");
    }
    for (const std::string* text : {&c.system_reserved, &c.kube_reserved}) {
      if (auto r = pod::ParseReservation(*text); !r.ok()) return r.status();
    }
    auto node_ip = NodeIP(c.node_ip);
    if (!node_ip.ok()) return node_ip.status();
    c.node_ip = *node_ip;
    auto service = PodworkerdService::Create(ctx, c);
    if (!service.ok()) return service.status();
    return std::unique_ptr<Service>(std::move(service).value());
  };
  return spec;
}

}  // namespace nodelet::podworkerd
