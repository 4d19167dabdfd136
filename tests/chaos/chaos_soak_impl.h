// Soak: the chaos soak's state and its parts, shared by the files that implement RunSoak (not
// an API: chaos_soak.h is). chaos_soak.cc runs the soak (setup, the fault window, convergence,
// teardown); chaos_soak_workload.cc writes and churns the pods' manifests; chaos_soak_faults.cc
// injects the faults; chaos_soak_checks.cc holds the runtime and statusd to what is desired;
// chaos_soak_leaks.cc looks for what the stopped node left behind.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "lib/common/status.h"
#include "lib/cri/grpc_cri_client.h"
#include "tests/chaos/chaos_pods.h"
#include "tests/chaos/chaos_soak.h"
#include "tests/testing/containerd.h"
#include "tests/testing/harness.h"
#include "tests/testing/leak_check.h"

namespace nodelet::chaos::soak_internal {

namespace fs = std::filesystem;
namespace v1 = ::runtime::v1;
using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;
using testing::CgroupsNamed;
using testing::ContainerdInstance;
using testing::MountsUnder;
using testing::NotifyListener;
using testing::ProcessesMentioning;
using testing::RunCommand;
using testing::Subprocess;

inline constexpr char kNodeName[] = "chaos";
inline constexpr size_t kMaxDetails = 200;

// One running container of a long-running pod, as recorded before a fault.
struct ContainerRecord {
  std::string id;
  std::string sandbox_id;
  int64_t started_at = 0;
  std::string hash;
  int restart_edits = 0;  // the pod's count of spec edits when recorded
};
using ContainerKey = std::pair<std::string, std::string>;  // pod uid, container name
using Snapshot = std::map<ContainerKey, ContainerRecord>;

// One run of the soak (RunSoak). Its threads (churn, statusd sampler) and the main loop share
// the desired pods and the figures under mu_.
class Soak {
 public:
  explicit Soak(const SoakOptions& options) : options_(options), rng_(options.seed) {}
  ~Soak() { Teardown(); }

  Result<SoakFigures> Run();

 private:
  // A pod the soak wants (its manifest is in the directory).
  struct Desired {
    ChaosPod pod;
    ExpectedPod expected;
    std::string file;
    int restart_edits = 0;
  };

  void Log(const std::string& line, bool always = false) {
    if (!always && !options_.verbose) return;
    double t = std::chrono::duration<double>(steady_clock::now() - started_).count();
    std::fprintf(stderr, "[chaos %7.1fs] %s\n", t, line.c_str());
  }
  void Violation(int& counter, const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    ++counter;
    if (figures_.details.size() < kMaxDetails) figures_.details.push_back(what);
    Log("VIOLATION: " + what, true);
  }
  int Rand(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  Status Setup();
  Status StartNodelet();
  void WriteFile(const std::string& name, const std::string& content);
  Status AddPod(PodKind kind);
  void ChurnLoop();
  void ChurnOnce(std::mt19937_64& rng);
  void StatusLoop();
  std::map<std::string, nlohmann::json> ServiceStatus();
  void InjectFault(steady_clock::time_point now, steady_clock::time_point t0);
  void RestartSupervisor(bool hard);
  std::optional<Snapshot> TakeSnapshot();
  void CompareSnapshots(const Snapshot& before, const Snapshot& after);
  // The end state against CRI: problems with desired pods and with undesired ones.
  std::pair<std::vector<std::string>, std::vector<std::string>> CheckRuntime();
  // Pod-network sandboxes: each keeps the IP it was first seen with (a new sandbox may get a
  // new one) inside the instance's subnet. Called with every snapshot.
  void CheckPodIps();
  // The IPs of the READY sandboxes that have one (pod network), from PodSandboxStatus.
  std::optional<std::set<std::string>> LivePodIps();
  void CheckLeaks();
  void Teardown();

  SoakOptions options_;
  SoakFigures figures_;
  std::mt19937_64 rng_;
  steady_clock::time_point started_ = steady_clock::now();
  std::string dir_;
  std::string manifests_, root_, run_, log_;
  std::unique_ptr<ContainerdInstance> containerd_;
  std::unique_ptr<cri::GrpcCriClient> cri_;
  std::unique_ptr<NotifyListener> notify_;
  std::unique_ptr<Subprocess> nodelet_;
  int nodelet_starts_ = 0;

  std::mutex mu_;  // guards desired_, next_serial_, figures_ counters written by the threads
  std::map<std::string, Desired> desired_;  // by UID
  int next_serial_ = 0;
  std::set<std::string> seen_ids_;  // every sandbox and container id seen (cgroup leak check)
  std::set<pid_t> container_pids_;  // container processes seen at the end (process leak check)
  std::map<std::string, std::string> sandbox_ips_;  // pod-network sandbox id -> its first IP
  std::set<std::string> tracked_ids_;  // long-running containers followed across faults

  std::atomic<bool> stop_churn_{false};
  std::atomic<bool> stop_status_{false};
  std::mutex wake_mu_;
  std::condition_variable wake_;
  std::thread churn_thread_, status_thread_;

  std::vector<std::pair<pid_t, steady_clock::time_point>> stopped_;  // SIGSTOPped services
  steady_clock::time_point last_sigstop_{};
  std::vector<steady_clock::time_point> supervisor_restart_at_;
  steady_clock::time_point containerd_restart_at_{};
  bool containerd_restarted_ = false;
};

}  // namespace nodelet::chaos::soak_internal
