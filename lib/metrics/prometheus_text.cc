// The Prometheus text writer (prometheus_text.h).
#include "lib/metrics/prometheus_text.h"

#include <sstream>

namespace nodelet::metrics {

const char* MetricTypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
    case MetricType::kUntyped:
      return "untyped";
  }
  return "untyped";
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '\\' || c == '"') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

std::string FormatDouble(double value, int precision) {
  std::ostringstream s;
  s.precision(precision);
  s << value;
  return s.str();
}

void TextWriter::Family(std::string_view name, std::string_view help, MetricType type) {
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  // Help text escapes only backslash and line feed.
  for (char c : help) {
    if (c == '\n') {
      out_ += "\\n";
      continue;
    }
    if (c == '\\') out_.push_back('\\');
    out_.push_back(c);
  }
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += ' ';
  out_ += MetricTypeName(type);
  out_ += '\n';
}

void TextWriter::Series(std::string_view name, std::string_view suffix, const Labels& labels,
                        const Label* extra) {
  out_ += name;
  out_ += suffix;
  if (labels.empty() && extra == nullptr) return;
  out_ += '{';
  bool first = true;
  auto put = [&](const Label& l) {
    if (!first) out_ += ',';
    first = false;
    out_ += l.name;
    out_ += "=\"";
    out_ += EscapeLabelValue(l.value);
    out_ += '"';
  };
  for (const Label& l : labels) put(l);
  if (extra != nullptr) put(*extra);
  out_ += '}';
}

void TextWriter::Sample(std::string_view name, const Labels& labels, std::string_view value,
                        std::optional<int64_t> timestamp_ms) {
  Series(name, "", labels, nullptr);
  out_ += ' ';
  out_ += value;
  if (timestamp_ms) {
    out_ += ' ';
    out_ += std::to_string(*timestamp_ms);
  }
  out_ += '\n';
}

void TextWriter::Histogram(std::string_view name, const Labels& labels,
                           const HistogramData& histogram) {
  for (const auto& [bound, count] : histogram.buckets) {
    const Label le{"le", bound};
    Series(name, "_bucket", labels, &le);
    out_ += ' ';
    out_ += std::to_string(count);
    out_ += '\n';
  }
  Series(name, "_sum", labels, nullptr);
  out_ += ' ';
  out_ += histogram.sum;
  out_ += '\n';
  Series(name, "_count", labels, nullptr);
  out_ += ' ';
  out_ += std::to_string(histogram.count);
  out_ += '\n';
}

}  // namespace nodelet::metrics
