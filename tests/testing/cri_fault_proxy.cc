#include "tests/testing/cri_fault_proxy.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <future>
#include <thread>
#include <vector>

#include "lib/cri/grpc_cri_client.h"

namespace nodelet::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr int kMaxMessageBytes = 64 * 1024 * 1024;

// Metadata gRPC sets by itself; everything else (e.g. containerd's "containerd-namespace") is
// forwarded as the client sent it.
bool ForwardedHeader(const std::string& key) {
  if (key.empty() || key[0] == ':') return false;
  if (key.rfind("grpc-", 0) == 0) return false;
  return key != "user-agent" && key != "content-type" && key != "te" && key != "host";
}

std::string ToString(grpc::string_ref s) { return std::string(s.data(), s.size()); }

}  // namespace

// ---- CallHold ------------------------------------------------------------------------------

bool CallHold::WaitHeld(milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return outcome_ != Outcome::kPending; });
}

void CallHold::Release(ProxyVerdict verdict) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!release_) release_ = std::move(verdict);
  }
  cv_.notify_all();
}

bool CallHold::WaitDone(milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout,
                      [&] { return outcome_ != Outcome::kPending && outcome_ != Outcome::kHeld; });
}

CallHold::Outcome CallHold::outcome() const {
  std::lock_guard<std::mutex> lock(mu_);
  return outcome_;
}

ProxyCall CallHold::held_call() const {
  std::lock_guard<std::mutex> lock(mu_);
  return call_;
}

void CallHold::Wake() {
  { std::lock_guard<std::mutex> lock(mu_); }
  cv_.notify_all();
}

ProxyVerdict CallHold::Run(const ProxyCall& call) {
  std::unique_lock<std::mutex> lock(mu_);
  if (taken_) return ProxyVerdict::Proceed();
  taken_ = true;
  call_ = call;
  call_.cancelled = nullptr;  // the call's own state; not valid after it ends
  outcome_ = Outcome::kHeld;
  cv_.notify_all();
  auto deadline = steady_clock::now() + deadline_;
  cv_.wait_until(lock, deadline, [&] { return release_.has_value() || call.cancelled(); });
  ProxyVerdict verdict;
  if (release_) {
    outcome_ = Outcome::kReleased;
    verdict = *release_;
  } else if (call.cancelled()) {
    outcome_ = Outcome::kCancelled;
    verdict = ProxyVerdict::Unavailable("the caller cancelled the call while it was held");
  } else {
    outcome_ = Outcome::kExpired;
    verdict = ProxyVerdict::Unavailable("hold expired after " + std::to_string(deadline_.count()) +
                                        " ms");
  }
  cv_.notify_all();
  return verdict;
}

// ---- The relay -----------------------------------------------------------------------------

class Relay;

struct CriFaultProxy::Impl : public grpc::CallbackGenericService {
  CriFaultProxyOptions options;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<grpc::GenericStub> stub;
  std::unique_ptr<grpc::Server> server;

  mutable std::mutex mu;
  std::map<std::pair<std::string, ProxyPoint>, ProxyHook> hooks;
  std::vector<std::weak_ptr<CallHold>> holds;
  std::map<std::string, int> calls;
  uint64_t serial = 0;
  int in_flight = 0;
  bool shut_down = false;
  // One thread per forwarded call (hooks may block); finished ones are joined by the next call
  // and at shutdown.
  std::map<std::thread::id, std::thread> threads;
  std::vector<std::thread::id> finished;

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override;

