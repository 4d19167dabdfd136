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

HttpEndpoint::HttpEndpoint(ipc::Context& ctx, EventLoop& loop, std::string run_dir,
                           std::string address, const NodeView* node,
                           HttpServerOptions server_options, std::string log_dir,
                           UsageSampler* usage)
    : ctx_(ctx),
      loop_(loop),
      clock_(loop.clock()),
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

void HttpEndpoint::SetSnapshotSource(std::function<HttpSnapshot()> take) {
  take_ = std::move(take);
}

HttpSnapshot HttpEndpoint::Snapshot() {
  if (take_) {
    auto promise = std::make_shared<std::promise<HttpSnapshot>>();
    std::future<HttpSnapshot> taken = promise->get_future();
    loop_.Post([promise, take = take_] { promise->set_value(take()); });
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
  server_ = std::make_unique<HttpServer>(loop_, server_options_);
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
    const HttpSnapshot s = snapshot();
    std::string text = RenderMetrics(s);
    if (usage_) text += RenderUsageMetrics(&usage_->Recent()->stats);
    // The supervisor's own figures and each running service's, read from /proc now.
    const double boot = BootTimeUnixSeconds();
    std::map<std::string, ProcessFigures> services;
    for (const auto& svc : s.services) {
      if (svc.state != ProcessState::Running || svc.pid <= 0) continue;
      if (auto p = ReadProcessFigures(svc.pid, boot)) services[svc.name] = *p;
    }
    text += RenderProcessMetrics(ReadProcessFigures(getpid(), boot), services);
    return HttpReply{200, "text/plain; version=0.0.4", std::move(text)};
  });
  // The kubelet's two other metric paths, for the scrape configs written for it.
  server_->Get("/metrics/probes", [snapshot] {
    return HttpReply{200, "text/plain; version=0.0.4", RenderProbeMetrics(snapshot())};
  });
  server_->Get("/metrics/resource", [this] {
    if (usage_ == nullptr) return HttpReply{404, "text/plain", "no usage figures\n"};
    return HttpReply{200, "text/plain; version=0.0.4",
                     RenderUsageMetrics(&usage_->Recent()->stats)};
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
