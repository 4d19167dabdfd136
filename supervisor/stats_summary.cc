// The Summary API's JSON and the resource metrics of a usage sample, the CPU rates they carry,
// and the one sampler the endpoint and the eviction manager share (stats_summary.h).
#include "supervisor/stats_summary.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "lib/common/json_text.h"
#include "lib/common/rfc3339.h"
#include "lib/metrics/prometheus_text.h"
#include "lib/stats/usage.h"

namespace nodelet::supervisor {
namespace {

using nlohmann::json;

json CpuJson(const std::string& time, const stats::CpuUsage& cpu,
             const std::optional<uint64_t>& nano_cores) {
  json j = {{"time", time}};
  if (nano_cores) j["usageNanoCores"] = *nano_cores;
  j["usageCoreNanoSeconds"] = cpu.usage_core_nanoseconds;
  return j;
}

json MemoryJson(const std::string& time, const stats::MemoryUsage& m) {
  return {{"time", time},
          {"usageBytes", m.usage_bytes},
          {"workingSetBytes", m.working_set_bytes},
          {"rssBytes", m.rss_bytes},
          {"pageFaults", m.page_faults},
          {"majorPageFaults", m.major_page_faults}};
}

json FsJson(const std::string& time, const stats::FsStats& fs) {
  return {{"time", time},
          {"availableBytes", fs.available_bytes},
          {"capacityBytes", fs.capacity_bytes},
          {"usedBytes", fs.used_bytes},
          {"inodesFree", fs.inodes_free},
          {"inodes", fs.inodes},
          {"inodesUsed", fs.inodes_used}};
}

// What a directory uses on the node's filesystem: its own bytes and inodes, the filesystem's
// capacity and free space (as the kubelet reports logs, volumes and ephemeral storage).
json DirJson(const std::string& time, const stats::DirUsage& used,
             const std::optional<stats::FsStats>& nodefs) {
  json j = {{"time", time}};
  if (nodefs) {
    j["availableBytes"] = nodefs->available_bytes;
    j["capacityBytes"] = nodefs->capacity_bytes;
    j["inodesFree"] = nodefs->inodes_free;
    j["inodes"] = nodefs->inodes;
  }
  j["usedBytes"] = used.used_bytes;
  j["inodesUsed"] = used.inodes_used;
  return j;
}

template <typename T>
std::optional<uint64_t> Find(const std::map<std::string, T>& m, const std::string& key) {
  auto it = m.find(key);
  if (it == m.end()) return std::nullopt;
  return it->second;
}

// Nanoseconds as seconds, exactly ("12.000000345").
std::string NanosAsSeconds(uint64_t ns) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%llu.%09llu",
                static_cast<unsigned long long>(ns / 1000000000ULL),
                static_cast<unsigned long long>(ns % 1000000000ULL));
  return buf;
}

}  // namespace

std::optional<uint64_t> CpuRateTracker::Rate(Series& s, Point p) const {
  if (s.last && p.v < s.last->v) {  // the counter started over
    s.prev.reset();
    s.last = p;
    return std::nullopt;
  }
  if (!s.last) {
    s.last = p;
    return std::nullopt;
  }
  auto rate = [](const Point& from, const Point& to) -> std::optional<uint64_t> {
    const int64_t dt = to.t_ms - from.t_ms;
    if (dt <= 0) return std::nullopt;
    return static_cast<uint64_t>(static_cast<long double>(to.v - from.v) * 1000.0L /
                                 static_cast<long double>(dt));
  };
  if (p.t_ms - s.last->t_ms >= min_window_ms_) {
    auto r = rate(*s.last, p);
    s.prev = s.last;
    s.last = p;
    return r;
  }
  // Too soon after the last point: over the longer window from the one before, if it is one.
  if (s.prev && p.t_ms - s.prev->t_ms >= min_window_ms_ && p.v >= s.prev->v) {
    return rate(*s.prev, p);
  }
  return std::nullopt;
}

