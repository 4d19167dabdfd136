// CriFaultProxy (tests/testing/cri_fault_proxy.h) between nodelet's CRI client and an in-process
// runtime on unix sockets in a temp dir: calls and their answers and errors pass unchanged, with
// their metadata; a hold keeps a call at either point until released, cancelled or expired; a
// caller that gives up cancels the runtime's call; shutdown ends every hold.
#include "tests/testing/cri_fault_proxy.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>

#include "lib/cri/api.grpc.pb.h"
#include "lib/cri/grpc_cri_client.h"
#include "tests/testing/harness.h"

namespace nodelet::testing {
namespace {

namespace v1 = ::runtime::v1;
using std::chrono::milliseconds;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr char kRunPodSandbox[] = "/runtime.v1.RuntimeService/RunPodSandbox";
constexpr char kStopPodSandbox[] = "/runtime.v1.RuntimeService/StopPodSandbox";

// A runtime that counts sandboxes, records metadata, and never answers StopPodSandbox("hang")
// until the call is cancelled.
class FakeRuntime final : public v1::RuntimeService::CallbackService {
 public:
  grpc::ServerUnaryReactor* Version(grpc::CallbackServerContext* ctx,
                                    const v1::VersionRequest* request,
                                    v1::VersionResponse* response) override {
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = ctx->client_metadata().find("containerd-namespace");
      if (it != ctx->client_metadata().end())
        namespace_seen.assign(it->second.data(), it->second.size());
    }
    response->set_version(request->version());
    response->set_runtime_name("fake");
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }
  grpc::ServerUnaryReactor* RunPodSandbox(grpc::CallbackServerContext* ctx,
                                          const v1::RunPodSandboxRequest* request,
                                          v1::RunPodSandboxResponse* response) override {
    {
      std::lock_guard<std::mutex> lock(mu);
      ++sandboxes_made;
    }
    response->set_pod_sandbox_id("sb-" + request->config().metadata().name());
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }
  grpc::ServerUnaryReactor* RemovePodSandbox(grpc::CallbackServerContext* ctx,
                                             const v1::RemovePodSandboxRequest* request,
                                             v1::RemovePodSandboxResponse*) override {
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND,
                           "sandbox \"" + request->pod_sandbox_id() + "\" not found"));
    return r;
  }
  grpc::ServerUnaryReactor* StopPodSandbox(grpc::CallbackServerContext*,
                                           const v1::StopPodSandboxRequest*,
                                           v1::StopPodSandboxResponse*) override {
    class Hang : public grpc::ServerUnaryReactor {
     public:
      explicit Hang(FakeRuntime* runtime) : runtime_(runtime) {}
      void OnCancel() override {
        {
          std::lock_guard<std::mutex> lock(runtime_->mu);
          ++runtime_->cancelled_calls;
        }
        runtime_->cv.notify_all();
        Finish(grpc::Status::CANCELLED);
      }
      void OnDone() override { delete this; }

     private:
      FakeRuntime* runtime_;
    };
    return new Hang(this);
  }

  int SandboxesMade() {
    std::lock_guard<std::mutex> lock(mu);
    return sandboxes_made;
  }

  std::mutex mu;
  std::condition_variable cv;
  int sandboxes_made = 0;
  int cancelled_calls = 0;
  std::string namespace_seen;
};

class CriFaultProxyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix://" + dir_.Sub("runtime.sock"),
                             grpc::InsecureServerCredentials());
    builder.RegisterService(&runtime_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    StartProxy("unix://" + dir_.Sub("runtime.sock"));
  }
  void TearDown() override {
    proxy_.reset();
    server_->Shutdown(std::chrono::system_clock::now());
  }
  void StartProxy(const std::string& upstream) {
    proxy_.reset();
    CriFaultProxyOptions options;
    options.listen_path = dir_.Sub("proxy.sock");
    options.upstream_endpoint = upstream;
    auto proxy = CriFaultProxy::Start(options);
    ASSERT_TRUE(proxy.ok()) << proxy.status().ToString();
    proxy_ = std::move(*proxy);
  }
  std::unique_ptr<cri::GrpcCriClient> Client(milliseconds call_timeout = 10s) {
    cri::CriTimeouts timeouts;
    timeouts.call = call_timeout;
    timeouts.query = call_timeout;
    auto client = cri::GrpcCriClient::Create(proxy_->endpoint(), timeouts);
    EXPECT_TRUE(client.ok());
    return client.ok() ? std::move(*client) : nullptr;
  }
  static v1::PodSandboxConfig Sandbox(const std::string& name) {
    v1::PodSandboxConfig c;
    c.mutable_metadata()->set_name(name);
    return c;
  }

  TempDir dir_;
  FakeRuntime runtime_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<CriFaultProxy> proxy_;
};

TEST_F(CriFaultProxyTest, ForwardsCallsAnswersAndErrors) {
  auto client = Client();
  auto version = client->Version();
  ASSERT_TRUE(version.ok()) << version.status().ToString();
  EXPECT_EQ(version->runtime_name(), "fake");
  auto id = client->RunPodSandbox(Sandbox("web"), "");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(*id, "sb-web");
  Status removed = client->RemovePodSandbox("gone");
  EXPECT_EQ(removed.code(), StatusCode::kNotFound);
  EXPECT_THAT(removed.message(), HasSubstr("sandbox \"gone\" not found"));
  EXPECT_EQ(proxy_->Calls(kRunPodSandbox), 1);
  EXPECT_EQ(proxy_->Calls("/runtime.v1.RuntimeService/Version"), 1);
  EXPECT_EQ(runtime_.SandboxesMade(), 1);
}

