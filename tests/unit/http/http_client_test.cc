// lib/http against scripted and TLS servers on loopback, for what the probe and manifest URL
// tests do not reach: chunked framing (decoded, malformed, mostly framing), the header cap, a
// truncated body, an idle timeout told apart from the deadline, and certificate checks (the
// given CA, a wrong one, the system's, a name or an address the certificate does not hold, an
// unreadable CA file), each failing as kTls with the reason in the message.
#include "lib/http/http_client.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "tests/testing/harness.h"
#include "tests/testing/httplib_listen.h"
#include "tests/testing/loopback_server.h"

namespace nodelet::http {
namespace {

using namespace std::chrono_literals;
using nodelet::testing::LoopbackServer;
using nodelet::testing::SendAll;

Request To(const std::string& host, int port) {
  Request r;
  r.host = host;
  r.port = port;
  return r;
}

Limits Within(std::chrono::milliseconds deadline, std::chrono::milliseconds io_timeout = 0ms) {
  Limits l;
  l.deadline = RealClock::Get().Now() + deadline;
  l.io_timeout = io_timeout;
  return l;
}

struct Fetched {
  bool ok = false;
  ResponseHead head;
  std::string body;
  Error error;
};

Fetched Get(const Request& request, const Limits& limits, size_t max_body = SIZE_MAX) {
  Exchange exchange(RealClock::Get(), limits);
  Fetched f;
  f.ok = exchange.Start(request, f.head) &&
         exchange.ReadBody(max_body, [&](const char* data, size_t len) {
           f.body.append(data, len);
           return true;
         });
  f.error = exchange.error();
  return f;
}

TEST(HttpClientTest, ChunkedBodyArrivesWithoutItsFraming) {
  LoopbackServer server([](int fd, const std::string&) {
    SendAll(fd,
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nETag: \"v1\"\r\n\r\n"
            "5;ext=1\r\nhello\r\n1\r\n \r\nA\r\nworld, too\r\n0\r\nX-Trailer: t\r\n\r\n");
  });
  auto f = Get(To("127.0.0.1", server.port()), Within(2s));
  ASSERT_TRUE(f.ok) << f.error.message;
  EXPECT_EQ(f.head.status, 200);
  EXPECT_TRUE(f.head.chunked);
  EXPECT_EQ(f.head.Header("etag"), "\"v1\"");
  EXPECT_EQ(f.body, "hello world, too");
}

TEST(HttpClientTest, BareLineFeedsEndLinesToo) {
  LoopbackServer server(
      [](int fd, const std::string&) { SendAll(fd, "HTTP/1.1 200 OK\nContent-Length: 2\n\nok"); });
  auto f = Get(To("127.0.0.1", server.port()), Within(2s));
  ASSERT_TRUE(f.ok) << f.error.message;
  EXPECT_EQ(f.head.content_length, 2u);
  EXPECT_EQ(f.body, "ok");
}

TEST(HttpClientTest, MalformedChunkedFramingIsAProtocolError) {
  const std::string bodies[] = {"zz\r\nhi\r\n0\r\n\r\n", "2\r\nhiX\r\n0\r\n\r\n",
                                std::string(5000, '1') + "\r\n"};
  for (const std::string& body : bodies) {
    LoopbackServer server([&](int fd, const std::string&) {
      SendAll(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body);
    });
    auto f = Get(To("127.0.0.1", server.port()), Within(2s));
    EXPECT_FALSE(f.ok);
    EXPECT_EQ(f.error.kind, ErrorKind::kProtocol) << f.error.message;
    EXPECT_EQ(f.error.message.rfind("malformed chunked encoding", 0), 0u) << f.error.message;
  }
}

// One-byte chunks with 3 KiB of extensions each: reads that carry almost no body are refused
// long before the body cap or the deadline would end them.
TEST(HttpClientTest, ChunksThatAreMostlyFramingAreRefused) {
  LoopbackServer server([&](int fd, const std::string&) {
    if (!SendAll(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")) return;
    const std::string chunk = "1;" + std::string(3000, 'e') + "\r\nx\r\n";
    for (int i = 0; i < 10000 && !server.stopping() && SendAll(fd, chunk); ++i) {
    }
  });
  auto f = Get(To("127.0.0.1", server.port()), Within(5s));
  EXPECT_FALSE(f.ok);
  EXPECT_EQ(f.error.message, "malformed chunked encoding: too much framing");
  EXPECT_LT(f.body.size(), 16u);
}

TEST(HttpClientTest, HeadersAreCapped) {
  LoopbackServer server([&](int fd, const std::string&) {
    if (!SendAll(fd, "HTTP/1.1 200 OK\r\n")) return;
    const std::string line = "X-Filler: " + std::string(100, 'a') + "\r\n";
    for (int i = 0; i < 100000 && !server.stopping() && SendAll(fd, line); ++i) {
    }
  });
  Limits limits = Within(5s);
  limits.max_header_bytes = 4096;
  auto f = Get(To("127.0.0.1", server.port()), limits);
  EXPECT_FALSE(f.ok);
  EXPECT_EQ(f.error.kind, ErrorKind::kTooLarge);
  EXPECT_EQ(f.error.message, "response headers exceed 4096 bytes");
}

TEST(HttpClientTest, BodyCutShortIsAnError) {
  for (const char* answer : {"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
                             "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab"}) {
    LoopbackServer server([&](int fd, const std::string&) { SendAll(fd, answer); });
    auto f = Get(To("127.0.0.1", server.port()), Within(2s));
    EXPECT_FALSE(f.ok) << answer;
    EXPECT_EQ(f.error.kind, ErrorKind::kIo);
    EXPECT_EQ(f.error.message, "unexpected EOF in the response body");
  }
  // Neither length nor chunks: EOF ends the body.
  LoopbackServer server(
      [](int fd, const std::string&) { SendAll(fd, "HTTP/1.1 200 OK\r\n\r\nall"); });
  auto f = Get(To("127.0.0.1", server.port()), Within(2s));
  ASSERT_TRUE(f.ok) << f.error.message;
  EXPECT_EQ(f.body, "all");
}

// A silent server: the idle timeout (one wait) and the deadline (everything) fail as different
// kinds, each at its own time.
TEST(HttpClientTest, IdleTimeoutAndDeadlineAreToldApart) {
  LoopbackServer silent([&](int, const std::string&) { silent.Pause(5s); });
  auto start = std::chrono::steady_clock::now();
  auto idle = Get(To("127.0.0.1", silent.port()), Within(10s, 200ms));
  EXPECT_EQ(idle.error.kind, ErrorKind::kTimeout) << idle.error.message;
  EXPECT_EQ(idle.error.message, "timeout awaiting response headers");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  start = std::chrono::steady_clock::now();
  auto late = Get(To("127.0.0.1", silent.port()), Within(200ms, 2s));
  EXPECT_EQ(late.error.kind, ErrorKind::kDeadline) << late.error.message;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
}

TEST(HttpClientTest, NothingListeningIsAConnectError) {
  int port = 0;
  {
    LoopbackServer gone([](int, const std::string&) {});
    port = gone.port();
  }
  auto f = Get(To("127.0.0.1", port), Within(2s));
  EXPECT_EQ(f.error.kind, ErrorKind::kConnect);
  EXPECT_EQ(f.error.message, "dial tcp 127.0.0.1:" + std::to_string(port) + ": Connection refused");
}

// TLS servers on 127.0.0.1 with self-signed certificates (each its own CA): `named_` holds
// DNS:localhost only, `addressed_` IP:127.0.0.1 and DNS:other.example.
class HttpClientTlsTest : public ::testing::Test {
 protected:
  struct Server {
    std::string cert;
    std::unique_ptr<httplib::SSLServer> server;
    std::thread thread;
    int port = 0;
  };

  void SetUp() override {
    Start(named_, "named", "DNS:localhost");
    Start(addressed_, "addressed", "IP:127.0.0.1,DNS:other.example");
  }
  void TearDown() override {
    for (Server* s : {&named_, &addressed_}) {
      if (s->server) s->server->stop();
      if (s->thread.joinable()) s->thread.join();
    }
  }
  void Start(Server& s, const std::string& name, const std::string& san) {
    const std::string key = dir_.Sub(name + ".key");
    s.cert = dir_.Sub(name + ".pem");
    auto made = nodelet::testing::RunCommand(
        {"/usr/bin/openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
         "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=" + name, "-addext",
         "subjectAltName=" + san, "-keyout", key, "-out", s.cert},
        std::chrono::seconds(20));
    ASSERT_EQ(made.exit_code, 0) << made.output;
    s.server = std::make_unique<httplib::SSLServer>(s.cert.c_str(), key.c_str());
    ASSERT_TRUE(s.server->is_valid());
    s.server->Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("fine", "text/plain");
    });
    s.port = s.server->bind_to_any_port("127.0.0.1");
    ASSERT_GT(s.port, 0);
    s.thread = nodelet::testing::ListenInThread(*s.server);
  }
  static Request Verified(const std::string& host, const Server& s, const std::string& ca) {
    Request r = To(host, s.port);
    r.tls = {true, true, ca};
    return r;
  }

  nodelet::testing::TempDir dir_;
  Server named_, addressed_;
};

TEST_F(HttpClientTlsTest, TheGivenCaAndTheRightNameOrAddressPass) {
  auto by_name = Get(Verified("localhost", named_, named_.cert), Within(5s));
  ASSERT_TRUE(by_name.ok) << by_name.error.message;
  EXPECT_EQ(by_name.head.status, 200);
  EXPECT_EQ(by_name.body, "fine");
  auto by_address = Get(Verified("127.0.0.1", addressed_, addressed_.cert), Within(5s));
  ASSERT_TRUE(by_address.ok) << by_address.error.message;
  EXPECT_EQ(by_address.body, "fine");
}

TEST_F(HttpClientTlsTest, AnotherCaOrTheSystemsIsRefusedWithTheReason) {
  for (const std::string& ca : {named_.cert, std::string()}) {
    auto f = Get(Verified("127.0.0.1", addressed_, ca), Within(5s));
    EXPECT_FALSE(f.ok);
    EXPECT_EQ(f.error.kind, ErrorKind::kTls);
    EXPECT_EQ(f.error.message.rfind("tls: certificate verify failed: ", 0), 0u) << f.error.message;
    EXPECT_NE(f.error.message.find("self-signed"), std::string::npos) << f.error.message;
  }
}

TEST_F(HttpClientTlsTest, ANameOrAddressTheCertificateDoesNotHoldIsRefused) {
  auto name = Get(Verified("localhost", addressed_, addressed_.cert), Within(5s));
  EXPECT_EQ(name.error.kind, ErrorKind::kTls);
  EXPECT_EQ(name.error.message, "tls: certificate verify failed: hostname mismatch")
      << name.error.message;
  auto address = Get(Verified("127.0.0.1", named_, named_.cert), Within(5s));
  EXPECT_EQ(address.error.kind, ErrorKind::kTls);
  EXPECT_EQ(address.error.message, "tls: certificate verify failed: IP address mismatch")
      << address.error.message;
  // Without verification (the probes) the same servers answer.
  Request unverified = Verified("localhost", addressed_, "");
  unverified.tls.verify = false;
  EXPECT_TRUE(Get(unverified, Within(5s)).ok);
}

TEST_F(HttpClientTlsTest, AnUnreadableCaFileIsATlsError) {
  auto f = Get(Verified("127.0.0.1", addressed_, dir_.Sub("missing.pem")), Within(5s));
  EXPECT_EQ(f.error.kind, ErrorKind::kTls);
  EXPECT_EQ(f.error.message.rfind(
                "tls: cannot load the CA certificates of " + dir_.Sub("missing.pem") + ": ", 0),
            0u)
      << f.error.message;
}

}  // namespace
}  // namespace nodelet::http
