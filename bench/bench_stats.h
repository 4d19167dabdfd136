// Small helpers shared by the benchmarks: percentiles over samples.
#pragma once

#include <algorithm>
#include <vector>

namespace nodelet::bench {

// The p-th percentile (0..100) of `v`, nearest rank; 0 for no samples.
inline double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t idx = static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(idx, v.size() - 1)];
}

}  // namespace nodelet::bench