CpuRates CpuRateTracker::Observe(const NodeStats& sample) {
  std::lock_guard<std::mutex> lock(mu_);
  CpuRates out;
  std::map<std::string, Series> next;
  auto observe = [&](const std::string& key, const stats::CpuUsage& cpu) {
    auto it = series_.find(key);
    Series s = it == series_.end() ? Series{} : it->second;
    auto r = Rate(s, Point{sample.time_unix_ms, cpu.usage_core_nanoseconds});
    next[key] = s;
    return r;
  };
  if (sample.cpu) out.node = observe("node", *sample.cpu);
  for (const auto& pod : sample.pods) {
    if (pod.cpu) {
      if (auto r = observe("pod/" + pod.uid, *pod.cpu)) out.pods[pod.uid] = *r;
    }
    for (const auto& c : pod.containers) {
      if (!c.cpu) continue;
      if (auto r = observe("container/" + c.id, *c.cpu)) out.containers[c.id] = *r;
    }
  }
  // What this sample did not have is gone (a removed pod, an ended container).
  series_ = std::move(next);
  return out;
}

std::string SummaryJson(const RatedSample& rated, int64_t node_start_unix_s) {
  const NodeStats& s = rated.stats;
  const std::string time = FormatRfc3339(s.time_unix_ms / 1000);
  json node = {{"nodeName", s.node_name}, {"startTime", FormatRfc3339(node_start_unix_s)}};
  if (s.cpu) node["cpu"] = CpuJson(time, *s.cpu, rated.rates.node);
  if (s.memory) {
    node["memory"] = {{"time", time},
                      {"availableBytes", s.memory->available_bytes},
                      {"usageBytes", s.memory->usage_bytes},
                      {"workingSetBytes", s.memory->working_set_bytes}};
  }
  if (s.nodefs) node["fs"] = FsJson(time, *s.nodefs);
  if (s.imagefs) node["runtime"] = {{"imageFs", FsJson(time, *s.imagefs)}};
  if (s.pids)
    node["rlimit"] = {{"time", time}, {"maxpid", s.pids->max}, {"curproc", s.pids->in_use}};

  json pods = json::array();
  for (const auto& p : s.pods) {
    json pj = {{"podRef", {{"name", p.name}, {"namespace", p.namespace_name}, {"uid", p.uid}}},
               {"startTime", FormatRfc3339(p.start_time_unix_s)}};
    json containers = json::array();
    for (const auto& c : p.containers) {
      json cj = {{"name", c.name}, {"startTime", FormatRfc3339(c.start_time_unix_s)}};
      if (c.cpu) cj["cpu"] = CpuJson(time, *c.cpu, Find(rated.rates.containers, c.id));
      if (c.memory) cj["memory"] = MemoryJson(time, *c.memory);
      if (c.rootfs) cj["rootfs"] = DirJson(time, *c.rootfs, s.imagefs ? s.imagefs : s.nodefs);
      if (c.logs) cj["logs"] = DirJson(time, *c.logs, s.nodefs);
      containers.push_back(std::move(cj));
    }
    pj["containers"] = std::move(containers);
    if (p.cpu) pj["cpu"] = CpuJson(time, *p.cpu, Find(rated.rates.pods, p.uid));
    if (p.memory) pj["memory"] = MemoryJson(time, *p.memory);
    if (!p.volumes.empty()) {
      json volumes = json::array();
      for (const auto& v : p.volumes) {
        json vj = DirJson(time, v.used, s.nodefs);
        vj["name"] = v.name;
        volumes.push_back(std::move(vj));
      }
      pj["volume"] = std::move(volumes);
    }
    pj["ephemeral-storage"] = DirJson(time, p.ephemeral_storage, s.nodefs);
    if (p.processes) pj["process_stats"] = {{"process_count", *p.processes}};
    pods.push_back(std::move(pj));
  }
  return JsonText(json{{"node", std::move(node)}, {"pods", std::move(pods)}}, 2);
}

