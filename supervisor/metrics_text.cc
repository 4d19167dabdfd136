// The HTTP endpoint's Prometheus text (metrics_text.h), written with lib/metrics' TextWriter,
// and the process figures read from /proc.
#include "supervisor/metrics_text.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <type_traits>

#include "lib/metrics/prometheus_text.h"
#include "nodelet_version.h"

namespace nodelet::supervisor {
namespace {

using metrics::MetricType;
using metrics::TextWriter;

// Microseconds as seconds, 9 significant digits.
std::string Seconds(uint64_t us) { return metrics::FormatDouble(static_cast<double>(us) / 1e6, 9); }

// The histogram a service exported under `prefix` in its counters (lib/common/histogram.h:
// PREFIX_bucket:LE, PREFIX_sum_us, PREFIX_count), its buckets in the order of their bounds;
// nullopt when it has no bucket.
std::optional<metrics::HistogramData> ExportedHistogram(
    const std::map<std::string, uint64_t>& counters, const std::string& prefix) {
  std::vector<std::pair<double, std::pair<std::string, uint64_t>>> buckets;
  const std::string bucket_prefix = prefix + "_bucket:";
  for (const auto& [k, v] : counters) {
    if (k.rfind(bucket_prefix, 0) != 0) continue;
    std::string le = k.substr(bucket_prefix.size());
    double bound = le == "+Inf" ? 1e300 : std::strtod(le.c_str(), nullptr);
    buckets.push_back({bound, {le, v}});
  }
  if (buckets.empty()) return std::nullopt;
  std::sort(buckets.begin(), buckets.end());
  metrics::HistogramData h;
  for (auto& [_, b] : buckets) h.buckets.push_back(std::move(b));
  auto sum = counters.find(prefix + "_sum_us");
  auto count = counters.find(prefix + "_count");
  h.sum = Seconds(sum == counters.end() ? 0 : sum->second);
  h.count = count == counters.end() ? 0 : count->second;
  return h;
}

// The histogram with its HELP and TYPE lines, when it has series.
void WriteHistogram(TextWriter& out, const std::string& name, const std::string& help,
                    const std::map<std::string, uint64_t>& counters, const std::string& prefix) {
  auto h = ExportedHistogram(counters, prefix);
  if (!h) return;
  out.Family(name, help, MetricType::kHistogram);
  out.Histogram(name, {}, *h);
}

// A counter with one label from the counters named PREFIX:VALUE (NAME{LABEL="VALUE"}), its HELP
// and TYPE lines always written.
void WriteLabelledCounter(TextWriter& out, const std::string& name, const std::string& help,
                          const std::map<std::string, uint64_t>& counters,
                          const std::string& prefix, const std::string& label) {
  out.Family(name, help, MetricType::kCounter);
  for (const auto& [k, v] : counters) {
    if (k.rfind(prefix, 0) != 0) continue;
    out.Sample(name, {{label, k.substr(prefix.size())}}, v);
  }
}

// A probe kind as the kubelet's probe_type label says it: "liveness" -> "Liveness".
std::string ProbeType(std::string kind) {
  if (!kind.empty()) kind[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(kind[0])));
  return kind;
}

// A pointer, not a reference: GCC 14 (Debian 13) takes a reference returned from a call with a
// temporary argument (the service's name) for a dangling one.
const std::map<std::string, uint64_t>* CountersOf(const HttpSnapshot& s, const std::string& svc) {
  static const std::map<std::string, uint64_t> kEmpty;
  auto it = s.counters.find(svc);
  return it == s.counters.end() ? &kEmpty : &it->second;
}

uint64_t Get(const std::map<std::string, uint64_t>& m, const std::string& k) {
  auto it = m.find(k);
  return it == m.end() ? 0 : it->second;
}

// Probes: one histogram and one counter, labelled by probe type (not by pod: the kubelet's
// per-pod labels would make the series grow with the pods); each family only with series.
void WriteProbeMetrics(TextWriter& out, const HttpSnapshot& s) {
  const auto& workers = *CountersOf(s, "podworkerd");
  TextWriter durations;
  for (const char* kind : {"liveness", "readiness", "startup"}) {
    if (auto h = ExportedHistogram(workers, std::string("probe_duration_seconds_") + kind)) {
      durations.Histogram("prober_probe_duration_seconds", {{"probe_type", ProbeType(kind)}}, *h);
    }
  }
  if (!durations.empty()) {
    out.Family("prober_probe_duration_seconds", "Duration in seconds for a probe response.",
               MetricType::kHistogram);
    out.Append(durations);
  }
  TextWriter totals;
  for (const auto& [k, v] : workers) {
    if (k.rfind("probe_total:", 0) != 0) continue;
    std::string rest = k.substr(12);
    auto colon = rest.find(':');
    if (colon == std::string::npos) continue;
    totals.Sample(
        "prober_probe_total",
        {{"probe_type", ProbeType(rest.substr(0, colon))}, {"result", rest.substr(colon + 1)}}, v);
  }
  if (!totals.empty()) {
    out.Family("prober_probe_total",
               "Cumulative number of a liveness, readiness or startup probe for a container by "
               "result.",
               MetricType::kCounter);
    out.Append(totals);
  }
}

// A number as the process figures print it: a double with 15 significant digits, an integer as
// it is.
template <typename T>
std::string ProcessNumber(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return metrics::FormatDouble(v, 15);
  } else {
    return std::to_string(v);
  }
}

}  // namespace

