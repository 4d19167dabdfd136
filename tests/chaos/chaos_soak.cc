#include "tests/chaos/chaos_soak.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "lib/cri/grpc_cri_client.h"
#include "lib/ipc/sockets.h"
#include "lib/status/status_client.h"
#include "tests/chaos/chaos_pods.h"
#include "tests/testing/containerd.h"
#include "tests/testing/harness.h"
#include "tests/testing/leak_check.h"

namespace nodelet::chaos {
namespace {

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

// What podworkerd stamps on what it creates (svc-podworkerd/cri_configs.h; a test does not
// include a service's code).
constexpr char kManagedLabel[] = "nodelet.io/managed";
constexpr char kPodUidLabel[] = "io.kubernetes.pod.uid";
constexpr char kContainerNameLabel[] = "io.kubernetes.container.name";
constexpr char kContainerHashAnnotation[] = "nodelet.io/container-hash";

constexpr char kNodeName[] = "chaos";
constexpr size_t kMaxDetails = 200;
const std::vector<std::string> kServices = {"plegd", "statusd", "podworkerd", "volumed"};

std::string Label(const google::protobuf::Map<std::string, std::string>& m, const std::string& k) {
  auto it = m.find(k);
  return it == m.end() ? "" : it->second;
}

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
  std::set<pid_t> container_pids_;
  std::map<std::string, std::string> sandbox_ips_;  // pod-network sandbox id -> its first IP
  std::set<std::string> tracked_ids_;  // long-running containers followed across faults  //
                                       // container processes seen at the end (process leak check)

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

Status Soak::Setup() {
  char tmpl[] = "/tmp/nodelet-chaos.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return ErrnoStatus("mkdtemp", errno);
  dir_ = tmpl;
  figures_.work_dir = dir_;
  manifests_ = dir_ + "/manifests";
  root_ = dir_ + "/root";
  run_ = dir_ + "/run";
  log_ = dir_ + "/log";
  for (const auto& d : {manifests_, log_}) fs::create_directories(d);
  // The writers' verdicts; any container user may append.
  fs::create_directories(dir_ + "/results");
  chmod((dir_ + "/results").c_str(), 0777);

  testing::ContainerdOptions copts;
  copts.dir = dir_ + "/ctrd";
  copts.image_tarballs = testing::DefaultImageTarballs(options_.images_dir);
  auto c = ContainerdInstance::Start(copts);
  if (!c.ok()) return c.status();
  containerd_ = std::move(*c);
  cri::CriTimeouts timeouts;
  timeouts.query = seconds(5);
  timeouts.call = seconds(10);
  auto client = cri::GrpcCriClient::Create(containerd_->endpoint(), timeouts);
  if (!client.ok()) return client.status();
  cri_ = std::move(*client);

  // podworkerd's crash-loop backoff short, so crash-looping pods keep cycling during the run.
  std::ofstream(dir_ + "/config.yaml")
      << "supervisor:\n  services:\n    podworkerd:\n      args: [\"--crashloop-initial\", "
         "\"1s\", \"--crashloop-max\", \"8s\"]\n";
  WriteFile("configmap.yaml", RenderConfigMapManifest("hello 0"));
  for (int i = 0; i < options_.pods; ++i) {
    if (Status s = AddPod(KindForIndex(i)); !s.ok()) return s;
  }
  return StartNodelet();
}

Status Soak::StartNodelet() {
  ++nodelet_starts_;
  notify_.reset();
  notify_ = std::make_unique<NotifyListener>(dir_ + "/notify-" + std::to_string(nodelet_starts_) +
                                             ".sock");
  std::vector<std::string> argv = {options_.bin_dir + "/nodelet",
                                   "--root-dir",
                                   root_,
                                   "--run-dir",
                                   run_,
                                   "--log-dir",
                                   log_,
                                   "--runtime-endpoint",
                                   containerd_->endpoint(),
                                   "--relist-period",
                                   "500ms",
                                   "--pod-manifest-path",
                                   manifests_,
                                   "--node-name",
                                   kNodeName,
                                   "--restart-intensity",
                                   "1000",
                                   "--config",
                                   dir_ + "/config.yaml",
                                   "--cgroup-root",
                                   testing::TestCgroupRoot(dir_)};
  nodelet_ = std::make_unique<Subprocess>(
      argv, std::map<std::string, std::string>{{"NOTIFY_SOCKET", notify_->path()}},
      dir_ + "/nodelet-" + std::to_string(nodelet_starts_) + ".log");
  if (!notify_->WaitFor("READY=1", seconds(60)).has_value()) {
    return DeadlineExceeded("nodelet (start " + std::to_string(nodelet_starts_) +
                            ") did not say READY=1 within 60 s; see " + dir_);
  }
  return Status::Ok();
}

void Soak::WriteFile(const std::string& name, const std::string& content) {
  std::string tmp = manifests_ + "/." + name + ".tmp";
  std::ofstream(tmp) << content;
  fs::rename(tmp, manifests_ + "/" + name);
}

// Caller must not hold mu_.
Status Soak::AddPod(PodKind kind) {
  Desired d;
  {
    std::lock_guard<std::mutex> lock(mu_);
    d.pod.name = "p" + std::to_string(next_serial_++);
  }
  d.pod.kind = kind;
  // One pod in three on the pod network (probe pods stay on the host's: their probes go to
  // 127.0.0.1, and nodelet's podIP is the host's for now).
  d.pod.pod_network = containerd_->has_pod_network() && kind != PodKind::kLongWithProbes &&
                      std::stoi(d.pod.name.substr(1)) % 3 == 1;
  if (kind == PodKind::kLongWithProbes) d.pod.port = testing::FreeLoopbackPort();
  if (kind == PodKind::kLongWithVolumes) d.pod.results_dir = dir_ + "/results";
  d.file = d.pod.name + ".yaml";
  std::string manifest = RenderPodManifest(d.pod);
  auto expected = ExpectPod(manifest, manifests_ + "/" + d.file, kNodeName);
  if (!expected.ok()) return expected.status();
  d.expected = *expected;
  {
    std::lock_guard<std::mutex> lock(mu_);
    desired_[d.expected.uid] = d;
  }
  WriteFile(d.file, manifest);
  return Status::Ok();
}

void Soak::ChurnLoop() {
  std::mt19937_64 rng(options_.seed * 7919 + 1);
  auto next_configmap = steady_clock::now() + seconds(10);
  int configmap_value = 0;
  while (!stop_churn_) {
    {
      std::unique_lock<std::mutex> lock(wake_mu_);
      int pause_ms = std::uniform_int_distribution<int>(150, 600)(rng);
      wake_.wait_for(lock, milliseconds(pause_ms), [&] { return stop_churn_.load(); });
    }
    if (stop_churn_) break;
    ChurnOnce(rng);
    if (steady_clock::now() >= next_configmap) {
      WriteFile("configmap.yaml",
                RenderConfigMapManifest("hello " + std::to_string(++configmap_value)));
      std::lock_guard<std::mutex> lock(mu_);
      ++figures_.configmap_edits;
      next_configmap = steady_clock::now() + seconds(10);
    }
  }
}

void Soak::ChurnOnce(std::mt19937_64& rng) {
  size_t count;
  {
    std::lock_guard<std::mutex> lock(mu_);
    count = desired_.size();
  }
  int action = std::uniform_int_distribution<int>(0, 3)(rng);  // add, delete, edit, label edit
  if (count + 3 < static_cast<size_t>(options_.pods)) action = 0;
  if (count > static_cast<size_t>(options_.pods) + 3) action = 1;
  if (action == 0) {
    PodKind kind = KindForIndex(std::uniform_int_distribution<int>(0, 9)(rng));
    if (Status s = AddPod(kind); !s.ok()) {
      Log("add failed: " + s.ToString(), true);
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    ++figures_.adds;
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  std::vector<std::string> candidates;
  for (const auto& [uid, d] : desired_) {
    if (action == 1 || IsLongRunning(d.pod.kind)) candidates.push_back(uid);
  }
  if (candidates.empty()) return;
  std::string uid =
      candidates[std::uniform_int_distribution<size_t>(0, candidates.size() - 1)(rng)];
  Desired& d = desired_[uid];
  if (action == 1) {
    std::string file = d.file, name = d.pod.name;
    desired_.erase(uid);
    ++figures_.deletes;
    lock.unlock();
    fs::remove(manifests_ + "/" + file);
    Log("deleted " + name);
    return;
  }
  if (action == 2) {
    ++d.pod.generation;
    ++d.restart_edits;
    ++figures_.edits_restart;
  } else {
    ++d.pod.label_generation;
    ++figures_.edits_label;
  }
  std::string manifest = RenderPodManifest(d.pod);
  auto expected = ExpectPod(manifest, manifests_ + "/" + d.file, kNodeName);
  if (!expected.ok()) {
    Log("edit failed: " + expected.status().ToString(), true);
    return;
  }
  d.expected = *expected;
  std::string file = d.file;
  // Written under the lock, so a snapshot never sees the new hash before the file exists.
  WriteFile(file, manifest);
}

void Soak::StatusLoop() {
  ipc::Context ctx;
  status::StatusClientOptions sopts;
  sopts.attempt_timeout = milliseconds(500);
  sopts.deadline = milliseconds(1500);
  status::StatusClient client(ctx, run_, sopts);
  if (Status s = client.Connect(); !s.ok()) {
    Log("statusd sampler cannot connect: " + s.ToString(), true);
    return;
  }
  struct Seen {
    uint64_t max_version = 0;
    bool terminal = false;
    status::PodPhase terminal_phase = status::PodPhase::kPending;
    std::string name;
  };
  std::map<std::string, Seen> seen;
  auto terminal = [](status::PodPhase p) {
    return p == status::PodPhase::kSucceeded || p == status::PodPhase::kFailed;
  };
  while (!stop_status_) {
    auto list = client.ListPodStatuses();
    if (list.ok()) {
      for (const auto& r : list->records) {
        Seen& s = seen[r.pod.uid];
        s.name = r.pod.name;
        if (r.version < s.max_version) {
          Violation(figures_.status_violations,
                    "statusd: pod " + r.pod.name + " (" + r.pod.uid + ") version went back from " +
                        std::to_string(s.max_version) + " to " + std::to_string(r.version));
        }
        s.max_version = std::max(s.max_version, r.version);
        if (s.terminal && r.status.phase != s.terminal_phase) {
          Violation(figures_.status_violations,
                    "statusd: pod " + r.pod.name + " left its terminal phase (" +
                        std::to_string(static_cast<int>(s.terminal_phase)) + " -> " +
                        std::to_string(static_cast<int>(r.status.phase)) + ")");
        }
        if (!s.terminal && terminal(r.status.phase)) {
          s.terminal = true;
          s.terminal_phase = r.status.phase;
        }
      }
      std::lock_guard<std::mutex> lock(mu_);
      ++figures_.status_samples;
      figures_.status_pods_tracked = static_cast<int>(seen.size());
    }
    std::unique_lock<std::mutex> lock(wake_mu_);
    wake_.wait_for(lock, milliseconds(250), [&] { return stop_status_.load(); });
  }
}

std::map<std::string, nlohmann::json> Soak::ServiceStatus() {
  std::map<std::string, nlohmann::json> out;
  auto r = RunCommand({options_.bin_dir + "/nodeletctl", "--run-dir", run_, "status", "--json"},
                      seconds(5));
  auto j = nlohmann::json::parse(r.output, nullptr, false);
  if (j.is_discarded() || !j.is_array()) return out;
  for (const auto& s : j) out[s.value("name", "")] = s;
  return out;
}

std::optional<Snapshot> Soak::TakeSnapshot() {
  auto containers = cri_->ListContainers(v1::ContainerFilter());
  auto sandboxes = cri_->ListPodSandbox(v1::PodSandboxFilter());
  if (!containers.ok() || !sandboxes.ok()) return std::nullopt;
  Snapshot snap;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& s : *sandboxes) seen_ids_.insert(s.id());
  for (const auto& c : *containers) {
    seen_ids_.insert(c.id());
    if (c.state() != v1::CONTAINER_RUNNING || Label(c.labels(), kManagedLabel).empty()) continue;
    std::string uid = Label(c.labels(), kPodUidLabel);
    std::string name = Label(c.labels(), kContainerNameLabel);
    auto it = desired_.find(uid);
    if (it == desired_.end() || !IsLongRunning(it->second.pod.kind)) continue;
    auto hash = it->second.expected.container_hashes.find(name);
    std::string stamped = Label(c.annotations(), kContainerHashAnnotation);
    // A container of an older spec is about to be replaced: not a baseline.
    if (hash == it->second.expected.container_hashes.end() || hash->second != stamped) continue;
    ContainerRecord rec;
    rec.id = c.id();
    rec.sandbox_id = c.pod_sandbox_id();
    rec.hash = stamped;
    rec.restart_edits = it->second.restart_edits;
    snap[{uid, name}] = rec;
    tracked_ids_.insert(rec.id);
  }
  figures_.containers_tracked = static_cast<int>(tracked_ids_.size());
  for (auto& [key, rec] : snap) {
    auto st = cri_->ContainerStatus(rec.id, false);
    if (st.ok()) rec.started_at = st->status().started_at();
  }
  return snap;
}

void Soak::CheckPodIps() {
  if (!containerd_->has_pod_network()) return;
  auto sandboxes = cri_->ListPodSandbox(v1::PodSandboxFilter());
  if (!sandboxes.ok()) return;
  std::vector<std::string> followed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& s : *sandboxes) {
      if (s.state() != v1::SANDBOX_READY) continue;
      auto it = desired_.find(Label(s.labels(), kPodUidLabel));
      if (it != desired_.end() && it->second.pod.pod_network) followed.push_back(s.id());
    }
  }
  std::string prefix = testing::PodNetworkForSlot(containerd_->cni_slot()).ip_prefix;
  std::vector<std::string> problems;
  for (const auto& id : followed) {
    auto st = cri_->PodSandboxStatus(id, false);
    // Gone or stopped meanwhile (churn, a fault): nothing to compare.
    if (!st.ok() || st->status().state() != v1::SANDBOX_READY) continue;
    std::string ip = st->status().network().ip();
    std::string what = "sandbox " + id.substr(0, 12) + " (" + st->status().metadata().name() + ")";
    std::lock_guard<std::mutex> lock(mu_);
    ++figures_.pod_ip_checks;
    auto [it, first] = sandbox_ips_.emplace(id, ip);
    if (first) {
      ++figures_.pod_ip_sandboxes;
      if (ip.rfind(prefix, 0) != 0) {
        problems.push_back(what + " has IP '" + ip + "', not in " + containerd_->pod_subnet());
      }
    } else if (it->second != ip) {
      problems.push_back(what + " changed its IP from " + it->second + " to '" + ip + "'");
      it->second = ip;
    }
  }
  for (const auto& p : problems) Violation(figures_.ip_violations, p);
}

std::optional<std::set<std::string>> Soak::LivePodIps() {
  auto sandboxes = cri_->ListPodSandbox(v1::PodSandboxFilter());
  if (!sandboxes.ok()) return std::nullopt;
  std::set<std::string> ips;
  for (const auto& s : *sandboxes) {
    if (s.state() != v1::SANDBOX_READY) continue;
    auto st = cri_->PodSandboxStatus(s.id(), false);
    if (!st.ok()) return std::nullopt;
    if (!st->status().network().ip().empty()) ips.insert(st->status().network().ip());
  }
  return ips;
}

void Soak::CompareSnapshots(const Snapshot& before, const Snapshot& after) {
  std::optional<std::set<std::string>> lost_at_boot;  // read once, when first needed
  auto runtime_lost = [&](const ContainerRecord& rec) {
    if (!lost_at_boot) {
      std::ifstream in(containerd_->dir() + "/containerd.log");
      std::stringstream text;
      text << in.rdbuf();
      lost_at_boot = ShimsLostAtBoot(text.str());
    }
    return lost_at_boot->count(rec.id) > 0 || lost_at_boot->count(rec.sandbox_id) > 0;
  };
  for (const auto& [key, rec] : before) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = desired_.find(key.first);
      if (it == desired_.end() || it->second.restart_edits != rec.restart_edits) continue;
      auto hash = it->second.expected.container_hashes.find(key.second);
      if (hash == it->second.expected.container_hashes.end() || hash->second != rec.hash) continue;
      ++figures_.continuity_checks;
    }
    auto now = after.find(key);
    std::string what =
        "container " + key.second + " of pod " + key.first + " (" + rec.id.substr(0, 12) + ")";
    std::string problem;
    if (now == after.end()) {
      problem = what + " is no longer running";
    } else if (now->second.id != rec.id) {
      problem = what + " was replaced by " + now->second.id.substr(0, 12);
    } else if (rec.started_at != 0 && now->second.started_at != 0 &&
               now->second.started_at != rec.started_at) {
      problem = what + " was started again";
    }
    if (problem.empty()) continue;
    if (runtime_lost(rec)) {
      ++figures_.runtime_losses;
      Log(problem + ": containerd cleaned up its shim when it booted again (not a violation)",
          true);
      continue;
    }
    Violation(figures_.restart_violations, problem);
  }
}

