// NodeStatusManager: the kubelet's runtime-up check and node status, in the supervisor.
//
// Timers on the supervisor's loop check the runtime every 5 s (CRI Status: RuntimeReady,
// NetworkReady; CRI Version) and rebuild the node's status every 10 s: capacity and allocatable
// (CPU, memory, ephemeral storage of the root directory's filesystem, pods; allocatable =
// capacity minus --system-reserved and --kube-reserved), conditions Ready, MemoryPressure,
// DiskPressure and PIDPressure with reasons and transition times, node info (nodelet and runtime
// versions, kernel, OS), addresses (InternalIP: --node-ip or the chosen one; Hostname) and the
// images on the node. The CRI calls, the node's files and the publishing run on a one-thread
// executor; what they return is applied on the loop. The result is a v1 Node object in JSON,
// for `nodeletctl node` and /node (read from any thread). As the kubelet's, Ready is False
// while the runtime's NetworkReady is (with the runtime's reason and message); host-network
// pods run then all the same.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "lib/common/clock.h"
#include "lib/common/status.h"
#include "lib/cri/runtime_service.h"
#include "lib/ipc/sockets.h"
#include "lib/pod/eviction.h"
#include "lib/pod/node_resources.h"
#include "lib/service/blocking_executor.h"
#include "lib/service/event_loop.h"
#include "lib/status/pod_status.h"
#include "supervisor/service_control.h"

namespace nodelet::supervisor {

using pod::NodeResourceList;
using pod::ParseReservation;

// The runtime's version is asked at every this many runtime checks (and after a failed one).
inline constexpr int kVersionEvery = 12;

struct NodeStatusOptions {
  std::string node_name;
  std::string node_ip;  // status.addresses InternalIP (lib/common/node_ip.h)
  std::string root_dir;
  int max_pods = 110;
  NodeResourceList system_reserved;
  NodeResourceList kube_reserved;
  std::string version;  // nodelet's
  std::chrono::milliseconds runtime_check_period{5000};
  std::chrono::milliseconds status_period{10000};
  // The hard eviction thresholds (--eviction-hard): allocatable leaves out their
  // memory.available and nodefs.available, as the kubelet's.
  std::vector<pod::EvictionThreshold> hard_eviction = pod::DefaultHardThresholds();
  // MemoryPressure, DiskPressure and PIDPressure as the eviction manager sees them (it applies
  // the pressure transition period); empty: computed here against `hard_eviction` at each
  // rebuild, and PIDPressure under `pid_available_min_fraction` of pid_max left.
  std::function<bool(std::string_view condition)> pressure;
  double pid_available_min_fraction = 0.10;
  // Called on the manager's executor thread with the node's JSON after each periodic rebuild
  // (and again at every runtime check while it returns false): the supervisor hands it to
  // statusd, and then to the status sinks. May be empty.
  std::function<bool(const std::string& node_json)> publish;
  // Called on the loop's thread (or Start's) when a condition is first set and each time its
  // status changes (for the node events: node_events.h). May be empty.
  std::function<void(const std::string& type, bool status)> on_transition;
};

// Called with the node's status as statusd stored it (its version), for the status sinks.
using NodeStoredCallback = std::function<void(const status::NodeStatusRecord&)>;

// A publisher for NodeStatusOptions::publish that sends the node's status to statusd
// (SetNodeStatus) in `run_dir`, over a client made on first use on the calling thread, and
// then to `stored` when set. Returns false, to be retried, while statusd does not answer; logs
// each new failure once.
std::function<bool(const std::string&)> MakeNodeStatusPublisher(ipc::Context& ctx,
                                                                const std::string& run_dir,
                                                                NodeStoredCallback stored = {});

class NodeStatusManager : public NodeView {
 public:
  // `runtime` and `images` may be null (no runtime endpoint): the runtime is then "not
  // configured" and Ready is false. The loop's clock paces the status and stamps its times.
  NodeStatusManager(EventLoop& loop, NodeStatusOptions options, cri::RuntimeService* runtime,
                    cri::ImageService* images);
  // Waits for the work in flight (at most one runtime call, the 2 s query timeout, once
  // RequestStop was called).
  ~NodeStatusManager() override;
  NodeStatusManager(const NodeStatusManager&) = delete;
  NodeStatusManager& operator=(const NodeStatusManager&) = delete;
  // Builds the first status on the calling thread (the supervisor's setup, before its loop
  // runs: admission needs the allocatable at once), then arms the runtime check. It goes out at
  // the first check.
  void Start();
  // On the loop: no new runtime call or rebuild starts; the call in flight is not waited for.
  void RequestStop();
  // On the loop: whether every service is RUNNING (and if not, which is not).
  void SetServices(bool all_running, const std::string& why);