  ProxyHook HookFor(const std::string& method, ProxyPoint point) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = hooks.find({method, point});
    return it == hooks.end() ? ProxyHook() : it->second;
  }

  void WakeHolds() {
    std::vector<std::shared_ptr<CallHold>> live;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (const auto& w : holds) {
        if (auto h = w.lock()) live.push_back(std::move(h));
      }
    }
    for (const auto& h : live) h->Wake();
  }

  void Spawn(std::function<void()> work) {
    std::vector<std::thread> done;
    std::lock_guard<std::mutex> lock(mu);
    for (auto id : finished) {
      auto it = threads.find(id);
      if (it != threads.end()) {
        done.push_back(std::move(it->second));
        threads.erase(it);
      }
    }
    finished.clear();
    std::thread t([this, work = std::move(work)] {
      work();
      std::lock_guard<std::mutex> l(mu);
      finished.push_back(std::this_thread::get_id());
    });
    threads.emplace(t.get_id(), std::move(t));
    // The finished threads have returned from work(); joining them only waits for their exit.
    for (auto& d : done) d.join();
  }

  void RelayDone() {
    std::lock_guard<std::mutex> lock(mu);
    --in_flight;
  }
};

class Relay : public grpc::ServerGenericBidiReactor {
 public:
  Relay(CriFaultProxy::Impl* impl, grpc::GenericCallbackServerContext* ctx, uint64_t serial)
      : impl_(impl), ctx_(ctx), method_(ctx->method()), serial_(serial) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "no request arrived"));
      return;
    }
    impl_->Spawn([this] { Forward(); });
  }

  void OnCancel() override {
    cancelled_ = true;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (outbound_ != nullptr) outbound_->TryCancel();
    }
    impl_->WakeHolds();
  }

  void OnDone() override {
    impl_->RelayDone();
    delete this;
  }

 private:
  // On its own thread: hooks, the upstream call, the answer. Ends with Finish (always).
  void Forward() {
    ProxyCall call;
    call.method = method_;
    call.serial = serial_;
    call.cancelled = [this] { return cancelled_.load(); };
    auto failed = [&](const ProxyVerdict& v) {
      Finish(grpc::Status(static_cast<grpc::StatusCode>(v.fail->first), v.fail->second));
    };

    call.point = ProxyPoint::kBeforeForward;
    if (ProxyHook hook = impl_->HookFor(method_, call.point)) {
      ProxyVerdict v = hook(call);
      if (v.fail) return failed(v);
    }

    grpc::ClientContext out;
    auto deadline = ctx_->deadline();
    auto fallback = std::chrono::system_clock::now() + impl_->options.default_deadline;
    out.set_deadline(deadline < fallback ? deadline : fallback);
    for (const auto& [key, value] : ctx_->client_metadata()) {
      std::string k = ToString(key);
      if (ForwardedHeader(k)) out.AddMetadata(k, ToString(value));
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cancelled_) {
        Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the caller cancelled the call"));
        return;
      }
      outbound_ = &out;
    }
    std::promise<grpc::Status> answered;
    auto answer = answered.get_future();
    impl_->stub->UnaryCall(&out, method_, grpc::StubOptions(), &request_, &response_,
                           [&answered](grpc::Status s) { answered.set_value(std::move(s)); });
    // The upstream call carries its deadline; this bound only guards against a lost callback.
    auto bound = std::chrono::duration_cast<milliseconds>(out.deadline() -
                                                          std::chrono::system_clock::now()) +
                 std::chrono::seconds(10);
    if (answer.wait_for(std::max(bound, milliseconds(0))) != std::future_status::ready) {
      out.TryCancel();
    }
    grpc::Status status = answer.get();  // after TryCancel the callback comes promptly
    {
      std::lock_guard<std::mutex> lock(mu_);
      outbound_ = nullptr;
    }

    call.point = ProxyPoint::kAfterAnswer;
    call.answer_code = static_cast<int>(status.error_code());
    call.answer_message = status.error_message();
    if (ProxyHook hook = impl_->HookFor(method_, call.point)) {
      ProxyVerdict v = hook(call);
      if (v.fail) return failed(v);
    }
    if (!status.ok()) {
      Finish(status);
      return;
    }
    StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
  }

  CriFaultProxy::Impl* impl_;
  grpc::GenericCallbackServerContext* ctx_;
  std::string method_;
  uint64_t serial_;
  grpc::ByteBuffer request_, response_;
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  grpc::ClientContext* outbound_ = nullptr;
};

