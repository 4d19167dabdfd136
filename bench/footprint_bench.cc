// Footprint: RSS and PSS (/proc/PID/smaps_rollup) of every nodelet process (the supervisor and
// its four services) and the CPU they use (/proc/PID/stat utime + stime), at 0, 10 and 100
// running idle pods, with a real nodelet on a private containerd. Each phase waits for its pods
// Running, lets the agent settle, then samples once a second over a steady-state window (60 s
// by default); memory is the median of the samples, CPU the ticks used over the window divided
// by its length. The references are the kubelet's published figures: 0.35 cores (p50) and
// 300 MiB at 100 pods, 50 MiB RSS for 10 pods in its density tests.
//
// With --data-dir, every sample from the first phase to the last (the ramps included) goes to
// footprint.dat for bench/plots/footprint.gp: seconds, pods, PSS sum, RSS sum, CPU cores over the
// last interval, then the PSS of each process; the first line names the columns.
//
//   footprint-bench --bin-dir DIR --images-dir DIR [--window SECONDS] [--settle SECONDS]
//                   [--pods 0,10,100] [--relist-period 1s] [--json FILE] [--data-dir DIR]
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_nodelet.h"
#include "bench/bench_report.h"
#include "bench/bench_stats.h"

using namespace nodelet;
using namespace nodelet::bench;
using SteadyClock = std::chrono::steady_clock;

namespace {

struct ProcSample {
  double rss_kib = 0, pss_kib = 0;
  unsigned long long ticks = 0;
};

struct Sample {
  double t = 0;  // seconds since sampling began
  int pods = 0;  // the phase being reached or measured
  std::map<std::string, ProcSample> procs;
  double cpu_cores = 0;  // all processes, since the previous sample
};

bool ReadSmapsRollup(pid_t pid, ProcSample& s) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/smaps_rollup");
  if (!in) return false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Rss:", 0) == 0) s.rss_kib = std::atof(line.c_str() + 4);
    if (line.rfind("Pss:", 0) == 0) s.pss_kib = std::atof(line.c_str() + 4);
  }
  return true;
}

bool ReadTicks(pid_t pid, ProcSample& s) {
  long long ticks = nodelet::bench::ProcessCpuTicks(pid);
  if (ticks < 0) return false;
  s.ticks = static_cast<unsigned long long>(ticks);
  return true;
}

double Sum(const Sample& s, double ProcSample::*field) {
  double total = 0;
  for (const auto& [_, p] : s.procs) total += p.*field;
  return total;
}

unsigned long long Ticks(const Sample& s) {
  unsigned long long total = 0;
  for (const auto& [_, p] : s.procs) total += p.ticks;
  return total;
}

// Samples the nodelet processes once a second on its own thread until stopped.
class Sampler {
 public:
  explicit Sampler(const BenchNodelet& b) : b_(b), t0_(SteadyClock::now()) {
    thread_ = std::thread([this] { Run(); });
  }
  ~Sampler() { Stop(); }
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  void SetPods(int pods) { pods_ = pods; }
  double Now() const { return std::chrono::duration<double>(SteadyClock::now() - t0_).count(); }
  std::vector<Sample> Between(double from, double to) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Sample> out;
    for (const auto& s : samples_) {
      if (s.t >= from && s.t <= to) out.push_back(s);
    }
    return out;
  }
  std::vector<Sample> All() {
    std::lock_guard<std::mutex> lock(mu_);
    return samples_;
  }

 private:
  void Run() {
    const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      lock.unlock();
      Sample s;
      s.t = Now();
      s.pods = pods_;
      for (const auto& [name, pid] : b_.Processes()) {
        ProcSample p;
        if (ReadSmapsRollup(pid, p) && ReadTicks(pid, p)) s.procs[name] = p;
      }
      lock.lock();
      if (!samples_.empty()) {
        const auto& prev = samples_.back();
        // A restarted service's ticks start again from zero: count only growth.
        unsigned long long now = Ticks(s), before = Ticks(prev);
        s.cpu_cores = now > before ? static_cast<double>(now - before) / tick / (s.t - prev.t) : 0;
      }
      samples_.push_back(std::move(s));
      // One sample a second; the wait ends early when Stop() is called.
      cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stop_; });
    }
  }

  const BenchNodelet& b_;
  SteadyClock::time_point t0_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::atomic<int> pods_{0};
  std::vector<Sample> samples_;
  std::thread thread_;
};

