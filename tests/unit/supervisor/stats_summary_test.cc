// The CPU rates between samples, the kubelet's Summary JSON and resource metrics of a sample, and
// the sampler behind the HTTP endpoint.
#include "supervisor/stats_summary.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "lib/common/clock.h"
#include "tests/fakes/fake_clock.h"

namespace nodelet::supervisor {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

NodeStats Sample(int64_t t_ms, uint64_t node_ns, uint64_t pod_ns, uint64_t container_ns) {
  NodeStats s;
  s.time_unix_ms = t_ms;
  s.cpu = stats::CpuUsage{node_ns};
  PodStats p;
  p.uid = "u1";
  p.cpu = stats::CpuUsage{pod_ns};
  ContainerStats c;
  c.id = "c1";
  c.cpu = stats::CpuUsage{container_ns};
  p.containers.push_back(c);
  s.pods.push_back(p);
  return s;
}

TEST(CpuRateTrackerTest, RatesOverTheWindowBetweenSamples) {
  CpuRateTracker t;
  CpuRates r = t.Observe(Sample(1000000, 0, 0, 0));
  EXPECT_FALSE(r.node.has_value()) << "one sample has no rate";
  EXPECT_TRUE(r.pods.empty());
  // 2 s later: the node used 3 CPU-seconds (1.5 cores), the pod 1 (0.5), the container 0.25.
  r = t.Observe(Sample(1002000, 3000000000, 1000000000, 500000000));
  ASSERT_TRUE(r.node.has_value());
  EXPECT_EQ(*r.node, 1500000000u);
  EXPECT_EQ(r.pods.at("u1"), 500000000u);
  EXPECT_EQ(r.containers.at("c1"), 250000000u);
  // 100 ms later (a second request): over the window from the sample before, 2.1 s.
  r = t.Observe(Sample(1002100, 4200000000, 1000000000, 500000000));
  ASSERT_TRUE(r.node.has_value());
  EXPECT_EQ(*r.node, 2000000000u);
  // ...and that sample did not become the base: 1 s after the second, over that second.
  r = t.Observe(Sample(1003000, 4000000000, 2000000000, 500000000));
  EXPECT_EQ(*r.node, 1000000000u);
  EXPECT_EQ(r.pods.at("u1"), 1000000000u);
  EXPECT_EQ(r.containers.at("c1"), 0u);
}

TEST(CpuRateTrackerTest, ACounterThatWentBackStartsOverAndAGoneOneIsForgotten) {
  CpuRateTracker t;
  (void)t.Observe(Sample(0, 5000000000, 5000000000, 5000000000));
  // The pod's cgroup was made again: its counter went back.
  CpuRates r = t.Observe(Sample(2000, 7000000000, 100, 6000000000));
  EXPECT_EQ(*r.node, 1000000000u);
  EXPECT_EQ(r.pods.count("u1"), 0u);
  r = t.Observe(Sample(4000, 9000000000, 2000000100, 8000000000));
  EXPECT_EQ(r.pods.at("u1"), 1000000000u);
  // A sample without the pod, then the pod again: a new series.
  NodeStats empty;
  empty.time_unix_ms = 6000;
  (void)t.Observe(empty);
  r = t.Observe(Sample(8000, 0, 9000000000, 9000000000));
  EXPECT_EQ(r.pods.count("u1"), 0u);
  EXPECT_EQ(r.containers.count("c1"), 0u);
}

NodeStats FullSample() {
  NodeStats s;
  s.time_unix_ms = 1714564800500;  // 2024-05-01T12:00:00.5Z
  s.node_name = "node1";
  s.cpu = stats::CpuUsage{7000000000};
  s.memory = stats::NodeMemory{1000, 600, 700, 400};
  s.nodefs = stats::FsStats{10000, 4000, 6000, 100, 40, 60};
  s.imagefs = stats::FsStats{20000, 5000, 1234, 200, 150, 50};
  s.pids = stats::NodePids{32768, 345};
  PodStats p;
  p.uid = "u1";
  p.name = "web-node1";
  p.namespace_name = "default";
  p.start_time_unix_s = 1714564000;
  p.cpu = stats::CpuUsage{3000000000};
  p.memory = stats::MemoryUsage{800, 500, 300, 11, 2};
  p.processes = 7;
  ContainerStats c;
  c.name = "app";
  c.id = "c1";
  c.start_time_unix_s = 1714564100;
  c.cpu = stats::CpuUsage{2500000000};
  c.memory = stats::MemoryUsage{700, 450, 250, 10, 1};
  c.logs = stats::DirUsage{8192, 3};
  p.containers.push_back(c);
  p.volumes.push_back({"scratch", stats::DirUsage{4096, 2}});
  p.ephemeral_storage = stats::DirUsage{12288 + 4096, 6};
  s.pods.push_back(p);
  return s;
}

TEST(SummaryJsonTest, TheKubeletsSummaryShape) {
  RatedSample rated{FullSample(), {}};
  rated.rates.node = 1500000000;
  rated.rates.pods["u1"] = 250000000;
  rated.rates.containers["c1"] = 200000000;
  json j = json::parse(SummaryJson(rated, 1714000000));
  const json& node = j["node"];
  EXPECT_EQ(node["nodeName"], "node1");
  EXPECT_EQ(node["startTime"], "2024-04-24T23:06:40Z");
  EXPECT_EQ(node["cpu"]["time"], "2024-05-01T12:00:00Z");
  EXPECT_EQ(node["cpu"]["usageNanoCores"], 1500000000u);
  EXPECT_EQ(node["cpu"]["usageCoreNanoSeconds"], 7000000000u);
  EXPECT_EQ(node["memory"]["availableBytes"], 400);
  EXPECT_EQ(node["memory"]["usageBytes"], 700);
  EXPECT_EQ(node["memory"]["workingSetBytes"], 600);
  EXPECT_EQ(node["fs"]["capacityBytes"], 10000);
  EXPECT_EQ(node["fs"]["availableBytes"], 4000);
  EXPECT_EQ(node["fs"]["usedBytes"], 6000);
  EXPECT_EQ(node["fs"]["inodes"], 100);
  EXPECT_EQ(node["fs"]["inodesFree"], 40);
  EXPECT_EQ(node["fs"]["inodesUsed"], 60);
  EXPECT_EQ(node["runtime"]["imageFs"]["usedBytes"], 1234);
  EXPECT_EQ(node["rlimit"]["maxpid"], 32768);
  EXPECT_EQ(node["rlimit"]["curproc"], 345);

  ASSERT_EQ(j["pods"].size(), 1u);
  const json& p = j["pods"][0];
  EXPECT_EQ(p["podRef"], (json{{"name", "web-node1"}, {"namespace", "default"}, {"uid", "u1"}}));
  EXPECT_EQ(p["startTime"], "2024-05-01T11:46:40Z");
  EXPECT_EQ(p["cpu"]["usageNanoCores"], 250000000u);
  EXPECT_EQ(p["memory"]["workingSetBytes"], 500);
  EXPECT_EQ(p["memory"]["rssBytes"], 300);
  EXPECT_EQ(p["memory"]["pageFaults"], 11);
  EXPECT_EQ(p["memory"]["majorPageFaults"], 2);
  EXPECT_FALSE(p["memory"].contains("availableBytes")) << "no limit known";
  ASSERT_EQ(p["containers"].size(), 1u);
  const json& c = p["containers"][0];
  EXPECT_EQ(c["name"], "app");
  EXPECT_EQ(c["startTime"], "2024-05-01T11:48:20Z");
  EXPECT_EQ(c["cpu"]["usageNanoCores"], 200000000u);
  EXPECT_EQ(c["cpu"]["usageCoreNanoSeconds"], 2500000000u);
  EXPECT_EQ(c["memory"]["usageBytes"], 700);
  EXPECT_EQ(c["logs"]["usedBytes"], 8192);
  EXPECT_EQ(c["logs"]["inodesUsed"], 3);
  EXPECT_EQ(c["logs"]["capacityBytes"], 10000) << "the node's filesystem";
  EXPECT_FALSE(c.contains("rootfs"));
  ASSERT_EQ(p["volume"].size(), 1u);
  EXPECT_EQ(p["volume"][0]["name"], "scratch");
  EXPECT_EQ(p["volume"][0]["usedBytes"], 4096);
  EXPECT_EQ(p["volume"][0]["inodesUsed"], 2);
  EXPECT_EQ(p["ephemeral-storage"]["usedBytes"], 16384);
  EXPECT_EQ(p["ephemeral-storage"]["inodesUsed"], 6);
  EXPECT_EQ(p["ephemeral-storage"]["availableBytes"], 4000);
  EXPECT_EQ(p["process_stats"]["process_count"], 7);

  // Without a rate (one sample so far), usageNanoCores is left out, not 0.
  json first = json::parse(SummaryJson(RatedSample{FullSample(), {}}, 0));
  EXPECT_FALSE(first["node"]["cpu"].contains("usageNanoCores"));
  EXPECT_FALSE(first["pods"][0]["containers"][0]["cpu"].contains("usageNanoCores"));
  EXPECT_TRUE(first["pods"][0]["containers"][0]["cpu"].contains("usageCoreNanoSeconds"));
}

TEST(UsageMetricsTest, TheKubeletsResourceMetrics) {
  NodeStats s = FullSample();
  s.pods[0].containers[0].cpu = stats::CpuUsage{2500000345};
  const std::string text = RenderUsageMetrics(&s);
  for (const std::string line : {
           "node_cpu_usage_seconds_total 7.000000000 1714564800500\n",
           "node_memory_working_set_bytes 600 1714564800500\n",
           "container_cpu_usage_seconds_total{container=\"app\",namespace=\"default\","
           "pod=\"web-node1\"} 2.500000345 1714564800500\n",
           "container_memory_working_set_bytes{container=\"app\",namespace=\"default\","
           "pod=\"web-node1\"} 450 1714564800500\n",
           "container_start_time_seconds{container=\"app\",namespace=\"default\","
           "pod=\"web-node1\"} 1714564100\n",
           "pod_cpu_usage_seconds_total{namespace=\"default\",pod=\"web-node1\"} 3.000000000 "
           "1714564800500\n",
           "pod_memory_working_set_bytes{namespace=\"default\",pod=\"web-node1\"} 500 "
           "1714564800500\n",
           "# TYPE container_cpu_usage_seconds_total counter\n",
           "# TYPE pod_memory_working_set_bytes gauge\n",
           "resource_scrape_error 0\n",
       }) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\nin:\n" << text;
  }
  // A container without counters has no series (not a 0).
  s.pods[0].containers[0].memory.reset();
  EXPECT_EQ(RenderUsageMetrics(&s).find("container_memory_working_set_bytes{"), std::string::npos);
  const std::string none = RenderUsageMetrics(nullptr);
  EXPECT_NE(none.find("resource_scrape_error 1\n"), std::string::npos);
  EXPECT_EQ(none.find("node_cpu_usage_seconds_total"), std::string::npos);
}