std::string RenderProbeMetrics(const HttpSnapshot& s) {
  TextWriter out;
  WriteProbeMetrics(out, s);
  return out.Take();
}

std::string RenderMetrics(const HttpSnapshot& s) {
  TextWriter out;
  const auto& pleg = *CountersOf(s, "plegd");
  const auto& workers = *CountersOf(s, "podworkerd");

  out.Family("kubelet_running_pods", "Number of pods that have a running container.",
             MetricType::kGauge);
  out.Sample("kubelet_running_pods", {}, Get(pleg, "running_pods"));
  out.Family("kubelet_running_containers", "Number of containers currently running.",
             MetricType::kGauge);
  out.Sample("kubelet_running_containers", {{"container_state", "running"}},
             Get(pleg, "running_containers"));
  WriteHistogram(out, "kubelet_pleg_relist_duration_seconds",
                 "Duration in seconds for relisting pods in PLEG.", pleg,
                 "relist_duration_seconds");
  WriteHistogram(out, "kubelet_pleg_relist_interval_seconds",
                 "Interval in seconds between relisting in PLEG.", pleg, "relist_interval_seconds");
  out.Family("kubelet_pleg_last_seen_seconds",
             "Timestamp in seconds when PLEG was last seen active.", MetricType::kGauge);
  out.Sample("kubelet_pleg_last_seen_seconds", {},
             Seconds(Get(pleg, "last_relist_unix_ms") * 1000));
  WriteHistogram(out, "kubelet_pod_start_duration_seconds",
                 "Duration in seconds from a pod's ADD to its status Running.", workers,
                 "pod_start_duration_seconds");
  WriteHistogram(out, "kubelet_pod_worker_duration_seconds",
                 "Duration in seconds to sync a single pod.", workers,
                 "pod_worker_duration_seconds");
  WriteProbeMetrics(out, s);
  // Containers started and the starts that failed, by container type and the kubelet's error
  // code (ErrImagePull, CreateContainerConfigError, CreateContainerError, RunContainerError,
  // PostStartHookError, ...), as the kubelet's SyncPod counts them.
  WriteLabelledCounter(out, "kubelet_started_containers_total",
                       "Cumulative number of containers started", workers,
                       "started_containers:", "container_type");
  out.Family("kubelet_started_containers_errors_total",
             "Cumulative number of errors when starting containers", MetricType::kCounter);
  for (const auto& [k, v] : workers) {
    if (k.rfind("started_containers_errors:", 0) != 0) continue;
    const std::string rest = k.substr(26);
    const size_t colon = rest.find(':');
    if (colon == std::string::npos) continue;
    out.Sample("kubelet_started_containers_errors_total",
               {{"code", rest.substr(colon + 1)}, {"container_type", rest.substr(0, colon)}}, v);
  }
  // Image pulls: one histogram per image size bucket (the kubelet's label values).
  {
    TextWriter pulls;
    std::vector<std::string> sizes;
    for (const auto& [k, v] : workers) {
      const std::string head = "image_pull_duration_seconds@";
      if (k.rfind(head, 0) != 0) continue;
      const std::string size = k.substr(head.size(), k.find('_', head.size()) - head.size());
      if (std::find(sizes.begin(), sizes.end(), size) == sizes.end()) sizes.push_back(size);
    }
    for (const auto& size : sizes) {
      if (auto h = ExportedHistogram(workers, "image_pull_duration_seconds@" + size)) {
        pulls.Histogram("kubelet_image_pull_duration_seconds", {{"image_size_in_bytes", size}}, *h);
      }
    }
    if (!pulls.empty()) {
      out.Family("kubelet_image_pull_duration_seconds", "Duration in seconds to pull an image.",
                 MetricType::kHistogram);
      out.Append(pulls);
    }
  }
  out.Family("kubelet_evictions", "Cumulative number of pod evictions by eviction signal",
             MetricType::kCounter);
  for (const auto& [signal, n] : s.evictions) {
    out.Sample("kubelet_evictions", {{"eviction_signal", signal}}, n);
  }
  WriteLabelledCounter(out, "kubelet_runtime_operations_total",
                       "Cumulative number of runtime operations by operation type.", workers,
                       "runtime_operations:", "operation_type");
  WriteLabelledCounter(out, "kubelet_runtime_operations_errors_total",
                       "Cumulative number of runtime operation errors by operation type.", workers,
                       "runtime_operations_errors:", "operation_type");

  auto counter = [&](const char* name, const char* help, MetricType type, const char* key) {
    out.Family(name, help, type);
    out.Sample(name, {}, Get(workers, key));
  };
  counter("kubelet_garbage_collected_containers_total",
          "Dead containers removed by garbage collection.", MetricType::kCounter,
          "containers_garbage_collected");
  counter("kubelet_image_garbage_collected_total", "Images removed by image garbage collection.",
          MetricType::kCounter, "images_garbage_collected");
  counter("nodelet_image_gc_freed_bytes_total",
          "Bytes freed by image garbage collection (the removed images' sizes).",
          MetricType::kCounter, "image_gc_bytes_freed");
  counter("nodelet_image_gc_runs_total", "Image garbage collection passes.", MetricType::kCounter,
          "image_gc_runs");
  counter("nodelet_image_gc_failures_total",
          "Image garbage collection passes that failed or could not free enough.",
          MetricType::kCounter, "image_gc_failures");
  counter("nodelet_image_fs_capacity_bytes", "Capacity of the image filesystem.",
          MetricType::kGauge, "image_fs_capacity_bytes");
  counter("nodelet_image_fs_available_bytes",
          "Free bytes of the image filesystem at the last image GC pass.", MetricType::kGauge,
          "image_fs_available_bytes");
  counter("nodelet_container_gc_runs_total", "Node-wide dead-container garbage collection passes.",
          MetricType::kCounter, "container_gc_runs");
  counter("nodelet_container_gc_failures_total",
          "Node-wide dead-container garbage collection passes that failed.", MetricType::kCounter,
          "container_gc_failures");
  out.Family("nodelet_service_up", "Whether the service is RUNNING (1) or not (0).",
             MetricType::kGauge);
  for (const auto& svc : s.services) {
    out.Sample("nodelet_service_up", {{"service", svc.name}},
               svc.state == ProcessState::Running ? 1 : 0);
  }
  out.Family("nodelet_service_restarts_total", "Automatic restarts of the service.",
             MetricType::kCounter);
  for (const auto& svc : s.services) {
    out.Sample("nodelet_service_restarts_total", {{"service", svc.name}}, svc.restarts);
  }
  out.Family("nodelet_ipc_messages_total", "Control messages the supervisor received, by sender.",
             MetricType::kCounter);
  for (const auto& svc : s.services) {
    auto it = s.messages.find(svc.name);
    out.Sample("nodelet_ipc_messages_total", {{"service", svc.name}},
               it == s.messages.end() ? 0 : it->second);
  }
  out.Family("nodelet_ipc_bad_messages_total",
             "Messages refused by verification, by receiving service.", MetricType::kCounter);
  for (const auto& svc : s.services) {
    const auto& c = *CountersOf(s, svc.name);
    out.Sample("nodelet_ipc_bad_messages_total", {{"service", svc.name}},
               Get(c, "bad_messages") + Get(c, "bad_requests"));
  }
  out.Sample("nodelet_ipc_bad_messages_total", {{"service", "supervisor"}}, s.bad_control);
  // Every counter each service reported in its last heartbeat, under its own name (docs/ of each
  // service names them): what the metrics above leave out, for whoever is chasing one service's
  // work (a bench, an operator comparing two nodes).
  out.Family("nodelet_service_stat",
             "A service's own counter or gauge (docs/ of each service), as its last heartbeat "
             "reported it, by service and name.",
             MetricType::kUntyped);
  for (const auto& [svc, counters] : s.counters) {
    for (const auto& [name, v] : counters) {
      out.Sample("nodelet_service_stat", {{"service", svc}, {"name", name}}, v);
    }
  }
  out.Family("nodelet_pod_source_failures_total",
             "Reads of a pod source that failed (its pods were kept), by source and reason.",
             MetricType::kCounter);
  for (const auto& [key, n] : s.source_failures) {
    out.Sample("nodelet_pod_source_failures_total", {{"source", key.first}, {"reason", key.second}},
               n);
  }
  return out.Take();
}

