// The runtime event watcher's stream reads (on its executor) and their scheduling on the owner's
// loop (runtime_events.h).
#include "lib/cri/runtime_events.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>

#include "lib/common/logging.h"
#include "lib/cri/api.grpc.pb.h"
#include "lib/cri/containerd_events.grpc.pb.h"
#include "lib/cri/containerd_events.h"
#include "lib/cri/grpc_cri_client.h"

namespace nodelet::cri {

namespace events = ::containerd::services::events::v1;
namespace v1 = ::runtime::v1;

std::string TopicOfCriEvent(int type) {
  switch (type) {
    case v1::CONTAINER_CREATED_EVENT:
      return "/containers/create";
    case v1::CONTAINER_STARTED_EVENT:
      return "/tasks/start";
    case v1::CONTAINER_STOPPED_EVENT:
      return "/tasks/exit";
    case v1::CONTAINER_DELETED_EVENT:
      return "/containers/delete";
    default:
      return "/cri/unknown";
  }
}

struct RuntimeEventWatcher::Stubs {
  explicit Stubs(const std::shared_ptr<grpc::Channel>& channel)
      : runtime(v1::RuntimeService::NewStub(channel)), events(events::Events::NewStub(channel)) {}
  std::unique_ptr<v1::RuntimeService::Stub> runtime;
  std::unique_ptr<events::Events::Stub> events;
};

Result<std::unique_ptr<RuntimeEventWatcher>> RuntimeEventWatcher::Create(
    EventLoop& loop, const std::string& endpoint, std::string ns, OnChange on_change) {
  auto path = ParseCriEndpoint(endpoint);
  if (!path.ok()) return path.status();
  if (ns.empty()) return InvalidArgument("containerd namespace must not be empty");
  auto channel = RuntimeChannel(*path);
  if (channel == nullptr) {
    return Internal("endpoint '" + endpoint + "': cannot create a gRPC channel");
  }
  return std::unique_ptr<RuntimeEventWatcher>(new RuntimeEventWatcher(
      loop, endpoint, std::move(ns), std::move(on_change), std::move(channel)));
}

RuntimeEventWatcher::RuntimeEventWatcher(EventLoop& loop, std::string endpoint, std::string ns,
                                         OnChange on_change, std::shared_ptr<grpc::Channel> channel)
    : endpoint_(std::move(endpoint)),
      ns_(std::move(ns)),
      on_change_(std::move(on_change)),
      channel_(std::move(channel)),
      stubs_(std::make_unique<Stubs>(channel_)),
      backoff_timer_(loop.AddTimer([this] {
        if (!stopping()) Subscribe(/*cri=*/true);
      })),
      executor_(loop, 1) {}

RuntimeEventWatcher::~RuntimeEventWatcher() { Stop(); }

void RuntimeEventWatcher::Start() { Subscribe(/*cri=*/true); }

void RuntimeEventWatcher::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    if (context_) context_->TryCancel();
  }
  // The job in flight sees the cancel (or stopping_, before it subscribes) and returns.
  executor_.Stop();
}

bool RuntimeEventWatcher::stopping() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stopping_;
}

void RuntimeEventWatcher::Subscribe(bool cri) {
  subscribed_ = true;
  auto outcome = std::make_shared<Outcome>();
  executor_.Submit(
      [this, cri, after = last_error_, outcome] {
        auto context = std::make_shared<grpc::ClientContext>();
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (stopping_) return;
          context_ = context;
        }
        source_ = cri ? Source::kCri : Source::kContainerd;
        ++subscriptions_;
        if (cri) ++cri_subscriptions_;
        grpc::Status st = cri ? ReadCri(*context, after, outcome->any)
                              : ReadContainerd(*context, after, outcome->any);
        {
          std::lock_guard<std::mutex> lock(mu_);
          context_.reset();
        }
        outcome->unimplemented = st.error_code() == grpc::StatusCode::UNIMPLEMENTED;
        outcome->why = st.ok() ? std::string("the stream ended") : st.error_message();
      },
      [this, cri, outcome] { Ended(cri, *outcome); });
}

void RuntimeEventWatcher::Ended(bool cri, const Outcome& outcome) {
  subscribed_ = false;
  if (stopping()) return;
  auto log = GetLogger("plegd");
  if (outcome.any) {
    backoff_ = std::chrono::milliseconds(100);
    last_error_.clear();
  }
  if (cri && !outcome.any && outcome.unimplemented) {
    if (!told_fallback_) {
      log->info(
          "runtime events: {} answered CRI GetContainerEvents UNIMPLEMENTED; reading "
          "containerd's event service (namespace {})",
          endpoint_, ns_);
      told_fallback_ = true;
    }
    Subscribe(/*cri=*/false);
    return;
  }
  ++stream_errors_;
  if (outcome.why != last_error_) {
    log->warn("runtime events: {} stream ended ({}); relisting only until it is back",
              cri ? "CRI's" : "containerd's", outcome.why);
    last_error_ = outcome.why;
  }
  backoff_timer_.ArmAfter(backoff_);
  backoff_ = std::min<std::chrono::milliseconds>(backoff_ * 2, std::chrono::seconds(5));
}

grpc::Status RuntimeEventWatcher::ReadCri(grpc::ClientContext& context, const std::string& after,
                                          bool& any) {
  auto reader = stubs_->runtime->GetContainerEvents(&context, v1::GetEventsRequest());
  // Whatever changed while there was no stream: one relist covers it. A runtime without this
  // stream says so only in its answer, after this; the fallback's subscription then asks for a
  // relist of its own, which is needed (changes between this relist and that subscription would
  // be missed otherwise) and costs one more full relist per subscription on containerd 1.6.
  on_change_("", "");
  v1::ContainerEventResponse event;
  while (reader->Read(&event)) {
    if (!any && !told_cri_) {
      GetLogger("plegd")->info("runtime events: reading CRI GetContainerEvents of {}", endpoint_);
      told_cri_ = true;
    }
    FirstEvent(after, any);
    ++events_;
    on_change_(event.container_id(), TopicOfCriEvent(event.container_event_type()));
  }
  return reader->Finish();
}

grpc::Status RuntimeEventWatcher::ReadContainerd(grpc::ClientContext& context,
                                                 const std::string& after, bool& any) {
  events::SubscribeRequest request;
  request.add_filters("namespace==" + ns_);
  auto reader = stubs_->events->Subscribe(&context, request);
  on_change_("", "");
  events::Envelope envelope;
  while (reader->Read(&envelope)) {
    FirstEvent(after, any);
    if (envelope.namespace_() != ns_ || !TopicChangesRuntime(envelope.topic())) continue;
    auto id = EventContainerId(envelope.topic(), envelope.event().value());
    if (!id) continue;  // an exec's exit
    ++events_;
    // An event without an id (a topic nodelet does not know) asks for a full relist.
    on_change_(*id, envelope.topic());
  }
  return reader->Finish();
}

void RuntimeEventWatcher::FirstEvent(const std::string& after, bool& any) {
  if (any) return;
  any = true;
  if (!after.empty()) {
    GetLogger("plegd")->info("runtime events: subscribed again after: {}", after);
  }
}

}  // namespace nodelet::cri
