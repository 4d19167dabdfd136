// GrpcProbe against real gRPC servers on loopback: gRPC's own health service (SERVING and
// NOT_SERVING per service name), a port where nothing listens, and a listener that never
// answers (the deadline ends the attempt).
#include "svc-podworkerd/grpc_probe.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>

// Debian's gRPC and abseil are not built with ThreadSanitizer: with a gRPC server in the same
// process, TSan reports races between gRPC's own threads inside those libraries. These tests run
// in the other trees (the probe itself is exercised under TSan through ProbeManager's tests).
#if defined(__SANITIZE_THREAD__)
#define NODELET_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define NODELET_UNDER_TSAN 1
#endif
#endif

namespace nodelet::podworkerd {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

class GrpcProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
#ifdef NODELET_UNDER_TSAN
    GTEST_SKIP() << "an in-process gRPC server under TSan (uninstrumented Debian gRPC)";
#endif
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    // A server needs one service of its own; the health service is gRPC's.
    builder.RegisterCallbackGenericService(&generic_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
    server_->GetHealthCheckService()->SetServingStatus("ready", true);
    server_->GetHealthCheckService()->SetServingStatus("sick", false);
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + 2s);
  }
  grpc::CallbackGenericService generic_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(GrpcProbeTest, ServingNotServingAndUnknownServices) {
  EXPECT_TRUE(GrpcProbe("127.0.0.1", port_, "", 2000ms).success);
  EXPECT_TRUE(GrpcProbe("127.0.0.1", port_, "ready", 2000ms).success);
  ProbeOutcome sick = GrpcProbe("127.0.0.1", port_, "sick", 2000ms);
  EXPECT_FALSE(sick.success);
  EXPECT_EQ(sick.message, "service unhealthy (responded with \"NOT_SERVING\")");
  ProbeOutcome unknown = GrpcProbe("127.0.0.1", port_, "nobody", 2000ms);
  EXPECT_FALSE(unknown.success);
  EXPECT_THAT(unknown.message, HasSubstr("health rpc probe failed"));
}

TEST(GrpcProbeFailureTest, NothingListensOrNothingAnswersWithinTheDeadline) {
#ifdef NODELET_UNDER_TSAN
  GTEST_SKIP() << "gRPC's channel threads under TSan (uninstrumented Debian gRPC)";
#endif
  // A port that was just free: the connection is refused until the deadline.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  auto began = std::chrono::steady_clock::now();
  ProbeOutcome refused = GrpcProbe("127.0.0.1", port, "", 500ms);
  EXPECT_FALSE(refused.success);
  EXPECT_LT(std::chrono::steady_clock::now() - began, 5s);

  // A listener that accepts (the kernel's backlog) and never says a word.
  ASSERT_EQ(listen(fd, 4), 0);
  began = std::chrono::steady_clock::now();
  ProbeOutcome silent = GrpcProbe("127.0.0.1", port, "", 500ms);
  EXPECT_FALSE(silent.success);
  EXPECT_THAT(silent.message, HasSubstr("timeout"));
  EXPECT_LT(std::chrono::steady_clock::now() - began, 5s);
  close(fd);
}

}  // namespace
}  // namespace nodelet::podworkerd