// A source whose samples are numbered: sample N is at N seconds and N CPU-seconds of the node.
class CountingSource : public StatsSource {
 public:
  NodeStats Sample() override {
    std::lock_guard<std::mutex> lock(mu_);
    ++n_;
    NodeStats s;
    s.time_unix_ms = n_ * 1000;
    s.cpu = stats::CpuUsage{static_cast<uint64_t>(n_) * 1000000000};
    cv_.notify_all();
    return s;
  }
  bool WaitFor(int n, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return n_ >= n; });
  }
  int count() {
    std::lock_guard<std::mutex> lock(mu_);
    return n_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_ = 0;
};

TEST(UsageSamplerTest, FreshSamplesCarryRatesAndTheBootTime) {
  CountingSource source;
  UsageSampler sampler(RealClock::Get(), source);
  EXPECT_FALSE(sampler.Fresh()->rates.node.has_value()) << "no earlier point yet";
  auto fresh = sampler.Fresh();
  ASSERT_TRUE(fresh->rates.node.has_value());
  EXPECT_EQ(*fresh->rates.node, 1000000000u) << "one CPU-second per second";
  EXPECT_GT(sampler.node_start_unix_s(), 0) << "the machine's boot time";
}

// /metrics asks for a recent sample: one younger than fresh_for is reused, an older one (or
// none) is replaced by a new one. Nothing samples on its own.
TEST(UsageSamplerTest, RecentReusesAYoungSampleAndTakesOneWhenItIsOld) {
  CountingSource source;
  testing::FakeClock clock;
  UsageSampler sampler(clock, source, 10s);
  EXPECT_EQ(source.count(), 0) << "no sample before one is asked for";
  EXPECT_EQ(sampler.Recent()->stats.time_unix_ms, 1000) << "none yet: one is taken";
  clock.Advance(9s);
  EXPECT_EQ(sampler.Recent()->stats.time_unix_ms, 1000) << "9 s old: reused";
  EXPECT_EQ(source.count(), 1);
  clock.Advance(1s);
  auto recent = sampler.Recent();
  EXPECT_EQ(recent->stats.time_unix_ms, 2000) << "10 s old: replaced";
  ASSERT_TRUE(recent->rates.node.has_value()) << "rated against the one before";
  EXPECT_EQ(sampler.samples(), 2u);
}

