#include "supervisor/node_status.h"

#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <fstream>
#include <optional>
#include <sstream>

#include "lib/common/json_text.h"
#include "lib/common/logging.h"
#include "lib/common/rfc3339.h"
#include "lib/pod/quantity.h"
#include "lib/stats/usage.h"
#include "lib/status/status_client.h"
#include "supervisor/pod_manager.h"

namespace nodelet::supervisor {
namespace {

std::string Time(int64_t unix_s) { return FormatRfc3339Nano(UnixTime{unix_s, 0}); }

int64_t MemAvailable() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  int64_t kb = 0;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return -1;
}

std::string OsImage() {
  std::ifstream in("/etc/os-release");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("PRETTY_NAME=", 0) == 0) {
      std::string v = line.substr(12);
      if (v.size() >= 2 && v.front() == '"') v = v.substr(1, v.size() - 2);
      return v;
    }
  }
  return "Linux";
}

// (in use, max) as the eviction manager counts them (tasks against pid_max and threads-max,
// stats::ReadNodePids); (0, 32768) when /proc cannot be read.
std::pair<int64_t, int64_t> Pids() {
  auto pids = stats::ReadNodePids();
  if (!pids.ok()) return {0, 32768};
  return {pids->in_use, pids->max};
}

std::string Ki(int64_t bytes) { return std::to_string(bytes / 1024) + "Ki"; }
std::string Milli(int64_t m) {
  return m % 1000 == 0 ? std::to_string(m / 1000) : std::to_string(m) + "m";
}

}  // namespace

std::function<bool(const std::string&)> MakeNodeStatusPublisher(ipc::Context& ctx,
                                                                const std::string& run_dir,
                                                                NodeStoredCallback stored) {
  struct State {
    std::unique_ptr<status::StatusClient> client;
    std::string last_error;
  };
  auto state = std::make_shared<State>();
  return [&ctx, run_dir, state, stored](const std::string& json) {
    auto log = GetLogger("node");
    if (!state->client) {
      status::StatusClientOptions opts;
      opts.sender = ipc::ServiceId::Supervisor;
      opts.attempt_timeout = std::chrono::milliseconds(500);
      opts.deadline = std::chrono::milliseconds(1000);
      auto client = std::make_unique<status::StatusClient>(ctx, run_dir, opts);
      if (Status s = client->Connect(); !s.ok()) {
        if (state->last_error != s.message())
          log->warn("Failed to connect to statusd: {}", s.message());
        state->last_error = s.message();
        return false;
      }
      state->client = std::move(client);
    }
    auto r = state->client->SetNodeStatus(json);
    if (!r.ok()) {
      if (state->last_error != r.status().message()) {
        log->warn("Failed to send the node status to statusd: {}", r.status().message());
      }
      state->last_error = r.status().message();
      return false;
    }
    if (!state->last_error.empty()) log->info("the node status reaches statusd again");
    state->last_error.clear();
    if (stored) {
      status::NodeStatusRecord record;
      record.node_json = json;
      record.version = r->version;
      stored(record);
    }
    return true;
  };
}

NodeStatusManager::NodeStatusManager(const Clock& clock, NodeStatusOptions options,
                                     cri::RuntimeService* runtime, cri::ImageService* images)
    : clock_(clock), options_(std::move(options)), runtime_(runtime), images_(images) {}

NodeStatusManager::~NodeStatusManager() {
  RequestStop();
  if (thread_.joinable()) thread_.join();
}

void NodeStatusManager::RequestStop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
}

void NodeStatusManager::Start() {
  Refresh();
  thread_ = std::thread([this] { Loop(); });
}

void NodeStatusManager::SetServices(bool all_running, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  services_ok_ = all_running;
  services_why_ = why;
}

void NodeStatusManager::Loop() {
  MonoTime next_status = clock_.Now() + options_.status_period;
  // The status built by Start() goes out at the first runtime check.
  bool unpublished = true;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, options_.runtime_check_period, [this] { return stopping_.load(); });
    if (stopping_) break;
    lock.unlock();
    const bool was_ready = runtime_ready_.load();
    CheckRuntime();
    // A change of the runtime's readiness shows in the node's Ready condition at once.
    if (stopping_) break;
    if (clock_.Now() >= next_status || runtime_ready_.load() != was_ready) {
      Refresh();
      next_status = clock_.Now() + options_.status_period;
      unpublished = true;
    }
    if (unpublished && options_.publish) unpublished = !options_.publish(NodeJson());
    lock.lock();
  }
}

