#include "svc-plegd/plegd_service.h"

#include "lib/common/logging.h"
#include "lib/cri/grpc_cri_client.h"
#include "lib/ipc/channel_limits.h"
#include "lib/ipc/endpoints.h"
#include "svc-plegd/cri_pleg_runtime.h"

namespace nodelet::plegd {
namespace {

using ipc::pleg::Body;
using ipc::pleg::PlegMessage;

flatbuffers::Offset<ipc::pleg::Event> PackEvent(flatbuffers::FlatBufferBuilder& fbb,
                                                const PlegEvent& e, int32_t exit_code) {
  return ipc::pleg::CreateEventDirect(fbb, e.pod_uid.c_str(), e.type, e.id.c_str(),
                                      e.container_name.c_str(), exit_code);
}

}  // namespace

Result<std::unique_ptr<PlegRuntime>> MakeCriPlegRuntime(const PlegdConfig& config) {
  cri::CriTimeouts timeouts;
  timeouts.query = config.call_timeout;
  auto client = cri::GrpcCriClient::Create(config.runtime_endpoint, timeouts);
  if (!client.ok()) return client.status();
  return std::unique_ptr<PlegRuntime>(std::make_unique<CriPlegRuntime>(std::move(*client)));
}

Result<std::unique_ptr<PlegdService>> PlegdService::Create(ServiceContext& ctx, PlegdConfig config,
                                                           const RuntimeFactory& factory) {
  std::unique_ptr<PlegdService> service(new PlegdService(ctx, std::move(config)));
  if (Status s = service->Start(factory); !s.ok()) return s;
  return service;
}

PlegdService::PlegdService(ServiceContext& ctx, PlegdConfig config)
    : ctx_(ctx), config_(std::move(config)) {}

PlegdService::~PlegdService() { Stop(); }

Status PlegdService::Start(const RuntimeFactory& factory) {
  ServiceContext& ctx = ctx_;
  auto runtime = factory(config_);
  if (!runtime.ok()) return runtime.status();
  runtime_ = std::move(runtime).value();
  // Events and snapshots have their own sockets and limits (ipc::kPlegEvents, kPlegSnapshots).
  publisher_ = std::make_unique<ipc::Publisher>(ctx.ipc, ipc::kPlegEvents);
  if (Status s = publisher_->Bind(ipc::kPlegEventsEndpoint.Uri(ctx.options.run_dir)); !s.ok()) {
    return s;
  }
  snapshots_ = std::make_unique<ipc::RouterServer>(ctx.ipc, ipc::kPlegSnapshots);
  if (Status s = snapshots_->Bind(ipc::kPlegSnapshotEndpoint.Uri(ctx.options.run_dir)); !s.ok()) {
    return s;
  }
  envelope_ = std::make_unique<ipc::EnvelopeWriter>(ipc::ServiceId::Plegd, ctx.incarnation);
  PlegOptions opts;
  opts.relist_period = config_.relist_period;
  opts.inspect_wait = std::max(config_.relist_period, std::chrono::milliseconds(200));
  opts.relist_threshold = config_.relist_threshold;
  opts.inspect_workers = config_.inspect_workers;
  // The engine runs on the loop, and its output is published as it comes.
  engine_ =
      std::make_unique<PlegEngine>(ctx.loop, *runtime_, opts, [this] { HandleEngineOutput(); });
  snapshot_source_ = ctx.loop.AddSocket(snapshots_->raw(), [this] { HandleSnapshotRequests(); });
  engine_->Start();
  if (config_.runtime_events) {
    // Its subscriptions are scheduled on plegd's loop; each event is posted to it by the engine.
    auto watcher =
        cri::RuntimeEventWatcher::Create(ctx.loop, config_.runtime_endpoint, "k8s.io",
                                         [this](const std::string& id, const std::string& topic) {
                                           engine_->OnRuntimeEvent(id, topic);
                                         });
    if (!watcher.ok()) return watcher.status();
    events_ = std::move(*watcher);
    events_->Start();
  }
  GetLogger("plegd")->info("relisting {} every {} ms{}", config_.runtime_endpoint,
                           config_.relist_period.count(),
                           events_ ? ", and at once on each of its events" : "");
  return Status::Ok();
}

void PlegdService::Stop() {
  if (events_) events_->Stop();
  if (engine_) engine_->Stop();
}

void PlegdService::Publish(flatbuffers::FlatBufferBuilder& fbb, Body type,
                           flatbuffers::Offset<void> body) {
  // Over the event limit: not published, but its sequence number is spent, so every subscriber
  // sees the gap and takes a snapshot, which carries the record (ipc::kPlegEvents).
  if (Status s = ipc::PublishMessage(*publisher_, fbb, *envelope_, type, body); !s.ok()) {
    ++publish_refused_;
    if (!publish_refused_logged_) {
      GetLogger("plegd")->warn("Failed to publish an update: {}; subscribers resync", s.message());
      publish_refused_logged_ = true;
    }
  }
}

void PlegdService::HandleEngineOutput() {
  PlegOutput out = engine_->Drain();
  for (auto& result : out.pods) {
    const ipc::pleg::PodRecordT& rec = cache_.Apply(result);
    flatbuffers::FlatBufferBuilder fbb(1024);
    std::vector<flatbuffers::Offset<ipc::pleg::Event>> events;
    for (const auto& e : result.events) {
      int32_t exit_code = 0;
      for (const auto& c : rec.containers) {
        if (c->id == e.id) exit_code = c->exit_code;
      }
      events.push_back(PackEvent(fbb, e, exit_code));
    }
    auto pod = ipc::pleg::PodRecord::Pack(fbb, &rec);
    auto update = ipc::pleg::CreatePodUpdate(fbb, pod, fbb.CreateVector(events));
    Publish(fbb, Body::PodUpdate, update.Union());
    events_published_ += result.events.size();
  }
  for (const auto& r : out.relists) {
    if (r.error.empty()) {
      cache_.set_last_relist(r.relist);
      relist_duration_.Observe(r.duration);
      if (last_relist_started_mono_ns_ != 0 &&
          r.started_at_mono_ns > last_relist_started_mono_ns_) {
        relist_interval_.Observe(std::chrono::microseconds(
            (r.started_at_mono_ns - last_relist_started_mono_ns_) / 1000));
      }
      last_relist_started_ns_ = r.started_at_ns;
      last_relist_started_mono_ns_ = r.started_at_mono_ns;
    }
    flatbuffers::FlatBufferBuilder fbb(256);
    auto done = ipc::pleg::CreateRelistDoneDirect(
        fbb, r.relist, static_cast<uint64_t>(r.duration.count()), r.pods, r.containers,
        r.started_at_ns, r.error.c_str(), r.started_at_mono_ns);
    Publish(fbb, Body::RelistDone, done.Union());
  }
}

Status PlegdService::HandleRelistRequest(const ipc::pleg::RelistRequest& request) {
  std::vector<std::string> uids;
  if (request.uids() != nullptr) {
    if (request.uids()->size() > kMaxRelistRequestPods) {
      return InvalidArgument(std::to_string(request.uids()->size()) +
                             " pods in one request (at most " +
                             std::to_string(kMaxRelistRequestPods) + ")");
    }
    for (const auto* uid : *request.uids()) {
      if (uid == nullptr || uid->size() == 0 || uid->size() > 128) {
        return InvalidArgument("a pod uid that is empty or longer than 128 bytes");
      }
      uids.push_back(uid->str());
    }
  }
  if (!uids.empty()) engine_->RelistPods(uids);
  ++relist_requests_;
  return Status::Ok();
}

void PlegdService::HandleSnapshotRequests() {
  for (int i = 0; i < 64 && snapshots_->Readable(); ++i) {
    auto in = snapshots_->Receive(std::chrono::milliseconds(0));
    if (!in.ok()) break;
    auto msg = ipc::DecodeMessage<PlegMessage>(in->payload.data(), in->payload.size(),
                                               ipc::pleg::PlegMessageIdentifier());
    flatbuffers::FlatBufferBuilder fbb(64 * 1024);
    if (msg.ok() && (*msg)->body_type() == Body::RelistRequest) {
      // No reply: the records that follow are the answer.
      if (Status s = HandleRelistRequest(*(*msg)->body_as_RelistRequest());
          !s.ok() && bad_requests_.Count()) {
        GetLogger("plegd")->warn("Refusing a bad relist request: {}", s.message());
      }
      continue;
    }
    if (!msg.ok() || (*msg)->body_type() != Body::SnapshotRequest) {
      std::string why = msg.ok() ? "expected a SnapshotRequest" : msg.status().message();
      if (bad_requests_.Count()) {
        GetLogger("plegd")->warn("Refusing a bad snapshot request: {}", why);
      }
      auto err = ipc::pleg::CreateErrorReplyDirect(fbb, 0, why.c_str());
      // A peer whose queue is full gets no error reply; it times out as it would anyway.
      (void)ipc::SendMessage(*snapshots_, in->peer, fbb, *envelope_, Body::ErrorReply, err.Union());
      continue;
    }
    std::vector<flatbuffers::Offset<ipc::pleg::PodRecord>> pods;
    for (const auto& [_, rec] : cache_.pods())
      pods.push_back(ipc::pleg::PodRecord::Pack(fbb, &rec));
    // The snapshot is current at the last message published on the PUB socket; replies use
    // their own envelope writer so the PUB sequence has no holes.
    ipc::EnvelopeWriter reply_writer(ipc::ServiceId::Plegd, envelope_->incarnation());
    auto snap = ipc::pleg::CreateSnapshot(fbb, (*msg)->body_as_SnapshotRequest()->request_id(),
                                          envelope_->last_sequence(), envelope_->incarnation(),
                                          cache_.last_relist(), fbb.CreateVector(pods));
    if (Status s = ipc::SendMessage(*snapshots_, in->peer, fbb, reply_writer, Body::Snapshot,
                                    snap.Union());
        !s.ok()) {
      // Over kPlegSnapshots' reply limit, or the peer's queue is full: it asks again.
      ++snapshot_send_failures_;
      if (s.code() == StatusCode::kResourceExhausted && !snapshot_too_large_logged_) {
        GetLogger("plegd")->error("Failed to send a snapshot of {} pods: {}", pods.size(),
                                  s.message());
        snapshot_too_large_logged_ = true;
      }
      continue;
    }
    ++snapshots_served_;
  }
}

HealthReport PlegdService::Health() const {
  PlegHealth h = engine_->Health();
  if (!h.ok) return {ipc::control::Health::Failing, h.reason};
  return {};
}

CounterList PlegdService::Counters() const {
  CounterList c;
  c.emplace_back("relists", engine_->relists());
  c.emplace_back("nudged_relists", engine_->nudged_relists());
  c.emplace_back("runtime_events", events_ ? events_->events() : 0);
  c.emplace_back("runtime_events_unlooked", engine_->runtime_events_unlooked());
  c.emplace_back("events_seen_already", engine_->events_seen_already());
  c.emplace_back("event_looks_put_off", engine_->event_looks_put_off());
  c.emplace_back("runtime_event_streams", events_ ? events_->subscriptions() : 0);
  c.emplace_back("cri_event_streams", events_ ? events_->cri_subscriptions() : 0);
  c.emplace_back("pod_relists", engine_->pod_relists());
  c.emplace_back("event_retries", engine_->event_retries());
  c.emplace_back("shared_listings", engine_->shared_listings());
  c.emplace_back("relist_requests", relist_requests_);
  c.emplace_back("relist_errors", engine_->relist_errors());
  c.emplace_back("inspections", engine_->inspections());
  c.emplace_back("inspection_errors", engine_->inspection_errors());
  c.emplace_back("containers_inspected", engine_->containers_inspected());
  c.emplace_back("containers_reused", engine_->containers_reused());
  c.emplace_back("relist_duration_us", static_cast<uint64_t>(engine_->last_relist_duration_us()));
  c.emplace_back("events_published", events_published_);
  c.emplace_back("snapshots_served", snapshots_served_);
  c.emplace_back("publish_refused", publish_refused_);
  c.emplace_back("snapshot_send_failures", snapshot_send_failures_);
  c.emplace_back("bad_requests", bad_requests_.count());
  c.emplace_back("pods", cache_.pods().size());
  c.emplace_back("containers", cache_.container_count());
  size_t running = 0, running_pods = 0;
  for (const auto& [_, p] : cache_.pods()) {
    bool pod_running = false;
    for (const auto& ctr : p.containers) {
      if (ctr->state == ipc::pleg::ContainerState::Running) {
        ++running;
        pod_running = true;
      }
    }
    running_pods += pod_running && !p.foreign;
  }
  c.emplace_back("running_containers", running);
  c.emplace_back("running_pods", running_pods);
  c.emplace_back("last_relist_unix_ms", static_cast<uint64_t>(last_relist_started_ns_ / 1000000));
  relist_duration_.Export("relist_duration_seconds", c);
  relist_interval_.Export("relist_interval_seconds", c);
  for (const auto& [call, n] : runtime_->CallCounts())
    c.emplace_back("runtime_operations:" + call, n);
  return c;
}

ServiceSpec MakeSpec() {
  auto config = std::make_shared<PlegdConfig>();
  auto relist_period = std::make_shared<std::string>("");
  auto threshold = std::make_shared<std::string>("3m");
  auto timeout = std::make_shared<std::string>("10s");
  ServiceSpec spec;
  spec.name = "plegd";
  spec.id = ipc::ServiceId::Plegd;
  spec.description = "nodelet-plegd: relists the container runtime, emits pod lifecycle events";
  spec.add_flags = [=](CLI::App& app) {
    app.add_option("--runtime-endpoint,--container-runtime-endpoint", config->runtime_endpoint,
                   "CRI endpoint of the container runtime")
        ->capture_default_str();
    app.add_option("--relist-period", *relist_period,
                   "Full relist period (100ms or more; default 10s with --runtime-events, where "
                   "events relist single pods and the full relist is the safety net, else 1s)")
        ->check(DurationValidator());
    app.add_option("--relist-threshold", *threshold,
                   "Health fails when no relist succeeded for this long")
        ->check(DurationValidator())
        ->capture_default_str();
    app.add_option("--runtime-events", config->runtime_events,
                   "Relist a pod at once on each of the runtime's events (CRI GetContainerEvents, "
                   "or containerd's event service where the runtime lacks it); the full relist "
                   "stays as the safety net")
        ->capture_default_str();
    app.add_option("--runtime-request-timeout", *timeout, "Deadline of each list/status call")
        ->check(DurationValidator())
        ->capture_default_str();
  };
  spec.create = [=](ServiceContext& ctx) -> Result<std::unique_ptr<Service>> {
    PlegdConfig c = *config;
    // The flags were validated by DurationValidator.
    c.relist_period =
        relist_period->empty()
            ? (c.runtime_events ? kEventedRelistPeriod : kRelistPeriod)
            : std::max(*ParseDuration(*relist_period), std::chrono::milliseconds(100));
    c.relist_threshold = *ParseDuration(*threshold);
    c.call_timeout = *ParseDuration(*timeout);
    auto service = PlegdService::Create(ctx, c, MakeCriPlegRuntime);
    if (!service.ok()) return service.status();
    return std::unique_ptr<Service>(std::move(service).value());
  };
  return spec;
}

}  // namespace nodelet::plegd
