// RequestHeadParser (Beast underneath): where a head ends, what it says, what it refuses; and
// the query's decoding.
#include "supervisor/http_request.h"

#include <gtest/gtest.h>

#include <string>

namespace nodelet::supervisor {
namespace {

TEST(HttpRequestTest, TheHeadEndsAtItsBlankLine) {
  EXPECT_EQ(ParseRequestHead("GET / HTTP/1.1\r\nHost: x\r\n\r\nbody", nullptr),
            HeadStatus::kComplete);
  EXPECT_EQ(ParseRequestHead("GET / HTTP/1.1\r\nHost: x\r\n", nullptr), HeadStatus::kIncomplete);
  EXPECT_EQ(ParseRequestHead("GET /hea", nullptr), HeadStatus::kIncomplete);
  EXPECT_EQ(ParseRequestHead("", nullptr), HeadStatus::kIncomplete);
  // Bare newlines never end a head: refused at once rather than left to the deadline.
  EXPECT_EQ(ParseRequestHead("GET / HTTP/1.1\nHost: x\n\n", nullptr), HeadStatus::kBad);
}

TEST(HttpRequestTest, TheRequestLineGivesMethodPathQueryAndVersion) {
  RequestLine line;
  ASSERT_EQ(
      ParseRequestHead("GET /containerLogs/ns/pod/c?tailLines=5&follow HTTP/1.0\r\n\r\n", &line),
      HeadStatus::kComplete);
  EXPECT_EQ(line.method, "GET");
  EXPECT_EQ(line.path, "/containerLogs/ns/pod/c");
  EXPECT_EQ(line.query, "tailLines=5&follow");
  EXPECT_TRUE(line.http10);

  line = {};
  ASSERT_EQ(ParseRequestHead("HEAD /healthz HTTP/1.1\r\nHost: a\r\n\r\n", &line),
            HeadStatus::kComplete);
  EXPECT_EQ(line.method, "HEAD");
  EXPECT_EQ(line.path, "/healthz");
  EXPECT_EQ(line.query, "");
  EXPECT_FALSE(line.http10);

  line = {};
  ASSERT_EQ(ParseRequestHead("GET /a?b?c HTTP/1.1\r\n\r\n", &line), HeadStatus::kComplete);
  EXPECT_EQ(line.path, "/a");
  EXPECT_EQ(line.query, "b?c");
  // A method the server does not serve is still read (the server answers 405).
  ASSERT_EQ(ParseRequestHead("POST /healthz HTTP/1.1\r\n\r\n", &line), HeadStatus::kComplete);
  EXPECT_EQ(line.method, "POST");
}

TEST(HttpRequestTest, WhatIsNotAnHttp1RequestHeadIsBad) {
  for (const char* bad :
       {"garbage\r\n\r\n", "GET /metrics\r\n\r\n", "GET /a HTTP/1.0x\r\n\r\n",
        "GET /a HTTP/2.0\r\n\r\n", " /x HTTP/1.1\r\n\r\n", "GET /a HTTP/1.1\r\nno colon\r\n\r\n"}) {
    EXPECT_EQ(ParseRequestHead(bad, nullptr), HeadStatus::kBad) << bad;
  }
}

TEST(HttpRequestTest, AHeadFedAsItArrivesEndsWhenItsLastByteComes) {
  const std::string head = "GET /pods?x=1 HTTP/1.1\r\nHost: h\r\nAccept: */*\r\n\r\n";
  RequestHeadParser parser;
  for (size_t n = 1; n < head.size(); ++n) {
    ASSERT_EQ(parser.Feed(std::string_view(head).substr(0, n)), HeadStatus::kIncomplete) << n;
  }
  ASSERT_EQ(parser.Feed(head), HeadStatus::kComplete);
  EXPECT_EQ(parser.line().path, "/pods");
  EXPECT_EQ(parser.line().query, "x=1");
  EXPECT_EQ(parser.Feed(head + "more"), HeadStatus::kComplete) << "the answer stays";
  // A first read that holds the whole request line: Beast takes the line at once.
  RequestHeadParser split;
  ASSERT_EQ(split.Feed(std::string_view(head).substr(0, 30)), HeadStatus::kIncomplete);
  ASSERT_EQ(split.Feed(head), HeadStatus::kComplete);
  EXPECT_EQ(split.line().method, "GET");
  EXPECT_EQ(split.line().path, "/pods");
}

TEST(HttpRequestTest, AHeadPastTheLimitIsTooLarge) {
  std::string head = "GET / HTTP/1.1\r\nX-Filler: " + std::string(kMaxRequestHeadBytes, 'a');
  RequestHeadParser parser;
  EXPECT_EQ(parser.Feed(std::string_view(head).substr(0, 100)), HeadStatus::kIncomplete);
  EXPECT_EQ(parser.Feed(head), HeadStatus::kTooLarge);
  EXPECT_EQ(ParseRequestHead(head + "\r\n\r\n", nullptr), HeadStatus::kTooLarge);
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