  // Any thread.
  std::string NodeJson() const override;
  // On the loop: a reloaded --eviction-hard: allocatable leaves its thresholds out from the
  // next rebuild.
  void SetHardEviction(std::vector<pod::EvictionThreshold> thresholds);
  // Allocatable, for admission. Any thread.
  NodeResourceList Allocatable() const;
  bool runtime_ready() const { return runtime_ready_.load(); }
  // On the loop: whether a check (or a publishing) is on the executor.
  bool checking() const { return checking_; }

 private:
  // What a runtime check found.
  struct RuntimeCheck {
    bool ready = false;
    std::string error;
    bool network = false;
    std::string network_error;
    std::string version;  // when asked and answered
  };
  // The node as a rebuild reads it.
  struct NodeReading {
    int64_t cpu_milli = 0, memory_bytes = 0;  // the online CPUs and MemTotal
    int64_t disk_total = 0, disk_avail = 0;
    nlohmann::json images = nlohmann::json::array();
    std::string machine, release, os_image;
    int64_t mem_avail = -1;
    int64_t pids_used = 0, pids_max = 0;
  };

  // Off the loop: CRI Version (when `ask_version`) and Status.
  RuntimeCheck CheckRuntime(bool ask_version) const;
  // Off the loop: the node's figures, and its images when the runtime is ready.
  NodeReading ReadNode(bool runtime_ready) const;
  // On the loop.
  bool AskVersion();
  void ApplyCheck(const RuntimeCheck& check);
  void Rebuild(const NodeReading& node);
  // The timer's: a check, a rebuild when due (or when the runtime's readiness changed), then
  // the publishing while it has not gone out.
  void Check();
  // The end of a check: the next one a period later.
  void CheckDone();
  nlohmann::json Condition(const std::string& type, bool status, const std::string& reason,
                           const std::string& message, int64_t now);

  const Clock& clock_;
  NodeStatusOptions options_;
  cri::RuntimeService* runtime_;
  cri::ImageService* images_;
  // Read by the work between its calls.
  std::atomic<bool> stopping_{false};
  // On the loop's thread.
  bool services_ok_ = false;
  std::string services_why_ = "services are starting";
  std::string runtime_error_ = "not checked yet";
  bool network_ready_ = false;
  std::string network_error_;
  std::string runtime_version_;
  // Runtime checks since the runtime's version was last asked.
  int checks_since_version_ = 0;
  MonoTime next_status_{};
  bool unpublished_ = true;  // the status last built has not reached `publish`
  bool checking_ = false;
  // type -> (status, last transition)
  std::map<std::string, std::pair<bool, int64_t>> transitions_;
  std::atomic<bool> runtime_ready_{false};
  // What other threads read.
  mutable std::mutex mu_;
  nlohmann::json node_;
  NodeResourceList allocatable_;
  EventLoop::Timer timer_;
  // Last: stopped (its thread joined) before the members its work and continuations use go.
  BlockingExecutor executor_;
};

}  // namespace nodelet::supervisor
