// lib/metrics' Prometheus text writer: label values and help text escaped as the exposition
// format wants, families and samples (with and without labels and timestamps), histograms, and
// families written only when their samples are.
#include "lib/metrics/prometheus_text.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace nodelet::metrics {
namespace {

TEST(PrometheusTextTest, LabelValuesEscapeBackslashQuoteAndLineFeed) {
  EXPECT_EQ(EscapeLabelValue("plain value-1.2"), "plain value-1.2");
  EXPECT_EQ(EscapeLabelValue(""), "");
  EXPECT_EQ(EscapeLabelValue("a\"b"), "a\\\"b");
  EXPECT_EQ(EscapeLabelValue("C:\\path"), "C:\\\\path");
  EXPECT_EQ(EscapeLabelValue("two\nlines"), "two\\nlines");
  EXPECT_EQ(EscapeLabelValue("\\\"\n"), "\\\\\\\"\\n");
  // Nothing else is touched: tabs, carriage returns, UTF-8.
  EXPECT_EQ(EscapeLabelValue("t\tr\r\xC3\xA9"), "t\tr\r\xC3\xA9");
}

TEST(PrometheusTextTest, AFamilyIsItsHelpAndTypeLines) {
  TextWriter w;
  w.Family("nodelet_runs_total", "Runs, by kind.", MetricType::kCounter);
  w.Family("nodelet_level", "A gauge.", MetricType::kGauge);
  w.Family("nodelet_latency_seconds", "A histogram.", MetricType::kHistogram);
  w.Family("nodelet_stat", "Untyped.", MetricType::kUntyped);
  EXPECT_EQ(w.text(),
            "# HELP nodelet_runs_total Runs, by kind.\n"
            "# TYPE nodelet_runs_total counter\n"
            "# HELP nodelet_level A gauge.\n"
            "# TYPE nodelet_level gauge\n"
            "# HELP nodelet_latency_seconds A histogram.\n"
            "# TYPE nodelet_latency_seconds histogram\n"
            "# HELP nodelet_stat Untyped.\n"
            "# TYPE nodelet_stat untyped\n");
}

TEST(PrometheusTextTest, HelpTextEscapesBackslashAndLineFeedOnly) {
  TextWriter w;
  w.Family("m", "a \"quoted\" C:\\dir\nsecond line", MetricType::kGauge);
  EXPECT_EQ(w.text(),
            "# HELP m a \"quoted\" C:\\\\dir\\nsecond line\n"
            "# TYPE m gauge\n");
}

TEST(PrometheusTextTest, SamplesWithAndWithoutLabelsAndTimestamps) {
  TextWriter w;
  w.Sample("up", {}, 1);
  w.Sample("bytes", {}, std::numeric_limits<uint64_t>::max());
  w.Sample("delta", {}, int64_t{-5});
  w.Sample("seconds", {}, "3.5");
  w.Sample("ops_total", {{"operation_type", "create"}}, 2u);
  w.Sample("ops_total", {{"kind", "a\"b"}, {"node", "n\\1\n"}}, 7);
  w.Sample("working_set_bytes", {{"pod", "web"}}, "450", 1714564800500);
  w.Sample("node_cpu", {}, 12, 1714564800500);
  EXPECT_EQ(w.text(),
            "up 1\n"
            "bytes 18446744073709551615\n"
            "delta -5\n"
            "seconds 3.5\n"
            "ops_total{operation_type=\"create\"} 2\n"
            "ops_total{kind=\"a\\\"b\",node=\"n\\\\1\\n\"} 7\n"
            "working_set_bytes{pod=\"web\"} 450 1714564800500\n"
            "node_cpu 12 1714564800500\n");
}

TEST(PrometheusTextTest, AHistogramIsItsBucketsSumAndCount) {
  HistogramData h;
  h.buckets = {{"0.005", 1}, {"1", 3}, {"+Inf", 4}};
  h.sum = "2.25";
  h.count = 4;
  TextWriter w;
  w.Histogram("latency_seconds", {}, h);
  w.Histogram("probe_seconds", {{"probe_type", "Liveness"}}, h);
  EXPECT_EQ(w.text(),
            "latency_seconds_bucket{le=\"0.005\"} 1\n"
            "latency_seconds_bucket{le=\"1\"} 3\n"
            "latency_seconds_bucket{le=\"+Inf\"} 4\n"
            "latency_seconds_sum 2.25\n"
            "latency_seconds_count 4\n"
            "probe_seconds_bucket{probe_type=\"Liveness\",le=\"0.005\"} 1\n"
            "probe_seconds_bucket{probe_type=\"Liveness\",le=\"1\"} 3\n"
            "probe_seconds_bucket{probe_type=\"Liveness\",le=\"+Inf\"} 4\n"
            "probe_seconds_sum{probe_type=\"Liveness\"} 2.25\n"
            "probe_seconds_count{probe_type=\"Liveness\"} 4\n");
}

// A family that is written only when it has samples: the samples go to a writer of their own,
// and the family's lines with them only when there are some.
TEST(PrometheusTextTest, AFamilyCanWaitForItsSamples) {
  TextWriter out;
  out.Family("first", "Always there.", MetricType::kGauge);
  out.Sample("first", {}, 0);
  for (int n : {0, 2}) {
    TextWriter series;
    for (int i = 0; i < n; ++i) series.Sample("maybe_total", {{"i", std::to_string(i)}}, i);
    if (series.empty()) continue;
    out.Family("maybe_total", "Only with samples.", MetricType::kCounter);
    out.Append(series);
  }
  EXPECT_EQ(out.Take(),
            "# HELP first Always there.\n"
            "# TYPE first gauge\n"
            "first 0\n"
            "# HELP maybe_total Only with samples.\n"
            "# TYPE maybe_total counter\n"
            "maybe_total{i=\"0\"} 0\n"
            "maybe_total{i=\"1\"} 1\n");
}

TEST(PrometheusTextTest, DoublesWithTheGivenSignificantDigits) {
  EXPECT_EQ(FormatDouble(3.5, 9), "3.5");
  EXPECT_EQ(FormatDouble(1.234574, 9), "1.234574");
  EXPECT_EQ(FormatDouble(1714564800.123, 9), "1.7145648e+09");
  EXPECT_EQ(FormatDouble(1714564800.37, 15), "1714564800.37");
  EXPECT_EQ(FormatDouble(123456789.0, 15), "123456789");
  EXPECT_EQ(FormatDouble(0, 15), "0");
}

}  // namespace
}  // namespace nodelet::metrics
