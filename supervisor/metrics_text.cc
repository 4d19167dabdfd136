#include "supervisor/metrics_text.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "nodelet_version.h"
#include "supervisor/stats_summary.h"

namespace nodelet::supervisor {
namespace {

std::string Seconds(uint64_t us) {
  std::ostringstream s;
  s.precision(9);
  s << static_cast<double>(us) / 1e6;
  return s.str();
}

// Writes the series of the histogram exported under `prefix` in `counters`
// (lib/common/histogram.h) as NAME with `labels`, no HELP or TYPE line; false when it has none.
bool RenderHistogramSeries(std::ostringstream& out, const std::string& name,
                           const std::map<std::string, uint64_t>& counters,
                           const std::string& prefix, const std::string& labels = "") {
  std::vector<std::pair<double, std::pair<std::string, uint64_t>>> buckets;
  const std::string bucket_prefix = prefix + "_bucket:";
  for (const auto& [k, v] : counters) {
    if (k.rfind(bucket_prefix, 0) != 0) continue;
    std::string le = k.substr(bucket_prefix.size());
    double bound = le == "+Inf" ? 1e300 : std::strtod(le.c_str(), nullptr);
    buckets.push_back({bound, {le, v}});
  }
  if (buckets.empty()) return false;
  std::sort(buckets.begin(), buckets.end());
  const std::string sep = labels.empty() ? "" : ",";
  for (const auto& [_, b] : buckets) {
    out << name << "_bucket{" << labels << sep << "le=\"" << b.first << "\"} " << b.second << "\n";
  }
  auto sum = counters.find(prefix + "_sum_us");
  auto count = counters.find(prefix + "_count");
  std::string l = labels.empty() ? "" : "{" + labels + "}";
  out << name << "_sum" << l << " " << Seconds(sum == counters.end() ? 0 : sum->second) << "\n";
  out << name << "_count" << l << " " << (count == counters.end() ? 0 : count->second) << "\n";
  return true;
}

// The histogram with its HELP and TYPE lines, when it has series.
void RenderHistogram(std::ostringstream& out, const std::string& name, const std::string& help,
                     const std::map<std::string, uint64_t>& counters, const std::string& prefix) {
  std::ostringstream series;
  if (!RenderHistogramSeries(series, name, counters, prefix)) return;
  out << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n" << series.str();
}

// A counter with one label from the counters named PREFIX:VALUE (NAME{LABEL="VALUE"}), its HELP
// and TYPE lines always written.
void RenderLabelledCounter(std::ostringstream& out, const std::string& name,
                           const std::string& help, const std::map<std::string, uint64_t>& counters,
                           const std::string& prefix, const std::string& label) {
  out << "# HELP " << name << " " << help << "\n# TYPE " << name << " counter\n";
  for (const auto& [k, v] : counters) {
    if (k.rfind(prefix, 0) != 0) continue;
    out << name << "{" << label << "=\"" << PrometheusLabel(k.substr(prefix.size())) << "\"} " << v
        << "\n";
  }
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

}  // namespace

std::string RenderProbeMetrics(const HttpSnapshot& s) {
  std::ostringstream out;
  const auto& workers = *CountersOf(s, "podworkerd");
  // Probes: one histogram and one counter, labelled by probe type (not by pod: the kubelet's
  // per-pod labels would make the series grow with the pods).
  {
    std::ostringstream hist;
    bool any = false;
    for (const char* kind : {"liveness", "readiness", "startup"}) {
      std::string type = kind;
      type[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(type[0])));
      any = RenderHistogramSeries(hist, "prober_probe_duration_seconds", workers,
                                  std::string("probe_duration_seconds_") + kind,
                                  "probe_type=\"" + type + "\"") ||
            any;
    }
    if (any) {
      out << "# HELP prober_probe_duration_seconds Duration in seconds for a probe response.\n"
          << "# TYPE prober_probe_duration_seconds histogram\n"
          << hist.str();
    }
    std::ostringstream totals;
    for (const auto& [k, v] : workers) {
      if (k.rfind("probe_total:", 0) != 0) continue;
      std::string rest = k.substr(12);
      auto colon = rest.find(':');
      if (colon == std::string::npos) continue;
      std::string type = rest.substr(0, colon);
      if (!type.empty())
        type[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(type[0])));
      totals << "prober_probe_total{probe_type=\"" << PrometheusLabel(type) << "\",result=\""
             << PrometheusLabel(rest.substr(colon + 1)) << "\"} " << v << "\n";
    }
    if (!totals.str().empty()) {
      out << "# HELP prober_probe_total Cumulative number of a liveness, readiness or startup "
             "probe for a container by result.\n"
          << "# TYPE prober_probe_total counter\n"
          << totals.str();
    }
  }
  return out.str();
}

