// GrpcCriClient against an in-process gRPC server on a unix socket in a temp dir: requests
// reach the server intact, errors keep the gRPC code and message, deadlines are enforced, bad
// responses are refused, and wait-for-ready waits for a runtime that is not there yet.
#include "lib/cri/grpc_cri_client.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>

#include "lib/cri/api.grpc.pb.h"
#include "lib/cri/containerd_tasks.h"
#include "tests/testing/harness.h"

namespace nodelet::cri {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// A scripted runtime: answers from fields the test sets, and can block a call until released.
class ScriptedRuntime final : public v1::RuntimeService::Service, public v1::ImageService::Service {
 public:
  grpc::Status Version(grpc::ServerContext*, const v1::VersionRequest* request,
                       v1::VersionResponse* response) override {
    response->set_version(request->version());
    response->set_runtime_name("scripted");
    response->set_runtime_api_version("v1");
    return grpc::Status::OK;
  }
  grpc::Status RunPodSandbox(grpc::ServerContext*, const v1::RunPodSandboxRequest* request,
                             v1::RunPodSandboxResponse* response) override {
    std::lock_guard<std::mutex> lock(mu);
    last_sandbox_config = request->config();
    last_runtime_handler = request->runtime_handler();
    response->set_pod_sandbox_id(sandbox_id_to_return);
    return grpc::Status::OK;
  }
  grpc::Status StopContainer(grpc::ServerContext*, const v1::StopContainerRequest* request,
                             v1::StopContainerResponse*) override {
    std::lock_guard<std::mutex> lock(mu);
    last_stop = *request;
    return grpc::Status::OK;
  }
  grpc::Status ContainerStatus(grpc::ServerContext*, const v1::ContainerStatusRequest* request,
                               v1::ContainerStatusResponse* response) override {
    if (request->container_id() == "broken") {
      response->mutable_status();  // no id, no metadata
      return grpc::Status::OK;
    }
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        "an error occurred when try to find container \"" +
                            request->container_id() + "\": not found");
  }
  grpc::Status ListContainers(grpc::ServerContext*, const v1::ListContainersRequest* request,
                              v1::ListContainersResponse* response) override {
    std::unique_lock<std::mutex> lock(mu);
    if (block_lists) {
      ++blocked;
      cv.notify_all();
      // Until the test (or the server's destructor) releases it.
      cv.wait(lock, [&] { return !block_lists; });
      --blocked;
      return grpc::Status(grpc::StatusCode::CANCELLED, "released");
    }
    auto* c = response->add_containers();
    c->set_id(request->filter().id());
    c->set_pod_sandbox_id(request->filter().pod_sandbox_id());
    c->set_state(request->filter().state().state());
    return grpc::Status::OK;
  }
  grpc::Status ExecSync(grpc::ServerContext*, const v1::ExecSyncRequest* request,
                        v1::ExecSyncResponse* response) override {
    std::string joined;
    for (const auto& arg : request->cmd()) joined += arg + " ";
    response->set_stdout(joined);
    response->set_exit_code(static_cast<int32_t>(request->timeout()));
    return grpc::Status::OK;
  }
  grpc::Status ImageStatus(grpc::ServerContext*, const v1::ImageStatusRequest* request,
                           v1::ImageStatusResponse* response) override {
    if (request->image().image() == "present") {
      response->mutable_image()->set_id("sha256:abc");
      response->mutable_image()->add_repo_tags("present:latest");
    }
    return grpc::Status::OK;
  }
  grpc::Status PullImage(grpc::ServerContext* context, const v1::PullImageRequest* request,
                         v1::PullImageResponse*) override {
    if (request->image().image() == "held:1") {
      // Until the client cancels (a server learns it by asking), or 20 s.
      std::unique_lock<std::mutex> lock(mu);
      ++held_pulls;
      cv.notify_all();
      const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!context->IsCancelled() && std::chrono::steady_clock::now() < end) {
        cv.wait_for(lock, milliseconds(20));
      }
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "never answered");
    }
    return grpc::Status(grpc::StatusCode::UNKNOWN,
                        "failed to resolve reference \"" + request->image().image() + "\"");
  }

  std::mutex mu;
  std::condition_variable cv;
  bool block_lists = false;
  int blocked = 0;
  int held_pulls = 0;
  std::string sandbox_id_to_return = "sandbox-1";
  v1::PodSandboxConfig last_sandbox_config;
  std::string last_runtime_handler;
  v1::StopContainerRequest last_stop;
};

