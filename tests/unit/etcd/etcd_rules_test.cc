// The etcd client's decisions without a server (lib/etcd/etcd_rules.h): endpoints, prefix
// ranges, what each of etcd's errors means for a call; and Client::Connect's validation, which
// needs no network either.
#include "lib/etcd/etcd_rules.h"

#include <gmock/gmock.h>
#include <grpcpp/support/status_code_enum.h>
#include <gtest/gtest.h>

#include "lib/etcd/etcd_client.h"
#include "tests/testing/harness.h"

namespace nodelet::etcd {
namespace {

using ::testing::HasSubstr;

TEST(EtcdEndpointTest, SchemesAndBareHostPort) {
  auto http = ParseEndpoint("http://127.0.0.1:2379", true);
  ASSERT_TRUE(http.ok()) << http.status().ToString();
  EXPECT_EQ(http->target, "127.0.0.1:2379");
  EXPECT_FALSE(http->tls);
  EXPECT_EQ(http->url, "http://127.0.0.1:2379");

  auto https = ParseEndpoint("https://etcd-0.example:2379/", false);
  ASSERT_TRUE(https.ok()) << https.status().ToString();
  EXPECT_EQ(https->target, "etcd-0.example:2379");
  EXPECT_TRUE(https->tls);

  // A bare host:port takes TLS when the client was given TLS files.
  auto bare_plain = ParseEndpoint("10.0.0.1:2379", false);
  ASSERT_TRUE(bare_plain.ok());
  EXPECT_FALSE(bare_plain->tls);
  auto bare_tls = ParseEndpoint("10.0.0.1:2379", true);
  ASSERT_TRUE(bare_tls.ok());
  EXPECT_TRUE(bare_tls->tls);

  auto v6 = ParseEndpoint("http://[::1]:2379", false);
  ASSERT_TRUE(v6.ok()) << v6.status().ToString();
  EXPECT_EQ(v6->target, "[::1]:2379");
}

TEST(EtcdEndpointTest, RefusedWithTheEndpointNamed) {
  for (const char* bad :
       {"", "127.0.0.1", "http://127.0.0.1", "http://:2379", "http://127.0.0.1:0",
        "http://127.0.0.1:65536", "http://127.0.0.1:12ab", "unix:///run/etcd.sock",
        "http://127.0.0.1:2379/v3", "http://[::1]", "http://[::1:2379", "127.0.0.1:999999"}) {
    auto r = ParseEndpoint(bad, false);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("'" + std::string(bad) + "'"));
  }
}

TEST(EtcdPrefixRangeEndTest, LastByteBelowFfIsIncremented) {
  EXPECT_EQ(PrefixRangeEnd("/registry/pods/node-a/"), "/registry/pods/node-a0");
  EXPECT_EQ(PrefixRangeEnd("a"), "b");
  EXPECT_EQ(PrefixRangeEnd(std::string("a\xff", 2)), "b");
  EXPECT_EQ(PrefixRangeEnd(std::string("a\xff\xff", 3)), "b");
  EXPECT_EQ(PrefixRangeEnd(std::string("a\x7f", 2)), std::string("a\x80", 2));
  EXPECT_EQ(PrefixRangeEnd(std::string("\x00", 1)), std::string("\x01", 1));
}

TEST(EtcdPrefixRangeEndTest, NoEndMeansToTheLastKey) {
  EXPECT_EQ(PrefixRangeEnd(""), std::string(1, '\0'));
  EXPECT_EQ(PrefixRangeEnd(std::string("\xff\xff", 2)), std::string(1, '\0'));
}

int Code(grpc::StatusCode c) { return static_cast<int>(c); }

TEST(EtcdClassifyErrorTest, RejectedBeforeRaftGoesElsewhere) {
  for (const char* m :
       {"etcdserver: no leader", "etcdserver: not capable", "etcdserver: leader changed"}) {
    auto e = ClassifyError(Code(grpc::StatusCode::UNAVAILABLE), m);
    EXPECT_EQ(e.code, StatusCode::kUnavailable) << m;
    EXPECT_EQ(e.retry, Retry::kElsewhere) << m;
  }
  auto not_leader =
      ClassifyError(Code(grpc::StatusCode::FAILED_PRECONDITION), "etcdserver: not leader");
  EXPECT_EQ(not_leader.retry, Retry::kElsewhere);
  auto refused = ClassifyError(Code(grpc::StatusCode::UNAVAILABLE),
                               "failed to connect to all addresses; last error: UNKNOWN: "
                               "ipv4:127.0.0.1:1: Failed to connect to remote host: Connection "
                               "refused");
  EXPECT_EQ(refused.retry, Retry::kElsewhere);
  auto busy =
      ClassifyError(Code(grpc::StatusCode::RESOURCE_EXHAUSTED), "etcdserver: too many requests");
  EXPECT_EQ(busy.code, StatusCode::kUnavailable);
  EXPECT_EQ(busy.retry, Retry::kElsewhere);
}

TEST(EtcdClassifyErrorTest, MaybeAppliedGoesElsewhereOnlyIfRepeatable) {
  for (const char* m : {"etcdserver: request timed out",
                        "etcdserver: request timed out, possibly due to previous leader failure",
                        "Socket closed", "Connection reset by peer"}) {
    auto e = ClassifyError(Code(grpc::StatusCode::UNAVAILABLE), m);
    EXPECT_EQ(e.code, StatusCode::kUnavailable) << m;
    EXPECT_EQ(e.retry, Retry::kElsewhereIfRepeatable) << m;
  }
  auto deadline = ClassifyError(Code(grpc::StatusCode::DEADLINE_EXCEEDED), "Deadline Exceeded");
  EXPECT_EQ(deadline.code, StatusCode::kDeadlineExceeded);
  EXPECT_EQ(deadline.retry, Retry::kElsewhereIfRepeatable);
}

TEST(EtcdClassifyErrorTest, AuthDenialIsPermissionDenied) {
  auto denied =
      ClassifyError(Code(grpc::StatusCode::PERMISSION_DENIED), "etcdserver: permission denied");
  EXPECT_EQ(denied.code, StatusCode::kPermissionDenied);
  EXPECT_EQ(denied.retry, Retry::kNo);
  EXPECT_FALSE(denied.stale_token);
  auto login = ClassifyError(Code(grpc::StatusCode::INVALID_ARGUMENT),
                             "etcdserver: authentication failed, invalid user ID or password");
  EXPECT_EQ(login.code, StatusCode::kPermissionDenied);
  auto anonymous =
      ClassifyError(Code(grpc::StatusCode::INVALID_ARGUMENT), "etcdserver: user name is empty");
  EXPECT_EQ(anonymous.code, StatusCode::kPermissionDenied);
  // A refused token is worth one new login.
  auto token =
      ClassifyError(Code(grpc::StatusCode::UNAUTHENTICATED), "etcdserver: invalid auth token");
  EXPECT_EQ(token.code, StatusCode::kPermissionDenied);
  EXPECT_TRUE(token.stale_token);
  auto old = ClassifyError(Code(grpc::StatusCode::INVALID_ARGUMENT),
                           "etcdserver: revision of auth store is old");
  EXPECT_TRUE(old.stale_token);
}

TEST(EtcdClassifyErrorTest, CompactedIsOutOfRangeAndNothingElseIs) {
  auto compacted = ClassifyError(Code(grpc::StatusCode::OUT_OF_RANGE),
                                 "etcdserver: mvcc: required revision has been compacted");
  EXPECT_EQ(compacted.code, StatusCode::kOutOfRange);
  EXPECT_EQ(compacted.retry, Retry::kNo);
  EXPECT_TRUE(IsCompacted(Status(compacted.code, "x")));
  auto future = ClassifyError(Code(grpc::StatusCode::OUT_OF_RANGE),
                              "etcdserver: mvcc: required revision is a future revision");
  EXPECT_EQ(future.code, StatusCode::kInvalidArgument);
  EXPECT_FALSE(IsCompacted(Status(future.code, "x")));
  EXPECT_FALSE(IsCompacted(Status::Ok()));
}

TEST(EtcdClassifyErrorTest, OtherAnswersHoldOnEveryMember) {
  auto lease = ClassifyError(Code(grpc::StatusCode::NOT_FOUND),
                             "etcdserver: requested lease "
                             "not found");
  EXPECT_EQ(lease.code, StatusCode::kNotFound);
  EXPECT_EQ(lease.retry, Retry::kNo);
  auto user = ClassifyError(Code(grpc::StatusCode::FAILED_PRECONDITION),
                            "etcdserver: user name already exists");
  EXPECT_EQ(user.code, StatusCode::kAlreadyExists);
  auto space = ClassifyError(Code(grpc::StatusCode::RESOURCE_EXHAUSTED),
                             "etcdserver: mvcc: database space exceeded");
  EXPECT_EQ(space.code, StatusCode::kResourceExhausted);
  EXPECT_EQ(space.retry, Retry::kNo);
  auto big =
      ClassifyError(Code(grpc::StatusCode::INVALID_ARGUMENT), "etcdserver: request is too large");
  EXPECT_EQ(big.code, StatusCode::kInvalidArgument);
}

TEST(EtcdClientConnectTest, ValidatesWithoutTheNetwork) {
  const Clock& clock = RealClock::Get();
  ClientOptions none;
  EXPECT_EQ(Client::Connect(none, clock).status().code(), StatusCode::kInvalidArgument);

  ClientOptions bad;
  bad.endpoints = {"http://127.0.0.1:2379", "ftp://x:1"};
  auto r = Client::Connect(bad, clock);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("ftp://x:1"));

