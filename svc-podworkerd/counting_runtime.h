// CountingRuntime: RuntimeService and ImageService that forward to another implementation and
// count each call and each error by operation (the kubelet's runtime_operations_total and
// runtime_operations_errors_total), for podworkerd's heartbeat counters. Thread-safe.
//
// It is also where every removal podworkerd makes passes, so it repairs the one removal failure
// CRI cannot fix (lib/cri/containerd_tasks.h): when RemoveContainer or RemovePodSandbox fails on
// a task containerd kept after a cancelled start, the repair hook (set_stuck_task_repair) kills
// and deletes that task, and the removal is tried once more. Counted as "repair_stuck_task".
// It also removes the empty cgroups a cancelled start can leave of a removed container
// (leftover_cgroups.h, set_sweep_leftover_cgroups).
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lib/cri/containerd_tasks.h"
#include "lib/cri/runtime_service.h"
#include "svc-podworkerd/leftover_cgroups.h"

namespace nodelet::podworkerd {

class CountingRuntime final : public cri::RuntimeService, public cri::ImageService {
 public:
  CountingRuntime(cri::RuntimeService& runtime, cri::ImageService& images)
      : runtime_(runtime), images_(images) {}

  using StuckTaskRepair = std::function<Status(const std::string& container_id)>;
  // Before the first call.
  void set_stuck_task_repair(StuckTaskRepair repair) { repair_ = std::move(repair); }
  // Before the first call: run after each successful RemovePodSandbox with the ids of the
  // sandbox and of every container that was in it (to delete tasks the runtime kept of them).
  void set_after_sandbox_removal(std::function<void(const std::vector<std::string>& ids)> hook) {
    after_removal_ = std::move(hook);
  }
  // Before the first call: after each container or sandbox removal, remove the cgroups the
  // runtime left of it (leftover_cgroups.h), under `cgroup_root`. Counted as
  // "repair_leftover_cgroup" (one per directory removed).
  // `removed` (optional) hears of each path that had directories removed, for the log.
  void set_sweep_leftover_cgroups(
      std::string cgroup_root,
      std::function<void(const std::string& path, int dirs)> removed = nullptr) {
    cgroup_root_ = std::move(cgroup_root);
    on_swept_ = std::move(removed);
  }

  // operation → (calls, errors), operations named as in CRI ("run_podsandbox", ...).
  std::map<std::string, std::pair<uint64_t, uint64_t>> Snapshot() const {
    std::lock_guard<std::mutex> lock(mu_);
    return ops_;
  }

  Result<cri::v1::VersionResponse> Version() override {
    return Count("version", runtime_.Version());
  }
  Result<cri::v1::StatusResponse> RuntimeStatus(bool verbose) override {
    return Count("status", runtime_.RuntimeStatus(verbose));
  }
  Result<std::string> RunPodSandbox(const cri::v1::PodSandboxConfig& config,
                                    const std::string& handler) override {
    return Count("run_podsandbox", runtime_.RunPodSandbox(config, handler));
  }
  Status StopPodSandbox(const std::string& id) override {
    return CountStatus("stop_podsandbox", runtime_.StopPodSandbox(id));
  }
  Status RemovePodSandbox(const std::string& id) override {
    std::vector<std::string> ids, cgroups;
    if (!cgroup_root_.empty() || after_removal_) SandboxContents(id, ids, cgroups);
    Status s =
        CountStatus("remove_podsandbox", Repaired([&] { return runtime_.RemovePodSandbox(id); }));
    if (s.ok()) {
      if (after_removal_) after_removal_(ids);
      Sweep(cgroups);
    }
    return s;
  }
  Result<cri::v1::PodSandboxStatusResponse> PodSandboxStatus(const std::string& id,
                                                             bool verbose) override {
    return Count("podsandbox_status", runtime_.PodSandboxStatus(id, verbose));
  }
  Result<std::vector<cri::v1::PodSandbox>> ListPodSandbox(
      const cri::v1::PodSandboxFilter& filter) override {
    return Count("list_podsandbox", runtime_.ListPodSandbox(filter));
  }
  Result<std::string> CreateContainer(const std::string& sandbox,
                                      const cri::v1::ContainerConfig& config,
                                      const cri::v1::PodSandboxConfig& sandbox_config) override {
    return Count("create_container", runtime_.CreateContainer(sandbox, config, sandbox_config));
  }
  Status StartContainer(const std::string& id) override {
    return CountStatus("start_container", runtime_.StartContainer(id));
  }
  Status StopContainer(const std::string& id, int64_t timeout) override {
    return CountStatus("stop_container", runtime_.StopContainer(id, timeout));
  }
  Status RemoveContainer(const std::string& id) override {
    std::vector<std::string> cgroups;
    if (!cgroup_root_.empty()) {
      if (auto c = ContainerCgroup(id)) cgroups.push_back(*c);
    }
    Status s =
        CountStatus("remove_container", Repaired([&] { return runtime_.RemoveContainer(id); }));
    if (s.ok()) Sweep(cgroups);
    return s;
  }
  Result<std::vector<cri::v1::Container>> ListContainers(
      const cri::v1::ContainerFilter& filter) override {
    return Count("list_containers", runtime_.ListContainers(filter));
  }
  Result<cri::v1::ContainerStatusResponse> ContainerStatus(const std::string& id,
                                                           bool verbose) override {
    return Count("container_status", runtime_.ContainerStatus(id, verbose));
  }
  Result<cri::v1::ExecSyncResponse> ExecSync(const std::string& id,
                                             const std::vector<std::string>& cmd,
                                             int64_t timeout) override {
    return Count("exec_sync", runtime_.ExecSync(id, cmd, timeout));
  }
  Result<std::string> Exec(const cri::v1::ExecRequest& request) override {
    return Count("exec", runtime_.Exec(request));
  }
  Result<std::string> Attach(const cri::v1::AttachRequest& request) override {
    return Count("attach", runtime_.Attach(request));
  }
  Result<std::string> PortForward(const cri::v1::PortForwardRequest& request) override {
    return Count("port_forward", runtime_.PortForward(request));
  }
  Status ReopenContainerLog(const std::string& id) override {
    return Count("reopen_container_log", runtime_.ReopenContainerLog(id));
  }
  Result<std::vector<cri::v1::Image>> ListImages(const cri::v1::ImageFilter& filter) override {
    return Count("list_images", images_.ListImages(filter));
  }
  Result<cri::v1::ImageStatusResponse> ImageStatus(const cri::v1::ImageSpec& image,
                                                   bool verbose) override {
    return Count("image_status", images_.ImageStatus(image, verbose));
  }
  Result<std::string> PullImage(const cri::v1::ImageSpec& image, const cri::v1::AuthConfig* auth,
                                const cri::v1::PodSandboxConfig* sandbox,
                                cri::CallCancel* cancel) override {
    return Count("pull_image", images_.PullImage(image, auth, sandbox, cancel));
  }
  Status RemoveImage(const cri::v1::ImageSpec& image) override {
    return CountStatus("remove_image", images_.RemoveImage(image));
  }
  Result<cri::v1::ImageFsInfoResponse> ImageFsInfo() override {
    return Count("image_fs_info", images_.ImageFsInfo());
  }