std::optional<ProcessFigures> ReadProcessFigures(pid_t pid, double boot_time_unix_s) {
  const std::string dir = "/proc/" + std::to_string(pid);
  std::ifstream stat(dir + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  // The fields after the command (which may hold spaces and parentheses): from the last ')'.
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(text.substr(close + 2));
  std::vector<std::string> f;
  for (std::string w; fields >> w;) f.push_back(w);
  // f[0] is field 3 (state): utime 14, stime 15, starttime 22, vsize 23, rss 24.
  if (f.size() < 22) return std::nullopt;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const auto field = [&](int n) { return std::strtoull(f[n - 3].c_str(), nullptr, 10); };
  ProcessFigures p;
  p.cpu_seconds = static_cast<double>(field(14) + field(15)) / ticks;
  p.start_time_unix_s = boot_time_unix_s + static_cast<double>(field(22)) / ticks;
  p.virtual_bytes = field(23);
  p.resident_bytes = field(24) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++p.open_fds;
  }
  std::ifstream limits(dir + "/limits");
  for (std::string line; std::getline(limits, line);) {
    if (line.rfind("Max open files", 0) != 0) continue;
    std::istringstream l(line.substr(14));
    std::string soft;
    l >> soft;
    p.max_fds = std::strtoull(soft.c_str(), nullptr, 10);
  }
  return p;
}

