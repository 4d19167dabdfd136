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