// Writes the pods' manifests (one file each) until `pods` exist, and waits for all of them
// Running on statusd's watch stream.
bool GrowTo(BenchNodelet& b, status::StatusWatcher& watcher, int& have, int pods,
            std::set<std::string>& running) {
  for (; have < pods; ++have) {
    b.Write("idle" + std::to_string(have) + ".yaml", IdlePodYaml("idle" + std::to_string(have), 1));
  }
  auto end = SteadyClock::now() + std::chrono::seconds(300);
  while (static_cast<int>(running.size()) < pods) {
    if (SteadyClock::now() >= end) {
      std::fprintf(stderr, "only %zu of %d pods reached Running\n", running.size(), pods);
      return false;
    }
    auto ev = watcher.Next(milliseconds(500));
    if (!ev.ok() || ev->kind != status::WatchEvent::Kind::kChanged) continue;
    if (AllRunning(ev->record, 1)) running.insert(ev->record.pod.name);
  }
  return true;
}

struct Phase {
  int pods = 0;
  double from = 0, to = 0;
  std::map<std::string, double> rss_mib, pss_mib, cores;
  double rss_sum = 0, pss_sum = 0, cores_sum = 0, pss_sum_max = 0;
  size_t samples = 0;
};

double Median(std::vector<double> v) { return Percentile(std::move(v), 50); }

Phase Summarize(int pods, const std::vector<Sample>& s) {
  Phase ph;
  ph.pods = pods;
  ph.samples = s.size();
  if (s.size() < 2) return ph;
  ph.from = s.front().t;
  ph.to = s.back().t;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double secs = ph.to - ph.from;
  std::map<std::string, std::vector<double>> rss, pss;
  std::vector<double> rss_sums, pss_sums;
  for (const auto& x : s) {
    for (const auto& [name, p] : x.procs) {
      rss[name].push_back(p.rss_kib / 1024);
      pss[name].push_back(p.pss_kib / 1024);
    }
    rss_sums.push_back(Sum(x, &ProcSample::rss_kib) / 1024);
    pss_sums.push_back(Sum(x, &ProcSample::pss_kib) / 1024);
    ph.pss_sum_max = std::max(ph.pss_sum_max, pss_sums.back());
  }
  for (const auto& [name, v] : rss) ph.rss_mib[name] = Median(v);
  for (const auto& [name, v] : pss) ph.pss_mib[name] = Median(v);
  ph.rss_sum = Median(rss_sums);
  ph.pss_sum = Median(pss_sums);
  for (const auto& [name, last] : s.back().procs) {
    auto first = s.front().procs.find(name);
    if (first == s.front().procs.end() || last.ticks < first->second.ticks) continue;
    ph.cores[name] = static_cast<double>(last.ticks - first->second.ticks) / tick / secs;
    ph.cores_sum += ph.cores[name];
  }
  return ph;
}

}  // namespace

