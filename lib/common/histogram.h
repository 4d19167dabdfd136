// Histogram: a Prometheus-style cumulative histogram with fixed buckets, exported through a
// service's heartbeat counters (which are plain name → uint64) as
//   NAME_bucket:LE      observations ≤ LE seconds (LE as written, e.g. "0.005", "+Inf")
//   NAME_sum_us         the sum of all observations, in microseconds
//   NAME_count          the number of observations
// The supervisor turns these back into a histogram on /metrics. Not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace nodelet {

class Histogram {
 public:
  // Upper bounds in seconds, ascending; +Inf is implied.
  explicit Histogram(std::vector<double> bounds)
      : bounds_(std::move(bounds)), counts_(bounds_.size()) {}

  // The kubelet's default latency buckets (0.005 s to 10 s) and a wider set for pod start-up.
  static std::vector<double> LatencyBuckets() {
    return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  }
  static std::vector<double> StartupBuckets() {
    return {0.1, 0.25, 0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120};
  }

  void Observe(std::chrono::microseconds d) {
    const double s = static_cast<double>(d.count()) / 1e6;
    for (size_t i = 0; i < bounds_.size(); ++i) {
      if (s <= bounds_[i]) ++counts_[i];
    }
    sum_us_ += static_cast<uint64_t>(d.count() < 0 ? 0 : d.count());
    ++count_;
  }

  void Export(const std::string& name, std::vector<std::pair<std::string, uint64_t>>& out) const {
    for (size_t i = 0; i < bounds_.size(); ++i) {
      out.emplace_back(name + "_bucket:" + Format(bounds_[i]), counts_[i]);
    }
    out.emplace_back(name + "_bucket:+Inf", count_);
    out.emplace_back(name + "_sum_us", sum_us_);
    out.emplace_back(name + "_count", count_);
  }

  uint64_t count() const { return count_; }

 private:
  static std::string Format(double v) {
    std::string s = std::to_string(v);
    while (!s.empty() && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  }

  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // cumulative: observations ≤ bound
  uint64_t sum_us_ = 0;
  uint64_t count_ = 0;
};

}  // namespace nodelet
