#include "svc-podworkerd/termination_message.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace nodelet::podworkerd {
namespace {

class TerminationMessageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/nodelet-termmsg-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
  }
  std::string dir_;
};

TEST_F(TerminationMessageTest, FileIsMadeWritableForAnyoneAndReadFromItsEnd) {
  auto path = TerminationMessagePath(dir_, "uid-1", "app", 3);
  ASSERT_TRUE(path.ok());
  EXPECT_EQ(*path, dir_ + "/pods/uid-1/containers/app/3");
  ASSERT_TRUE(CreateTerminationMessageFile(*path).ok());
  struct stat st {};
  ASSERT_EQ(stat(path->c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666u);
  EXPECT_EQ(ReadTerminationMessage(*path), "");
  Write(*path, "bye\n");
  EXPECT_EQ(ReadTerminationMessage(*path), "bye\n");
  Write(*path, std::string(1000, 'a') + std::string(kMaxTerminationMessageBytes, 'b'));
  EXPECT_EQ(ReadTerminationMessage(*path), std::string(kMaxTerminationMessageBytes, 'b'));
  // Created again (a new try of the same instance): empty again.
  ASSERT_TRUE(CreateTerminationMessageFile(*path).ok());
  EXPECT_EQ(ReadTerminationMessage(*path), "");
  EXPECT_FALSE(TerminationMessagePath(dir_, "../x", "app", 0).ok());
  EXPECT_FALSE(TerminationMessagePath(dir_, "u", "a/b", 0).ok());
}

TEST_F(TerminationMessageTest, LinksAndOtherFilesAreNotFollowed) {
  Write(dir_ + "/secret", "host secret");
  ASSERT_EQ(symlink((dir_ + "/secret").c_str(), (dir_ + "/link").c_str()), 0);
  EXPECT_EQ(ReadTerminationMessage(dir_ + "/link"), "");
  EXPECT_EQ(ReadTerminationMessage(dir_), "") << "a directory";
  EXPECT_EQ(ReadTerminationMessage(dir_ + "/missing"), "");
  ASSERT_EQ(mkfifo((dir_ + "/fifo").c_str(), 0600), 0);
  EXPECT_EQ(ReadTerminationMessage(dir_ + "/fifo"), "") << "a fifo must not block";
}

TEST_F(TerminationMessageTest, LastLogLinesJoinPartialsAndKeepTheEnd) {
  const std::string log = dir_ + "/0.log";
  std::string text;
  for (int i = 0; i < 100; ++i) {
    text += "2026-11-25T21:00:00.000000000Z stdout F line " + std::to_string(i) + "\n";
  }
  text += "2026-11-25T21:00:01.000000000Z stderr P half \n";
  text += "2026-11-25T21:00:01.000000001Z stderr F and the rest\n";
  Write(log, text);
  std::string out = ReadLastLogLines(log);
  const std::string end = "line 99\nhalf and the rest\n";
  ASSERT_GE(out.size(), end.size());
  EXPECT_EQ(out.substr(out.size() - end.size()), end);
  EXPECT_EQ(out.find("line 20\n"), std::string::npos) << "only the last 80 lines";
  EXPECT_NE(out.find("line 21\n"), std::string::npos);
  std::string big;
  for (int i = 0; i < 10; ++i) {
    big += "2026-11-25T21:00:00.000000000Z stdout F " + std::string(500, 'x') + "\n";
  }
  Write(log, big);
  EXPECT_EQ(ReadLastLogLines(log).size(), kMaxTerminationLogBytes);
  EXPECT_EQ(ReadLastLogLines(dir_ + "/none.log"), "");
}

// The container's bytes become status text: valid UTF-8 (invalid sequences replaced by U+FFFD,
// even when the replacement makes the text longer: the cap still holds), and a read that starts
// inside a character (the last 4 KiB of a longer file) starts after it.
TEST_F(TerminationMessageTest, MessagesAreValidUtf8CutOnACharacterBoundary) {
  const std::string fffd = "\xEF\xBF\xBD";
  const std::string path = dir_ + "/msg";
  Write(path, "bad \xFF\xFE osc \x1b]0;t\x07 cut \xE2\x82");
  EXPECT_EQ(ReadTerminationMessage(path), "bad " + fffd + fffd + " osc \x1b]0;t\x07 cut " + fffd)
      << "control characters are the container's text: escaped where it is shown";
  // A euro sign across the 4 KiB cut: its last two bytes are in the window, and dropped.
  const std::string euro = "\xE2\x82\xAC";
  Write(path, "x" + euro + std::string(kMaxTerminationMessageBytes - 2, 'b'));
  EXPECT_EQ(ReadTerminationMessage(path), std::string(kMaxTerminationMessageBytes - 2, 'b'));
  // 4 KiB of invalid bytes would be 12 KiB of replacements: the end is kept within the cap.
  Write(path, std::string(kMaxTerminationMessageBytes, '\xFF'));
  const std::string all_bad = ReadTerminationMessage(path);
  EXPECT_LE(all_bad.size(), kMaxTerminationMessageBytes);
  EXPECT_EQ(all_bad.size() % 3, 0u) << "whole replacement characters only";
  EXPECT_EQ(all_bad.substr(0, 3), fffd);
  // The log fallback: the same for the log's last lines.
  const std::string log = dir_ + "/0.log";
  Write(log, "2026-11-25T21:00:00.000000000Z stdout F \xC3(\x1b[2J\n");
  EXPECT_EQ(ReadLastLogLines(log), fffd + "(\x1b[2J\n");
}

TEST(TerminationMessageCapTest, ThePodsMessagesShareTwelveKiB) {
  EXPECT_EQ(TerminationMessageCap(1), 12u * 1024);
  EXPECT_EQ(TerminationMessageCap(5), 12u * 1024 / 5);
  EXPECT_EQ(TerminationMessageCap(0), 12u * 1024);
}

}  // namespace
}  // namespace nodelet::podworkerd