int main(int argc, char** argv) {
  std::string bin_dir, images_dir, json_path, data_dir, pods_arg = "0,10,100", relist;
  std::string events = "true", label;
  int window = 60, settle = 5;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--bin-dir" && i + 1 < argc)
      bin_dir = argv[++i];
    else if (a == "--images-dir" && i + 1 < argc)
      images_dir = argv[++i];
    else if (a == "--window" && i + 1 < argc)
      window = std::atoi(argv[++i]);
    else if (a == "--settle" && i + 1 < argc)
      settle = std::atoi(argv[++i]);
    else if (a == "--pods" && i + 1 < argc)
      pods_arg = argv[++i];
    else if (a == "--relist-period" && i + 1 < argc)
      relist = argv[++i];
    else if (a == "--runtime-events" && i + 1 < argc)
      events = argv[++i];
    else if (a == "--label" && i + 1 < argc)
      label = argv[++i];
    else if (a == "--json" && i + 1 < argc)
      json_path = argv[++i];
    else if (a == "--data-dir" && i + 1 < argc)
      data_dir = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: footprint-bench --bin-dir DIR --images-dir DIR [--window S] "
                   "[--settle S] [--pods 0,10,100] [--relist-period PERIOD (default: plegd's)] "
                   "[--runtime-events true|false] [--label TEXT] [--json FILE] "
                   "[--data-dir DIR]\n");
      return 2;
    }
  }
  if (bin_dir.empty() || images_dir.empty() || window < 2) {
    std::fprintf(stderr,
                 "footprint-bench: --bin-dir and --images-dir are required, --window >= 2\n");
    return 2;
  }
  std::vector<int> phases;
  {
    std::stringstream ss(pods_arg);
    for (std::string s; std::getline(ss, s, ',');) phases.push_back(std::stoi(s));
  }
  auto b = BenchNodelet::Start(images_dir);
  std::vector<std::string> flags = {"--runtime-events", events};
  if (!relist.empty()) {
    flags.push_back("--relist-period");
    flags.push_back(relist);
  }
  if (!b || !b->StartNodelet(bin_dir, "footprint", flags)) return 1;
  ipc::Context ctx;
  status::StatusWatcher watcher(ctx, b->run_dir());
  if (!watcher.Connect().ok()) return 1;
  (void)watcher.Next(milliseconds(300));

  Sampler sampler(*b);
  std::vector<Phase> results;
  int have = 0;
  std::set<std::string> running;
  for (int pods : phases) {
    sampler.SetPods(pods);
    if (!GrowTo(*b, watcher, have, pods, running)) return 1;
    // Settle, then the steady-state window; the stream is drained meanwhile (statuses of
    // running pods do not change, so it is quiet).
    double start = sampler.Now() + settle;
    double stop = start + window;
    while (sampler.Now() < stop) (void)watcher.Next(milliseconds(200));
    Phase ph = Summarize(pods, sampler.Between(start, stop));
    std::printf(
        "footprint at %3d pods: PSS %6.1f MiB  RSS %6.1f MiB  CPU %.4f cores (%zu samples)\n", pods,
        ph.pss_sum, ph.rss_sum, ph.cores_sum, ph.samples);
    for (const auto& [name, pss] : ph.pss_mib) {
      std::printf("  %-20s PSS %6.1f MiB  RSS %6.1f MiB  CPU %.4f cores\n", name.c_str(), pss,
                  ph.rss_mib[name], ph.cores[name]);
    }
    results.push_back(ph);
  }
  sampler.Stop();
  auto all = sampler.All();
  for (int i = 0; i < have; ++i) b->Remove("idle" + std::to_string(i) + ".yaml");
  if (!b->WaitRuntimeEmpty(milliseconds(180000))) std::fprintf(stderr, "pods not removed\n");
  b->StopNodelet();

  std::vector<Figure> figures;
  nlohmann::json details;
  details["relist_period"] = relist.empty() ? "default" : relist;
  details["runtime_events"] = events != "false";
  const std::string mode =
      (events == "false" ? std::string("relist only, ") : std::string("runtime events, ")) +
      "relist " + (relist.empty() ? std::string("default") : relist) +
      (label.empty() ? std::string() : " [" + label + "]");
  details["window_s"] = window;
  details["settle_s"] = settle;
  for (const auto& ph : results) {
    const std::string at = std::to_string(ph.pods) + (ph.pods == 1 ? " pod" : " pods");
    Figure pss = Value("footprint PSS, all nodelet processes, " + at + ", " + mode, "MiB",
                       ph.pss_sum, ph.samples);
    Figure rss = Value("footprint RSS, all nodelet processes, " + at + ", " + mode, "MiB",
                       ph.rss_sum, ph.samples);
    Figure cpu =
        Value("CPU, all nodelet processes, " + at + ", " + mode, "cores", ph.cores_sum, ph.samples);
    pss.note = "median of the samples; max " + std::to_string(ph.pss_sum_max).substr(0, 5) + " MiB";
    rss.note = "median of the samples";
    cpu.note = "over " + std::to_string(static_cast<int>(ph.to - ph.from)) + " s of steady state";
    if (ph.pods == 100) {
      SetReferenceValue(pss, "kubelet's published limit at 100 pods", 300);
      SetGoal(pss, "value", "<", 36);
      SetReferenceValue(cpu, "kubelet's published limit at 100 pods (p50)", 0.35);
      SetGoal(cpu, "value", "<", 0.005);
    }
    if (ph.pods == 10) SetReferenceValue(rss, "kubelet density test limit, 10 pods", 50);
    figures.push_back(pss);
    figures.push_back(rss);
    figures.push_back(cpu);
    nlohmann::json p;
    p["pods"] = ph.pods;
    p["samples"] = ph.samples;
    p["window_s"] = ph.to - ph.from;
    for (const auto& [name, v] : ph.pss_mib) {
      p["processes"].push_back({{"name", name},
                                {"pss_mib", v},
                                {"rss_mib", ph.rss_mib.at(name)},
                                {"cpu_cores", ph.cores.count(name) ? ph.cores.at(name) : 0.0}});
    }
    p["sum"] = {{"pss_mib", ph.pss_sum}, {"rss_mib", ph.rss_sum}, {"cpu_cores", ph.cores_sum}};
    details["phases"].push_back(p);
  }
  WriteReport(json_path, figures, details);

  if (!data_dir.empty()) {
    std::set<std::string> names;
    for (const auto& s : all) {
      for (const auto& [name, _] : s.procs) names.insert(name);
    }
    std::ofstream out(data_dir + "/footprint.dat");
    out << "seconds pods pss_sum_mib rss_sum_mib cpu_cores";
    for (const auto& n : names) out << " " << n;
    out << "\n";
    for (const auto& s : all) {
      out << s.t << " " << s.pods << " " << Sum(s, &ProcSample::pss_kib) / 1024 << " "
          << Sum(s, &ProcSample::rss_kib) / 1024 << " " << s.cpu_cores;
      for (const auto& n : names) {
        auto it = s.procs.find(n);
        out << " " << (it == s.procs.end() ? 0.0 : it->second.pss_kib / 1024);
      }
      out << "\n";
    }
  }
  return 0;
}
