#include "supervisor/http_request.h"

#include <gtest/gtest.h>

#include <string>

namespace nodelet::supervisor {
namespace {

TEST(HttpRequestTest, TheHeadEndsAtItsBlankLineWithOrWithoutCarriageReturns) {
  EXPECT_EQ(RequestHeadLength("GET / HTTP/1.1\r\nHost: x\r\n\r\nbody"), 23u);
  EXPECT_EQ(RequestHeadLength("GET / HTTP/1.1\nHost: x\n\n"), 22u);
  EXPECT_EQ(RequestHeadLength("GET / HTTP/1.1\r\nHost: x\r\n"), std::string::npos);
  EXPECT_EQ(RequestHeadLength(""), std::string::npos);
}

TEST(HttpRequestTest, TheRequestLineGivesMethodPathQueryAndVersion) {
  RequestLine line =
      ParseRequestLine("GET /containerLogs/ns/pod/c?tailLines=5&follow HTTP/1.0\r\n");
  EXPECT_EQ(line.method, "GET");
  EXPECT_EQ(line.path, "/containerLogs/ns/pod/c");
  EXPECT_EQ(line.query, "tailLines=5&follow");
  EXPECT_TRUE(line.http10);

  line = ParseRequestLine("HEAD /healthz HTTP/1.1\r\nHost: a\r\n\r\n");
  EXPECT_EQ(line.method, "HEAD");
  EXPECT_EQ(line.path, "/healthz");
  EXPECT_EQ(line.query, "");
  EXPECT_FALSE(line.http10);
}

TEST(HttpRequestTest, ALineWithoutASpaceOrVersionIsStillRead) {
  RequestLine line = ParseRequestLine("garbage\r\n\r\n");
  EXPECT_EQ(line.method, "");
  EXPECT_EQ(line.path, "");
  line = ParseRequestLine("GET /metrics");  // HTTP/0.9 style: no version
  EXPECT_EQ(line.method, "GET");
  EXPECT_EQ(line.path, "/metrics");
  EXPECT_FALSE(line.http10);
  line = ParseRequestLine("GET /a?b?c HTTP/1.0x");
  EXPECT_EQ(line.path, "/a");
  EXPECT_EQ(line.query, "b?c");
  EXPECT_TRUE(line.http10);  // the version's first 8 bytes, as before
}

TEST(HttpRequestTest, TheQueryIsDecodedAndTheFirstOfRepeatedKeysWins) {
  auto q = ParseQuery("a=1&b=x%20y+z&a=2&&flag&bad=%zz%4&n=%41%6a");
  EXPECT_EQ(q["a"], "1");
  EXPECT_EQ(q["b"], "x y z");
  EXPECT_EQ(q.count("flag"), 1u);
  EXPECT_EQ(q["flag"], "");
  EXPECT_EQ(q["bad"], "%zz%4");
  EXPECT_EQ(q["n"], "Aj");
  EXPECT_EQ(q.size(), 5u);
  EXPECT_TRUE(ParseQuery("").empty());
  EXPECT_EQ(ParseQuery("%00=%ff").begin()->first, std::string(1, '\0'));
}

}  // namespace
}  // namespace nodelet::supervisor