std::string RenderUsageMetrics(const NodeStats* s) {
  using metrics::MetricType;
  metrics::TextWriter out;
  if (s != nullptr) {
    const int64_t ts = s->time_unix_ms;
    out.Family("node_cpu_usage_seconds_total",
               "Cumulative cpu time consumed by the node in core-seconds", MetricType::kCounter);
    if (s->cpu) {
      out.Sample("node_cpu_usage_seconds_total", {}, NanosAsSeconds(s->cpu->usage_core_nanoseconds),
                 ts);
    }
    out.Family("node_memory_working_set_bytes", "Current working set of the node in bytes",
               MetricType::kGauge);
    if (s->memory) {
      out.Sample("node_memory_working_set_bytes", {}, s->memory->working_set_bytes, ts);
    }

    // A family's series, one for each container (each pod) `value` has a figure for.
    auto per_container = [&](const char* name, const char* help, MetricType type,
                             std::optional<int64_t> time, auto value) {
      out.Family(name, help, type);
      for (const auto& p : s->pods) {
        for (const auto& c : p.containers) {
          std::optional<std::string> v = value(c);
          if (!v) continue;
          out.Sample(name,
                     {{"container", c.name}, {"namespace", p.namespace_name}, {"pod", p.name}}, *v,
                     time);
        }
      }
    };
    per_container("container_cpu_usage_seconds_total",
                  "Cumulative cpu time consumed by the container in core-seconds",
                  MetricType::kCounter, ts,
                  [](const ContainerStats& c) -> std::optional<std::string> {
                    if (!c.cpu) return std::nullopt;
                    return NanosAsSeconds(c.cpu->usage_core_nanoseconds);
                  });
    per_container("container_memory_working_set_bytes",
                  "Current working set of the container in bytes", MetricType::kGauge, ts,
                  [](const ContainerStats& c) -> std::optional<std::string> {
                    if (!c.memory) return std::nullopt;
                    return std::to_string(c.memory->working_set_bytes);
                  });
    per_container("container_start_time_seconds",
                  "Start time of the container since unix epoch in seconds", MetricType::kGauge,
                  std::nullopt, [](const ContainerStats& c) -> std::optional<std::string> {
                    if (c.start_time_unix_s <= 0) return std::nullopt;
                    return std::to_string(c.start_time_unix_s);
                  });
    auto per_pod = [&](const char* name, const char* help, MetricType type, auto value) {
      out.Family(name, help, type);
      for (const auto& p : s->pods) {
        std::optional<std::string> v = value(p);
        if (!v) continue;
        out.Sample(name, {{"namespace", p.namespace_name}, {"pod", p.name}}, *v, ts);
      }
    };
    per_pod("pod_cpu_usage_seconds_total",
            "Cumulative cpu time consumed by the pod in core-seconds", MetricType::kCounter,
            [](const PodStats& p) -> std::optional<std::string> {
              if (!p.cpu) return std::nullopt;
              return NanosAsSeconds(p.cpu->usage_core_nanoseconds);
            });
    per_pod("pod_memory_working_set_bytes", "Current working set of the pod in bytes",
            MetricType::kGauge, [](const PodStats& p) -> std::optional<std::string> {
              if (!p.memory) return std::nullopt;
              return std::to_string(p.memory->working_set_bytes);
            });
  }
  out.Family("resource_scrape_error",
             "1 if there was an error while getting container metrics, 0 otherwise",
             MetricType::kGauge);
  out.Sample("resource_scrape_error", {}, s == nullptr ? 1 : 0);
  return out.Take();
}

UsageSampler::UsageSampler(const Clock& clock, StatsSource& source,
                           std::chrono::milliseconds fresh_for)
    : clock_(clock), source_(source), fresh_for_(fresh_for) {
  if (auto boot = stats::ReadBootTime(); boot.ok()) node_start_unix_s_ = *boot;
}

std::shared_ptr<const RatedSample> UsageSampler::Fresh() {
  std::lock_guard<std::mutex> one_at_a_time(sample_mu_);
  return FreshLocked();
}

std::shared_ptr<const RatedSample> UsageSampler::FreshLocked() {
  auto sample = std::make_shared<RatedSample>();
  sample->stats = source_.Sample();
  sample->rates = rates_.Observe(sample->stats);
  ++samples_;
  std::lock_guard<std::mutex> lock(mu_);
  last_ = sample;
  last_at_ = clock_.Now();
  return sample;
}

std::shared_ptr<const RatedSample> UsageSampler::Recent(std::chrono::milliseconds max_age) {
  auto young = [&]() -> std::shared_ptr<const RatedSample> {
    std::lock_guard<std::mutex> lock(mu_);
    if (last_ && clock_.Now() - last_at_ < max_age) return last_;
    return nullptr;
  };
  if (auto s = young()) return s;
  std::lock_guard<std::mutex> one_at_a_time(sample_mu_);
  // Another caller may have taken one while this one waited for the lock.
  if (auto s = young()) return s;
  return FreshLocked();
}

}  // namespace nodelet::supervisor
