#include "svc-podworkerd/probe_manager.h"

#include <algorithm>
#include <cctype>
#include <optional>

#include "lib/common/unique_fd.h"
#include "lib/common/utf8.h"
#include "lib/http/dial.h"
#include "svc-podworkerd/grpc_probe.h"
#include "svc-podworkerd/http_probe.h"

namespace nodelet::podworkerd {
namespace {

// A tcpSocket probe: the connection is all it checks.
ProbeOutcome TcpProbe(const Clock& clock, const std::string& host, int port,
                      std::chrono::milliseconds timeout) {
  http::Error error;
  UniqueFd fd = http::DialTcp(clock, host, port, clock.Now() + timeout, {}, error);
  if (fd) return {true, ""};
  if (error.unresolved) return {false, "cannot resolve " + host};
  if (error.kind != http::ErrorKind::kConnect) return {false, "dial tcp: timeout"};
  return {false, "dial tcp: " + error.dial_reason};
}

}  // namespace

std::optional<int> ResolvePort(const pod::IntOrString& port, const pod::Container& c) {
  if (!port.is_string) return port.int_value;
  for (const auto& p : c.ports) {
    if (p.name == port.str_value) return p.container_port;
  }
  return std::nullopt;
}

ProbeOutcome RunHttpGet(const Clock& clock, const pod::HttpGetAction& h,
                        const pod::Container& container, const std::string& default_host,
                        std::chrono::milliseconds timeout) {
  auto port = ResolvePort(h.port, container);
  if (!port) return {false, "no port named " + h.port.ToString()};
  if (!h.scheme.empty() && h.scheme != pod::kSchemeHttp && h.scheme != pod::kSchemeHttps) {
    return {false, "scheme " + h.scheme + " is not supported"};
  }
  HttpProbeRequest req;
  req.tls = h.scheme == pod::kSchemeHttps;
  req.host = h.host.empty() ? default_host : h.host;
  req.port = *port;
  req.path = h.path.empty() ? "/" : h.path;
  for (const auto& hh : h.http_headers) req.headers.emplace_back(hh.name, hh.value);
  req.timeout = timeout;
  HttpProbeResult r = DoHttpProbe(clock, req);
  return {r.success, r.message};
}

ProbeOutcome RunProbe(const Clock& clock, cri::RuntimeService& runtime, const pod::Probe& probe,
                      const pod::Container& container, const std::string& container_id,
                      const std::string& default_host) {
  const auto timeout = std::chrono::seconds(std::max(1, probe.timeout_seconds));
  if (probe.exec) {
    auto r = runtime.ExecSync(container_id, probe.exec->command, timeout.count());
    if (!r.ok()) return {false, r.status().message()};
    if (r->exit_code() == 0) return {true, ""};
    // The container's own bytes: 10 KiB of them as the kubelet keeps, valid UTF-8.
    return {false, "command exited " + std::to_string(r->exit_code()) + ": " +
                       ValidUtf8(CutUtf8(r->stdout() + r->stderr(), kMaxProbeOutputBytes))};
  }
  if (probe.http_get) {
    return RunHttpGet(clock, *probe.http_get, container, default_host,
                      std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
  }
  if (probe.grpc) {
    return GrpcProbe(default_host, probe.grpc->port, probe.grpc->service,
                     std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
  }
  if (probe.tcp_socket) {
    auto port = ResolvePort(probe.tcp_socket->port, container);
    if (!port) return {false, "no port named " + probe.tcp_socket->port.ToString()};
    return TcpProbe(clock, probe.tcp_socket->host.empty() ? default_host : probe.tcp_socket->host,
                    *port, std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
  }
  return {false, "probe has no handler"};
}

const char* ProbeKindName(ProbeKind kind) {
  switch (kind) {
    case ProbeKind::kLiveness:
      return "Liveness";
    case ProbeKind::kReadiness:
      return "Readiness";
    case ProbeKind::kStartup:
      return "Startup";
  }
  return "?";
}

ProbeManager::ProbeManager(EventLoop& loop, cri::RuntimeService& runtime,
                           std::function<void()> on_change, int min_threads)
    : runtime_(runtime),
      clock_(loop.clock()),
      on_change_(std::move(on_change)),
      min_threads_(static_cast<size_t>(std::max(1, min_threads))),
      timer_(loop.AddTimer([this] { Schedule(); })),
      executor_(loop, static_cast<int>(min_threads_)) {}

// An attempt in flight ends by its own deadline (timeoutSeconds, or the CRI call's).
ProbeManager::~ProbeManager() { executor_.Stop(); }

void ProbeManager::ResizePoolLocked() {
  executor_.Resize(static_cast<int>(std::max(min_threads_, probes_.size())));
}

size_t ProbeManager::threads() const { return executor_.threads(); }

std::vector<std::pair<std::string, uint64_t>> ProbeManager::Counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<std::string, uint64_t>> out;
  for (int k = 0; k < 3; ++k) {
    std::string kind = ProbeKindName(static_cast<ProbeKind>(k));
    for (auto& c : kind) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    durations_[k].Export("probe_duration_seconds_" + kind, out);
    out.emplace_back("probe_total:" + kind + ":successful", successes_[k]);
    out.emplace_back("probe_total:" + kind + ":failed", failures_[k]);
  }
  out.emplace_back("probe_threads", executor_.threads());
  return out;
}

void ProbeManager::Ensure(const std::string& pod_uid, const pod::Pod& pod,
                          const pod::Container& container, const std::string& container_id,
                          const std::string& host) {
  (void)pod;
  std::lock_guard<std::mutex> lock(mu_);
  // Called at every sync of the pod: most calls change nothing and cost no schedule.
  bool added = false, removed = false;
  // Other instances of this container (its earlier runs) are not probed any more.
  for (auto it = probes_.begin(); it != probes_.end();) {
    const Probe& p = it->second;
    if (p.pod_uid == pod_uid && p.container.name == container.name &&
        p.container_id != container_id) {
      it = probes_.erase(it);
      removed = true;
    } else {
      ++it;
    }
  }
  auto add = [&](ProbeKind kind, const std::optional<pod::Probe>& spec) {
    if (!spec) return;
    Key key{container_id, kind};
    if (probes_.count(key)) return;
    added = true;
    Probe p;
    p.pod_uid = pod_uid;
    p.container_id = container_id;
    p.kind = kind;
    p.spec = *spec;
    p.container = container;
    p.host = host;
    p.next = clock_.Now() + std::chrono::seconds(spec->initial_delay_seconds);
    // Readiness carried over from before a restart: no flip to unready while it is re-probed.
    if (kind == ProbeKind::kReadiness) {
      auto s = seeded_.find(container_id);
      if (s != seeded_.end()) p.result = s->second;
    }
    probes_[key] = std::move(p);
  };
  add(ProbeKind::kStartup, container.startup_probe);
  add(ProbeKind::kLiveness, container.liveness_probe);
  add(ProbeKind::kReadiness, container.readiness_probe);
  if (added || removed) ResizePoolLocked();
  if (added) timer_.ArmAt(clock_.Now());  // Schedule, once this call is done
}

void ProbeManager::RemovePod(const std::string& pod_uid) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t before = probes_.size();
  for (auto it = probes_.begin(); it != probes_.end();) {
    it = it->second.pod_uid == pod_uid ? probes_.erase(it) : std::next(it);
  }
  // Threads beyond what the probes left need end; a removal makes no other probe due.
  if (probes_.size() != before) ResizePoolLocked();
}

void ProbeManager::SeedReady(const std::string& container_id, bool ready) {
  std::lock_guard<std::mutex> lock(mu_);
  seeded_[container_id] = ready;
}

bool ProbeManager::StartedLocked(const std::string& container_id) const {
  auto it = probes_.find({container_id, ProbeKind::kStartup});
  return it == probes_.end() || it->second.result.value_or(false);
}

bool ProbeManager::Ready(const std::string& container_id, bool has_readiness_probe,
                         bool has_startup_probe) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto seeded = seeded_.find(container_id);
  if (seeded != seeded_.end() && !probes_.count({container_id, ProbeKind::kReadiness})) {
    return seeded->second;  // carried over, until this incarnation has probed it
  }
  const bool startup_registered = probes_.count({container_id, ProbeKind::kStartup}) != 0;
  const bool started = has_startup_probe ? startup_registered && StartedLocked(container_id) : true;
  if (!started) return false;
  auto it = probes_.find({container_id, ProbeKind::kReadiness});
  if (it == probes_.end()) return !has_readiness_probe;
  return it->second.result.value_or(false);
}

bool ProbeManager::LivenessFailed(const std::string& container_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = probes_.find({container_id, ProbeKind::kLiveness});
  return it != probes_.end() && it->second.result.has_value() && !*it->second.result;
}

std::optional<ProbeKind> ProbeManager::FailedToRestart(const std::string& container_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (ProbeKind kind : {ProbeKind::kStartup, ProbeKind::kLiveness}) {
    auto it = probes_.find({container_id, kind});
    if (it != probes_.end() && it->second.result.has_value() && !*it->second.result) return kind;
  }
  return std::nullopt;
}

std::set<std::string> ProbeManager::TakeChanged() {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string> out;
  out.swap(changed_);
  return out;
}

void ProbeManager::Record(const Key& key, const ProbeOutcome& outcome,
                          std::chrono::microseconds took) {
  bool tell = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int k = static_cast<int>(key.second);
    durations_[k].Observe(took);
    ++(outcome.success ? successes_[k] : failures_[k]);
    auto it = probes_.find(key);
    if (it == probes_.end()) return;  // removed meanwhile
    Probe& p = it->second;
    p.running = false;
    p.next = clock_.Now() + std::chrono::seconds(std::max(1, p.spec.period_seconds));
    std::optional<bool> before = p.result;
    if (outcome.success) {
      p.failures = 0;
      if (++p.successes >= std::max(1, p.spec.success_threshold)) p.result = true;
    } else {
      p.successes = 0;
      if (++p.failures >= std::max(1, p.spec.failure_threshold)) p.result = false;
    }
    if (p.result != before) {
      // The owner is told once per batch: when the set it takes was empty.
      tell = changed_.empty();
      changed_.insert(p.pod_uid);
    }
  }
  if (tell && on_change_) on_change_();
}

