// The Prometheus text of the HTTP endpoint: the kubelet's container-start, eviction and image
// pull metrics from the services' counters, /metrics/probes alone, and the process figures.
#include "supervisor/metrics_text.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

namespace nodelet::supervisor {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

HttpSnapshot Snapshot() {
  HttpSnapshot s;
  s.counters["podworkerd"] = {
      {"started_containers:container", 5},
      {"started_containers:init_container", 2},
      {"started_containers_errors:container:CreateContainerConfigError", 1},
      {"started_containers_errors:container:ErrImagePull", 3},
      {"image_pull_duration_seconds@10MB-100MB_bucket:1", 1},
      {"image_pull_duration_seconds@10MB-100MB_bucket:5", 2},
      {"image_pull_duration_seconds@10MB-100MB_bucket:+Inf", 2},
      {"image_pull_duration_seconds@10MB-100MB_sum_us", 3500000},
      {"image_pull_duration_seconds@10MB-100MB_count", 2},
      {"probe_total:liveness:successful", 7},
      {"probe_total:readiness:failed", 1},
  };
  s.evictions = {{"memory.available", 2}, {"emptydirfs.limit", 1}};
  return s;
}

TEST(MetricsTextTest, ContainerStartsEvictionsAndPullsUnderTheKubeletsNames) {
  const std::string text = RenderMetrics(Snapshot());
  EXPECT_THAT(text,
              HasSubstr("kubelet_started_containers_total{container_type=\"container\"} 5\n"));
  EXPECT_THAT(text,
              HasSubstr("kubelet_started_containers_total{container_type=\"init_container\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("kubelet_started_containers_errors_total{code=\"ErrImagePull\","
                              "container_type=\"container\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("kubelet_evictions{eviction_signal=\"memory.available\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("kubelet_evictions{eviction_signal=\"emptydirfs.limit\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE kubelet_image_pull_duration_seconds histogram\n"));
  EXPECT_THAT(text, HasSubstr("kubelet_image_pull_duration_seconds_bucket{image_size_in_bytes="
                              "\"10MB-100MB\",le=\"5\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("kubelet_image_pull_duration_seconds_sum{image_size_in_bytes="
                              "\"10MB-100MB\"} 3.5\n"));
  // The probe metrics are in /metrics too.
  EXPECT_THAT(text,
              HasSubstr("prober_probe_total{probe_type=\"Liveness\",result=\"successful\"} 7"));
}

TEST(MetricsTextTest, ProbeMetricsAloneForMetricsProbes) {
  const std::string text = RenderProbeMetrics(Snapshot());
  EXPECT_THAT(text, HasSubstr("# TYPE prober_probe_total counter\n"));
  EXPECT_THAT(text,
              HasSubstr("prober_probe_total{probe_type=\"Readiness\",result=\"failed\"} 1\n"));
  EXPECT_THAT(text, Not(HasSubstr("kubelet_")));
}

TEST(MetricsTextTest, ProcessFiguresAreThisProcesssOwn) {
  const double boot = BootTimeUnixSeconds();
  ASSERT_GT(boot, 1e9);
  auto self = ReadProcessFigures(getpid(), boot);
  ASSERT_TRUE(self.has_value());
  EXPECT_GT(self->resident_bytes, 1u << 20);
  EXPECT_GE(self->virtual_bytes, self->resident_bytes);
  EXPECT_GE(self->open_fds, 3u);
  EXPECT_GT(self->max_fds, self->open_fds);
  EXPECT_GT(self->start_time_unix_s, boot);
  EXPECT_LE(self->start_time_unix_s, static_cast<double>(time(nullptr)) + 1);
  EXPECT_FALSE(ReadProcessFigures(999999999, boot).has_value()) << "no such process";

  const std::string text = RenderProcessMetrics(self, {{"plegd", *self}});
  EXPECT_THAT(text, HasSubstr("# TYPE process_cpu_seconds_total counter\n"));
  EXPECT_THAT(text, HasSubstr("\nprocess_open_fds " + std::to_string(self->open_fds) + "\n"));
  EXPECT_THAT(text, HasSubstr("nodelet_build_info{version=\""));
  EXPECT_THAT(text, HasSubstr("nodelet_service_resident_memory_bytes{service=\"plegd\"} " +
                              std::to_string(self->resident_bytes) + "\n"));
}

}  // namespace
}  // namespace nodelet::supervisor
