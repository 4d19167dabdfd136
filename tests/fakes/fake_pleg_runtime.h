// FakePlegRuntime: an in-memory runtime for plegd's unit tests, with knobs to fail the listing
// and to make one sandbox's inspection hang until released.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "svc-plegd/pleg_runtime.h"

namespace nodelet::testing {

class FakePlegRuntime : public plegd::PlegRuntime {
 public:
  // Adds a managed pod with one sandbox "<uid>-sb" and the given containers (name → state).
  void AddPod(const std::string& uid,
              const std::map<std::string, plegd::ContainerState>& containers, bool managed = true) {
    std::lock_guard<std::mutex> lock(mu_);
    plegd::SandboxListing s;
    s.id = uid + "-sb";
    s.pod_uid = uid;
    s.pod_name = "pod-" + uid;
    s.pod_namespace = "default";
    s.state = plegd::SandboxState::Ready;
    s.created_at_ns = ++created_;
    if (managed) s.labels[plegd::kManagedLabel] = "true";
    listing_.sandboxes.push_back(s);
    for (const auto& [name, state] : containers) {
      plegd::ContainerListing c;
      c.id = uid + "-" + name;
      c.sandbox_id = s.id;
      c.name = name;
      c.state = state;
      c.created_at_ns = ++created_;
      listing_.containers.push_back(c);
      exit_codes_[c.id] = 0;
    }
  }
  void SetContainerState(const std::string& id, plegd::ContainerState state, int exit_code = 0) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : listing_.containers) {
      if (c.id == id) c.state = state;
    }
    exit_codes_[id] = exit_code;
  }
  void RemoveContainer(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    std::erase_if(listing_.containers, [&](const auto& c) { return c.id == id; });
  }
  void FailList(std::optional<Status> status) {
    std::lock_guard<std::mutex> lock(mu_);
    list_error_ = std::move(status);
  }
  // InspectSandbox(id) blocks until ReleaseHangs() (or the fake is destroyed).
  void HangSandbox(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    hanging_.insert(id);
  }
  void ReleaseHangs() {
    std::lock_guard<std::mutex> lock(mu_);
    hanging_.clear();
    cv_.notify_all();
  }
  ~FakePlegRuntime() override { ReleaseHangs(); }

  Result<plegd::RuntimeListing> List() override {
    std::lock_guard<std::mutex> lock(mu_);
    ++lists_;
    LookedLocked(nullptr);
    if (list_error_) return *list_error_;
    return listing_;
  }
  // The managed pod's sandboxes and the containers in them (the fake has no labels on
  // containers: a container is the pod's when its sandbox is).
  // The container takes `state` only at the `looks`-th look at it from now: a List or ListPod
  // call, or an InspectContainer of it. A runtime whose view lags the event that announced the
  // change.
  void DeferState(const std::string& id, plegd::ContainerState state, int looks) {
    std::lock_guard<std::mutex> lock(mu_);
    deferred_.push_back({id, state, looks});
  }
  // Called (without the fake's lock) at each ListPod, before it answers; set it before the
  // engine starts.
  std::function<void(const std::string& uid)> on_list_pod;
  // The fake groups by uid alone and needs no `known_sandboxes`.
  Result<plegd::RuntimeListing> ListPod(const std::string& uid,
                                        const std::vector<std::string>& known_sandboxes) override {
    if (on_list_pod) on_list_pod(uid);
    std::lock_guard<std::mutex> lock(mu_);
    ++pod_lists_;
    LookedLocked(nullptr);
    if (list_error_) return *list_error_;
    plegd::RuntimeListing out;
    std::set<std::string> sandboxes;
    for (const auto& s : listing_.sandboxes) {
      if (s.pod_uid != uid || s.labels.count(plegd::kManagedLabel) == 0) continue;
      out.sandboxes.push_back(s);
      sandboxes.insert(s.id);
    }
    for (const auto& c : listing_.containers) {
      if (sandboxes.count(c.sandbox_id) != 0) out.containers.push_back(c);
    }
    return out;
  }
  Result<plegd::PodRef> PodOf(const std::string& runtime_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++pod_ofs_;
    std::string sandbox_id = runtime_id;
    for (const auto& c : listing_.containers) {
      if (c.id == runtime_id) sandbox_id = c.sandbox_id;
    }
    for (const auto& s : listing_.sandboxes) {
      if (s.id != sandbox_id) continue;
      if (s.labels.count(plegd::kManagedLabel) == 0) {
        return Status(StatusCode::kFailedPrecondition, "foreign");
      }
      return plegd::PodRef{s.pod_uid, s.id};
    }
    return NotFound("no " + runtime_id);
  }
  int lists() const {
    std::lock_guard<std::mutex> lock(mu_);
    return lists_;
  }
  int pod_lists() const {
    std::lock_guard<std::mutex> lock(mu_);
    return pod_lists_;
  }
  int pod_ofs() const {
    std::lock_guard<std::mutex> lock(mu_);
    return pod_ofs_;
  }
  int sandbox_inspections() const {
    std::lock_guard<std::mutex> lock(mu_);
    return sandbox_inspections_;
  }
  int container_inspections() const {
    std::lock_guard<std::mutex> lock(mu_);
    return container_inspections_;
  }
  Result<ipc::pleg::SandboxRecordT> InspectSandbox(const std::string& id) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++sandbox_inspections_;
    cv_.wait(lock, [&] { return hanging_.count(id) == 0; });
    for (const auto& s : listing_.sandboxes) {
      if (s.id != id) continue;
      ipc::pleg::SandboxRecordT r;
      r.id = s.id;
      r.state = s.state;
      r.host_network = true;
      r.created_at_ns = s.created_at_ns;
      return r;
    }
    return NotFound("sandbox " + id);
  }
  // Called (without the fake's lock) at each InspectContainer, before it answers; set it before
  // the engine starts.
  std::function<void(const std::string& id)> on_inspect_container;
  Result<ipc::pleg::ContainerRecordT> InspectContainer(const std::string& id) override {
    if (on_inspect_container) on_inspect_container(id);
    std::lock_guard<std::mutex> lock(mu_);
    ++container_inspections_;
    LookedLocked(&id);
    for (const auto& c : listing_.containers) {
      if (c.id != id) continue;
      ipc::pleg::ContainerRecordT r;
      r.id = c.id;
      r.name = c.name;
      r.state = c.state;
      r.sandbox_id = c.sandbox_id;
      r.exit_code = exit_codes_[c.id];
      return r;
    }
    return NotFound("container " + id);
  }

 private:
  // A look at every container (`id` null: a pod's listing) or at `id` alone.
  void LookedLocked(const std::string* id) {
    for (auto it = deferred_.begin(); it != deferred_.end();) {
      if (id != nullptr && *id != it->id) {
        ++it;
        continue;
      }
      if (++it->looked < it->after) {
        ++it;
        continue;
      }
      for (auto& c : listing_.containers) {
        if (c.id == it->id) c.state = it->state;
      }
      it = deferred_.erase(it);
    }
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  plegd::RuntimeListing listing_;
  int lists_ = 0, pod_lists_ = 0, pod_ofs_ = 0, container_inspections_ = 0,
      sandbox_inspections_ = 0;
  struct Deferred {
    std::string id;
    plegd::ContainerState state;
    int after;
    int looked = 0;
  };
  std::vector<Deferred> deferred_;
  std::map<std::string, int> exit_codes_;
  std::optional<Status> list_error_;
  std::set<std::string> hanging_;
  int64_t created_ = 0;
};

}  // namespace nodelet::testing