std::string RenderMetrics(const HttpSnapshot& s) {
  std::ostringstream out;
  const auto& pleg = *CountersOf(s, "plegd");
  const auto& workers = *CountersOf(s, "podworkerd");

  out << "# HELP kubelet_running_pods Number of pods that have a running container.\n"
      << "# TYPE kubelet_running_pods gauge\n"
      << "kubelet_running_pods " << Get(pleg, "running_pods") << "\n";
  out << "# HELP kubelet_running_containers Number of containers currently running.\n"
      << "# TYPE kubelet_running_containers gauge\n"
      << "kubelet_running_containers{container_state=\"running\"} "
      << Get(pleg, "running_containers") << "\n";
  RenderHistogram(out, "kubelet_pleg_relist_duration_seconds",
                  "Duration in seconds for relisting pods in PLEG.", pleg,
                  "relist_duration_seconds");
  RenderHistogram(out, "kubelet_pleg_relist_interval_seconds",
                  "Interval in seconds between relisting in PLEG.", pleg,
                  "relist_interval_seconds");
  out << "# HELP kubelet_pleg_last_seen_seconds Timestamp in seconds when PLEG was last seen "
         "active.\n"
      << "# TYPE kubelet_pleg_last_seen_seconds gauge\n"
      << "kubelet_pleg_last_seen_seconds " << Seconds(Get(pleg, "last_relist_unix_ms") * 1000)
      << "\n";
  RenderHistogram(out, "kubelet_pod_start_duration_seconds",
                  "Duration in seconds from a pod's ADD to its status Running.", workers,
                  "pod_start_duration_seconds");
  RenderHistogram(out, "kubelet_pod_worker_duration_seconds",
                  "Duration in seconds to sync a single pod.", workers,
                  "pod_worker_duration_seconds");
  out << RenderProbeMetrics(s);
  // Containers started and the starts that failed, by container type and the kubelet's error
  // code (ErrImagePull, CreateContainerConfigError, CreateContainerError, RunContainerError,
  // PostStartHookError, ...), as the kubelet's SyncPod counts them.
  {
    std::ostringstream failed;
    for (const auto& [k, v] : workers) {
      if (k.rfind("started_containers_errors:", 0) != 0) continue;
      const std::string rest = k.substr(26);
      const size_t colon = rest.find(':');
      if (colon == std::string::npos) continue;
      failed << "kubelet_started_containers_errors_total{code=\""
             << PrometheusLabel(rest.substr(colon + 1)) << "\",container_type=\""
             << PrometheusLabel(rest.substr(0, colon)) << "\"} " << v << "\n";
    }
    RenderLabelledCounter(out, "kubelet_started_containers_total",
                          "Cumulative number of containers started", workers,
                          "started_containers:", "container_type");
    out << "# HELP kubelet_started_containers_errors_total Cumulative number of errors when "
           "starting containers\n"
        << "# TYPE kubelet_started_containers_errors_total counter\n"
        << failed.str();
  }
  // Image pulls: one histogram per image size bucket (the kubelet's label values).
  {
    std::ostringstream pulls;
    std::vector<std::string> sizes;
    for (const auto& [k, v] : workers) {
      const std::string head = "image_pull_duration_seconds@";
      if (k.rfind(head, 0) != 0) continue;
      const std::string size = k.substr(head.size(), k.find('_', head.size()) - head.size());
      if (std::find(sizes.begin(), sizes.end(), size) == sizes.end()) sizes.push_back(size);
    }
    for (const auto& size : sizes) {
      RenderHistogramSeries(pulls, "kubelet_image_pull_duration_seconds", workers,
                            "image_pull_duration_seconds@" + size,
                            "image_size_in_bytes=\"" + PrometheusLabel(size) + "\"");
    }
    if (!pulls.str().empty()) {
      out << "# HELP kubelet_image_pull_duration_seconds Duration in seconds to pull an image.\n"
          << "# TYPE kubelet_image_pull_duration_seconds histogram\n"
          << pulls.str();
    }
  }
  out << "# HELP kubelet_evictions Cumulative number of pod evictions by eviction signal\n"
      << "# TYPE kubelet_evictions counter\n";
  for (const auto& [signal, n] : s.evictions) {
    out << "kubelet_evictions{eviction_signal=\"" << PrometheusLabel(signal) << "\"} " << n << "\n";
  }
  RenderLabelledCounter(out, "kubelet_runtime_operations_total",
                        "Cumulative number of runtime operations by operation type.", workers,
                        "runtime_operations:", "operation_type");
  RenderLabelledCounter(out, "kubelet_runtime_operations_errors_total",
                        "Cumulative number of runtime operation errors by operation type.", workers,
                        "runtime_operations_errors:", "operation_type");

  out << "# HELP kubelet_garbage_collected_containers_total Dead containers removed by garbage "
         "collection.\n"
      << "# TYPE kubelet_garbage_collected_containers_total counter\n"
      << "kubelet_garbage_collected_containers_total "
      << Get(workers, "containers_garbage_collected") << "\n";
  auto counter = [&](const char* name, const char* help, const char* type, const char* key) {
    out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n"
        << name << " " << Get(workers, key) << "\n";
  };
  counter("kubelet_image_garbage_collected_total", "Images removed by image garbage collection.",
          "counter", "images_garbage_collected");
  counter("nodelet_image_gc_freed_bytes_total",
          "Bytes freed by image garbage collection (the removed images' sizes).", "counter",
          "image_gc_bytes_freed");
  counter("nodelet_image_gc_runs_total", "Image garbage collection passes.", "counter",
          "image_gc_runs");
  counter("nodelet_image_gc_failures_total",
          "Image garbage collection passes that failed or could not free enough.", "counter",
          "image_gc_failures");
  counter("nodelet_image_fs_capacity_bytes", "Capacity of the image filesystem.", "gauge",
          "image_fs_capacity_bytes");
  counter("nodelet_image_fs_available_bytes",
          "Free bytes of the image filesystem at the last image GC pass.", "gauge",
          "image_fs_available_bytes");
  counter("nodelet_container_gc_runs_total", "Node-wide dead-container garbage collection passes.",
          "counter", "container_gc_runs");
  counter("nodelet_container_gc_failures_total",
          "Node-wide dead-container garbage collection passes that failed.", "counter",
          "container_gc_failures");
  out << "# HELP nodelet_service_up Whether the service is RUNNING (1) or not (0).\n"
      << "# TYPE nodelet_service_up gauge\n";
  for (const auto& svc : s.services) {
    out << "nodelet_service_up{service=\"" << svc.name << "\"} "
        << (svc.state == ProcessState::Running ? 1 : 0) << "\n";
  }
  out << "# HELP nodelet_service_restarts_total Automatic restarts of the service.\n"
      << "# TYPE nodelet_service_restarts_total counter\n";
  for (const auto& svc : s.services) {
    out << "nodelet_service_restarts_total{service=\"" << svc.name << "\"} " << svc.restarts
        << "\n";
  }
  out << "# HELP nodelet_ipc_messages_total Control messages the supervisor received, by sender.\n"
      << "# TYPE nodelet_ipc_messages_total counter\n";
  for (const auto& svc : s.services) {
    auto it = s.messages.find(svc.name);
    out << "nodelet_ipc_messages_total{service=\"" << svc.name << "\"} "
        << (it == s.messages.end() ? 0 : it->second) << "\n";
  }
  out << "# HELP nodelet_ipc_bad_messages_total Messages refused by verification, by receiving "
         "service.\n"
      << "# TYPE nodelet_ipc_bad_messages_total counter\n";
  for (const auto& svc : s.services) {
    const auto& c = *CountersOf(s, svc.name);
    out << "nodelet_ipc_bad_messages_total{service=\"" << svc.name << "\"} "
        << Get(c, "bad_messages") + Get(c, "bad_requests") << "\n";
  }
  out << "nodelet_ipc_bad_messages_total{service=\"supervisor\"} " << s.bad_control << "\n";
  // Every counter each service reported in its last heartbeat, under its own name (docs/ of each
  // service names them): what the metrics above leave out, for whoever is chasing one service's
  // work (a bench, an operator comparing two nodes).
  out << "# HELP nodelet_service_stat A service's own counter or gauge (docs/ of each "
         "service), as its last heartbeat reported it, by service and name.\n"
      << "# TYPE nodelet_service_stat untyped\n";
  for (const auto& [svc, counters] : s.counters) {
    for (const auto& [name, v] : counters) {
      out << "nodelet_service_stat{service=\"" << PrometheusLabel(svc) << "\",name=\""
          << PrometheusLabel(name) << "\"} " << v << "\n";
    }
  }
  out << "# HELP nodelet_pod_source_failures_total Reads of a pod source that failed (its pods "
         "were kept), by source and reason.\n"
      << "# TYPE nodelet_pod_source_failures_total counter\n";
  for (const auto& [key, n] : s.source_failures) {
    out << "nodelet_pod_source_failures_total{source=\"" << PrometheusLabel(key.first)
        << "\",reason=\"" << PrometheusLabel(key.second) << "\"} " << n << "\n";
  }
  return out.str();
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
  std::ostringstream out;
  out.precision(15);
  out << "# HELP nodelet_build_info The version nodelet was built from, and how.\n"
      << "# TYPE nodelet_build_info gauge\n"
      << "nodelet_build_info{version=\"" << PrometheusLabel(NODELET_VERSION) << "\",compiler=\""
      << PrometheusLabel(__VERSION__) << "\",platform=\"linux/amd64\"} 1\n";
  if (self) {
    const auto gauge = [&](const char* name, const char* type, const char* help, double v) {
      out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n"
          << name << " " << v << "\n";
    };
    gauge("process_cpu_seconds_total", "counter",
          "Total user and system CPU time spent in seconds.", self->cpu_seconds);
    gauge("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
          static_cast<double>(self->resident_bytes));
    gauge("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.",
          static_cast<double>(self->virtual_bytes));
    gauge("process_start_time_seconds", "gauge",
          "Start time of the process since unix epoch in seconds.", self->start_time_unix_s);
    gauge("process_open_fds", "gauge", "Number of open file descriptors.",
          static_cast<double>(self->open_fds));
    gauge("process_max_fds", "gauge", "Maximum number of open file descriptors.",
          static_cast<double>(self->max_fds));
  }
  const auto per_service = [&](const char* name, const char* type, const char* help, auto value) {
    out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
    for (const auto& [svc, p] : services) {
      out << name << "{service=\"" << PrometheusLabel(svc) << "\"} " << value(p) << "\n";
    }
  };
  per_service("nodelet_service_cpu_seconds_total", "counter",
              "A running service's user and system CPU time in seconds.",
              [](const ProcessFigures& p) { return p.cpu_seconds; });
  per_service("nodelet_service_resident_memory_bytes", "gauge",
              "A running service's resident memory in bytes.",
              [](const ProcessFigures& p) { return p.resident_bytes; });
  per_service("nodelet_service_open_fds", "gauge", "A running service's open file descriptors.",
              [](const ProcessFigures& p) { return p.open_fds; });
  return out.str();
}

}  // namespace nodelet::supervisor