double BootTimeUnixSeconds() {
  std::ifstream stat("/proc/stat");
  for (std::string line; std::getline(stat, line);) {
    if (line.rfind("btime ", 0) == 0) return std::strtod(line.c_str() + 6, nullptr);
  }
  return 0;
}

std::string RenderProcessMetrics(const std::optional<ProcessFigures>& self,
                                 const std::map<std::string, ProcessFigures>& services) {
  TextWriter out;
  out.Family("nodelet_build_info", "The version nodelet was built from, and how.",
             MetricType::kGauge);
  out.Sample("nodelet_build_info",
             {{"version", NODELET_VERSION}, {"compiler", __VERSION__}, {"platform", "linux/amd64"}},
             1);
  if (self) {
    const auto gauge = [&](const char* name, MetricType type, const char* help, double v) {
      out.Family(name, help, type);
      out.Sample(name, {}, ProcessNumber(v));
    };
    gauge("process_cpu_seconds_total", MetricType::kCounter,
          "Total user and system CPU time spent in seconds.", self->cpu_seconds);
    gauge("process_resident_memory_bytes", MetricType::kGauge, "Resident memory size in bytes.",
          static_cast<double>(self->resident_bytes));
    gauge("process_virtual_memory_bytes", MetricType::kGauge, "Virtual memory size in bytes.",
          static_cast<double>(self->virtual_bytes));
    gauge("process_start_time_seconds", MetricType::kGauge,
          "Start time of the process since unix epoch in seconds.", self->start_time_unix_s);
    gauge("process_open_fds", MetricType::kGauge, "Number of open file descriptors.",
          static_cast<double>(self->open_fds));
    gauge("process_max_fds", MetricType::kGauge, "Maximum number of open file descriptors.",
          static_cast<double>(self->max_fds));
  }
  const auto per_service = [&](const char* name, MetricType type, const char* help, auto value) {
    out.Family(name, help, type);
    for (const auto& [svc, p] : services) {
      out.Sample(name, {{"service", svc}}, ProcessNumber(value(p)));
    }
  };
  per_service("nodelet_service_cpu_seconds_total", MetricType::kCounter,
              "A running service's user and system CPU time in seconds.",
              [](const ProcessFigures& p) { return p.cpu_seconds; });
  per_service("nodelet_service_resident_memory_bytes", MetricType::kGauge,
              "A running service's resident memory in bytes.",
              [](const ProcessFigures& p) { return p.resident_bytes; });
  per_service("nodelet_service_open_fds", MetricType::kGauge,
              "A running service's open file descriptors.",
              [](const ProcessFigures& p) { return p.open_fds; });
  return out.Take();
}

}  // namespace nodelet::supervisor
