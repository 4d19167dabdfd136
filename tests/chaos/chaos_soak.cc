// RunSoak: the soak from start to end. Its directory, containerd and nodelet started; the
// initial pods converged; the fault window (snapshots compared, faults injected, the workload
// churned by its thread); convergence and the final checks; the leak checks; the teardown.
#include "tests/chaos/chaos_soak.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <tuple>

#include "tests/chaos/chaos_soak_impl.h"

namespace nodelet::chaos::soak_internal {
namespace {

const std::vector<std::string> kServices = {"plegd", "statusd", "podworkerd", "volumed"};

}  // namespace

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

}  // namespace nodelet::chaos::soak_internal

namespace nodelet::chaos {

Result<SoakFigures> RunSoak(const SoakOptions& options) {
  soak_internal::Soak soak(options);
  return soak.Run();
}

}  // namespace nodelet::chaos
