// The Prometheus text the HTTP endpoint serves (docs/observability.md, "Metrics"): /metrics (the
// kubelet's metric names where it has them, from the services' heartbeat counters, nodelet's own,
// the build and each process's own figures), /metrics/probes (the prober's metrics alone, as the
// kubelet serves them there) and /metrics/resource (stats_summary.h: RenderUsageMetrics).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "supervisor/service_control.h"

namespace nodelet::supervisor {

struct HttpSnapshot {
  std::vector<ServiceInfo> services;
  // service → its last heartbeat's counters.
  std::map<std::string, std::map<std::string, uint64_t>> counters;
  // service → control messages received from it; "supervisor" → frames it refused.
  std::map<std::string, uint64_t> messages;
  uint64_t bad_control = 0;
  // (source, reason) → failed reads of that pod source (nodelet_pod_source_failures_total).
  std::map<std::pair<std::string, std::string>, uint64_t> source_failures;
  // eviction signal ("memory.available", "emptydirfs.limit", ...) → pods evicted for it.
  std::map<std::string, uint64_t> evictions;
};

// What /proc says of one process (process_* of the Prometheus client libraries).
struct ProcessFigures {
  double cpu_seconds = 0;  // user + system
  uint64_t resident_bytes = 0;
  uint64_t virtual_bytes = 0;
  double start_time_unix_s = 0;
  uint64_t open_fds = 0;
  uint64_t max_fds = 0;  // the soft RLIMIT_NOFILE
};
// /proc/PID/stat, /proc/PID/fd and /proc/PID/limits; nullopt when the process is gone or
// unreadable. `boot_time_unix_s` is /proc/stat's btime (start times are ticks since boot).
std::optional<ProcessFigures> ReadProcessFigures(pid_t pid, double boot_time_unix_s);
// /proc/stat's btime; 0 when unreadable.
double BootTimeUnixSeconds();

// The Prometheus text for a snapshot (exposed for tests): every metric of /metrics but the
// resource metrics, which the endpoint adds from its usage sample, and the process figures.
std::string RenderMetrics(const HttpSnapshot& s);
// The prober's metrics alone (/metrics/probes): prober_probe_total and
// prober_probe_duration_seconds, by probe type and result.
std::string RenderProbeMetrics(const HttpSnapshot& s);
// process_* of the supervisor itself (`self`), nodelet_build_info, and nodelet_service_cpu_
// seconds_total, _resident_memory_bytes and _open_fds of each running service (`services`:
// name → figures).
std::string RenderProcessMetrics(const std::optional<ProcessFigures>& self,
                                 const std::map<std::string, ProcessFigures>& services);

}  // namespace nodelet::supervisor
