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
#include "lib/pod/downward_api.h"
#include "lib/pod/quantity.h"
#include "lib/stats/usage.h"
#include "lib/status/status_client.h"

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

NodeStatusManager::NodeStatusManager(EventLoop& loop, NodeStatusOptions options,
                                     cri::RuntimeService* runtime, cri::ImageService* images)
    : clock_(loop.clock()),
      options_(std::move(options)),
      runtime_(runtime),
      images_(images),
      timer_(loop.AddTimer([this] { Check(); })),
      executor_(loop, 1) {}

NodeStatusManager::~NodeStatusManager() {
  stopping_ = true;
  executor_.Stop();
}

void NodeStatusManager::RequestStop() {
  stopping_ = true;
  timer_.Cancel();
}

void NodeStatusManager::Start() {
  ApplyCheck(CheckRuntime(AskVersion()));
  Rebuild(ReadNode(runtime_ready_));
  next_status_ = clock_.Now() + options_.status_period;
  unpublished_ = true;
  timer_.ArmAfter(options_.runtime_check_period);
}

void NodeStatusManager::SetServices(bool all_running, const std::string& why) {
  services_ok_ = all_running;
  services_why_ = why;
}

bool NodeStatusManager::AskVersion() {
  // The version is asked again only after a failed check (a runtime that came back may be
  // another one) and once a minute (one restarted between two checks); Status every time.
  if (runtime_ == nullptr) return false;
  if (!runtime_ready_ || ++checks_since_version_ >= kVersionEvery) {
    checks_since_version_ = 0;
    return true;
  }
  return false;
}

void NodeStatusManager::Check() {
  if (stopping_ || checking_) return;
  checking_ = true;
  const bool ask_version = AskVersion();
  const bool was_ready = runtime_ready_;
  const bool status_due = clock_.Now() >= next_status_;
  auto check = std::make_shared<RuntimeCheck>();
  auto node = std::make_shared<std::optional<NodeReading>>();
  executor_.Submit(
      [this, ask_version, was_ready, status_due, check, node] {
        *check = CheckRuntime(ask_version);
        // A change of the runtime's readiness shows in the node's Ready condition at once.
        if (stopping_ || (!status_due && check->ready == was_ready)) return;
        *node = ReadNode(check->ready);
      },
      [this, check, node] {
        if (stopping_) {
          checking_ = false;
          return;
        }
        ApplyCheck(*check);
        if (node->has_value()) {
          Rebuild(**node);
          next_status_ = clock_.Now() + options_.status_period;
          unpublished_ = true;
        }
        if (!unpublished_ || !options_.publish) {
          CheckDone();
          return;
        }
        auto sent = std::make_shared<bool>(false);
        executor_.Submit(
            // Blocking: statusd's reply, within the publisher's deadline.
            [this, json = NodeJson(), sent] { *sent = options_.publish(json); },
            [this, sent] {
              unpublished_ = !*sent;
              CheckDone();
            });
      });
}

void NodeStatusManager::CheckDone() {
  checking_ = false;
  if (!stopping_) timer_.ArmAfter(options_.runtime_check_period);
}

NodeStatusManager::RuntimeCheck NodeStatusManager::CheckRuntime(bool ask_version) const {
  RuntimeCheck r;
  if (runtime_ == nullptr) {
    r.error = "no container runtime configured (--runtime-endpoint)";
    return r;
  }
  std::optional<Result<runtime::v1::VersionResponse>> v;
  if (ask_version) {
    v = runtime_->Version();
    if (stopping_) return r;  // each call may take its whole timeout while the runtime hangs
  }
  auto st = runtime_->RuntimeStatus(false);
  if (v && !v->ok()) {
    r.error = "container runtime is down: " + v->status().message();
  } else if (!st.ok()) {
    r.error = (st.status().code() == StatusCode::kUnavailable ||
                       st.status().code() == StatusCode::kDeadlineExceeded
                   ? "container runtime is down: "
                   : "container runtime status check failed: ") +
              st.status().message();
  } else {
    if (v) r.version = (*v)->runtime_name() + "://" + (*v)->runtime_version();
    for (const auto& c : st->status().conditions()) {
      if (c.type() == "RuntimeReady") {
        r.ready = c.status();
        if (!r.ready) r.error = "container runtime not ready: " + c.reason() + ": " + c.message();
      }
    }
    r.network_error = cri::NetworkError(*st);
    r.network = r.network_error.empty();
  }
  return r;
}

