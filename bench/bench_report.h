// The figure record every benchmark writes (--json FILE) and bench-report merges into
// bench/results/latest.json and latest.md: a name, a unit, the number of samples, p50/p99 for a
// distribution or one value, the reference measured in the same run with the ratio to it, and
// the goal it is compared with (measured, never asserted). See docs/bench.md.
#pragma once

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_stats.h"

namespace nodelet::bench {

struct Figure {
  std::string name;  // "pod startup, 30 pods"
  std::string unit;  // "ms", "MiB", "cores", "updates/s"
  size_t samples = 0;
  std::optional<double> p50, p99;  // a distribution
  std::optional<double> value;     // a single figure (a rate, a sum)
  // What the figure is paired with in the same run ("CRI floor"), and the ratio figure/reference
  // (p50 over p50, or value over value).
  std::string reference;
  std::optional<double> ref_p50, ref_p99, ref_value;
  std::optional<double> ratio;
  // "p99 < 150 ms" and whether this run met it.
  std::string goal;
  std::optional<bool> goal_met;
  std::string note;
};

// A distribution figure from raw samples.
inline Figure Distribution(std::string name, std::string unit, const std::vector<double>& v) {
  Figure f;
  f.name = std::move(name);
  f.unit = std::move(unit);
  f.samples = v.size();
  f.p50 = Percentile(v, 50);
  f.p99 = Percentile(v, 99);
  return f;
}

// A single-value figure.
inline Figure Value(std::string name, std::string unit, double value, size_t samples) {
  Figure f;
  f.name = std::move(name);
  f.unit = std::move(unit);
  f.samples = samples;
  f.value = value;
  return f;
}

// Pairs `f` with a reference distribution measured in the same run; the ratio is p50 over p50.
inline void SetReference(Figure& f, std::string reference, const std::vector<double>& v) {
  f.reference = std::move(reference);
  f.ref_p50 = Percentile(v, 50);
  f.ref_p99 = Percentile(v, 99);
  if (f.p50 && *f.ref_p50 > 0) f.ratio = *f.p50 / *f.ref_p50;
}

// Pairs `f` with a reference value (a published limit, a floor); the ratio is value over value.
inline void SetReferenceValue(Figure& f, std::string reference, double value) {
  f.reference = std::move(reference);
  f.ref_value = value;
  double mine = f.value ? *f.value : f.p50 ? *f.p50 : 0;
  if (value > 0) f.ratio = mine / value;
}

// The goal: `what` is "p50", "p99", "value", "ratio" or "p99 over reference" (p99 minus the
// reference's p99); `op` "<" or ">".
inline void SetGoal(Figure& f, const std::string& what, const std::string& op, double limit) {
  std::optional<double> over;
  if (f.p99 && f.ref_p99) over = *f.p99 - *f.ref_p99;
  std::optional<double> x = what == "p50"                  ? f.p50
                            : what == "p99"                ? f.p99
                            : what == "ratio"              ? f.ratio
                            : what == "p99 over reference" ? over
                                                           : f.value;
  char text[96];
  std::snprintf(text, sizeof text, "%s %s %g%s%s", what.c_str(), op.c_str(), limit,
                what == "ratio" ? "x" : " ", what == "ratio" ? "" : f.unit.c_str());
  f.goal = text;
  if (x) f.goal_met = op == "<" ? *x < limit : *x > limit;
}

inline nlohmann::json ToJson(const Figure& f) {
  nlohmann::json j;
  j["name"] = f.name;
  j["unit"] = f.unit;
  j["samples"] = f.samples;
  if (f.p50) j["p50"] = *f.p50;
  if (f.p99) j["p99"] = *f.p99;
  if (f.value) j["value"] = *f.value;
  if (!f.reference.empty()) {
    nlohmann::json r;
    r["name"] = f.reference;
    if (f.ref_p50) r["p50"] = *f.ref_p50;
    if (f.ref_p99) r["p99"] = *f.ref_p99;
    if (f.ref_value) r["value"] = *f.ref_value;
    j["reference"] = r;
  }
  if (f.ratio) j["ratio"] = *f.ratio;
  if (!f.goal.empty()) {
    j["goal"] = f.goal;
    if (f.goal_met) j["goal_met"] = *f.goal_met;
  }
  if (!f.note.empty()) j["note"] = f.note;
  return j;
}

// Writes {"figures": [...], "details": {...}} to `path` (nothing when empty).
inline bool WriteReport(const std::string& path, const std::vector<Figure>& figures,
                        const nlohmann::json& details = nlohmann::json::object()) {
  if (path.empty()) return true;
  nlohmann::json j;
  j["figures"] = nlohmann::json::array();
  for (const auto& f : figures) j["figures"].push_back(ToJson(f));
  j["details"] = details;
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  return static_cast<bool>(out);
}

// Writes one sample per line (sorted, with its cumulative fraction) for a CDF plot.
inline void WriteCdf(const std::string& path, std::vector<double> v) {
  if (path.empty()) return;
  std::sort(v.begin(), v.end());
  std::ofstream out(path);
  for (size_t i = 0; i < v.size(); ++i) {
    out << v[i] << " " << static_cast<double>(i + 1) / static_cast<double>(v.size()) << "\n";
  }
}

}  // namespace nodelet::bench