void Soak::RestartSupervisor(bool hard) {
  auto services = ServiceStatus();
  Log(std::string("fault: supervisor ") + (hard ? "SIGKILL" : "SIGTERM") + " and start again",
      true);
  nodelet_->Signal(hard ? SIGKILL : SIGTERM);
  if (!nodelet_->Wait(seconds(40)).has_value()) {
    Violation(figures_.leak_violations, "nodelet did not exit within 40 s of SIGTERM");
    nodelet_->Signal(SIGKILL);
    nodelet_->Wait(seconds(10));
  }
  // Its services go with it (SIGTERM: stopped by it; SIGKILL: PR_SET_PDEATHSIG).
  for (const auto& [name, s] : services) {
    pid_t pid = s.value("pid", 0);
    if (pid > 0 && !testing::WaitProcessGone(pid, seconds(15))) {
      Violation(figures_.leak_violations,
                "service " + name + " (pid " + std::to_string(pid) + ") outlived its supervisor");
    }
  }
  ++figures_.supervisor_restarts;
  if (Status s = StartNodelet(); !s.ok()) Log("nodelet restart: " + s.ToString(), true);
}

void Soak::InjectFault(steady_clock::time_point now, steady_clock::time_point t0) {
  (void)t0;
  // Processes still SIGSTOPped after 25 s (the supervisor kills a hung service well before).
  for (auto it = stopped_.begin(); it != stopped_.end();) {
    if (now - it->second > seconds(25) || !testing::ProcessAlive(it->first)) {
      kill(it->first, SIGCONT);
      it = stopped_.erase(it);
    } else {
      ++it;
    }
  }
  if (options_.containerd_restart && !containerd_restarted_ && now >= containerd_restart_at_) {
    Log("fault: containerd restart", true);
    containerd_restarted_ = true;
    Status s = containerd_->Restart(seconds(60));
    if (!s.ok()) Log("containerd restart failed: " + s.ToString(), true);
    ++figures_.containerd_restarts;
    return;
  }
  if (!supervisor_restart_at_.empty() && now >= supervisor_restart_at_.front()) {
    supervisor_restart_at_.erase(supervisor_restart_at_.begin());
    RestartSupervisor(figures_.supervisor_restarts % 2 == 0);
    return;
  }
  auto services = ServiceStatus();
  std::vector<std::pair<std::string, pid_t>> running;
  for (const auto& [name, s] : services) {
    pid_t pid = s.value("pid", 0);
    if (s.value("state", "") == "RUNNING" && pid > 0) running.emplace_back(name, pid);
  }
  if (running.empty()) return;  // the supervisor is busy restarting: next time
  auto [name, pid] = running[static_cast<size_t>(Rand(0, static_cast<int>(running.size()) - 1))];
  if (now - last_sigstop_ > seconds(20) && stopped_.empty()) {
    Log("fault: SIGSTOP " + name + " (pid " + std::to_string(pid) + ")", options_.verbose);
    kill(pid, SIGSTOP);
    stopped_.emplace_back(pid, now);
    last_sigstop_ = now;
    ++figures_.sigstops;
    return;
  }
  Log("fault: SIGKILL " + name + " (pid " + std::to_string(pid) + ")");
  kill(pid, SIGKILL);
  ++figures_.sigkills;
}