  ClientOptions half;
  half.endpoints = {"https://127.0.0.1:2379"};
  half.cert_file = "/nonexistent.crt";
  EXPECT_EQ(Client::Connect(half, clock).status().code(), StatusCode::kInvalidArgument);

  ClientOptions missing;
  missing.endpoints = {"https://127.0.0.1:2379"};
  missing.ca_file = "/nonexistent/ca.crt";
  auto m = Client::Connect(missing, clock);
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("/nonexistent/ca.crt"));

  testing::TempDir dir;
  testing::WriteTextFile(dir.Sub("not-pem"), "hello");
  ClientOptions not_pem;
  not_pem.endpoints = {"https://127.0.0.1:2379"};
  not_pem.ca_file = dir.Sub("not-pem");
  EXPECT_THAT(Client::Connect(not_pem, clock).status().message(), HasSubstr("not PEM"));

  ClientOptions password_only;
  password_only.endpoints = {"127.0.0.1:2379"};
  password_only.password = "secret";
  EXPECT_EQ(Client::Connect(password_only, clock).status().code(), StatusCode::kInvalidArgument);

  ClientOptions page;
  page.endpoints = {"127.0.0.1:2379"};
  page.page_size = 0;
  EXPECT_EQ(Client::Connect(page, clock).status().code(), StatusCode::kInvalidArgument);

  // Nothing listens there: Connect does not dial.
  ClientOptions good;
  good.endpoints = {"http://127.0.0.1:1", "127.0.0.1:2"};
  auto c = Client::Connect(good, clock);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ((*c)->options().endpoints.size(), 2u);
}

TEST(EtcdClientConnectTest, DeletingEveryKeyIsRefused) {
  ClientOptions o;
  o.endpoints = {"http://127.0.0.1:1"};
  auto c = Client::Connect(o, RealClock::Get());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->DeletePrefix("").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace nodelet::etcd
