// ProbeManager: podworkerd's liveness, readiness and startup probes (the kubelet's prober).
//
// One probe per (container instance, kind), run at its period after its initial delay: exec
// through CRI ExecSync under the probe's timeout (plus the CRI call's own gRPC deadline),
// httpGet through DoHttpProbe (http_probe.h: one deadline for the whole attempt, a 10 KiB body
// cap, the kubelet's redirect rules) and tcpSocket through lib/http's DialTcp (connecting is the
// whole check) under the probe's timeout. The schedule is a timer on podworkerd's loop: when a
// probe is due, its attempt runs on the manager's executor, and its result is recorded back on
// the loop, where the probe's next time is set. No probe can hold back another: the executor has
// at least one thread per registered probe (resized in Ensure and RemovePod), and each probe
// has at most one attempt in flight, so a due probe always finds a free thread however many
// endpoints hang (each for at most its timeoutSeconds). successThreshold consecutive successes
// make a probe pass, failureThreshold consecutive failures make it fail. A startup probe, while
// it has not passed, holds the other two back. Results are read by the pod syncer (is this
// container ready? did its liveness fail?) from any thread; a change of result is queued for the
// loop, which syncs the pod (a failed liveness restarts the container; readiness changes the
// status).
//
// Readiness survives restarts: the service seeds a container's readiness from its last status
// in statusd, so a podworkerd or supervisor restart does not flip a ready container to unready.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "lib/common/clock.h"
#include "lib/common/histogram.h"
#include "lib/common/status.h"
#include "lib/cri/runtime_service.h"
#include "lib/pod/pod.h"
#include "lib/service/blocking_executor.h"
#include "lib/service/event_loop.h"

namespace nodelet::podworkerd {

// An exec probe's output kept in its message at most, as the kubelet keeps (10 KiB).
inline constexpr size_t kMaxProbeOutputBytes = 10 * 1024;

enum class ProbeKind { kLiveness, kReadiness, kStartup };

// One probe attempt: success or failure, with a message for failures.
struct ProbeOutcome {
  bool success = false;
  std::string message;
};

const char* ProbeKindName(ProbeKind kind);  // "Liveness", "Readiness", "Startup" (the kubelet's)

// A port given by number or by the name of one of the container's ports.
std::optional<int> ResolvePort(const pod::IntOrString& port, const pod::Container& container);
// One httpGet (of a probe or a hook) to `default_host` unless it names a host, within `timeout`
// (DoHttpProbe: 200-399 is a success).
ProbeOutcome RunHttpGet(const Clock& clock, const pod::HttpGetAction& http_get,
                        const pod::Container& container, const std::string& default_host,
                        std::chrono::milliseconds timeout);
// Runs one probe attempt against a container (exec / httpGet / tcpSocket). `host` is the pod's
// IP (127.0.0.1 for host-network pods) unless the probe names a host. `clock` times an httpGet
// and a tcpSocket's connect.
ProbeOutcome RunProbe(const Clock& clock, cri::RuntimeService& runtime, const pod::Probe& probe,
                      const pod::Container& container, const std::string& container_id,
                      const std::string& host);

class ProbeManager {
 public:
  // The loop's clock schedules the probes (periods, initial delays) and times their attempts.
  // `on_change` is called on the loop's thread when TakeChanged() has something after it was
  // empty. `min_threads` stay up while idle; more are started as probes are registered. Ensure,
  // RemovePod and SeedReady are called on the loop's thread; the readers from any thread.
  ProbeManager(EventLoop& loop, cri::RuntimeService& runtime, std::function<void()> on_change,
               int min_threads = 2);
  // Waits for the attempts in flight (each ends by its own deadline).
  ~ProbeManager();

  // Makes sure the probes of a running container instance exist (started at `started_at`).
  // Probes of other instances of the same container stop.
  void Ensure(const std::string& pod_uid, const pod::Pod& pod, const pod::Container& container,
              const std::string& container_id, const std::string& host);
  // Drops every probe of a pod (it terminated).
  void RemovePod(const std::string& pod_uid);
  // Readiness carried over from the previous podworkerd (statusd's last status).
  void SeedReady(const std::string& container_id, bool ready);

  // Ready: running, started (startup probe passed or none) and readiness passed (or none).
  // A container whose probes are not registered yet is ready only if it has neither a
  // readiness nor a startup probe (or its readiness was carried over from statusd).
  bool Ready(const std::string& container_id, bool has_readiness_probe,
             bool has_startup_probe) const;
  // The liveness probe of this instance has failed (the container must be restarted).
  bool LivenessFailed(const std::string& container_id) const;
  // The probe whose failure means this instance must be killed and restarted as its
  // restartPolicy says: a failed liveness probe, or a startup probe that reached its
  // failureThreshold before it ever passed (the kubelet's rule for both). Neither is probed
  // again until the container is restarted (a new instance).
  std::optional<ProbeKind> FailedToRestart(const std::string& container_id) const;

  // Pods whose probe results changed since the last call (main loop).
  std::set<std::string> TakeChanged();

  // Metrics: per probe kind, the duration of each attempt (prober_probe_duration_seconds) and
  // the attempts by result (prober_probe_total), as heartbeat counters:
  //   probe_duration_seconds_<kind>_bucket:LE, ..._sum_us, ..._count   (lib/common/histogram.h)
  //   probe_total:<kind>:<successful|failed>
  std::vector<std::pair<std::string, uint64_t>> Counters() const;
  // Threads of the executor now (tests).
  size_t threads() const;

 private:
  struct Probe {
    std::string pod_uid;
    std::string container_id;
    ProbeKind kind;
    pod::Probe spec;
    pod::Container container;
    std::string host;
    MonoTime next;
    int successes = 0, failures = 0;
    std::optional<bool> result;  // nullopt until a threshold is reached
    bool running = false;        // an attempt is in flight
  };
  using Key = std::pair<std::string, ProbeKind>;  // container id, kind

  // Starts the attempts that are due and arms the timer for the next one. On the loop.
  void Schedule();
  // The executor's size: one thread per probe, never fewer than the minimum. Under mu_.
  void ResizePoolLocked();
  void Record(const Key& key, const ProbeOutcome& outcome, std::chrono::microseconds took);
  bool StartedLocked(const std::string& container_id) const;

  cri::RuntimeService& runtime_;
  const Clock& clock_;
  std::function<void()> on_change_;
  size_t min_threads_;
  // Guards what the readers see from the pod workers' threads; the schedule is the loop's.
  mutable std::mutex mu_;
  std::map<Key, Probe> probes_;
  std::map<std::string, bool> seeded_;  // container id -> ready
  std::set<std::string> changed_;
  // Metrics, by kind (index: ProbeKind).
  Histogram durations_[3] = {Histogram(Histogram::LatencyBuckets()),
                             Histogram(Histogram::LatencyBuckets()),
                             Histogram(Histogram::LatencyBuckets())};
  uint64_t successes_[3] = {0, 0, 0}, failures_[3] = {0, 0, 0};
  EventLoop::Timer timer_;
  // Last: stopped (its attempts waited for) before what they use goes.
  BlockingExecutor executor_;
};

}  // namespace nodelet::podworkerd