class ScriptedServer {
 public:
  explicit ScriptedServer(const std::string& socket_path) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix://" + socket_path, grpc::InsecureServerCredentials());
    builder.RegisterService(static_cast<v1::RuntimeService::Service*>(&runtime));
    builder.RegisterService(static_cast<v1::ImageService::Service*>(&runtime));
    server_ = builder.BuildAndStart();
    if (server_ == nullptr) throw std::runtime_error("cannot start the scripted gRPC server");
  }
  ~ScriptedServer() {
    {
      std::lock_guard<std::mutex> lock(runtime.mu);
      runtime.block_lists = false;
      runtime.cv.notify_all();
    }
    server_->Shutdown(std::chrono::system_clock::now() + milliseconds(2000));
  }
  ScriptedRuntime runtime;

 private:
  std::unique_ptr<grpc::Server> server_;
};

class GrpcCriClientTest : public ::testing::Test {
 protected:
  std::string Endpoint() const { return "unix://" + dir_.Sub("cri.sock"); }
  std::unique_ptr<GrpcCriClient> Client(CriTimeouts timeouts = {}) {
    auto client = GrpcCriClient::Create(Endpoint(), timeouts);
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    return std::move(client).value();
  }
  nodelet::testing::TempDir dir_;
};

TEST(ParseCriEndpoint, AcceptsOnlyAbsoluteUnixSockets) {
  auto path = ParseCriEndpoint("unix:///run/containerd/containerd.sock");
  ASSERT_TRUE(path.ok());
  EXPECT_EQ(*path, "/run/containerd/containerd.sock");
  for (const char* bad : {"", "/run/containerd/containerd.sock", "tcp://127.0.0.1:1234", "unix://",
                          "unix://relative.sock"}) {
    auto r = ParseCriEndpoint(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr("CRI endpoint '" + std::string(bad) + "'"));
  }
  EXPECT_FALSE(ParseCriEndpoint("unix:///" + std::string(200, 'x')).ok());
  EXPECT_FALSE(GrpcCriClient::Create("tcp://localhost:1").ok());
}