void NodeStatusManager::ApplyCheck(const RuntimeCheck& check) {
  runtime_ready_ = check.ready;
  runtime_error_ = check.error;
  network_ready_ = check.network;
  network_error_ = check.network_error;
  if (!check.version.empty()) runtime_version_ = check.version;
}

NodeStatusManager::NodeReading NodeStatusManager::ReadNode(bool runtime_ready) const {
  NodeReading r;
  const pod::NodeAllocatable cap = pod::ReadNodeAllocatable();
  r.cpu_milli = cap.cpu_milli;
  r.memory_bytes = cap.memory_bytes;
  struct statvfs fs {};
  if (statvfs(options_.root_dir.c_str(), &fs) == 0) {
    r.disk_total = static_cast<int64_t>(fs.f_blocks) * static_cast<int64_t>(fs.f_frsize);
    r.disk_avail = static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
  }
  if (images_ != nullptr && runtime_ready && !stopping_) {
    auto list = images_->ListImages(cri::v1::ImageFilter());
    if (list.ok()) {
      for (const auto& img : *list) {
        nlohmann::json names = nlohmann::json::array();
        for (const auto& t : img.repo_tags()) names.push_back(t);
        for (const auto& d : img.repo_digests()) names.push_back(d);
        r.images.push_back({{"names", names}, {"sizeBytes", img.size()}});
      }
    }
  }
  utsname u{};
  uname(&u);
  r.machine = u.machine;
  r.release = u.release;
  r.os_image = OsImage();
  r.mem_avail = MemAvailable();
  std::tie(r.pids_used, r.pids_max) = Pids();
  return r;
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

void NodeStatusManager::Rebuild(const NodeReading& n) {
  const int64_t now = clock_.WallSeconds();
  // As the kubelet: capacity minus the reservations minus the hard eviction thresholds (the
  // pressure thresholds below: memory.available, nodefs.available).
  NodeResourceList capacity;
  capacity.cpu_milli = n.cpu_milli;
  capacity.memory_bytes = n.memory_bytes;
  capacity.ephemeral_storage_bytes = n.disk_total;
  NodeResourceList eviction;
  int64_t memory_min = 0, disk_min = 0;
  for (const auto& t : options_.hard_eviction) {
    if (t.signal == pod::EvictionSignal::kMemoryAvailable)
      memory_min = t.MinAvailable(n.memory_bytes);
    if (t.signal == pod::EvictionSignal::kNodeFsAvailable) disk_min = t.MinAvailable(n.disk_total);
  }
  eviction.memory_bytes = memory_min;
  eviction.ephemeral_storage_bytes = disk_min;
  NodeResourceList alloc =
      pod::AllocatableFrom(capacity, options_.system_reserved, options_.kube_reserved, eviction);

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
                                : memory_min > 0 && n.mem_avail >= 0 && n.mem_avail < memory_min;
  const bool disk_pressure = options_.pressure
                                 ? options_.pressure("DiskPressure")
                                 : n.disk_total > 0 && disk_min > 0 && n.disk_avail < disk_min;
  const bool pid_pressure =
      options_.pressure ? options_.pressure("PIDPressure")
                        : static_cast<double>(n.pids_max - n.pids_used) <
                              options_.pid_available_min_fraction * static_cast<double>(n.pids_max);
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

  const std::string arch = n.machine == "x86_64" ? "amd64" : n.machine;
  nlohmann::json node = {{"apiVersion", "v1"},
                         {"kind", "Node"},
                         {"metadata",
                          {{"name", options_.node_name},
                           {"labels",
                            {{"kubernetes.io/hostname", options_.node_name},
                             {"kubernetes.io/os", "linux"},
                             {"kubernetes.io/arch", arch}}}}},
                         {"status",
                          {{"capacity",
                            {{"cpu", Milli(n.cpu_milli)},
                             {"memory", Ki(n.memory_bytes)},
                             {"ephemeral-storage", Ki(n.disk_total)},
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
                             {"kernelVersion", n.release},
                             {"osImage", n.os_image},
                             {"operatingSystem", "linux"},
                             {"architecture", arch}}},
                           {"images", n.images}}}};
  std::lock_guard<std::mutex> lock(mu_);
  allocatable_ = alloc;
  node_ = std::move(node);
}

std::string NodeStatusManager::NodeJson() const {
  std::lock_guard<std::mutex> lock(mu_);
  return JsonText(node_, 2);
}

void NodeStatusManager::SetHardEviction(std::vector<pod::EvictionThreshold> thresholds) {
  options_.hard_eviction = std::move(thresholds);
}

NodeResourceList NodeStatusManager::Allocatable() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocatable_;
}

}  // namespace nodelet::supervisor
