#include "lib/cri/containerd_events.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>

#include "lib/common/logging.h"
#include "lib/cri/containerd_events.grpc.pb.h"
#include "lib/cri/grpc_cri_client.h"

namespace nodelet::cri {

namespace events = ::containerd::services::events::v1;

bool TopicChangesRuntime(const std::string& topic) {
  // An exec's process starting does not change what CRI lists.
  if (topic == "/tasks/exec-added" || topic == "/tasks/exec-started") return false;
  for (const char* prefix : {"/tasks/", "/containers/", "/sandboxes/"}) {
    if (topic.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

std::optional<std::string> EventContainerId(const std::string& topic, const std::string& payload) {
  if (topic == "/tasks/exit") {
    events::TaskExitTarget exit;
    if (!exit.ParseFromString(payload)) return std::nullopt;
    // An exec's process exited (a probe, `nodeletctl exec`): the container did not.
    if (!exit.id().empty() && exit.id() != exit.container_id()) return std::nullopt;
    return exit.container_id();
  }
  if (topic == "/tasks/delete") {
    events::TaskDeleteTarget deleted;
    if (!deleted.ParseFromString(payload)) return std::nullopt;
    // An exec's process deleted: the container's own task is still there.
    if (!deleted.id().empty() && deleted.id() != deleted.container_id()) return std::nullopt;
    return deleted.container_id();
  }
  events::EventTarget target;
  if (!target.ParseFromString(payload)) return std::nullopt;
  return target.container_id();
}

struct ContainerdEventWatcher::Stub {
  explicit Stub(const std::shared_ptr<grpc::Channel>& channel)
      : events(events::Events::NewStub(channel)) {}
  std::unique_ptr<events::Events::Stub> events;
};

Result<std::unique_ptr<ContainerdEventWatcher>> ContainerdEventWatcher::Create(
    const std::string& endpoint, std::string ns,
    std::function<void(const std::string&, const std::string&)> on_change) {
  auto path = ParseCriEndpoint(endpoint);
  if (!path.ok()) return path.status();
  if (ns.empty()) return InvalidArgument("containerd namespace must not be empty");
  auto channel = RuntimeChannel(*path);
  if (channel == nullptr) {
    return Internal("endpoint '" + endpoint + "': cannot create a gRPC channel");
  }
  return std::unique_ptr<ContainerdEventWatcher>(
      new ContainerdEventWatcher(std::move(ns), std::move(on_change), std::move(channel)));
}

ContainerdEventWatcher::ContainerdEventWatcher(
    std::string ns, std::function<void(const std::string&, const std::string&)> on_change,
    std::shared_ptr<grpc::Channel> channel)
    : ns_(std::move(ns)),
      on_change_(std::move(on_change)),
      channel_(std::move(channel)),
      stub_(std::make_unique<Stub>(channel_)) {}

ContainerdEventWatcher::~ContainerdEventWatcher() { Stop(); }

void ContainerdEventWatcher::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void ContainerdEventWatcher::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    if (context_) context_->TryCancel();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ContainerdEventWatcher::Loop() {
  auto log = GetLogger("plegd");
  std::chrono::milliseconds backoff{100};
  std::string last_error;
  while (true) {
    auto context = std::make_shared<grpc::ClientContext>();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      context_ = context;
    }
    events::SubscribeRequest request;
    request.add_filters("namespace==" + ns_);
    auto reader = stub_->events->Subscribe(context.get(), request);
    ++subscriptions_;
    // Whatever changed while there was no stream: one relist covers it.
    on_change_("", "");
    events::Envelope envelope;
    bool any = false;
    while (reader->Read(&envelope)) {
      if (!any && !last_error.empty()) {
        log->info("runtime events: subscribed again after: {}", last_error);
        last_error.clear();
      }
      any = true;
      backoff = std::chrono::milliseconds(100);
      if (envelope.namespace_() != ns_ || !TopicChangesRuntime(envelope.topic())) continue;
      auto id = EventContainerId(envelope.topic(), envelope.event().value());
      if (!id) continue;  // an exec's exit
      ++events_;
      // An event without an id (a topic nodelet does not know) asks for a full relist.
      on_change_(*id, envelope.topic());
    }
    grpc::Status st = reader->Finish();
    std::unique_lock<std::mutex> lock(mu_);
    context_.reset();
    if (stopping_) return;
    ++stream_errors_;
    const std::string why = st.ok() ? std::string("the stream ended") : st.error_message();
    if (why != last_error) {
      log->warn("runtime events: stream ended ({}); relisting only until it is back", why);
      last_error = why;
    }
    cv_.wait_for(lock, backoff, [this] { return stopping_; });
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, std::chrono::seconds(5));
  }
}

}  // namespace nodelet::cri