grpc::ServerGenericBidiReactor* CriFaultProxy::Impl::CreateReactor(
    grpc::GenericCallbackServerContext* ctx) {
  uint64_t n;
  {
    std::lock_guard<std::mutex> lock(mu);
    n = ++serial;
    ++calls[ctx->method()];
    ++in_flight;
  }
  return new Relay(this, ctx, n);
}

// ---- CriFaultProxy -------------------------------------------------------------------------

CriFaultProxy::CriFaultProxy(std::string listen_path)
    : listen_path_(std::move(listen_path)), impl_(std::make_unique<Impl>()) {}

Result<std::unique_ptr<CriFaultProxy>> CriFaultProxy::Start(const CriFaultProxyOptions& options) {
  if (options.listen_path.empty() || options.listen_path[0] != '/' ||
      options.listen_path.size() > 107) {
    return InvalidArgument("proxy socket '" + options.listen_path +
                           "' must be an absolute path of at most 107 bytes");
  }
  if (options.upstream_endpoint.rfind("unix:///", 0) != 0) {
    return InvalidArgument("upstream '" + options.upstream_endpoint + "' is not unix:///PATH");
  }
  if (unlink(options.listen_path.c_str()) != 0 && errno != ENOENT) {
    return ErrnoStatus("remove old socket '" + options.listen_path + "'", errno);
  }
  std::unique_ptr<CriFaultProxy> proxy(new CriFaultProxy(options.listen_path));
  Impl& impl = *proxy->impl_;
  impl.options = options;
  // nodelet's own channel to the runtime (its quick reconnects: the proxy adds no back-off of
  // its own to a restart window), with room for any message: the client's limit is under test.
  auto upstream = cri::ParseCriEndpoint(options.upstream_endpoint);
  if (!upstream.ok()) return upstream.status();
  impl.channel = cri::RuntimeChannel(*upstream, kMaxMessageBytes);
  if (impl.channel == nullptr)
    return Internal("cannot create a channel to " + options.upstream_endpoint);
  impl.stub = std::make_unique<grpc::GenericStub>(impl.channel);

  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + options.listen_path, grpc::InsecureServerCredentials());
  builder.RegisterCallbackGenericService(&impl);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  impl.server = builder.BuildAndStart();
  if (impl.server == nullptr) {
    return Internal("cannot serve gRPC on '" + options.listen_path + "'");
  }
  return proxy;
}

CriFaultProxy::~CriFaultProxy() { Shutdown(); }

void CriFaultProxy::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->shut_down) return;
    impl_->shut_down = true;
  }
  // Cancels every call in flight (OnCancel: upstream cancelled, holds woken), then waits for
  // their reactors to finish.
  impl_->server->Shutdown(std::chrono::system_clock::now());
  std::map<std::thread::id, std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    threads.swap(impl_->threads);
  }
  for (auto& [id, t] : threads) t.join();
  impl_->server->Wait();
  unlink(listen_path_.c_str());
}

void CriFaultProxy::SetHook(const std::string& method, ProxyPoint point, ProxyHook hook) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (hook) {
    impl_->hooks[{method, point}] = std::move(hook);
  } else {
    impl_->hooks.erase({method, point});
  }
}

std::shared_ptr<CallHold> CriFaultProxy::Hold(const std::string& method, ProxyPoint point,
                                              milliseconds deadline) {
  auto hold = std::make_shared<CallHold>(deadline);
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->holds.push_back(hold);
  }
  SetHook(method, point, [hold](const ProxyCall& call) { return hold->Run(call); });
  return hold;
}

int CriFaultProxy::Calls(const std::string& method) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->calls.find(method);
  return it == impl_->calls.end() ? 0 : it->second;
}

int CriFaultProxy::InFlight() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->in_flight;
}

}  // namespace nodelet::testing
