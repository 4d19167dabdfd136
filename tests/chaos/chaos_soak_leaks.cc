// The soak's leak checks, once every pod is removed and nodelet stopped: nothing left in the
// runtime, under nodelet's root, in the IPAM files, among the processes, the mounts and the
// cgroups; the grace-period verdicts of the volume pods' writers.
#include <signal.h>

#include <fstream>
#include <sstream>

#include "tests/chaos/chaos_soak_impl.h"

namespace nodelet::chaos::soak_internal {

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

}  // namespace nodelet::chaos::soak_internal
