#include "supervisor/http_endpoint.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <future>
#include <sstream>

#include "lib/common/fs.h"
#include "lib/common/json_text.h"
#include "lib/ipc/endpoints.h"
#include "lib/logs/cri_log.h"
#include "lib/pod/names.h"
#include "lib/status/pod_status_json.h"
#include "lib/status/status_client.h"

namespace nodelet::supervisor {
namespace {

std::string Seconds(uint64_t us) {
  std::ostringstream s;
  s.precision(9);
  s << static_cast<double>(us) / 1e6;
  return s.str();
}

// Writes the histogram exported under `prefix` in `counters` (lib/common/histogram.h) as NAME.
void RenderHistogram(std::ostringstream& out, const std::string& name, const std::string& help,
                     const std::map<std::string, uint64_t>& counters, const std::string& prefix,
                     const std::string& labels = "") {
  std::vector<std::pair<double, std::pair<std::string, uint64_t>>> buckets;
  const std::string bucket_prefix = prefix + "_bucket:";
  for (const auto& [k, v] : counters) {
    if (k.rfind(bucket_prefix, 0) != 0) continue;
    std::string le = k.substr(bucket_prefix.size());
    double bound = le == "+Inf" ? 1e300 : std::strtod(le.c_str(), nullptr);
    buckets.push_back({bound, {le, v}});
  }
  if (buckets.empty()) return;
  std::sort(buckets.begin(), buckets.end());
  out << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
  const std::string sep = labels.empty() ? "" : ",";
  for (const auto& [_, b] : buckets) {
    out << name << "_bucket{" << labels << sep << "le=\"" << b.first << "\"} " << b.second << "\n";
  }
  auto sum = counters.find(prefix + "_sum_us");
  auto count = counters.find(prefix + "_count");
  std::string l = labels.empty() ? "" : "{" + labels + "}";
  out << name << "_sum" << l << " " << Seconds(sum == counters.end() ? 0 : sum->second) << "\n";
  out << name << "_count" << l << " " << (count == counters.end() ? 0 : count->second) << "\n";
}

// A pointer, not a reference: GCC 14 (Debian 13) takes a reference returned from a call with a
// temporary argument (the service's name) for a dangling one.
const std::map<std::string, uint64_t>* CountersOf(const HttpSnapshot& s, const std::string& svc) {
  static const std::map<std::string, uint64_t> kEmpty;
  auto it = s.counters.find(svc);
  return it == s.counters.end() ? &kEmpty : &it->second;
}

uint64_t Get(const std::map<std::string, uint64_t>& m, const std::string& k) {
  auto it = m.find(k);
  return it == m.end() ? 0 : it->second;
}

status::StatusClientOptions StatusOptions() {
  status::StatusClientOptions opts;
  opts.sender = ipc::ServiceId::Supervisor;
  opts.deadline = std::chrono::milliseconds(2000);
  return opts;
}

// The kubelet's (Go's strconv.ParseBool) true values; an absent parameter is false.
Result<bool> QueryBool(const std::map<std::string, std::string>& q, const std::string& key) {
  auto it = q.find(key);
  if (it == q.end()) return false;
  const std::string& v = it->second;
  if (v == "1" || v == "t" || v == "T" || v == "true" || v == "TRUE" || v == "True") return true;
  if (v == "0" || v == "f" || v == "F" || v == "false" || v == "FALSE" || v == "False")
    return false;
  return InvalidArgument("query parameter " + key + "=" + v + ": want true or false");
}

// A parameter that must be a number >= 0; -1 when absent.
Result<int64_t> QueryCount(const std::map<std::string, std::string>& q, const std::string& key) {
  auto it = q.find(key);
  if (it == q.end()) return -1;
  const std::string& v = it->second;
  int64_t n = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (v.empty() || ec != std::errc() || p != v.data() + v.size() || n < 0) {
    return InvalidArgument("query parameter " + key + "=" + v + ": want a number >= 0");
  }
  return n;
}

HttpReply TextReply(int status, const std::string& text) {
  return HttpReply{status, "text/plain", text + "\n", nullptr};
}

// The address a client on this node dials for a listener bound to `host`:`port`.
std::string DialAddress(const std::string& host, int port) {
  std::string h = host;
  if (h.empty() || h == "0.0.0.0") h = "127.0.0.1";
  if (h == "::") h = "::1";
  if (h.find(':') != std::string::npos) h = "[" + h + "]";
  return h + ":" + std::to_string(port);
}

}  // namespace

Result<status::PodStatusList> HttpEndpoint::ListPodStatuses() {
  // One statusd client per worker thread (a ZeroMQ socket belongs to one thread).
  static thread_local std::unique_ptr<status::StatusClient> client;
  if (!client) {
    client = std::make_unique<status::StatusClient>(ctx_, run_dir_, StatusOptions());
    if (!client->Connect().ok()) client.reset();
  }
  return client ? client->ListPodStatuses() : Result<status::PodStatusList>(Unavailable("statusd"));
}

HttpReply HttpEndpoint::ContainerLogs(const HttpRequest& request) {
  static const std::string kPrefix = "/containerLogs/";
  // NAMESPACE/POD/CONTAINER: checked as Kubernetes names before any of it is near a path.
  std::vector<std::string> parts;
  std::string rest = request.path.substr(std::min(kPrefix.size(), request.path.size()));
  for (size_t start = 0;;) {
    size_t slash = rest.find('/', start);
    parts.push_back(rest.substr(start, slash == std::string::npos ? slash : slash - start));
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  if (parts.size() != 3) {
    return TextReply(404, "want /containerLogs/NAMESPACE/POD/CONTAINER");
  }
  if (!pod::IsDns1123Label(parts[0]).empty())
    return TextReply(400, "invalid namespace \"" + parts[0].substr(0, 64) + "\"");
  if (!pod::IsDns1123Subdomain(parts[1]).empty())
    return TextReply(400, "invalid pod name \"" + parts[1].substr(0, 64) + "\"");
  if (!pod::IsDns1123Label(parts[2]).empty())
    return TextReply(400, "invalid container name \"" + parts[2].substr(0, 64) + "\"");
  auto follow = QueryBool(request.query, "follow");
  auto previous = QueryBool(request.query, "previous");
  auto timestamps = QueryBool(request.query, "timestamps");
  auto tail = QueryCount(request.query, "tailLines");
  auto since = QueryCount(request.query, "sinceSeconds");
  auto limit = QueryCount(request.query, "limitBytes");
  for (const Status* s : {&follow.status(), &previous.status(), &timestamps.status(),
                          &tail.status(), &since.status(), &limit.status()}) {
    if (!s->ok()) return TextReply(400, s->message());
  }
  logs::LogReadOptions read;
  read.tail_lines = *tail;
  read.timestamps = *timestamps;
  read.limit_bytes = *limit;
  if (*since > 0) {
    read.since_unix_ns = clock_.WallNanos() - std::min<int64_t>(*since, 1LL << 32) * 1000000000;
  }

  auto list = ListPodStatuses();
  if (!list.ok()) return TextReply(503, "statusd unavailable: " + list.status().message());
  const std::string pods_dir = log_dir_ + "/pods";
  auto pods_fd = std::make_shared<UniqueFd>(
      open(pods_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  if (!pods_fd->valid()) return TextReply(503, "no pod logs directory");
  auto attempts = [&](const logs::LogTarget& t) {
    auto dir = logs::OpenContainerLogDir(pods_fd->get(), t);
    return dir.ok() ? logs::ListLogAttempts(dir->get()) : std::vector<int>{};
  };
  auto target =
      logs::ResolveLogTarget(list->records, parts[0], parts[1], parts[2], *previous, attempts);
  if (!target.ok()) {
    const int code = target.status().code() == StatusCode::kNotFound ? 404 : 400;
    return TextReply(code, target.status().message());
  }
  auto dir = logs::OpenContainerLogDir(pods_fd->get(), *target);
  if (!dir.ok()) return TextReply(404, dir.status().message());
  auto dir_fd = std::make_shared<UniqueFd>(std::move(*dir));
  HttpReply reply{200, "text/plain", "", nullptr};
  reply.stream = [this, dir_fd, target = *target, read, follow = *follow](HttpStream& out) {
    auto sink = [&out](std::string_view text) { return out.Write(text); };
    if (!follow) {
      (void)logs::ReadCriLog(dir_fd->get(), target.file, read, sink);
      return;
    }
    // This stream's own statusd client: it asks once a second whether the instance runs.
    status::StatusClient statusd(ctx_, run_dir_, StatusOptions());
    const bool connected = statusd.Connect().ok();
    logs::FollowOptions fo;
    fo.clock = &clock_;
    fo.cancel_fd = out.client_fd();
    fo.ended = [&] {
      if (out.stopping()) return true;
      if (!connected) return target.running_container_id.empty();
      return logs::InstanceEnded(statusd.GetPodStatus(target.pod_uid), target).value_or(false);
    };
    (void)logs::FollowCriLog(dir_fd->get(), target.file, read, fo, sink);
  };
  return reply;
}

std::string RenderMetrics(const HttpSnapshot& s) {
  std::ostringstream out;
  const auto& pleg = *CountersOf(s, "plegd");
  const auto& workers = *CountersOf(s, "podworkerd");

  out << "# HELP kubelet_running_pods Number of pods that have a running container.\n"
      << "# TYPE kubelet_running_pods gauge\n"
      << "kubelet_running_pods " << Get(pleg, "running_pods") << "\n";
  out << "# HELP kubelet_running_containers Number of containers currently running.\n"
      << "# TYPE kubelet_running_containers gauge\n"
      << "kubelet_running_containers{container_state=\"running\"} "
      << Get(pleg, "running_containers") << "\n";
  RenderHistogram(out, "kubelet_pleg_relist_duration_seconds",
                  "Duration in seconds for relisting pods in PLEG.", pleg,
                  "relist_duration_seconds");
  RenderHistogram(out, "kubelet_pleg_relist_interval_seconds",
                  "Interval in seconds between relisting in PLEG.", pleg,
                  "relist_interval_seconds");
  out << "# HELP kubelet_pleg_last_seen_seconds Timestamp in seconds when PLEG was last seen "
         "active.\n"
      << "# TYPE kubelet_pleg_last_seen_seconds gauge\n"
      << "kubelet_pleg_last_seen_seconds " << Seconds(Get(pleg, "last_relist_unix_ms") * 1000)
      << "\n";
  RenderHistogram(out, "kubelet_pod_start_duration_seconds",
                  "Duration in seconds from a pod's ADD to its status Running.", workers,
                  "pod_start_duration_seconds");
  RenderHistogram(out, "kubelet_pod_worker_duration_seconds",
                  "Duration in seconds to sync a single pod.", workers,
                  "pod_worker_duration_seconds");
  // Probes: one histogram and one counter, labelled by probe type (not by pod: the kubelet's
  // per-pod labels would make the series grow with the pods).
  {
    std::ostringstream hist;
    bool any = false;
    for (const char* kind : {"liveness", "readiness", "startup"}) {
      std::ostringstream one;
      std::string type = kind;
      type[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(type[0])));
      RenderHistogram(one, "prober_probe_duration_seconds", "", workers,
                      std::string("probe_duration_seconds_") + kind, "probe_type=\"" + type + "\"");
      std::string text = one.str();
      // Keep the series only: HELP and TYPE are written once below.
      std::istringstream lines(text);
      for (std::string line; std::getline(lines, line);) {
        if (line.rfind("# ", 0) == 0) continue;
        hist << line << "\n";
        any = true;
      }
    }
    if (any) {
      out << "# HELP prober_probe_duration_seconds Duration in seconds for a probe response.\n"
          << "# TYPE prober_probe_duration_seconds histogram\n"
          << hist.str();
    }
    std::ostringstream totals;
    for (const auto& [k, v] : workers) {
      if (k.rfind("probe_total:", 0) != 0) continue;
      std::string rest = k.substr(12);
      auto colon = rest.find(':');
      if (colon == std::string::npos) continue;
      std::string type = rest.substr(0, colon);
      if (!type.empty())
        type[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(type[0])));
      totals << "prober_probe_total{probe_type=\"" << PrometheusLabel(type) << "\",result=\""
             << PrometheusLabel(rest.substr(colon + 1)) << "\"} " << v << "\n";
    }
    if (!totals.str().empty()) {
      out << "# HELP prober_probe_total Cumulative number of a liveness, readiness or startup "
             "probe for a container by result.\n"
          << "# TYPE prober_probe_total counter\n"
          << totals.str();
    }
  }
  std::ostringstream ops, errs;
  for (const auto& [k, v] : workers) {
    if (k.rfind("runtime_operations:", 0) == 0) {
      ops << "kubelet_runtime_operations_total{operation_type=\"" << PrometheusLabel(k.substr(19))
          << "\"} " << v << "\n";
    } else if (k.rfind("runtime_operations_errors:", 0) == 0) {
      errs << "kubelet_runtime_operations_errors_total{operation_type=\""
           << PrometheusLabel(k.substr(26)) << "\"} " << v << "\n";
    }
  }
  out << "# HELP kubelet_runtime_operations_total Cumulative number of runtime operations by "
         "operation type.\n"
      << "# TYPE kubelet_runtime_operations_total counter\n"
      << ops.str();
  out << "# HELP kubelet_runtime_operations_errors_total Cumulative number of runtime operation "
         "errors by operation type.\n"
      << "# TYPE kubelet_runtime_operations_errors_total counter\n"
      << errs.str();

  out << "# HELP kubelet_garbage_collected_containers_total Dead containers removed by garbage "
         "collection.\n"
      << "# TYPE kubelet_garbage_collected_containers_total counter\n"
      << "kubelet_garbage_collected_containers_total "
      << Get(workers, "containers_garbage_collected") << "\n";
  auto counter = [&](const char* name, const char* help, const char* type, const char* key) {
    out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n"
        << name << " " << Get(workers, key) << "\n";
  };
  counter("kubelet_image_garbage_collected_total", "Images removed by image garbage collection.",
          "counter", "images_garbage_collected");
  counter("nodelet_image_gc_freed_bytes_total",
          "Bytes freed by image garbage collection (the removed images' sizes).", "counter",
          "image_gc_bytes_freed");
  counter("nodelet_image_gc_runs_total", "Image garbage collection passes.", "counter",
          "image_gc_runs");
  counter("nodelet_image_gc_failures_total",
          "Image garbage collection passes that failed or could not free enough.", "counter",
          "image_gc_failures");
  counter("nodelet_image_fs_capacity_bytes", "Capacity of the image filesystem.", "gauge",
          "image_fs_capacity_bytes");
  counter("nodelet_image_fs_available_bytes",
          "Free bytes of the image filesystem at the last image GC pass.", "gauge",
          "image_fs_available_bytes");
  counter("nodelet_container_gc_runs_total", "Node-wide dead-container garbage collection passes.",
          "counter", "container_gc_runs");
  counter("nodelet_container_gc_failures_total",
          "Node-wide dead-container garbage collection passes that failed.", "counter",
          "container_gc_failures");
  out << "# HELP nodelet_service_up Whether the service is RUNNING (1) or not (0).\n"
      << "# TYPE nodelet_service_up gauge\n";
  for (const auto& svc : s.services) {
    out << "nodelet_service_up{service=\"" << svc.name << "\"} "
        << (svc.state == ProcessState::Running ? 1 : 0) << "\n";
  }
  out << "# HELP nodelet_service_restarts_total Automatic restarts of the service.\n"
      << "# TYPE nodelet_service_restarts_total counter\n";
  for (const auto& svc : s.services) {
    out << "nodelet_service_restarts_total{service=\"" << svc.name << "\"} " << svc.restarts
        << "\n";
  }
  out << "# HELP nodelet_ipc_messages_total Control messages the supervisor received, by sender.\n"
      << "# TYPE nodelet_ipc_messages_total counter\n";
  for (const auto& svc : s.services) {
    auto it = s.messages.find(svc.name);
    out << "nodelet_ipc_messages_total{service=\"" << svc.name << "\"} "
        << (it == s.messages.end() ? 0 : it->second) << "\n";
  }
  out << "# HELP nodelet_ipc_bad_messages_total Messages refused by verification, by receiving "
         "service.\n"
      << "# TYPE nodelet_ipc_bad_messages_total counter\n";
  for (const auto& svc : s.services) {
    const auto& c = *CountersOf(s, svc.name);
    out << "nodelet_ipc_bad_messages_total{service=\"" << svc.name << "\"} "
        << Get(c, "bad_messages") + Get(c, "bad_requests") << "\n";
  }
  out << "nodelet_ipc_bad_messages_total{service=\"supervisor\"} " << s.bad_control << "\n";
  // Every counter each service reported in its last heartbeat, under its own name (docs/ of each
  // service names them): what the metrics above leave out, for whoever is chasing one service's
  // work (a bench, an operator comparing two nodes).
  out << "# HELP nodelet_service_stat A service's own counter or gauge (docs/ of each "
         "service), as its last heartbeat reported it, by service and name.\n"
      << "# TYPE nodelet_service_stat untyped\n";
  for (const auto& [svc, counters] : s.counters) {
    for (const auto& [name, v] : counters) {
      out << "nodelet_service_stat{service=\"" << PrometheusLabel(svc) << "\",name=\""
          << PrometheusLabel(name) << "\"} " << v << "\n";
    }
  }
  out << "# HELP nodelet_pod_source_failures_total Reads of a pod source that failed (its pods "
         "were kept), by source and reason.\n"
      << "# TYPE nodelet_pod_source_failures_total counter\n";
  for (const auto& [key, n] : s.source_failures) {
    out << "nodelet_pod_source_failures_total{source=\"" << PrometheusLabel(key.first)
        << "\",reason=\"" << PrometheusLabel(key.second) << "\"} " << n << "\n";
  }
  return out.str();
}

HttpEndpoint::HttpEndpoint(ipc::Context& ctx, const Clock& clock, std::string run_dir,
                           std::string address, const NodeView* node,
                           HttpServerOptions server_options, std::string log_dir,
                           UsageSampler* usage)
    : ctx_(ctx),
      clock_(clock),
      run_dir_(std::move(run_dir)),
      address_(std::move(address)),
      node_(node),
      log_dir_(std::move(log_dir)),
      usage_(usage),
      server_options_(server_options) {}

HttpEndpoint::~HttpEndpoint() {
  if (server_) server_->Stop();
  if (!address_file_.empty()) unlink(address_file_.c_str());
}

void HttpEndpoint::SetSnapshotSource(EventLoop& loop, std::function<HttpSnapshot()> take) {
  loop_ = &loop;
  take_ = std::move(take);
}

HttpSnapshot HttpEndpoint::Snapshot() {
  if (loop_ != nullptr) {
    auto promise = std::make_shared<std::promise<HttpSnapshot>>();
    std::future<HttpSnapshot> taken = promise->get_future();
    loop_->Post([promise, take = take_] { promise->set_value(take()); });
    if (taken.wait_for(kSnapshotWait) == std::future_status::ready) {
      HttpSnapshot snapshot = taken.get();
      std::lock_guard<std::mutex> lock(mu_);
      last_ = snapshot;
      return snapshot;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  return last_;
}

Status HttpEndpoint::Start() {
  auto colon = address_.rfind(':');
  if (colon == std::string::npos)
    return InvalidArgument("--http-address " + address_ + ": want HOST:PORT");
  std::string host = address_.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  const int port = std::atoi(address_.c_str() + colon + 1);
  server_ = std::make_unique<HttpServer>(clock_, server_options_);
  auto snapshot = [this] { return Snapshot(); };
  // On the server's urgent lane: never queued behind /pods or a slow client.
  server_->GetUrgent("/healthz", [snapshot] {
    HttpSnapshot s = snapshot();
    bool ok = !s.services.empty();
    std::string body;
    for (const auto& svc : s.services) {
      ok = ok && svc.state == ProcessState::Running;
      std::string state = ipc::ctl::EnumNameProcessState(svc.state);
      for (auto& ch : state) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      body += svc.name + ": " + state +
              (svc.description.empty() ? "" : " (" + svc.description + ")") + "\n";
    }
    return HttpReply{ok ? 200 : 503, "text/plain", (ok ? "ok\n" : "unhealthy\n") + body};
  });
  server_->Get("/metrics", [this, snapshot] {
    std::string text = RenderMetrics(snapshot());
    if (usage_) text += RenderUsageMetrics(&usage_->Recent()->stats);
    return HttpReply{200, "text/plain; version=0.0.4", std::move(text)};
  });
  if (usage_) {
    server_->Get("/stats/summary", [this] {
      return HttpReply{200, "application/json",
                       SummaryJson(*usage_->Recent(kSummaryMaxAge), usage_->node_start_unix_s())};
    });
  }
  server_->Get("/node", [this] {
    if (node_ == nullptr) return HttpReply{404, "text/plain", "no node status\n"};
    return HttpReply{200, "application/json", node_->NodeJson()};
  });
  server_->Get("/pods", [this] {
    auto list = ListPodStatuses();
    if (!list.ok()) {
      return HttpReply{503, "text/plain", "statusd unavailable: " + list.status().message() + "\n"};
    }
    return HttpReply{200, "application/json", JsonText(status::PodListToJson(list->records), 2)};
  });
  if (!log_dir_.empty()) {
    server_->GetPrefix("/containerLogs/",
                       [this](const HttpRequest& request) { return ContainerLogs(request); });
  }
  auto bound = server_->Listen(host, port);
  if (!bound.ok()) {
    server_.reset();
    return Unavailable("cannot listen on " + address_ +
                       " (in use, or a bad address): " + bound.status().message());
  }
  port_ = *bound;
  // For `nodeletctl top`: written whole (a temporary file renamed over it).
  const std::string file = run_dir_ + "/" + ipc::kHttpAddressFile;
  Status written = WriteFileAtomically(file, DialAddress(host, port_) + "\n", 0640);
  if (written.ok()) {
    address_file_ = file;
  } else {
    spdlog::warn("nodeletctl top will not find the endpoint: {}", written.message());
  }
  return Status::Ok();
}

}  // namespace nodelet::supervisor
