// What the HTTP endpoint makes of StatsSource samples (stats_collector.h): the kubelet's Summary
// API (/stats/summary, k8s.io/kubelet/pkg/apis/stats/v1alpha1) and its resource metrics
// (/metrics/resource's series, served on /metrics), with the CPU rates (usageNanoCores) that
// need two samples.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "lib/common/clock.h"
#include "supervisor/stats_collector.h"

namespace nodelet::supervisor {

// CPU use in nanocores (CPU-nanoseconds per second) over the window between two samples.
struct CpuRates {
  std::optional<uint64_t> node;
  std::map<std::string, uint64_t> pods;        // by pod uid
  std::map<std::string, uint64_t> containers;  // by container id
};

// Keeps the last two points of each cumulative CPU counter (the node's, each pod's, each
// container's) and gives each new sample its rates: over the window since the last point, or,
// when that is shorter than `min_window` (two requests close together), since the one before.
// A counter that went backwards (a cgroup made again) starts over. Thread-safe.
class CpuRateTracker {
 public:
  explicit CpuRateTracker(std::chrono::milliseconds min_window = std::chrono::seconds(1))
      : min_window_ms_(min_window.count()) {}
  CpuRates Observe(const NodeStats& sample);

 private:
  struct Point {
    int64_t t_ms = 0;
    uint64_t v = 0;
  };
  struct Series {
    std::optional<Point> prev, last;
  };
  std::optional<uint64_t> Rate(Series& s, Point p) const;

  const int64_t min_window_ms_;
  std::mutex mu_;
  std::map<std::string, Series> series_;
};

struct RatedSample {
  NodeStats stats;
  CpuRates rates;
};

// The Summary JSON of a sample. `node_start_unix_s` is the node's startTime (its boot).
std::string SummaryJson(const RatedSample& s, int64_t node_start_unix_s);

// The kubelet's resource metrics of a sample (node_, pod_ and container_ cpu_usage_seconds_total
// and memory_working_set_bytes, container_start_time_seconds, resource_scrape_error); only
// resource_scrape_error 1 without one.
std::string RenderUsageMetrics(const NodeStats* sample);

// The supervisor's one sampler of a StatsSource, shared by the eviction manager (which samples
// through it as its own StatsSource) and the HTTP endpoint (/metrics renders a recent sample,
// /stats/summary one at most kSummaryMaxAge old). It samples only when asked: nothing reads the
// pods' cgroups while nobody looks (at 100 idle pods a periodic sample was half of an idle
// supervisor's CPU). Every whole sample goes through one CpuRateTracker, so a rate spans the
// time since the sample before it, whoever asked for that one.
// How old the sample /stats/summary serves may be: a scrape or `nodeletctl top` sees figures
// at most this old, and any number of requests within it read the cgroups once.
inline constexpr std::chrono::milliseconds kSummaryMaxAge{2000};

class UsageSampler : public StatsSource {
 public:
  UsageSampler(const Clock& clock, StatsSource& source,
               std::chrono::milliseconds fresh_for = std::chrono::seconds(10));
  UsageSampler(const UsageSampler&) = delete;
  UsageSampler& operator=(const UsageSampler&) = delete;

  // A new sample with its rates.
  std::shared_ptr<const RatedSample> Fresh();
  // The last sample when it is younger than `fresh_for` (cAdvisor's housekeeping interval, so
  // that a burst of scrapes reads the cgroups once), else a fresh one.
  std::shared_ptr<const RatedSample> Recent() { return Recent(fresh_for_); }
  // The last sample when it is younger than `max_age`, else a fresh one. Callers that ask at
  // once share one sample: whoever waited for another's sample takes that one (no burst of
  // requests reads the cgroups once per request).
  std::shared_ptr<const RatedSample> Recent(std::chrono::milliseconds max_age);
  // StatsSource: a fresh sample (kept as the last one).
  NodeStats Sample() override { return Fresh()->stats; }
  // StatsSource: the source's node-only sample, passed through (no rates; not kept).
  NodeStats SampleNode() override { return source_.SampleNode(); }
  uint64_t samples() const { return samples_.load(); }
  int64_t node_start_unix_s() const { return node_start_unix_s_; }

 private:
  const Clock& clock_;
  StatsSource& source_;
  const std::chrono::milliseconds fresh_for_;
  int64_t node_start_unix_s_ = 0;
  CpuRateTracker rates_;
  // One sample and its rates at a time, so the counters come in order.
  std::shared_ptr<const RatedSample> FreshLocked();
  std::mutex sample_mu_;
  std::mutex mu_;
  std::shared_ptr<const RatedSample> last_;
  MonoTime last_at_{};  // when last_ was taken
  std::atomic<uint64_t> samples_{0};
};

}  // namespace nodelet::supervisor