 private:
  static std::optional<std::string> InfoCgroup(
      const google::protobuf::Map<std::string, std::string>& info) {
    auto it = info.find("info");
    if (it == info.end()) return std::nullopt;
    return CgroupsPathFromInfo(it->second);
  }
  std::optional<std::string> ContainerCgroup(const std::string& id) {
    auto st = runtime_.ContainerStatus(id, /*verbose=*/true);
    if (!st.ok()) return std::nullopt;
    return InfoCgroup(st->info());
  }
  // The ids and cgroups of the sandbox and of every container in it (RemovePodSandbox removes
  // them all).
  void SandboxContents(const std::string& id, std::vector<std::string>& ids,
                       std::vector<std::string>& cgroups) {
    cri::v1::ContainerFilter filter;
    filter.set_pod_sandbox_id(id);
    if (auto containers = runtime_.ListContainers(filter); containers.ok()) {
      for (const auto& c : *containers) {
        ids.push_back(c.id());
        if (cgroup_root_.empty()) continue;
        if (auto p = ContainerCgroup(c.id())) cgroups.push_back(*p);
      }
    }
    ids.push_back(id);
    if (cgroup_root_.empty()) return;
    if (auto st = runtime_.PodSandboxStatus(id, /*verbose=*/true); st.ok()) {
      if (auto p = InfoCgroup(st->info())) cgroups.push_back(*p);
    }
  }
  void Sweep(const std::vector<std::string>& cgroups) {
    for (const auto& path : cgroups) {
      int removed = RemoveLeftoverCgroups({path}, cgroup_root_);
      if (removed == 0) continue;
      for (int i = 0; i < removed; ++i) Add("repair_leftover_cgroup", true);
      if (on_swept_) on_swept_(path, removed);
    }
  }
  // Runs `remove`; on a stuck task, repairs it and runs `remove` again.
  template <typename Fn>
  Status Repaired(Fn&& remove) {
    Status s = remove();
    if (s.ok() || !repair_) return s;
    auto stuck = cri::StuckTaskContainerId(s);
    if (!stuck) return s;
    Status repaired = repair_(*stuck);
    Add("repair_stuck_task", repaired.ok());
    if (!repaired.ok()) return s;
    return remove();
  }
  void Add(const char* op, bool ok) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& e = ops_[op];
    ++e.first;
    if (!ok) ++e.second;
  }
  template <typename T>
  T Count(const char* op, T result) {
    Add(op, result.ok());
    return result;
  }
  Status CountStatus(const char* op, Status s) {
    Add(op, s.ok());
    return s;
  }

  cri::RuntimeService& runtime_;
  cri::ImageService& images_;
  StuckTaskRepair repair_;
  std::string cgroup_root_;  // empty: no sweep
  std::function<void(const std::string&, int)> on_swept_;
  std::function<void(const std::vector<std::string>&)> after_removal_;
  mutable std::mutex mu_;
  std::map<std::string, std::pair<uint64_t, uint64_t>> ops_;
};

}  // namespace nodelet::podworkerd