void ProbeManager::Schedule() {
  struct Attempt {
    Key key;
    pod::Probe spec;
    pod::Container container;
    std::string host;
  };
  std::vector<Attempt> due;
  std::optional<MonoTime> next_wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const MonoTime now = clock_.Now();
    for (auto& [key, p] : probes_) {
      if (p.running) continue;
      if (p.kind != ProbeKind::kStartup && !StartedLocked(p.container_id)) continue;
      // A liveness probe that failed waits for the container's restart (a new instance).
      if (p.kind == ProbeKind::kLiveness && p.result.has_value() && !*p.result) continue;
      // A startup probe is done once it passed; one that failed waits for the restart too.
      if (p.kind == ProbeKind::kStartup && p.result.has_value()) continue;
      if (p.next <= now) {
        p.running = true;
        due.push_back({key, p.spec, p.container, p.host});
      } else {
        next_wake = next_wake ? std::min(*next_wake, p.next) : p.next;
      }
    }
  }
  // None waiting for its time: only a change (Ensure, a result, RemovePod) makes one due.
  if (next_wake) {
    timer_.ArmAt(*next_wake);
  } else {
    timer_.Cancel();
  }
  for (auto& a : due) {
    auto outcome = std::make_shared<ProbeOutcome>();
    auto took = std::make_shared<std::chrono::microseconds>();
    executor_.Submit(
        [this, a, outcome, took] {
          const MonoTime start = clock_.Now();
          *outcome = RunProbe(clock_, runtime_, a.spec, a.container, a.key.first, a.host);
          *took = std::chrono::duration_cast<std::chrono::microseconds>(clock_.Now() - start);
        },
        [this, key = a.key, outcome, took] {
          Record(key, *outcome, *took);
          Schedule();  // its next time, and a passed startup probe lets the others run
        });
  }
}

}  // namespace nodelet::podworkerd