std::pair<std::vector<std::string>, std::vector<std::string>> Soak::CheckRuntime() {
  std::vector<std::string> desired_problems, undesired_problems;
  auto sandboxes = cri_->ListPodSandbox(v1::PodSandboxFilter());
  auto containers = cri_->ListContainers(v1::ContainerFilter());
  if (!sandboxes.ok() || !containers.ok()) {
    desired_problems.push_back(
        "CRI list failed: " +
        (sandboxes.ok() ? containers.status() : sandboxes.status()).ToString());
    return {desired_problems, undesired_problems};
  }
  std::map<std::string, Desired> desired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    desired = desired_;
    for (const auto& s : *sandboxes) seen_ids_.insert(s.id());
    for (const auto& c : *containers) seen_ids_.insert(c.id());
  }
  std::map<std::string, std::vector<const v1::PodSandbox*>> ready_by_uid;
  for (const auto& s : *sandboxes) {
    if (Label(s.labels(), kManagedLabel).empty()) continue;
    std::string uid = Label(s.labels(), kPodUidLabel);
    if (desired.count(uid) == 0) {
      undesired_problems.push_back("sandbox " + s.id().substr(0, 12) + " of undesired pod " +
                                   s.metadata().name() + " is left");
    } else if (s.state() == v1::SANDBOX_READY) {
      ready_by_uid[uid].push_back(&s);
    }
  }
  std::map<ContainerKey, std::vector<const v1::Container*>> by_key;
  for (const auto& c : *containers) {
    if (Label(c.labels(), kManagedLabel).empty()) continue;
    std::string uid = Label(c.labels(), kPodUidLabel);
    if (desired.count(uid) == 0) {
      undesired_problems.push_back("container " + c.id().substr(0, 12) + " of undesired pod " +
                                   uid + " is left");
      continue;
    }
    by_key[{uid, Label(c.labels(), kContainerNameLabel)}].push_back(&c);
  }
  for (const auto& [uid, d] : desired) {
    std::string pod = d.expected.full_name + " (" + PodKindName(d.pod.kind) + ")";
    auto ready = ready_by_uid[uid];
    bool completing =
        d.pod.kind == PodKind::kCompleteNever || d.pod.kind == PodKind::kCompleteOnFailure;
    if (!completing && ready.size() != 1) {
      desired_problems.push_back(pod + ": " + std::to_string(ready.size()) +
                                 " ready sandboxes, want 1");
      continue;
    }
    for (const auto& [name, hash] : d.expected.container_hashes) {
      const auto& list = by_key[{uid, name}];
      int running_current = 0, running_other = 0, exited_current = 0;
      for (const v1::Container* c : list) {
        bool current = Label(c->annotations(), kContainerHashAnnotation) == hash;
        if (c->state() == v1::CONTAINER_RUNNING) {
          (current && c->pod_sandbox_id() == (ready.empty() ? "" : ready[0]->id())
               ? running_current
               : running_other)++;
        } else if (c->state() == v1::CONTAINER_EXITED && current) {
          if (completing) {
            auto st = cri_->ContainerStatus(c->id(), false);
            if (st.ok() && st->status().exit_code() == 0) ++exited_current;
          } else {
            ++exited_current;
          }
        }
      }
      std::string what = pod + " container " + name;
      if (IsLongRunning(d.pod.kind)) {
        if (running_current != 1 || running_other != 0) {
          desired_problems.push_back(
              what + ": " + std::to_string(running_current) + " running with the current spec, " +
              std::to_string(running_other) + " other running; want exactly 1 of the current spec");
        }
      } else if (d.pod.kind == PodKind::kCrashLooping) {
        if (running_current + exited_current == 0 || running_other != 0) {
          desired_problems.push_back(what + ": no container of the current spec");
        }
      } else if (exited_current == 0 || running_current + running_other != 0) {
        desired_problems.push_back(what + ": not completed with exit code 0 on the current spec");
      }
    }
  }
  return {desired_problems, undesired_problems};
}