TEST_F(GrpcCriClientTest, RequestsAndResponsesCrossTheWire) {
  ScriptedServer server(dir_.Sub("cri.sock"));
  auto client = Client();

  auto version = client->Version();
  ASSERT_TRUE(version.ok()) << version.status().ToString();
  EXPECT_EQ(version->version(), kCriApiVersion);
  EXPECT_EQ(version->runtime_name(), "scripted");

  v1::PodSandboxConfig config;
  config.mutable_metadata()->set_name("web");
  config.mutable_metadata()->set_uid("uid-1");
  (*config.mutable_labels())["a"] = "b";
  config.mutable_linux()->mutable_security_context()->mutable_namespace_options()->set_network(
      v1::NODE);
  auto sandbox = client->RunPodSandbox(config, "runc");
  ASSERT_TRUE(sandbox.ok());
  EXPECT_EQ(*sandbox, "sandbox-1");
  {
    std::lock_guard<std::mutex> lock(server.runtime.mu);
    EXPECT_EQ(server.runtime.last_sandbox_config.SerializeAsString(), config.SerializeAsString());
    EXPECT_EQ(server.runtime.last_runtime_handler, "runc");
  }

  ASSERT_TRUE(client->StopContainer("c1", 30).ok());
  {
    std::lock_guard<std::mutex> lock(server.runtime.mu);
    EXPECT_EQ(server.runtime.last_stop.container_id(), "c1");
    EXPECT_EQ(server.runtime.last_stop.timeout(), 30);
  }

  v1::ContainerFilter filter;
  filter.set_id("abc");
  filter.set_pod_sandbox_id("sb");
  filter.mutable_state()->set_state(v1::CONTAINER_EXITED);
  auto containers = client->ListContainers(filter);
  ASSERT_TRUE(containers.ok());
  ASSERT_EQ(containers->size(), 1u);
  EXPECT_EQ(containers->at(0).id(), "abc");
  EXPECT_EQ(containers->at(0).pod_sandbox_id(), "sb");
  EXPECT_EQ(containers->at(0).state(), v1::CONTAINER_EXITED);

  auto exec = client->ExecSync("c1", {"echo", "hi"}, 7);
  ASSERT_TRUE(exec.ok());
  EXPECT_EQ(exec->stdout(), "echo hi ");
  EXPECT_EQ(exec->exit_code(), 7);
  EXPECT_EQ(client->ExecSync("c1", {}, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client->StopContainer("c1", -1).code(), StatusCode::kInvalidArgument);

  v1::ImageSpec absent;
  absent.set_image("absent");
  auto absent_status = client->ImageStatus(absent, false);
  ASSERT_TRUE(absent_status.ok());
  EXPECT_FALSE(absent_status->has_image());
  v1::ImageSpec present;
  present.set_image("present");
  EXPECT_EQ(client->ImageStatus(present, false)->image().id(), "sha256:abc");
}

TEST_F(GrpcCriClientTest, ErrorsCarryTheCallTheGrpcCodeAndTheMessage) {
  ScriptedServer server(dir_.Sub("cri.sock"));
  auto client = Client();
  auto status = client->ContainerStatus("nope", false);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(status.status().message(),
            "CRI ContainerStatus failed: NOT_FOUND: an error occurred when try to find container "
            "\"nope\": not found");

  v1::ImageSpec image;
  image.set_image("example.com/x:1");
  auto pull = client->PullImage(image, nullptr, nullptr, nullptr);
  ASSERT_FALSE(pull.ok());
  EXPECT_EQ(pull.status().code(), StatusCode::kInternal);
  EXPECT_THAT(pull.status().message(),
              StartsWith("CRI PullImage failed: UNKNOWN: failed to resolve"));
}

TEST_F(GrpcCriClientTest, MalformedResponsesAreRefused) {
  ScriptedServer server(dir_.Sub("cri.sock"));
  auto client = Client();
  auto broken = client->ContainerStatus("broken", false);
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(broken.status().message(), HasSubstr("without id or metadata"));

  {
    std::lock_guard<std::mutex> lock(server.runtime.mu);
    server.runtime.sandbox_id_to_return = "";
  }
  auto sandbox = client->RunPodSandbox(v1::PodSandboxConfig(), "");
  ASSERT_FALSE(sandbox.ok());
  EXPECT_THAT(sandbox.status().message(), HasSubstr("empty sandbox id"));
}

TEST_F(GrpcCriClientTest, AHungCallEndsAtItsDeadline) {
  ScriptedServer server(dir_.Sub("cri.sock"));
  {
    std::lock_guard<std::mutex> lock(server.runtime.mu);
    server.runtime.block_lists = true;
  }
  CriTimeouts timeouts;
  timeouts.query = milliseconds(300);
  auto client = Client(timeouts);
  auto start = std::chrono::steady_clock::now();
  auto list = client->ListContainers({});
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(list.ok());
  EXPECT_EQ(list.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_THAT(list.status().message(),
              StartsWith("CRI ListContainers failed: DEADLINE_EXCEEDED: "));
  // It waited for its deadline (not failed at once); gRPC's timers run on gRPC's own clock and
  // were seen firing a millisecond before the test's steady clock says 300 ms.
  EXPECT_GE(took, milliseconds(250));
  // Other calls are not held up by the hung one's deadline.
  EXPECT_TRUE(client->Version().ok());
}

TEST_F(GrpcCriClientTest, APullHasNoDeadlineAndEndsWhenCancelled) {
  ScriptedServer server(dir_.Sub("cri.sock"));
  CriTimeouts timeouts;
  timeouts.call = milliseconds(100);
  timeouts.query = milliseconds(100);
  auto client = Client(timeouts);
  CallCancel cancel;
  v1::ImageSpec image;
  image.set_image("held:1");
  auto pull = std::async(std::launch::async,
                         [&] { return client->PullImage(image, nullptr, nullptr, &cancel); });
  {
    std::unique_lock<std::mutex> lock(server.runtime.mu);
    ASSERT_TRUE(server.runtime.cv.wait_for(lock, std::chrono::seconds(10),
                                           [&] { return server.runtime.held_pulls == 1; }));
  }
  // Three times the deadline of the other calls that change state, it is still in flight.
  EXPECT_EQ(pull.wait_for(milliseconds(300)), std::future_status::timeout);
  cancel.Cancel();
  ASSERT_EQ(pull.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  auto pulled = pull.get();
  ASSERT_FALSE(pulled.ok());
  EXPECT_EQ(pulled.status().code(), StatusCode::kCancelled);
  EXPECT_THAT(pulled.status().message(), StartsWith("CRI PullImage failed: CANCELLED"));
  // Cancelling is final: a pull given the same canceller ends at once.
  auto again = client->PullImage(image, nullptr, nullptr, &cancel);
  EXPECT_EQ(again.status().code(), StatusCode::kCancelled);
}

TEST_F(GrpcCriClientTest, NoRuntimeIsUnavailable) {
  auto client = Client();
  auto version = client->Version();
  ASSERT_FALSE(version.ok());
  EXPECT_EQ(version.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(version.status().message(), StartsWith("CRI Version failed: UNAVAILABLE: "));

  auto waited = client->WaitForReady(milliseconds(200));
  ASSERT_FALSE(waited.ok());
  EXPECT_EQ(waited.status().code(), StatusCode::kDeadlineExceeded);
}

TEST_F(GrpcCriClientTest, WaitForReadyWaitsForTheRuntimeToComeUp) {
  auto client = Client();
  auto waiting =
      std::async(std::launch::async, [&] { return client->WaitForReady(milliseconds(20000)); });
  // The runtime appears while the call waits (or before it starts: either way it must succeed).
  ScriptedServer server(dir_.Sub("cri.sock"));
  auto version = waiting.get();
  ASSERT_TRUE(version.ok()) << version.status().ToString();
  EXPECT_EQ(version->runtime_name(), "scripted");
}

TEST_F(GrpcCriClientTest, ReconnectsAfterTheRuntimeRestarts) {
  auto client = Client();
  {
    ScriptedServer server(dir_.Sub("cri.sock"));
    ASSERT_TRUE(client->Version().ok());
  }
  EXPECT_FALSE(client->Version().ok());
  ScriptedServer again(dir_.Sub("cri.sock"));
  EXPECT_TRUE(client->WaitForReady(milliseconds(20000)).ok());
  EXPECT_TRUE(client->Version().ok());
}

}  // namespace
}  // namespace nodelet::cri

namespace nodelet::cri {
namespace {

// containerd's removal error for a task it kept after a cancelled start names the container.
TEST(StuckTaskContainerIdTest, ReadsTheIdFromContainerdsRemovalError) {
  const std::string id(64, 'a');
  Status removal(StatusCode::kFailedPrecondition,
                 "CRI RemovePodSandbox failed: FAILED_PRECONDITION: failed to remove container \"" +
                     id + "\": failed to delete containerd container \"" + id +
                     "\": cannot delete running task " + id + ": failed precondition");
  auto got = StuckTaskContainerId(removal);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, id);
  EXPECT_FALSE(StuckTaskContainerId(Status::Ok()).has_value());
  EXPECT_FALSE(StuckTaskContainerId(Status(StatusCode::kFailedPrecondition,
                                           "container is in starting state, can't be removed"))
                   .has_value());
  // A truncated id is not taken for one.
  EXPECT_FALSE(StuckTaskContainerId(Status(StatusCode::kFailedPrecondition,
                                           "cannot delete running task abc: failed precondition"))
                   .has_value());
}

}  // namespace
}  // namespace nodelet::cri
