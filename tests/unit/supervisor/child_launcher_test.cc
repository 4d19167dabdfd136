#include "supervisor/child_launcher.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/testing/harness.h"

namespace nodelet::supervisor {
namespace {

// An fd the supervisor opened without CLOEXEC must not reach a spawned service.
TEST(ChildLauncherTest, ChildInheritsOnlyStdio) {
  char tmpl[] = "/tmp/nodelet-launcher-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  int leaked = open("/dev/null", O_RDONLY);  // deliberately without O_CLOEXEC
  ASSERT_GE(leaked, 3);
  {
    ChildLauncher launcher(dir, dir, 1 << 20, 1);
    const std::string probe = "if [ -e /proc/self/fd/" + std::to_string(leaked) +
                              " ]; then echo LEAK; else echo CLEAN; fi";
    ASSERT_TRUE(launcher.Add({"fdcheck", {"/bin/sh", "-c", probe}}).ok());
    auto pid = launcher.Spawn("fdcheck");
    ASSERT_TRUE(pid.ok()) << pid.status().ToString();
    const std::string log = launcher.LogPath("fdcheck");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    std::string text;
    while (std::chrono::steady_clock::now() < deadline) {
      int pipe_fd = -1;
      for (const auto& p : launcher.Pollables()) {
        if (!p.is_notify && p.name == "fdcheck") pipe_fd = p.fd;
      }
      if (pipe_fd < 0) break;  // the pipe reached EOF and was closed
      pollfd pfd{pipe_fd, POLLIN, 0};
      poll(&pfd, 1, 200);
      launcher.PumpLog("fdcheck");
    }
    text = nodelet::testing::ReadTextFile(log);
    int status = 0;
    waitpid(pid.value(), &status, 0);
    EXPECT_NE(text.find("CLEAN"), std::string::npos) << text;
    EXPECT_EQ(text.find("LEAK"), std::string::npos) << text;
  }
  close(leaked);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace nodelet::supervisor

namespace nodelet::supervisor {
namespace {

TEST(JournalTeeTest, NodeletsLinesGoWithTheirLevelAsPriorityAndWithoutTheTime) {
  EXPECT_EQ(JournalLine("2026-11-29T10:45:00.123Z warning [plegd.relist] relist took 3 s"),
            "<4>[plegd.relist] relist took 3 s");
  EXPECT_EQ(JournalLine("2026-11-29T10:45:00.123Z debug [ipc] x"), "<7>[ipc] x");
  EXPECT_EQ(JournalLine("2026-11-29T10:45:00.123Z error [podworkerd] y"), "<3>[podworkerd] y");
  EXPECT_EQ(JournalLine("2026-11-29T10:45:00.123Z critical [statusd] z"), "<2>[statusd] z");
  // Anything else as it is, at info: a library's own line, JSON, an unknown level.
  EXPECT_EQ(JournalLine("E1129 something grpc printed"), "<6>E1129 something grpc printed");
  EXPECT_EQ(JournalLine(R"({"ts":"2026-11-29T10:45:00.123Z","level":"info"})"),
            R"(<6>{"ts":"2026-11-29T10:45:00.123Z","level":"info"})");
  EXPECT_EQ(JournalLine("2026-11-29T10:45:00.123Z loud [x] y"),
            "<6>2026-11-29T10:45:00.123Z loud [x] y");
  EXPECT_EQ(JournalLine(""), "<6>");
}

TEST(JournalTeeTest, LinesSplitAcrossReadsGoWholeAndAPartialLineGoesAtTheEnd) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  {
    auto tee = JournalTee::OnFd(fds[1]);
    const std::string a = "2026-11-29T10:45:00.123Z info [plegd] first\n2026-11-29T10:45:00.1";
    const std::string b = "24Z error [plegd] second\nno end";
    tee->Write(a.data(), a.size());
    tee->Write(b.data(), b.size());
  }  // the partial line goes when the tee closes
  std::string got;
  char buf[256];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  EXPECT_EQ(got, "<6>[plegd] first\n<3>[plegd] second\n<6>no end\n");
}

}  // namespace
}  // namespace nodelet::supervisor