void Soak::CheckLeaks() {
  // 1. Every pod removed: nodelet must leave nothing in the runtime nor under its root.
  for (const auto& e : fs::directory_iterator(manifests_)) fs::remove(e.path());
  {
    std::lock_guard<std::mutex> lock(mu_);
    desired_.clear();
  }
  auto deadline = steady_clock::now() + seconds(120);
  std::vector<std::string> left;
  for (;;) {
    left.clear();
    auto sandboxes = cri_->ListPodSandbox(v1::PodSandboxFilter());
    auto containers = cri_->ListContainers(v1::ContainerFilter());
    if (!sandboxes.ok() || !containers.ok()) {
      left.push_back("CRI list failed");
    } else {
      for (const auto& s : *sandboxes)
        left.push_back("sandbox " + s.id().substr(0, 12) + " (" + s.metadata().name() + ")");
      for (const auto& c : *containers) left.push_back("container " + c.id().substr(0, 12));
    }
    for (const auto& m : MountsUnder(root_)) left.push_back("mount " + m);
    // Pod directories go after the pod stopped (volumed, once podworkerd no longer reports it
    // in use), so a little after the runtime is clean; every pod has one (termination messages).
    std::error_code dir_ec;
    for (const auto& e : fs::directory_iterator(root_ + "/pods", dir_ec)) {
      left.push_back("pod directory " + e.path().string());
    }
    // A pod cgroup whose sandbox an earlier podworkerd made and a later one removed as an
    // orphan goes with podworkerd's periodic sweep (5 s after each podworkerd start, then every
    // --orphan-shim-period, 1 min; pod_cgroups.h): within the deadline, not at once.
    for (const auto& cg : testing::PodCgroupsUnder(testing::TestCgroupRoot(dir_))) {
      left.push_back("pod cgroup " + cg);
    }
    if (left.empty() || steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(milliseconds(500));  // polling the runtime, bounded by the deadline
  }
  for (const auto& l : left) {
    Violation(figures_.leak_violations, "after every manifest was removed, left: " + l);
  }
  // No pod left, so no pod IP may be held either.
  if (containerd_->has_pod_network()) {
    for (const auto& p :
         testing::CheckIpamHolds(containerd_->ipam_data_dir(), containerd_->network_name(), {})) {
      Violation(figures_.leak_violations, "after every manifest was removed: " + p);
    }
  }
  std::error_code ec;
  // The verdicts of the writers' SIGTERM handlers (chaos_pods.h): an emptyDir file gone during a
  // grace period is a violation; a handler that found no trace of its preStop hook is counted
  // (a hook can fail for a fault: containerd restarted while it ran).
  for (const auto& e : fs::directory_iterator(dir_ + "/results", ec)) {
    std::ifstream in(e.path());
    for (std::string line; std::getline(in, line);) {
      ++figures_.grace_verdicts;
      if (line == kGraceNoPreStop) ++figures_.grace_no_prestop;
      if (line == kGraceMissing) {
        Violation(figures_.grace_violations, e.path().filename().string() +
                                                 ": an emptyDir file was gone during the grace "
                                                 "period");
      }
    }
  }

  // 2. nodelet stopped: none of its processes is left.
  auto services = ServiceStatus();
  nodelet_->Signal(SIGTERM);
  if (!nodelet_->Wait(seconds(40)).has_value()) {
    Violation(figures_.leak_violations, "nodelet did not exit within 40 s of SIGTERM");
  }
  for (const auto& [name, s] : services) {
    pid_t pid = s.value("pid", 0);
    if (pid > 0 && !testing::WaitProcessGone(pid, seconds(10))) {
      Violation(figures_.leak_violations, "service " + name + " still runs after nodelet stopped");
    }
  }
  // 3. No shim of this containerd, no process naming the run's directory, no container process.
  deadline = steady_clock::now() + seconds(30);
  std::vector<pid_t> shims;
  while (!(shims = containerd_->ShimPids()).empty() && steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(200));
  }
  for (pid_t p : shims)
    Violation(figures_.leak_violations, "containerd shim " + std::to_string(p) + " left");
  for (pid_t p : ProcessesMentioning(dir_, containerd_->pid())) {
    Violation(figures_.leak_violations,
              "process " + std::to_string(p) + " naming " + dir_ + " left");
  }
  for (pid_t p : container_pids_) {
    if (testing::ProcessAlive(p)) {
      Violation(figures_.leak_violations, "container process " + std::to_string(p) + " left");
    }
  }
  // 4. No mount under the run's directories (containerd's included), no cgroup of its containers.
  // containerd's own netns mounts of RunPodSandbox calls its restart cut off are its leak, not
  // nodelet's (SandboxCallsCutByStop): as many as there were such calls are counted, not blamed.
  const std::string netns_dir = containerd_->dir() + "/state/io.containerd.grpc.v1.cri/netns/";
  std::vector<std::string> mounts = MountsUnder(dir_);
  std::vector<std::string> netns_left;
  for (const auto& m : mounts) {
    if (m.rfind(netns_dir, 0) == 0) netns_left.push_back(m);
  }
  int cut_calls = 0;
  if (!netns_left.empty()) {
    std::ifstream in(containerd_->dir() + "/containerd.log");
    std::stringstream text;
    text << in.rdbuf();
    cut_calls = SandboxCallsCutByStop(text.str());
  }
  const bool runtime_netns =
      !netns_left.empty() && netns_left.size() <= static_cast<size_t>(cut_calls);
  for (const auto& m : mounts) {
    if (runtime_netns && m.rfind(netns_dir, 0) == 0) {
      ++figures_.runtime_netns_left;
      Log("netns mount left by a RunPodSandbox that containerd's restart cut off (" +
              std::to_string(cut_calls) + " such calls; not a violation): " + m,
          true);
      continue;
    }
    Violation(figures_.leak_violations, "mount left: " + m);
  }
  std::set<std::string> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ids = seen_ids_;
  }
  for (const auto& cg : CgroupsNamed(ids))
    Violation(figures_.leak_violations, "cgroup left: " + cg);
  // Every pod was removed: podworkerd removed each pod's cgroup (pod_cgroups.h).
  for (const auto& cg : testing::PodCgroupsUnder(testing::TestCgroupRoot(dir_))) {
    Violation(figures_.leak_violations, "pod cgroup left: " + cg);
  }
}

