// NodeStatusManager: the kubelet's runtime-up check and node status, in the supervisor.
//
// A thread checks the runtime every 5 s (CRI Status: RuntimeReady, NetworkReady; CRI Version)
// and rebuilds the node's status every 10 s: capacity and allocatable (CPU, memory, ephemeral
// storage of the root directory's filesystem, pods; allocatable = capacity minus
// --system-reserved and --kube-reserved), conditions Ready, MemoryPressure, DiskPressure and
// PIDPressure with reasons and transition times, node info (nodelet and runtime versions,
// kernel, OS), addresses (InternalIP: --node-ip or the chosen one; Hostname) and the images on
// the node. The result is a v1 Node object in JSON, for `nodeletctl node` and /node. As the
// kubelet's, Ready is False while the runtime's NetworkReady is (with the runtime's reason and
// message); host-network pods run then all the same.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "lib/common/clock.h"
#include "lib/common/status.h"
#include "lib/cri/runtime_service.h"
#include "lib/ipc/sockets.h"
#include "lib/pod/eviction.h"
#include "lib/pod/node_resources.h"
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
  // Called from the manager's thread with the node's JSON after each periodic rebuild (and
  // again at every runtime check while it returns false): the supervisor hands it to statusd,
  // and then to the status sinks. May be empty.
  std::function<bool(const std::string& node_json)> publish;
  // Called from the manager's thread when a condition is first set and each time its status
  // changes (for the node events: node_events.h). May be empty.
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
  // configured" and Ready is false. `clock` paces the status and stamps its times.
  NodeStatusManager(const Clock& clock, NodeStatusOptions options, cri::RuntimeService* runtime,
                    cri::ImageService* images);
  ~NodeStatusManager() override;
  void Start();
  // Asks the thread to stop without waiting for it: it makes no new runtime call, so the
  // destructor's join waits at most for the call in flight (the 2 s query timeout).
  void RequestStop();
  // From the supervisor's loop: whether every service is RUNNING (and if not, which is not).
  void SetServices(bool all_running, const std::string& why);
  // Recomputes now (the thread does it periodically).
  void Refresh();

  std::string NodeJson() const override;
  // A reloaded --eviction-hard: allocatable leaves its thresholds out from the next refresh.
  void SetHardEviction(std::vector<pod::EvictionThreshold> thresholds);
  // Allocatable, for admission.
  NodeResourceList Allocatable() const;
  bool runtime_ready() const { return runtime_ready_.load(); }

 private:
  void Loop();
  void CheckRuntime();
  nlohmann::json Condition(const std::string& type, bool status, const std::string& reason,
                           const std::string& message, int64_t now);

  const Clock& clock_;
  NodeStatusOptions options_;
  cri::RuntimeService* runtime_;
  cri::ImageService* images_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> stopping_{false};
  bool services_ok_ = false;
  std::string services_why_ = "services are starting";
  std::string runtime_error_ = "not checked yet";
  bool network_ready_ = false;
  std::string network_error_;
  std::string runtime_version_;
  // Runtime checks since the runtime's version was last asked (CheckRuntime, its thread only).
  int checks_since_version_ = 0;
  std::atomic<bool> runtime_ready_{false};
  // type -> (status, last transition)
  std::map<std::string, std::pair<bool, int64_t>> transitions_;
  nlohmann::json node_;
  NodeResourceList allocatable_;
  std::thread thread_;
};

}  // namespace nodelet::supervisor
