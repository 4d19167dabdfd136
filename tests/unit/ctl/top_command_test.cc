// `nodeletctl top`: kubectl's figures and columns from a Summary, and the small HTTP client that
// fetches it, against a one-connection server in the test (an answer, an error, silence).
#include "ctl/top_command.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "lib/common/clock.h"
#include "lib/ipc/endpoints.h"
#include "tests/testing/harness.h"

namespace nodelet::ctl {
namespace {

using namespace std::chrono_literals;

const char* kSummary = R"({
  "node": {"nodeName": "node1",
           "cpu": {"usageNanoCores": 250000000, "usageCoreNanoSeconds": 9},
           "memory": {"workingSetBytes": 1073741824, "availableBytes": 1}},
  "pods": [
    {"podRef": {"name": "web-node1", "namespace": "default", "uid": "u1"},
     "cpu": {"usageNanoCores": 4200000}, "memory": {"workingSetBytes": 13107200},
     "containers": [
       {"name": "app", "cpu": {"usageNanoCores": 4000000}, "memory": {"workingSetBytes": 12582912}},
       {"name": "side", "cpu": {"usageCoreNanoSeconds": 5}, "memory": {"workingSetBytes": 1}}]},
    {"podRef": {"name": "batch-node1", "namespace": "jobs", "uid": "u2"},
     "containers": [
       {"name": "a", "cpu": {"usageNanoCores": 1000000}, "memory": {"workingSetBytes": 2097152}},
       {"name": "b", "cpu": {"usageNanoCores": 1}, "memory": {"workingSetBytes": 1048576}}]},
    {"podRef": {"name": "new-node1", "namespace": "default", "uid": "u3"},
     "cpu": {"usageCoreNanoSeconds": 1}, "memory": {"workingSetBytes": 0}, "containers": []}
  ]})";

TEST(TopFormatTest, KubectlsUnits) {
  EXPECT_EQ(FormatMilliCores(0), "0m");
  EXPECT_EQ(FormatMilliCores(1), "1m") << "rounded up, as Quantity.MilliValue";
  EXPECT_EQ(FormatMilliCores(5000000), "5m");
  EXPECT_EQ(FormatMilliCores(1500000001), "1501m");
  EXPECT_EQ(FormatMebibytes(12 * 1024 * 1024 + 1), "12Mi");
  EXPECT_EQ(FormatMebibytes(1024 * 1024 - 1), "0Mi");
}

TEST(TopFormatTest, PodsFromTheirCgroupOrTheirContainers) {
  auto table = FormatTopPods(kSummary, "", false);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  EXPECT_EQ(*table,
            "NAME          CPU(cores)   MEMORY(bytes)\n"
            "batch-node1   2m           3Mi\n"
            "new-node1     -            0Mi\n"
            "web-node1     5m           12Mi\n");
  auto jobs = FormatTopPods(kSummary, "jobs", false);
  ASSERT_TRUE(jobs.ok());
  EXPECT_EQ(*jobs,
            "NAME          CPU(cores)   MEMORY(bytes)\n"
            "batch-node1   2m           3Mi\n");
  auto containers = FormatTopPods(kSummary, "default", true);
  ASSERT_TRUE(containers.ok());
  EXPECT_EQ(*containers,
            "POD         NAME   CPU(cores)   MEMORY(bytes)\n"
            "web-node1   app    4m           12Mi\n"
            "web-node1   side   -            0Mi\n");
  EXPECT_FALSE(FormatTopPods("not json", "", false).ok());
  EXPECT_FALSE(FormatTopPods("[1,2]", "", false).ok());
}

TEST(TopFormatTest, NodeWithItsShareOfTheAllocatable) {
  auto table = FormatTopNode(kSummary, 2000, int64_t{4} << 30);
  ASSERT_TRUE(table.ok());
  EXPECT_EQ(*table,
            "NAME    CPU(cores)   CPU%   MEMORY(bytes)   MEMORY%\n"
            "node1   250m         12%    1024Mi          25%\n");
  auto unknown = FormatTopNode(kSummary, std::nullopt, std::nullopt);
  ASSERT_TRUE(unknown.ok());
  EXPECT_NE(unknown->find("250m         <unknown>   1024Mi          <unknown>"), std::string::npos)
      << *unknown;
}

