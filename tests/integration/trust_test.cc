// Trust only what root owns, one capability per channel (docs/security.md, "Edges: bytes, files
// and users nodelet does not control"), against the real binaries: nodelet refuses a run
// directory another user could change; podworkerd takes DesiredPods only from the supervisor.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "lib/ipc/codec.h"
#include "lib/ipc/endpoints.h"
#include "lib/ipc/sockets.h"
#include "podwork_generated.h"
#include "tests/testing/harness.h"
#include "tests/testing/service_node.h"

namespace nodelet::testing {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

constexpr uid_t kNobody = 65534;

CommandResult RunNodelet(const TempDir& dir, const std::string& run_dir) {
  return RunCommand({BinDir() + "/nodelet", "--root-dir", dir.Sub("root"), "--run-dir", run_dir,
                     "--log-dir", dir.Sub("log"), "--cgroup-root", TestCgroupRoot(dir.path())},
                    20s);
}

TEST(TrustTest, NodeletRefusesARunDirAnotherUserOwns) {
  ASSERT_EQ(geteuid(), 0u) << "runs as root (chown)";
  TempDir dir;
  const std::string run = dir.Sub("run");
  ASSERT_EQ(mkdir(run.c_str(), 0700), 0);
  ASSERT_EQ(chown(run.c_str(), kNobody, kNobody), 0);
  ASSERT_EQ(chmod(run.c_str(), 0777), 0);
  auto r = RunNodelet(dir, run);
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--run-dir '" + run +
                                  "' is not trusted: owner 65534:65534, "
                                  "mode 0777; it is owned by uid 65534"))
      << r.output;
  // Nothing was made or bound in it, and it was not "fixed" either.
  EXPECT_TRUE(std::filesystem::is_empty(run)) << run;
  struct stat st {};
  ASSERT_EQ(stat(run.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0777u);
}

TEST(TrustTest, NodeletRefusesARunDirWhoseAncestorOthersCanWrite) {
  ASSERT_EQ(geteuid(), 0u) << "runs as root (chown)";
  TempDir dir;
  const std::string open = dir.Sub("open");
  ASSERT_EQ(mkdir(open.c_str(), 0700), 0);
  ASSERT_EQ(chmod(open.c_str(), 0777), 0);  // root's, but anyone may rename what is in it
  const std::string run = open + "/run";
  ASSERT_EQ(mkdir(run.c_str(), 0700), 0);
  auto r = RunNodelet(dir, run);
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--run-dir '" + run + "' is not trusted (at '" + open +
                                  "'): owner 0:0, mode 0777; it is writable by every user and "
                                  "has no sticky bit"))
      << r.output;
  EXPECT_TRUE(std::filesystem::is_empty(run)) << run;
}

// The bytes of one DesiredPods message with no pods, as a sender claiming to be the supervisor
// would write them.
std::string EmptyDesiredPods(uint64_t generation) {
  flatbuffers::FlatBufferBuilder fbb(256);
  ipc::EnvelopeWriter envelope(ipc::ServiceId::Supervisor, ipc::NewIncarnation());
  auto desired = ipc::podwork::CreateDesiredPods(
      fbb, generation,
      fbb.CreateVector(std::vector<flatbuffers::Offset<ipc::podwork::DesiredPod>>{}), true);
  auto header = envelope.Write(fbb);
  fbb.Finish(ipc::podwork::CreatePodWorkMessage(fbb, header, ipc::podwork::Body::DesiredPods,
                                                desired.Union()),
             ipc::podwork::PodWorkMessageIdentifier());
  return std::string(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
}

// In a forked child: drops every capability (as the systemd units of statusd and plegd leave a
// service), sends `message` to podworkerd's work socket and writes what came back to `out_fd`:
// "ack", "error: TEXT", or why nothing did. Never returns.
[[noreturn]] void SendAsServiceWithoutCapabilities(const std::string& endpoint,
                                                   const std::string& message, int out_fd) {
  std::string result;
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capset, &header, data) != 0) {
    result = "capset failed";
  } else {
    ipc::Context ctx;
    ipc::DealerClient client(ctx, 1024 * 1024);
    if (Status s = client.Connect(endpoint); !s.ok()) {
      result = "connect: " + s.message();
    } else if (!client.WaitWritable(10s)) {
      result = "not writable";
    } else if (!client.Send(message.data(), message.size()).ok()) {
      result = "send failed";
    } else {
      auto frame = client.Receive(10s);
      if (!frame.ok()) {
        result = "no reply: " + frame.status().message();
      } else {
        auto m = ipc::DecodeMessage<ipc::podwork::PodWorkMessage>(
            frame->data(), frame->size(), ipc::podwork::PodWorkMessageIdentifier());
        if (!m.ok()) {
          result = "bad reply";
        } else if (auto err = (*m)->body_as_ErrorReply()) {
          result = "error: " + (err->error() ? err->error()->str() : std::string());
        } else {
          result = (*m)->body_type() == ipc::podwork::Body::WorkAck ? "ack" : "other reply";
        }
      }
    }
  }
  (void)!write(out_fd, result.data(), result.size());
  _exit(0);
}

// What the child wrote before it exited (up to `timeout`), and its reaping.
std::string ReadChild(pid_t pid, int fd, std::chrono::milliseconds timeout) {
  std::string out;
  const auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    if (left <= 0ms) {
      kill(pid, SIGKILL);
      out += " (timed out)";
      break;
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[1024];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return out;
}

// The text of every log file in `dir` whose name starts with `prefix` ("podworkerd-1.log"...).
std::string ServiceLogs(const TempDir& dir, const std::string& prefix) {
  std::string out;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() != ".log" || name.rfind(prefix, 0) != 0) continue;
    std::ifstream in(entry.path());
    out += "---- " + name + "\n" +
           std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  return out;
}

class PodworkerdChannelTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(node_.Start()); }
  void TearDown() override {
    if (HasFailure()) std::cerr << ServiceLogs(dir_, "");
  }
  TempDir dir_;
  ServiceNode node_{dir_};
};

// The test process plays the supervisor (podworkerd's parent, as the supervisor is in process
// mode): its sets are taken. A child without capabilities, root and let in by the socket's
// credential check, sends a set of its own: refused with a reply that says why, counted.
TEST_F(PodworkerdChannelTest, DesiredPodsAreTakenOnlyFromTheSupervisor) {
  node_.SendDesired({});
  const std::string endpoint = ipc::kPodWorkerEndpoint.Uri(dir_.Sub("run"));
  const std::string message = EmptyDesiredPods(1000);
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    SendAsServiceWithoutCapabilities(endpoint, message, fds[1]);
  }
  close(fds[1]);
  const std::string result = ReadChild(pid, fds[0], 20s);
  close(fds[0]);
  EXPECT_THAT(result, HasSubstr("error: DesiredPods is taken only from the supervisor: uid 0 gid "
                                "0 pid " +
                                std::to_string(pid) + " is not the supervisor"));
  // The supervisor's next set is still taken.
  node_.SendDesired({});
  node_.StopServices();
  const std::string logs = ServiceLogs(dir_, "podworkerd");
  EXPECT_THAT(logs, HasSubstr("desired_refused=1")) << logs;
  EXPECT_THAT(logs, HasSubstr("Refused: DesiredPods is taken only from the supervisor"));
}

}  // namespace
}  // namespace nodelet::testing