Result<SoakFigures> Soak::Run() {
  figures_.seed = options_.seed;
  if (Status s = Setup(); !s.ok()) return s;
  Log("work directory " + dir_ + ": containerd and nodelet started with " +
          std::to_string(options_.pods) + " pods",
      true);

  // Initial convergence, before any fault.
  auto deadline = steady_clock::now() + seconds(180);
  for (;;) {
    auto [bad, extra] = CheckRuntime();
    bad.insert(bad.end(), extra.begin(), extra.end());
    if (bad.empty()) break;
    if (steady_clock::now() >= deadline) {
      figures_.details = bad;  // keeps the directory for a look
      return DeadlineExceeded("the initial pods did not converge within 180 s: " + bad.front() +
                              " (and " + std::to_string(bad.size() - 1) + " more); see " + dir_);
    }
    notify_->Receive(milliseconds(1000));
  }
  Log("initial pods converged; chaos for " + std::to_string(options_.duration.count() / 1000) +
          " s",
      true);

  auto t0 = steady_clock::now();
  auto end = t0 + options_.duration;
  containerd_restart_at_ = t0 + options_.duration / 2;
  int supervisor_restarts = std::max<int>(1, static_cast<int>(options_.duration / seconds(90)));
  for (int k = 1; k <= supervisor_restarts; ++k) {
    supervisor_restart_at_.push_back(t0 + options_.duration * k / (supervisor_restarts + 1) +
                                     seconds(3));
  }
  last_sigstop_ = t0 - seconds(15);
  churn_thread_ = std::thread([this] { ChurnLoop(); });
  status_thread_ = std::thread([this] { StatusLoop(); });

  std::optional<Snapshot> last = TakeSnapshot();
  while (steady_clock::now() < end) {
    auto snap = TakeSnapshot();
    CheckPodIps();
    if (snap) {
      if (last) CompareSnapshots(*last, *snap);
      last = std::move(snap);
    }
    InjectFault(steady_clock::now(), t0);
    std::this_thread::sleep_for(milliseconds(Rand(2000, 4000)));  // the fault rhythm
  }

  Log("chaos over; waiting for convergence", true);
  stop_churn_ = true;
  wake_.notify_all();
  churn_thread_.join();
  for (auto& [pid, _] : stopped_) kill(pid, SIGCONT);
  stopped_.clear();
  if (!nodelet_->running()) {
    if (Status s = StartNodelet(); !s.ok()) return s;
  }
  deadline = steady_clock::now() + seconds(180);
  std::vector<std::string> bad, extra;
  for (;;) {
    bool services_ok = true;
    auto services = ServiceStatus();
    for (const auto& name : kServices) {
      services_ok =
          services_ok && services.count(name) && services[name].value("state", "") == "RUNNING";
    }
    std::tie(bad, extra) = CheckRuntime();
    if (!services_ok) bad.push_back("not every service is RUNNING");
    if (bad.empty() && extra.empty()) break;
    if (steady_clock::now() >= deadline) break;
    notify_->Receive(milliseconds(1000));
  }
  for (const auto& b : bad) Violation(figures_.desired_violations, b);
  for (const auto& e : extra) Violation(figures_.undesired_violations, e);
  if (auto snap = TakeSnapshot(); snap && last) CompareSnapshots(*last, *snap);
  CheckPodIps();
  // host-local's files against the live sandboxes: every IP held is a READY sandbox's, and every
  // READY sandbox's IP is held (leak_check.h).
  if (containerd_->has_pod_network()) {
    if (auto ips = LivePodIps(); ips) {
      for (const auto& p : testing::CheckIpamHolds(containerd_->ipam_data_dir(),
                                                   containerd_->network_name(), *ips)) {
        Violation(figures_.ip_violations, "after convergence: " + p);
      }
    } else {
      Violation(figures_.ip_violations, "after convergence: cannot read the sandboxes' IPs");
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    figures_.pods_checked = static_cast<int>(desired_.size());
  }
  // Remember the container processes, to find them later if anything leaks.
  if (auto containers = cri_->ListContainers(v1::ContainerFilter()); containers.ok()) {
    for (const auto& c : *containers) {
      if (c.state() != v1::CONTAINER_RUNNING) continue;
      pid_t pid = testing::ContainerPid(*cri_, c.id());
      if (pid > 0) container_pids_.insert(pid);
    }
  }
  stop_status_ = true;
  wake_.notify_all();
  status_thread_.join();

  Log("checking for leaks", true);
  CheckLeaks();
  figures_.duration_s = std::chrono::duration<double>(options_.duration).count();
  return figures_;
}

void Soak::Teardown() {
  stop_churn_ = true;
  stop_status_ = true;
  wake_.notify_all();
  if (churn_thread_.joinable()) churn_thread_.join();
  if (status_thread_.joinable()) status_thread_.join();
  for (auto& [pid, _] : stopped_) kill(pid, SIGCONT);
  if (nodelet_ && nodelet_->running()) {
    nodelet_->Signal(SIGTERM);
    if (!nodelet_->Wait(seconds(40)).has_value()) nodelet_->Signal(SIGKILL);
  }
  nodelet_.reset();
  if (containerd_) {
    if (Status s = containerd_->Stop(); !s.ok()) Log("containerd stop: " + s.ToString(), true);
    containerd_.reset();
  }
  if (dir_.empty()) return;
  (void)testing::RemoveCgroupTree(testing::TestCgroupRoot(dir_));
  for (const auto& m : MountsUnder(dir_)) umount2(m.c_str(), MNT_DETACH);
  if (!options_.keep_dir && figures_.violations() == 0) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  } else {
    Log("kept " + dir_ + " (nodelet-N.log, log/, ctrd/containerd.log)", true);
  }
}

}  // namespace