void NodeStatusManager::CheckRuntime() {
  bool ready = false, network = false;
  std::string error, version, network_error;
  if (runtime_ == nullptr) {
    error = "no container runtime configured (--runtime-endpoint)";
  } else {
    // The version is asked again only after a failed check (a runtime that came back may be
    // another one) and once a minute (one restarted between two checks); Status every time.
    std::optional<Result<runtime::v1::VersionResponse>> v;
    if (!runtime_ready_ || ++checks_since_version_ >= kVersionEvery) {
      checks_since_version_ = 0;
      v = runtime_->Version();
      if (stopping_) return;  // each call may take its whole timeout while the runtime hangs
    }
    auto st = runtime_->RuntimeStatus(false);
    if (v && !v->ok()) {
      error = "container runtime is down: " + v->status().message();
    } else if (!st.ok()) {
      error = (st.status().code() == StatusCode::kUnavailable ||
                       st.status().code() == StatusCode::kDeadlineExceeded
                   ? "container runtime is down: "
                   : "container runtime status check failed: ") +
              st.status().message();
    } else {
      if (v) version = (*v)->runtime_name() + "://" + (*v)->runtime_version();
      for (const auto& c : st->status().conditions()) {
        if (c.type() == "RuntimeReady") {
          ready = c.status();
          if (!ready) error = "container runtime not ready: " + c.reason() + ": " + c.message();
        }
      }
      network_error = cri::NetworkError(*st);
      network = network_error.empty();
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  runtime_ready_ = ready;
  runtime_error_ = error;
  network_ready_ = network;
  network_error_ = network_error;
  if (!version.empty()) runtime_version_ = version;
}

nlohmann::json NodeStatusManager::Condition(const std::string& type, bool status,
                                            const std::string& reason, const std::string& message,
                                            int64_t now) {
  auto& t = transitions_[type];
  if (t.second == 0 || t.first != status) {
    t = {status, now};
    if (options_.on_transition) options_.on_transition(type, status);
  }
  return {{"type", type},
          {"status", status ? "True" : "False"},
          {"reason", reason},
          {"message", message},
          {"lastHeartbeatTime", Time(now)},
          {"lastTransitionTime", Time(t.second)}};
}

void NodeStatusManager::Refresh() {
  CheckRuntime();
  const int64_t now = clock_.WallSeconds();
  NodeResources cap = ReadNodeCapacity();
  struct statvfs fs {};
  int64_t disk_total = 0, disk_avail = 0;
  if (statvfs(options_.root_dir.c_str(), &fs) == 0) {
    disk_total = static_cast<int64_t>(fs.f_blocks) * static_cast<int64_t>(fs.f_frsize);
    disk_avail = static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
  }
  // As the kubelet: capacity minus the reservations minus the hard eviction thresholds (the
  // pressure thresholds below: memory.available, nodefs.available).
  NodeResourceList capacity;
  capacity.cpu_milli = cap.cpu_milli;
  capacity.memory_bytes = cap.memory_bytes;
  capacity.ephemeral_storage_bytes = disk_total;
  NodeResourceList eviction;
  int64_t memory_min = 0, disk_min = 0;
  std::vector<pod::EvictionThreshold> hard;
  {
    std::lock_guard<std::mutex> lock(mu_);
    hard = options_.hard_eviction;
  }
  for (const auto& t : hard) {
    if (t.signal == pod::EvictionSignal::kMemoryAvailable)
      memory_min = t.MinAvailable(cap.memory_bytes);
    if (t.signal == pod::EvictionSignal::kNodeFsAvailable) disk_min = t.MinAvailable(disk_total);
  }
  eviction.memory_bytes = memory_min;
  eviction.ephemeral_storage_bytes = disk_min;
  NodeResourceList alloc =
      pod::AllocatableFrom(capacity, options_.system_reserved, options_.kube_reserved, eviction);

  nlohmann::json images = nlohmann::json::array();
  if (images_ != nullptr && runtime_ready_ && !stopping_) {
    auto list = images_->ListImages(cri::v1::ImageFilter());
    if (list.ok()) {
      for (const auto& img : *list) {
        nlohmann::json names = nlohmann::json::array();
        for (const auto& t : img.repo_tags()) names.push_back(t);
        for (const auto& d : img.repo_digests()) names.push_back(d);
        images.push_back({{"names", names}, {"sizeBytes", img.size()}});
      }
    }
  }
  utsname u{};
  uname(&u);
  const int64_t mem_avail = MemAvailable();
  auto [pids_used, pids_max] = Pids();

  std::lock_guard<std::mutex> lock(mu_);
  allocatable_ = alloc;
  nlohmann::json conditions = nlohmann::json::array();
  // As the kubelet: the node is not Ready while the runtime's network is not (host-network
  // pods run all the same; pod-network pods wait, see podworkerd's NetworkNotReady).
  const bool ready = runtime_ready_ && services_ok_ && network_ready_;
  std::string ready_msg = "nodelet is posting ready status";
  if (!runtime_ready_)
    ready_msg = runtime_error_;
  else if (!network_ready_)
    ready_msg = network_error_;
  else if (!services_ok_)
    ready_msg = services_why_;
  const bool mem_pressure = options_.pressure
                                ? options_.pressure("MemoryPressure")
                                : memory_min > 0 && mem_avail >= 0 && mem_avail < memory_min;
  const bool disk_pressure = options_.pressure
                                 ? options_.pressure("DiskPressure")
                                 : disk_total > 0 && disk_min > 0 && disk_avail < disk_min;
  const bool pid_pressure =
      options_.pressure ? options_.pressure("PIDPressure")
                        : static_cast<double>(pids_max - pids_used) <
                              options_.pid_available_min_fraction * static_cast<double>(pids_max);
  conditions.push_back(Condition(
      "MemoryPressure", mem_pressure,
      mem_pressure ? "KubeletHasInsufficientMemory" : "KubeletHasSufficientMemory",
      mem_pressure ? "node has memory pressure" : "nodelet has sufficient memory available", now));
  conditions.push_back(
      Condition("DiskPressure", disk_pressure,
                disk_pressure ? "KubeletHasDiskPressure" : "KubeletHasNoDiskPressure",
                disk_pressure ? "node has disk pressure" : "nodelet has no disk pressure", now));
  conditions.push_back(Condition(
      "PIDPressure", pid_pressure,
      pid_pressure ? "KubeletHasInsufficientPID" : "KubeletHasSufficientPID",
      pid_pressure ? "node has PID pressure" : "nodelet has sufficient PID available", now));
  conditions.push_back(
      Condition("Ready", ready, ready ? "KubeletReady" : "KubeletNotReady", ready_msg, now));

  node_ = {{"apiVersion", "v1"},
           {"kind", "Node"},
           {"metadata",
            {{"name", options_.node_name},
             {"labels",
              {{"kubernetes.io/hostname", options_.node_name},
               {"kubernetes.io/os", "linux"},
               {"kubernetes.io/arch", std::string(u.machine) == "x86_64" ? "amd64" : u.machine}}}}},
           {"status",
            {{"capacity",
              {{"cpu", Milli(cap.cpu_milli)},
               {"memory", Ki(cap.memory_bytes)},
               {"ephemeral-storage", Ki(disk_total)},
               {"pods", std::to_string(options_.max_pods)}}},
             {"allocatable",
              {{"cpu", Milli(alloc.cpu_milli)},
               {"memory", Ki(alloc.memory_bytes)},
               {"ephemeral-storage", Ki(alloc.ephemeral_storage_bytes)},
               {"pods", std::to_string(options_.max_pods)}}},
             {"conditions", conditions},
             {"addresses",
              {{{"type", "InternalIP"}, {"address", options_.node_ip}},
               {{"type", "Hostname"}, {"address", options_.node_name}}}},
             {"nodeInfo",
              {{"kubeletVersion", "nodelet-" + options_.version},
               {"containerRuntimeVersion", runtime_version_},
               {"kernelVersion", u.release},
               {"osImage", OsImage()},
               {"operatingSystem", "linux"},
               {"architecture", std::string(u.machine) == "x86_64" ? "amd64" : u.machine}}},
             {"images", images}}}};
}

std::string NodeStatusManager::NodeJson() const {
  std::lock_guard<std::mutex> lock(mu_);
  return JsonText(node_, 2);
}

void NodeStatusManager::SetHardEviction(std::vector<pod::EvictionThreshold> thresholds) {
  std::lock_guard<std::mutex> lock(mu_);
  options_.hard_eviction = std::move(thresholds);
}

NodeResourceList NodeStatusManager::Allocatable() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocatable_;
}

}  // namespace nodelet::supervisor