// A loopback server for one connection: reads the request, then answers `reply` (nothing when
// empty: it holds the connection until the test ends).
class OneShotServer {
 public:
  explicit OneShotServer(std::string reply) : reply_(std::move(reply)) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(fd_, 1), 0);
    socklen_t len = sizeof(addr);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    EXPECT_EQ(pipe2(stop_, O_CLOEXEC), 0);
    thread_ = std::thread([this] { Serve(); });
  }
  ~OneShotServer() {
    (void)!write(stop_[1], "x", 1);
    thread_.join();
    close(fd_);
    close(stop_[0]);
    close(stop_[1]);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string request() const { return request_; }

 private:
  void Serve() {
    pollfd p[2] = {{fd_, POLLIN, 0}, {stop_[0], POLLIN, 0}};
    if (poll(p, 2, -1) <= 0 || (p[1].revents & POLLIN)) return;
    int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) return;
    char buf[4096];
    while (request_.find("\r\n\r\n") == std::string::npos) {
      ssize_t n = read(c, buf, sizeof(buf));
      if (n <= 0) break;
      request_.append(buf, static_cast<size_t>(n));
    }
    if (!reply_.empty()) {
      (void)!write(c, reply_.data(), reply_.size());
    } else {
      pollfd s{stop_[0], POLLIN, 0};
      poll(&s, 1, -1);
    }
    close(c);
  }

  std::string reply_;
  int fd_ = -1;
  int port_ = 0;
  int stop_[2] = {-1, -1};
  std::string request_;
  std::thread thread_;
};

TEST(TopHttpTest, GetsTheBodyOfA200) {
  std::string request;
  {
    OneShotServer server("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{\"a\":1}");
    auto body = HttpGet(RealClock::Get(), server.address(), "/stats/summary", 5s);
    ASSERT_TRUE(body.ok()) << body.status().ToString();
    EXPECT_EQ(*body, "{\"a\":1}");
    request = server.request();
  }
  EXPECT_EQ(request.rfind("GET /stats/summary HTTP/1.0\r\n", 0), 0u) << request;
}

TEST(TopHttpTest, AnErrorStatusSilenceAndNobodyAreErrors) {
  {
    OneShotServer server("HTTP/1.1 404 Not Found\r\n\r\nno stats\n");
    auto body = HttpGet(RealClock::Get(), server.address(), "/stats/summary", 5s);
    ASSERT_FALSE(body.ok());
    EXPECT_EQ(body.status().message(), "HTTP 404: no stats");
  }
  {
    OneShotServer server("");  // accepts, never answers
    auto start = std::chrono::steady_clock::now();
    auto body = HttpGet(RealClock::Get(), server.address(), "/", 300ms);
    ASSERT_FALSE(body.ok());
    EXPECT_EQ(body.status().code(), StatusCode::kDeadlineExceeded);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  }
  auto refused = HttpGet(RealClock::Get(),
                         "127.0.0.1:" + std::to_string(testing::FreeLoopbackPort()), "/", 2s);
  EXPECT_FALSE(refused.ok());
  EXPECT_FALSE(HttpGet(RealClock::Get(), "no-port", "/", 1s).ok());
}

TEST(TopHttpTest, TopPodsReadsTheAddressFromTheRunDirectory) {
  testing::TempDir dir;
  const std::string body = kSummary;
  OneShotServer server("HTTP/1.0 200 OK\r\nContent-Length: " + std::to_string(body.size()) +
                       "\r\n\r\n" + body);
  TopOptions o;
  o.run_dir = dir.path();
  std::ostringstream out, err;
  EXPECT_EQ(RunTopPods(o, out, err), 4) << "no address file";
  EXPECT_NE(err.str().find(dir.path() + "/http-address"), std::string::npos) << err.str();

  std::ofstream(dir.path() + "/" + ipc::kHttpAddressFile) << server.address() << "\n";
  out.str("");
  err.str("");
  EXPECT_EQ(RunTopPods(o, out, err), 0) << err.str();
  EXPECT_NE(out.str().find("web-node1     5m           12Mi\n"), std::string::npos) << out.str();
}

}  // namespace
}  // namespace nodelet::ctl