nlohmann::json SoakFigures::ToJson() const {
  return {{"duration_s", duration_s},
          {"seed", seed},
          {"faults",
           {{"sigkill", sigkills},
            {"sigstop", sigstops},
            {"supervisor_restarts", supervisor_restarts},
            {"containerd_restarts", containerd_restarts},
            {"total", sigkills + sigstops + supervisor_restarts + containerd_restarts}}},
          {"churn",
           {{"adds", adds},
            {"edits_restart", edits_restart},
            {"edits_label", edits_label},
            {"deletes", deletes},
            {"configmap_edits", configmap_edits}}},
          {"checks",
           {{"pods_checked", pods_checked},
            {"containers_tracked", containers_tracked},
            {"continuity_checks", continuity_checks},
            {"runtime_losses", runtime_losses},
            {"runtime_netns_left", runtime_netns_left},
            {"status_samples", status_samples},
            {"status_pods_tracked", status_pods_tracked},
            {"grace_verdicts", grace_verdicts},
            {"grace_no_prestop", grace_no_prestop},
            {"pod_ip_sandboxes", pod_ip_sandboxes},
            {"pod_ip_checks", pod_ip_checks}}},
          {"violations",
           {{"desired", desired_violations},
            {"undesired", undesired_violations},
            {"restarted", restart_violations},
            {"status", status_violations},
            {"leaks", leak_violations},
            {"grace", grace_violations},
            {"ip", ip_violations},
            {"total", violations()}}},
          {"details", details}};
}

