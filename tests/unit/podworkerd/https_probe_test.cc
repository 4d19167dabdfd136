// DoHttpProbe over TLS (scheme HTTPS) against a real TLS server on loopback with a self-signed
// certificate made for the test: no certificate check (the kubelet's prober), the status code
// decides, a plain-HTTP server fails the handshake, a TLS server that never answers is cut at the
// deadline, and a redirect from http to https on the same host is followed.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "svc-podworkerd/http_probe.h"
#include "tests/testing/httplib_listen.h"
#include "tests/testing/loopback_server.h"

namespace nodelet::podworkerd {
namespace {

using namespace std::chrono_literals;

class HttpsProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/nodelet-https-probe-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    const std::string cmd =
        "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost"
        " -keyout " +
        dir_ + "/key.pem -out " + dir_ + "/cert.pem 2>/dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << "openssl could not make a certificate";
    server_ = std::make_unique<httplib::SSLServer>((dir_ + "/cert.pem").c_str(),
                                                   (dir_ + "/key.pem").c_str());
    ASSERT_TRUE(server_->is_valid());
    server_->Get("/ok", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("fine", "text/plain");
    });
    server_->Get("/bad", [](const httplib::Request&, httplib::Response& res) { res.status = 503; });
    port_ = server_->bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    thread_ = nodelet::testing::ListenInThread(*server_);
  }
  void TearDown() override {
    if (server_) server_->stop();
    if (thread_.joinable()) thread_.join();
    std::filesystem::remove_all(dir_);
  }
  HttpProbeRequest Request(int port, const std::string& path, bool tls = true) {
    HttpProbeRequest r;
    r.host = "127.0.0.1";
    r.port = port;
    r.path = path;
    r.timeout = 3s;
    r.tls = tls;
    return r;
  }
  std::string dir_;
  std::unique_ptr<httplib::SSLServer> server_;
  std::thread thread_;
  int port_ = 0;
};

TEST_F(HttpsProbeTest, StatusDecidesOverTlsWithoutACertificateCheck) {
  auto ok = DoHttpProbe(RealClock::Get(), Request(port_, "/ok"));
  EXPECT_TRUE(ok.success) << ok.message;
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(ok.body_bytes, 4u);
  auto bad = DoHttpProbe(RealClock::Get(), Request(port_, "/bad"));
  EXPECT_FALSE(bad.success);
  EXPECT_EQ(bad.message, "HTTP probe failed with statuscode: 503");
  // Plain HTTP to a TLS port: no valid response.
  auto plain = DoHttpProbe(RealClock::Get(), Request(port_, "/ok", false));
  EXPECT_FALSE(plain.success);
}

TEST_F(HttpsProbeTest, PlainServerFailsTheHandshakeAndASilentOneTheDeadline) {
  testing::LoopbackServer plain([](int fd, const std::string&) {
    testing::SendAll(fd, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
  });
  auto r = DoHttpProbe(RealClock::Get(), Request(plain.port(), "/"));
  EXPECT_FALSE(r.success);
  EXPECT_EQ(r.message.rfind("Get \"https://127.0.0.1:", 0), 0u) << r.message;
  EXPECT_NE(r.message.find("tls:"), std::string::npos) << r.message;

  // Accepted by the kernel, never answered: the handshake waits until the deadline only.
  testing::LoopbackServer silent([](int, const std::string&) {});
  auto request = Request(silent.port(), "/");
  request.timeout = 500ms;
  auto began = std::chrono::steady_clock::now();
  auto s = DoHttpProbe(RealClock::Get(), request);
  EXPECT_FALSE(s.success);
  EXPECT_LT(std::chrono::steady_clock::now() - began, 3s);
}

TEST_F(HttpsProbeTest, RedirectFromHttpToHttpsOnTheSameHostIsFollowed) {
  const int tls_port = port_;
  testing::LoopbackServer plain([tls_port](int fd, const std::string&) {
    testing::SendAll(fd, "HTTP/1.1 302 Found\r\nLocation: https://127.0.0.1:" +
                             std::to_string(tls_port) + "/ok\r\nContent-Length: 0\r\n\r\n");
  });
  auto r = DoHttpProbe(RealClock::Get(), Request(plain.port(), "/start", false));
  EXPECT_TRUE(r.success) << r.message;
  EXPECT_EQ(r.redirects, 1);
  EXPECT_EQ(r.status, 200);
}

}  // namespace
}  // namespace nodelet::podworkerd
