// metrics::TextWriter: Prometheus text exposition (format 0.0.4), the one writer of it in
// nodelet (the supervisor's /metrics, /metrics/probes and /metrics/resource). A family is its
// "# HELP" and "# TYPE" lines; a sample is NAME{LABEL="VALUE",...} VALUE [TIMESTAMP]; a histogram
// is its _bucket series (with "le"), _sum and _count. Label values are escaped here (backslash,
// double quote, line feed), and so is help text (backslash, line feed); names are the caller's to
// get right. Values arrive as numbers or as text the caller formatted (FormatDouble, or an exact
// decimal), so that each metric keeps the form it has always had.
#pragma once

#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nodelet::metrics {

enum class MetricType { kCounter, kGauge, kHistogram, kUntyped };

// "counter", "gauge", "histogram", "untyped".
const char* MetricTypeName(MetricType type);

// One label of a sample: its name and its value as it is (the writer escapes it).
struct Label {
  std::string name;
  std::string value;
};
using Labels = std::vector<Label>;

// A label value as the text format writes it between double quotes: backslash, double quote and
// line feed escaped ("a\"b" for a"b).
std::string EscapeLabelValue(std::string_view value);

// `value` as a C++ stream prints a double with `precision` significant digits: "3.5",
// "1.7145648e+09" (precision 8), "0.000123".
std::string FormatDouble(double value, int precision);

// One histogram's series: its cumulative buckets, in ascending order of their upper bounds, each
// bound as it is written in "le" ("0.005", "+Inf"); the sum of the observations, formatted; their
// count.
struct HistogramData {
  std::vector<std::pair<std::string, uint64_t>> buckets;
  std::string sum;
  uint64_t count = 0;
};

class TextWriter {
 public:
  // "# HELP NAME HELP" and "# TYPE NAME TYPE".
  void Family(std::string_view name, std::string_view help, MetricType type);
  // NAME{LABELS} VALUE, with " TIMESTAMP" (milliseconds since 1970) when one is given; a sample
  // without labels has no braces.
  void Sample(std::string_view name, const Labels& labels, std::string_view value,
              std::optional<int64_t> timestamp_ms = std::nullopt);
  template <std::integral T>
  void Sample(std::string_view name, const Labels& labels, T value,
              std::optional<int64_t> timestamp_ms = std::nullopt) {
    Sample(name, labels, std::to_string(value), timestamp_ms);
  }
  // NAME_bucket{LABELS,le="BOUND"} for each bucket, then NAME_sum{LABELS} and NAME_count{LABELS}.
  void Histogram(std::string_view name, const Labels& labels, const HistogramData& histogram);
  // What `other` wrote, after what this one has: for a family whose lines are written only when
  // it has samples (the samples go to a writer of their own first).
  void Append(const TextWriter& other) { out_ += other.out_; }

  bool empty() const { return out_.empty(); }
  const std::string& text() const { return out_; }
  std::string Take() { return std::move(out_); }

 private:
  void Series(std::string_view name, std::string_view suffix, const Labels& labels,
              const Label* extra);

  std::string out_;
};

}  // namespace nodelet::metrics