std::set<std::string> ShimsLostAtBoot(const std::string& containerd_log) {
  std::set<std::string> out;
  bool booting = false;
  std::istringstream lines(containerd_log);
  const std::string key = " id=";
  for (std::string line; std::getline(lines, line);) {
    if (line.find("msg=\"starting containerd\"") != std::string::npos) {
      booting = true;
    } else if (line.find("msg=\"containerd successfully booted") != std::string::npos) {
      booting = false;
    } else if (booting &&
               line.find("msg=\"cleaning up after shim disconnected\"") != std::string::npos) {
      auto at = line.find(key);
      if (at == std::string::npos) continue;
      at += key.size();
      auto end = line.find(' ', at);
      out.insert(line.substr(at, end == std::string::npos ? std::string::npos : end - at));
    }
  }
  return out;
}

int SandboxCallsCutByStop(const std::string& containerd_log) {
  const std::string start = "msg=\"RunPodSandbox for &PodSandboxMetadata{";
  std::map<std::string, int> open;  // calls in flight, by their metadata (a retry has the same)
  int cut = 0;
  std::istringstream lines(containerd_log);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("msg=\"Stop CRI service\"") != std::string::npos) {
      for (const auto& [meta, n] : open) cut += n;
      open.clear();
      continue;
    }
    auto at = line.find(start);
    if (at == std::string::npos) continue;
    at += start.size();
    auto close = line.find("}", at);
    if (close == std::string::npos) continue;
    std::string meta = line.substr(at, close - at);
    // "...{META}" opens a call; "...{META} returns sandbox id" and "...{META} failed" end it.
    if (line.compare(close, 2, "}\"") == 0) {
      ++open[meta];
    } else if (auto it = open.find(meta); it != open.end() && --it->second == 0) {
      open.erase(it);
    }
  }
  return cut;
}