// /stats/summary: a burst of requests at once shares one sample (each that waited for another's
// sample takes it), and the sample served is never older than the age asked for.
TEST(UsageSamplerTest, ABurstOfSummariesReadsTheSourceOnce) {
  class SlowSource : public CountingSource {
   public:
    NodeStats Sample() override {
      // A sample's cost (the cgroups and directories read), so that the callers overlap.
      std::this_thread::sleep_for(50ms);
      return CountingSource::Sample();
    }
  };
  SlowSource source;
  testing::FakeClock clock;
  UsageSampler sampler(clock, source, 10s);
  std::vector<std::thread> callers;
  std::atomic<int> served{0};
  for (int i = 0; i < 16; ++i) {
    callers.emplace_back([&] {
      if (sampler.Recent(kSummaryMaxAge)->stats.time_unix_ms == 1000) ++served;
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(served.load(), 16) << "every caller got the one sample";
  EXPECT_EQ(source.count(), 1) << "16 requests at once read the source once";
  clock.Advance(kSummaryMaxAge - 1ms);
  EXPECT_EQ(sampler.Recent(kSummaryMaxAge)->stats.time_unix_ms, 1000);
  clock.Advance(1ms);
  EXPECT_EQ(sampler.Recent(kSummaryMaxAge)->stats.time_unix_ms, 2000) << "too old: replaced";
}

// The eviction manager samples through the sampler (a StatsSource): its whole samples are what
// /metrics then renders, with rates; its node-only ones pass through and are not kept.
TEST(UsageSamplerTest, WholeSamplesThroughItAreKeptNodeOnlyOnesPassThrough) {
  class NodeOnlySource : public CountingSource {
   public:
    NodeStats SampleNode() override {
      NodeStats s = Sample();
      s.pods_sampled = false;
      return s;
    }
  };
  NodeOnlySource source;
  testing::FakeClock clock;
  UsageSampler sampler(clock, source, 10s);
  StatsSource& as_source = sampler;
  EXPECT_EQ(as_source.Sample().time_unix_ms, 1000);
  EXPECT_EQ(sampler.Recent()->stats.time_unix_ms, 1000) << "kept: /metrics reads it";
  NodeStats node = as_source.SampleNode();
  EXPECT_FALSE(node.pods_sampled);
  EXPECT_EQ(node.time_unix_ms, 2000);
  EXPECT_EQ(sampler.Recent()->stats.time_unix_ms, 1000) << "a node-only sample is not kept";
  EXPECT_EQ(sampler.samples(), 1u);
}

}  // namespace
}  // namespace nodelet::supervisor
