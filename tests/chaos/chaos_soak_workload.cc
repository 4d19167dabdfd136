// The soak's workload: the pods' manifests written into the directory nodelet watches (one
// file each, replaced through a rename), and the churn thread that adds, deletes and edits them
// (a spec edit that must restart the container, a label edit that must not) and edits the
// ConfigMap every 10 s.
#include <fstream>

#include "tests/chaos/chaos_soak_impl.h"

namespace nodelet::chaos::soak_internal {

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

}  // namespace nodelet::chaos::soak_internal
