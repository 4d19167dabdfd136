// lib/ipc sockets: an ipc:// endpoint is bound only under its lock, so a second server on the
// same path is refused with the holder's pid and the first one keeps its socket file and its
// clients; once the first is gone, the path can be bound again.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "lib/ipc/sockets.h"
#include "tests/testing/harness.h"

namespace nodelet::ipc {
namespace {

using namespace std::chrono_literals;

TEST(IpcSocketsTest, SecondServerOnAPathIsRefusedAndTheFirstKeepsServing) {
  testing::TempDir dir;
  const std::string path = dir.Sub("s.sock");
  const std::string uri = "ipc://" + path;
  Context ctx;
  auto first = std::make_unique<RouterServer>(ctx);
  ASSERT_TRUE(first->Bind(uri).ok());
  struct stat before {};
  ASSERT_EQ(stat(path.c_str(), &before), 0);

  RouterServer second(ctx);
  Status s = second.Bind(uri);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("is served by another process (pid " + std::to_string(getpid()) + ")"),
            std::string::npos)
      << s.message();
  // The socket file was not replaced: the first server still gets what a client sends.
  struct stat after {};
  ASSERT_EQ(stat(path.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);
  DealerClient client(ctx);
  ASSERT_TRUE(client.Connect(uri).ok());
  ASSERT_TRUE(client.WaitWritable(5s));
  ASSERT_TRUE(client.Send("hi", 2).ok());
  auto got = first->Receive(5s);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->payload.to_string(), "hi");

  // The holder gone (its socket file with it), the path is free again.
  first.reset();
  EXPECT_NE(access(path.c_str(), F_OK), 0);
  EXPECT_TRUE(second.Bind(uri).ok());
  EXPECT_EQ(access(path.c_str(), F_OK), 0);
}

}  // namespace
}  // namespace nodelet::ipc