// containerd's own services read the namespace from the call's metadata.
TEST_F(CriFaultProxyTest, ForwardsMetadata) {
  auto channel = grpc::CreateChannel(proxy_->endpoint(), grpc::InsecureChannelCredentials());
  auto stub = v1::RuntimeService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.AddMetadata("containerd-namespace", "k8s.io");
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  v1::VersionRequest request;
  v1::VersionResponse response;
  ASSERT_TRUE(stub->Version(&ctx, request, &response).ok());
  std::lock_guard<std::mutex> lock(runtime_.mu);
  EXPECT_EQ(runtime_.namespace_seen, "k8s.io");
}

TEST_F(CriFaultProxyTest, HoldBeforeForwardKeepsTheRuntimeUnawareUntilReleased) {
  auto hold = proxy_->Hold(kRunPodSandbox, ProxyPoint::kBeforeForward, 30s);
  auto client = Client();
  auto call =
      std::async(std::launch::async, [&] { return client->RunPodSandbox(Sandbox("a"), ""); });
  ASSERT_TRUE(hold->WaitHeld(10s));
  EXPECT_EQ(hold->held_call().method, kRunPodSandbox);
  EXPECT_EQ(runtime_.SandboxesMade(), 0);
  EXPECT_EQ(proxy_->InFlight(), 1);
  hold->Release();
  auto id = call.get();
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(*id, "sb-a");
  EXPECT_EQ(runtime_.SandboxesMade(), 1);
  EXPECT_EQ(hold->outcome(), CallHold::Outcome::kReleased);
  // Only the first call is held.
  EXPECT_TRUE(client->RunPodSandbox(Sandbox("b"), "").ok());
}

// The runtime did the work, the caller never hears of it: the runtime-restart window.
TEST_F(CriFaultProxyTest, HoldAfterAnswerThenFailAsADeadConnection) {
  auto hold = proxy_->Hold(kRunPodSandbox, ProxyPoint::kAfterAnswer, 30s);
  auto client = Client();
  auto call =
      std::async(std::launch::async, [&] { return client->RunPodSandbox(Sandbox("a"), ""); });
  ASSERT_TRUE(hold->WaitHeld(10s));
  EXPECT_EQ(runtime_.SandboxesMade(), 1);
  EXPECT_EQ(hold->held_call().answer_code, 0);
  hold->Release(ProxyVerdict::Unavailable());
  auto id = call.get();
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(id.status().message(), HasSubstr("connection to the runtime lost"));
}

TEST_F(CriFaultProxyTest, HoldExpiresAtItsDeadline) {
  auto hold = proxy_->Hold(kRunPodSandbox, ProxyPoint::kBeforeForward, 200ms);
  auto client = Client();
  auto id = client->RunPodSandbox(Sandbox("a"), "");
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(id.status().message(), HasSubstr("hold expired"));
  EXPECT_EQ(hold->outcome(), CallHold::Outcome::kExpired);
  EXPECT_EQ(runtime_.SandboxesMade(), 0);
}

TEST_F(CriFaultProxyTest, CallerGivingUpCancelsTheRuntimesCall) {
  auto client = Client(300ms);
  Status stopped = client->StopPodSandbox("hang");
  EXPECT_EQ(stopped.code(), StatusCode::kDeadlineExceeded) << stopped.ToString();
  std::unique_lock<std::mutex> lock(runtime_.mu);
  EXPECT_TRUE(runtime_.cv.wait_for(lock, 10s, [&] { return runtime_.cancelled_calls == 1; }));
}

TEST_F(CriFaultProxyTest, CallerGivingUpEndsTheHold) {
  auto hold = proxy_->Hold(kRunPodSandbox, ProxyPoint::kBeforeForward, 60s);
  auto client = Client(300ms);
  auto id = client->RunPodSandbox(Sandbox("a"), "");
  EXPECT_EQ(id.status().code(), StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(hold->WaitDone(10s));
  EXPECT_EQ(hold->outcome(), CallHold::Outcome::kCancelled);
  EXPECT_EQ(runtime_.SandboxesMade(), 0);
}

TEST_F(CriFaultProxyTest, HookCanFailACall) {
  proxy_->SetHook(kStopPodSandbox, ProxyPoint::kBeforeForward,
                  [](const ProxyCall&) { return ProxyVerdict::Unavailable("injected"); });
  auto client = Client();
  Status stopped = client->StopPodSandbox("hang");
  EXPECT_EQ(stopped.code(), StatusCode::kUnavailable);
  EXPECT_THAT(stopped.message(), HasSubstr("injected"));
  proxy_->SetHook(kStopPodSandbox, ProxyPoint::kBeforeForward, nullptr);
  EXPECT_TRUE(client->RunPodSandbox(Sandbox("a"), "").ok());
}

TEST_F(CriFaultProxyTest, RuntimeDownIsUnavailable) {
  StartProxy("unix://" + dir_.Sub("nothing.sock"));
  auto client = Client();
  auto version = client->Version();
  ASSERT_FALSE(version.ok());
  EXPECT_EQ(version.status().code(), StatusCode::kUnavailable);
}

TEST_F(CriFaultProxyTest, ShutdownEndsHeldCalls) {
  auto hold = proxy_->Hold(kRunPodSandbox, ProxyPoint::kAfterAnswer, 60s);
  auto client = Client();
  auto call =
      std::async(std::launch::async, [&] { return client->RunPodSandbox(Sandbox("a"), ""); });
  ASSERT_TRUE(hold->WaitHeld(10s));
  auto started = std::chrono::steady_clock::now();
  proxy_.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - started, 10s);
  EXPECT_FALSE(call.get().ok());
  EXPECT_EQ(hold->outcome(), CallHold::Outcome::kCancelled);
}

}  // namespace
}  // namespace nodelet::testing
