// nodeletctl's output: container text reaches the terminal with its controls escaped, whole
// lines at a time, never half a character; the commands that print the container's own stream
// (logs, exec, attach, port-forward) are the ones left raw.
#include "ctl/terminal_output.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

namespace nodelet::ctl {
namespace {

TEST(TerminalOutputTest, ControlsAreEscapedOnTheWayOut) {
  std::ostringstream sink;
  {
    TerminalEscapingBuf buf(sink.rdbuf());
    std::ostream out(&buf);
    out << "Message:      \x1b]0;pwned\x07 \x1b[2J\rfake\n";
    out << "  C1 \xC2\x9B"
           "2J, bad \xFF, caf\xC3\xA9\n";
    out << "no line end";
  }
  EXPECT_EQ(sink.str(),
            "Message:      ^[]0;pwned\\u0007 ^[[2J\\rfake\n"
            "  C1 \\u009b2J, bad \xEF\xBF\xBD, caf\xC3\xA9\n"
            "no line end");
}

TEST(TerminalOutputTest, LinesGoOutAsTheyEndAndACharacterIsNeverSplit) {
  std::ostringstream sink;
  TerminalEscapingBuf buf(sink.rdbuf());
  std::ostream out(&buf);
  out << "row 1\npartial";
  EXPECT_EQ(sink.str(), "row 1\n") << "a watch prints each row as it comes";
  out << " \xE2\x82";  // the first two bytes of the euro sign
  out.flush();
  EXPECT_EQ(sink.str(), "row 1\npartial ") << "a flush keeps an unfinished character back";
  out << "\xAC\n";
  EXPECT_EQ(sink.str(), "row 1\npartial \xE2\x82\xAC\n");
}

TEST(TerminalOutputTest, EscapedJsonIsTheSameDocument) {
  const nlohmann::json doc = {{"message",
                               "del\x7f c1\xC2\x9D"
                               "x esc\x1b"}};
  std::ostringstream sink;
  {
    TerminalEscapingBuf buf(sink.rdbuf());
    std::ostream out(&buf);
    out << doc.dump(4) << "\n";
  }
  EXPECT_EQ(sink.str().find('\x7f'), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(sink.str()), doc);
}

TEST(TerminalOutputTest, OnlyTheContainerStreamCommandsAreRaw) {
  auto raw = [](std::vector<const char*> argv) {
    argv.insert(argv.begin(), "nodeletctl");
    return PrintsContainerStream(static_cast<int>(argv.size()), argv.data());
  };
  EXPECT_TRUE(raw({"logs", "web"}));
  EXPECT_TRUE(raw({"--run-dir", "/run/x", "logs", "-f", "web"}));
  EXPECT_TRUE(raw({"exec", "web", "--", "sh"}));
  EXPECT_TRUE(raw({"attach", "web"}));
  EXPECT_TRUE(raw({"port-forward", "web", "8080"}));
  EXPECT_FALSE(raw({"pod", "logs"})) << "a pod named logs";
  EXPECT_FALSE(raw({"--run-dir", "logs", "pods"})) << "a run directory named logs";
  EXPECT_FALSE(raw({"events"}));
  EXPECT_FALSE(raw({}));
}

}  // namespace
}  // namespace nodelet::ctl