std::string SoakFigures::Summary() const {
  std::ostringstream out;
  out << "chaos soak: " << duration_s << " s of faults, seed " << seed << "\n"
      << "  faults injected: " << (sigkills + sigstops + supervisor_restarts + containerd_restarts)
      << " (SIGKILL " << sigkills << ", SIGSTOP " << sigstops << ", supervisor restarts "
      << supervisor_restarts << ", containerd restarts " << containerd_restarts << ")\n"
      << "  churn: " << adds << " adds, " << edits_restart << " spec edits, " << edits_label
      << " label edits, " << deletes << " deletes, " << configmap_edits << " ConfigMap edits\n"
      << "  pods checked: " << pods_checked << "; containers followed: " << containers_tracked
      << " (continuity checks: " << continuity_checks
      << ", lost by containerd's restart: " << runtime_losses << ")"
      << "; statusd samples: " << status_samples << " over " << status_pods_tracked << " pods\n"
      << "  grace periods checked: " << grace_verdicts << " (preStop not seen: " << grace_no_prestop
      << ")\n"
      << "  left by containerd's restart: " << runtime_netns_left << " netns mounts\n"
      << "  pod IPs followed: " << pod_ip_sandboxes << " sandboxes (" << pod_ip_checks
      << " checks)\n"
      << "  violations: " << violations() << " (desired " << desired_violations << ", undesired "
      << undesired_violations << ", restarted " << restart_violations << ", status "
      << status_violations << ", leaks " << leak_violations << ", grace " << grace_violations
      << ", ip " << ip_violations << ")\n";
  for (const auto& d : details) out << "    " << d << "\n";
  return out.str();
}

Result<SoakFigures> RunSoak(const SoakOptions& options) {
  Soak soak(options);
  return soak.Run();
}

}  // namespace nodelet::chaos
