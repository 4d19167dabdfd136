#include "ctl/stream_protocol.h"

#include <gtest/gtest.h>

namespace nodelet::ctl {
namespace {

TEST(StreamProtocolTest, ParsesTheStreamingServersUrls) {
  auto u = ParseStreamUrl("http://127.0.0.1:43121/exec/Zx9-token");
  ASSERT_TRUE(u.ok()) << u.status().message();
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, "43121");
  EXPECT_EQ(u->target, "/exec/Zx9-token");
  auto v6 = ParseStreamUrl("http://[::1]:8080/portforward/t?x=1");
  ASSERT_TRUE(v6.ok()) << v6.status().message();
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, "8080");
  EXPECT_EQ(v6->target, "/portforward/t?x=1");
  auto no_port = ParseStreamUrl("http://localhost/attach/t");
  ASSERT_TRUE(no_port.ok());
  EXPECT_EQ(no_port->port, "80");
  EXPECT_FALSE(ParseStreamUrl("https://127.0.0.1:1/exec/t").ok());
  EXPECT_FALSE(ParseStreamUrl("http://127.0.0.1:x1/exec/t").ok());
  EXPECT_FALSE(ParseStreamUrl("http://:80/exec/t").ok());
  EXPECT_FALSE(ParseStreamUrl("").ok());
}

TEST(StreamProtocolTest, AStatusWithFieldsOfTheWrongTypeIsAFailureNotACrash) {
  // A server's Status whose fields are not strings: read as missing, never thrown.
  auto numbers = OutcomeFromStatus(R"({"status":1,"message":2,"reason":3})");
  EXPECT_EQ(numbers.exit_code, 1);
  EXPECT_EQ(numbers.message, "the command failed");
  auto cause = OutcomeFromStatus(R"({"status":"Failure","reason":"NonZeroExitCode","message":"m",)"
                                 R"("details":{"causes":[{"reason":["ExitCode"],"message":7},)"
                                 R"({"reason":"ExitCode","message":{"a":1}}]}})");
  EXPECT_EQ(cause.exit_code, 1);
  EXPECT_EQ(cause.message, "m");
  EXPECT_EQ(OutcomeFromStatus(R"({"status":null})").exit_code, 1);
}

TEST(StreamProtocolTest, TheErrorChannelsStatusGivesTheExitCode) {
  EXPECT_EQ(OutcomeFromStatus(R"({"metadata":{},"status":"Success"})").exit_code, 0);
  auto three = OutcomeFromStatus(
      R"({"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: 3",)"
      R"("reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}})");
  EXPECT_EQ(three.exit_code, 3);
  EXPECT_EQ(three.message, "");
  auto missing = OutcomeFromStatus(
      R"({"status":"Failure","reason":"InternalError","message":"error executing command: exec: )"
      R"(\"nosuch\": executable file not found in $PATH: unknown"})");
  EXPECT_EQ(missing.exit_code, 127);
  EXPECT_NE(missing.message.find("nosuch"), std::string::npos);
  auto denied = OutcomeFromStatus(
      R"({"status":"Failure","message":"exec: \"/etc/passwd\": permission denied"})");
  EXPECT_EQ(denied.exit_code, 126);
  auto other = OutcomeFromStatus(R"({"status":"Failure","message":"container gone"})");
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_EQ(other.message, "container gone");
  // A cause that is not a number does not pass for an exit code.
  EXPECT_EQ(OutcomeFromStatus(R"({"status":"Failure","reason":"NonZeroExitCode",)"
                              R"("details":{"causes":[{"reason":"ExitCode","message":"x"}]}})")
                .exit_code,
            1);
  auto garbage = OutcomeFromStatus("not json");
  EXPECT_EQ(garbage.exit_code, 1);
  EXPECT_NE(garbage.message.find("unreadable"), std::string::npos);
}

TEST(StreamProtocolTest, FramesStartWithTheChannel) {
  EXPECT_EQ(Frame(kStdin, "ab"), std::string("\x00"
                                             "ab",
                                             3));
  EXPECT_EQ(Frame(kResize, "{}"), "\x04{}");
}

TEST(StreamProtocolTest, PortPairs) {
  auto same = ParsePortPair("8080");
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->local, 8080);
  EXPECT_EQ(same->remote, 8080);
  auto mapped = ParsePortPair("9000:80");
  ASSERT_TRUE(mapped.ok());
  EXPECT_EQ(mapped->local, 9000);
  EXPECT_EQ(mapped->remote, 80);
  auto any = ParsePortPair(":80");
  ASSERT_TRUE(any.ok());
  EXPECT_EQ(any->local, 0);
  EXPECT_EQ(any->remote, 80);
  for (const char* bad : {"0", "70000", "a:80", "80:", "80:0", "", "1:2:3", "123456"}) {
    EXPECT_FALSE(ParsePortPair(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace nodelet::ctl
