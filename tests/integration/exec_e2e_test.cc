// `nodeletctl exec`, `attach` and `port-forward` end to end: the real nodelet on a private
// containerd, sessions over containerd's streaming server (WebSocket, v4.channel.k8s.io):
// - exec passes stdin, stdout, stderr and the exit code through; a command that does not exist
//   exits 127; an unknown pod exits 4, a container that is not running 1; a session goes on
//   while podworkerd is killed and restarted (a second session works meanwhile) and while the
//   supervisor and all services are killed, and the container is never touched;
// - sessions are asked of the supervisor (ctl.sock), which asks podworkerd: podworkerd refuses
//   any other peer, and a stopped podworkerd gets nodeletctl a clear error within the deadline
//   while the supervisor goes on serving;
// - exec -t runs in a terminal whose size follows the local one (a pty in the test);
// - attach passes stdin to a container that reads it and ends when the container does;
// - port-forward carries two connections to busybox httpd in the pod;
// - `pods -w` prints a row when a pod appears, and AGE is known.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "lib/ipc/codec.h"
#include "lib/ipc/endpoints.h"
#include "lib/ipc/sockets.h"
#include "podwork_generated.h"
#include "tests/testing/containerd.h"
#include "tests/testing/harness.h"
#include "tests/testing/http_get.h"
#include "tests/testing/nodelet_fixture.h"

namespace nodelet::testing {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

// A child with its stdin, stdout and stderr on pipes (or all three on a pty), ended by pid.
class Child {
 public:
  // `pty_rows`/`pty_cols` > 0: the child runs on a new pseudo-terminal of that size.
  explicit Child(const std::vector<std::string>& argv, int pty_rows = 0, int pty_cols = 0) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    if (pty_rows > 0) {
      winsize ws{};
      ws.ws_row = static_cast<unsigned short>(pty_rows);
      ws.ws_col = static_cast<unsigned short>(pty_cols);
      pid_ = forkpty(&in_, nullptr, nullptr, &ws);
      if (pid_ == 0) {
        execv(args[0], args.data());
        _exit(127);
      }
      out_ = in_;
      return;
    }
    int in[2], out[2], err[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0)
      return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      dup2(err[1], 2);
      execv(args[0], args.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    close(err[1]);
    in_ = in[1];
    out_ = out[0];
    err_ = err[0];
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (in_ >= 0 && in_ != out_) close(in_);
    if (out_ >= 0) close(out_);
    if (err_ >= 0) close(err_);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  void Write(const std::string& data) { (void)!::write(in_, data.data(), data.size()); }
  void CloseStdin() {
    if (in_ != out_) {
      close(in_);
      in_ = -1;
    }
  }
  void SetWindow(int rows, int cols) {
    winsize ws{};
    ws.ws_row = static_cast<unsigned short>(rows);
    ws.ws_col = static_cast<unsigned short>(cols);
    ioctl(in_, TIOCSWINSZ, &ws);
  }
  // Reads stdout until it holds `needle` or the deadline; true when it does.
  bool ReadUntil(const std::string& needle, std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (out.find(needle) == std::string::npos) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          end - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      if (!Drain(out_, &out, left)) return out.find(needle) != std::string::npos;
    }
    return true;
  }
  // Waits for the exit, reading what remains; the exit code, or -1 (signal, deadline).
  int Wait(std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    bool out_open = true, err_open = err_ >= 0;
    while (out_open || err_open) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          end - std::chrono::steady_clock::now());
      if (left.count() <= 0) return -1;
      if (out_open) out_open = Drain(out_, &out, std::min(left, 100ms));
      if (err_open) err_open = Drain(err_, &err, std::min(left, 100ms));
    }
    int status = 0;
    // Both pipes are closed: the child is exiting; its exit is reaped within the deadline.
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() >= end) return -1;
      std::this_thread::sleep_for(10ms);
    }
    reaped_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  std::string out, err;

 private:
  // One read of `fd` within `timeout`; false at its end (EOF, or EIO on a pty).
  static bool Drain(int fd, std::string* into, std::chrono::milliseconds timeout) {
    pollfd p{fd, POLLIN, 0};
    int r = poll(&p, 1, static_cast<int>(timeout.count()));
    if (r <= 0) return true;
    char buf[4096];
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return false;
    into->append(buf, static_cast<size_t>(n));
    return true;
  }

  pid_t pid_ = -1;
  int in_ = -1, out_ = -1, err_ = -1;
  bool reaped_ = false;
};

class ExecE2eTest : public NodeletTest {
 protected:
  std::vector<std::string> Ctl(std::vector<std::string> args) {
    std::vector<std::string> argv = {BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run")};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }
  // Running in the runtime, and so in podworkerd's view (plegd's cache), which `exec` and
  // `attach` check: an exec that succeeds says both.
  bool WaitRunning(const std::string& pod, std::chrono::milliseconds timeout) {
    return WaitFor(
        [&] {
          return !RunningContainer(pod).empty() &&
                 RunCommand(Ctl({"exec", pod, "--", "true"}), std::chrono::seconds(10)).exit_code ==
                     0;
        },
        timeout);
  }
  int RestartCount(const std::string& pod) {
    auto j = CtlPod(pod);
    if (j.is_null() || !j["status"]["containerStatuses"].is_array()) return -1;
    return j["status"]["containerStatuses"][0].value("restartCount", -1);
  }
};

TEST_F(ExecE2eTest, ExecPassesStreamsAndExitCodeAndOutlivesPodworkerd) {
  Write("box.yaml", BusyboxPodYaml("box", kSleepUntilTerm));
  Write("done.yaml", BusyboxPodYaml("done", "echo bye", "  restartPolicy: Never\n"));
  StartNodelet();
  ASSERT_TRUE(WaitRunning("box-node1", 60s));
  ASSERT_TRUE(WaitFor(
      [&] {
        auto j = CtlPod("done-node1");
        return !j.is_null() && j["status"].value("phase", "") == "Succeeded";
      },
      60s));

  // stdin in, stdout and stderr apart, the exit code back.
  {
    Child c(Ctl({"exec", "-i", "box-node1", "--", "sh", "-c",
                 "read l; echo out:$l; echo err:$l >&2; exit 3"}));
    c.Write("hello\n");
    EXPECT_EQ(c.Wait(20s), 3) << c.out << c.err;
    EXPECT_EQ(c.out, "out:hello\n");
    EXPECT_THAT(c.err, HasSubstr("err:hello\n"));
  }
  auto ok = RunCommand(Ctl({"exec", "box-node1", "--", "sh", "-c", "echo $HOSTNAME"}), 20s);
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_EQ(ok.output, "box-node1\n");
  auto missing = RunCommand(Ctl({"exec", "box-node1", "--", "no-such-command"}), 20s);
  EXPECT_EQ(missing.exit_code, 127) << missing.output;
  EXPECT_THAT(missing.output, HasSubstr("no-such-command"));
  auto no_pod = RunCommand(Ctl({"exec", "ghost", "--", "true"}), 20s);
  EXPECT_EQ(no_pod.exit_code, 4) << no_pod.output;
  EXPECT_THAT(no_pod.output, HasSubstr("pod default/ghost not found"));
  auto no_container = RunCommand(Ctl({"exec", "box-node1", "-c", "db", "--", "true"}), 20s);
  EXPECT_EQ(no_container.exit_code, 4) << no_container.output;
  auto exited = RunCommand(Ctl({"exec", "done-node1", "--", "true"}), 20s);
  EXPECT_EQ(exited.exit_code, 1) << exited.output;
  EXPECT_THAT(exited.output, HasSubstr("is not running"));

  // A session in progress while podworkerd is killed: it goes on (it runs between nodeletctl
  // and containerd); a second session works once podworkerd is back; the container is the same.
  const std::string container = RunningContainer("box-node1");
  const int restarts = RestartCount("box-node1");
  Child session(
      Ctl({"exec", "-i", "box-node1", "--", "sh", "-c", "while read l; do echo echo:$l; done"}));
  session.Write("one\n");
  ASSERT_TRUE(session.ReadUntil("echo:one\n", 20s)) << session.out << session.err;
  const pid_t podworkerd = ServicePid("podworkerd");
  ASSERT_GT(podworkerd, 0);
  ASSERT_EQ(kill(podworkerd, SIGKILL), 0);
  ASSERT_TRUE(WaitProcessGone(podworkerd, 10s));
  session.Write("two\n");
  EXPECT_TRUE(session.ReadUntil("echo:two\n", 20s)) << session.out << session.err;
  CommandResult second;
  EXPECT_TRUE(WaitFor(
      [&] {
        second = RunCommand(Ctl({"exec", "box-node1", "--", "echo", "second"}), 20s);
        return second.exit_code == 0;
      },
      40s))
      << second.output;
  EXPECT_EQ(second.output, "second\n");
  session.Write("three\n");
  EXPECT_TRUE(session.ReadUntil("echo:three\n", 20s)) << session.out << session.err;
  // The supervisor and every service killed: the session still goes on; once nodelet is back,
  // new sessions work again.
  ASSERT_TRUE(KillSupervisorAndServices());
  session.Write("four\n");
  EXPECT_TRUE(session.ReadUntil("echo:four\n", 20s)) << session.out << session.err;
  StartNodelet();
  EXPECT_TRUE(WaitFor(
      [&] {
        second = RunCommand(Ctl({"exec", "box-node1", "--", "echo", "third"}), 20s);
        return second.exit_code == 0;
      },
      60s))
      << second.output;
  // v4.channel.k8s.io cannot pass the end of stdin: nodeletctl is ended by a signal, and the
  // exec'd loop with it; the container stays.
  kill(session.pid(), SIGTERM);
  EXPECT_EQ(session.Wait(20s), 128 + SIGTERM) << session.err;
  EXPECT_EQ(RunningContainer("box-node1"), container);
  EXPECT_EQ(RestartCount("box-node1"), restarts);
}

// In a forked child (a root process the socket's credential check lets in, not the supervisor):
// asks podworkerd's socket directly for an exec session of `pod` and writes what came back to
// `out_fd`: "url: URL", "error: CODE: TEXT", or why nothing did. Never returns.
[[noreturn]] void AskPodworkerdDirectly(const std::string& endpoint, const std::string& pod,
                                        int out_fd) {
  std::string result;
  {
    ipc::Context ctx;
    ipc::DealerClient client(ctx, 1024 * 1024);
    flatbuffers::FlatBufferBuilder fbb(512);
    std::vector<flatbuffers::Offset<flatbuffers::String>> cmd = {fbb.CreateString("true")};
    auto request = ipc::podwork::CreateStreamRequestDirect(
        fbb, ipc::podwork::StreamKind::Exec, "default", pod.c_str(), "", &cmd,
        /*stdin=*/false, /*stdout=*/true, /*stderr=*/true, /*tty=*/false, nullptr,
        /*request_id=*/7);
    ipc::EnvelopeWriter envelope(ipc::ServiceId::Ctl, ipc::NewIncarnation());
    auto header = envelope.Write(fbb);
    fbb.Finish(ipc::podwork::CreatePodWorkMessage(fbb, header, ipc::podwork::Body::StreamRequest,
                                                  request.Union()),
               ipc::podwork::PodWorkMessageIdentifier());
    if (Status s = client.Connect(endpoint); !s.ok()) {
      result = "connect: " + s.message();
    } else if (!client.WaitWritable(10s)) {
      result = "not writable";
    } else if (!client.Send(fbb.GetBufferPointer(), fbb.GetSize()).ok()) {
      result = "send failed";
    } else if (auto frame = client.Receive(10s); !frame.ok()) {
      result = "no reply: " + frame.status().message();
    } else {
      auto m = ipc::DecodeMessage<ipc::podwork::PodWorkMessage>(
          frame->data(), frame->size(), ipc::podwork::PodWorkMessageIdentifier());
      const auto* reply = m.ok() ? (*m)->body_as_StreamReply() : nullptr;
      if (reply == nullptr) {
        result = "not a StreamReply";
      } else if (reply->error() && reply->error()->size() > 0) {
        result = "error: " + std::to_string(reply->code()) + ": " + reply->error()->str();
      } else {
        result = "url: " + (reply->url() ? reply->url()->str() : std::string());
      }
    }
  }
  (void)!write(out_fd, result.data(), result.size());
  _exit(0);
}

// What a forked child wrote before it exited (up to `timeout`); it is reaped (SIGKILLed at the
// deadline).
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
  waitpid(pid, nullptr, 0);
  return out;
}

// SIGSTOPs a process by pid, and SIGCONTs it when it goes out of scope (also on a failure).
class Stopped {
 public:
  explicit Stopped(pid_t pid) : pid_(pid) { ok_ = kill(pid_, SIGSTOP) == 0; }
  ~Stopped() { Continue(); }
  bool ok() const { return ok_; }
  void Continue() {
    if (ok_) kill(pid_, SIGCONT);
    ok_ = false;
  }

 private:
  pid_t pid_;
  bool ok_ = false;
};

// exec goes through the supervisor (ctl.sock), which asks podworkerd on its own socket:
// podworkerd opens sessions only for the supervisor, and a podworkerd that does not answer
// (SIGSTOPped) costs nodeletctl a clear error within the deadline, not a hung supervisor.
TEST_F(ExecE2eTest, StreamSessionsAreOpenedOnlyThroughTheSupervisor) {
  Write("box.yaml", BusyboxPodYaml("box", kSleepUntilTerm));
  // A stopped podworkerd is not taken for hung and restarted while the test holds it.
  StartNodelet({"--heartbeat-deadline", "60s"});
  // An exec that succeeds went through the supervisor: nodeletctl knows no other way.
  ASSERT_TRUE(WaitRunning("box-node1", 60s));

  // A root process that is not the supervisor asks podworkerd's socket directly: refused.
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    AskPodworkerdDirectly(ipc::kPodWorkerEndpoint.Uri(dir_.Sub("run")), "box-node1", fds[1]);
  }
  close(fds[1]);
  const std::string direct = ReadChild(child, fds[0], 20s);
  close(fds[0]);
  EXPECT_THAT(direct, HasSubstr("error: " +
                                std::to_string(static_cast<int>(StatusCode::kPermissionDenied)) +
                                ": stream sessions are opened only for the supervisor"));
  EXPECT_THAT(direct, HasSubstr("pid " + std::to_string(child) + " is not the supervisor"));

  // podworkerd stopped: exec answers a clear error within the supervisor's deadline (5 s), and
  // the supervisor serves `status` meanwhile.
  const pid_t podworkerd = ServicePid("podworkerd");
  ASSERT_GT(podworkerd, 0);
  {
    Stopped stopped(podworkerd);
    ASSERT_TRUE(stopped.ok());
    const auto start = std::chrono::steady_clock::now();
    Child exec(Ctl({"exec", "box-node1", "--", "true"}));
    auto status = RunCommand(Ctl({"status"}), 3s);
    EXPECT_EQ(status.exit_code, 0) << status.output;
    EXPECT_THAT(status.output, HasSubstr("podworkerd"));
    EXPECT_LT(std::chrono::steady_clock::now() - start, 4s) << "status waited for podworkerd";
    EXPECT_EQ(exec.Wait(20s), 4) << exec.out << exec.err;
    EXPECT_LT(std::chrono::steady_clock::now() - start, 8s);
    EXPECT_THAT(exec.err, HasSubstr("podworkerd did not answer within 5000 ms")) << exec.err;
  }
  // Going on: sessions work again (the late answer to the request that timed out is dropped).
  CommandResult again;
  EXPECT_TRUE(WaitFor(
      [&] {
        again = RunCommand(Ctl({"exec", "box-node1", "--", "echo", "back"}), 20s);
        return again.exit_code == 0;
      },
      30s))
      << again.output;
  EXPECT_EQ(again.output, "back\n");
  if (HasFailure()) PrintServiceLogs();
}

TEST_F(ExecE2eTest, ExecInATerminalFollowsResizesAndAttachPassesStdin) {
  Write("box.yaml", BusyboxPodYaml("box", kSleepUntilTerm));
  Write("reader.yaml", BusyboxPodYaml("reader", "read l; echo got:$l", "  restartPolicy: Never\n",
                                      "    stdin: true\n"));
  StartNodelet();
  ASSERT_TRUE(WaitRunning("box-node1", 60s));
  ASSERT_TRUE(WaitRunning("reader-node1", 60s));

  {
    Child tty(Ctl({"exec", "-i", "-t", "box-node1", "--", "sh"}), 30, 100);
    tty.Write("stty size\r");
    EXPECT_TRUE(tty.ReadUntil("30 100", 20s)) << tty.out;
    tty.SetWindow(40, 120);  // the kernel sends nodeletctl SIGWINCH
    // The resize travels on its own channel, not ordered with stdin: ask until it shows.
    bool resized = false;
    for (int i = 0; i < 20 && !resized; ++i) {
      tty.Write("stty size\r");
      resized = tty.ReadUntil("40 120", 1s);
    }
    EXPECT_TRUE(resized) << tty.out;
    tty.Write("exit 7\r");
    EXPECT_EQ(tty.Wait(20s), 7) << tty.out;
  }

  // The container waits on stdin; attach gives it a line; the session ends with the container.
  Child attach(Ctl({"attach", "-i", "reader-node1"}));
  // Attached once the session is open; the line is read by the container whenever it arrives.
  attach.Write("through-attach\n");
  EXPECT_TRUE(attach.ReadUntil("got:through-attach", 30s)) << attach.out << attach.err;
  EXPECT_EQ(attach.Wait(30s), 0) << attach.err;
  EXPECT_TRUE(WaitFor(
      [&] {
        auto j = CtlPod("reader-node1");
        return !j.is_null() && j["status"].value("phase", "") == "Succeeded";
      },
      30s));
}

TEST_F(ExecE2eTest, PortForwardCarriesConnectionsToThePod) {
  Write("web.yaml", BusyboxPodYaml("web",
                                   "mkdir -p /www; echo hello-through-forward > /www/index.html; "
                                   "exec httpd -f -p 8080 -h /www"));
  StartNodelet();
  ASSERT_TRUE(WaitRunning("web-node1", 60s));
  auto refused = RunCommand(Ctl({"port-forward", "ghost", ":80"}), 20s);
  EXPECT_EQ(refused.exit_code, 4) << refused.output;
  auto bad = RunCommand(Ctl({"port-forward", "web-node1", "99999"}), 20s);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;

  Child forward(Ctl({"port-forward", "web-node1", ":8080"}));
  ASSERT_TRUE(forward.ReadUntil(" -> 8080\n", 20s)) << forward.out << forward.err;
  // "Forwarding from 127.0.0.1:PORT -> 8080"
  const auto colon = forward.out.find("127.0.0.1:");
  ASSERT_NE(colon, std::string::npos) << forward.out;
  const int port = std::atoi(forward.out.c_str() + colon + 10);
  ASSERT_GT(port, 0);
  // httpd listens a moment after the container started: retried within a deadline.
  std::string got;
  WaitFor(
      [&] {
        got = HttpGetOnce("127.0.0.1", port, "/index.html");
        return got.find("hello-through-forward") != std::string::npos;
      },
      20s);
  EXPECT_THAT(got, HasSubstr("hello-through-forward")) << forward.err;
  // A second connection: a session of its own.
  EXPECT_THAT(HttpGetOnce("127.0.0.1", port, "/index.html"), HasSubstr("hello-through-forward"))
      << forward.err;
  kill(forward.pid(), SIGTERM);
  EXPECT_EQ(forward.Wait(20s), 0) << forward.err;
}

TEST_F(ExecE2eTest, PodsWatchPrintsARowPerChangeAndAgeIsKnown) {
  Write("box.yaml", BusyboxPodYaml("box", kSleepUntilTerm));
  StartNodelet();
  ASSERT_TRUE(WaitRunning("box-node1", 60s));
  auto table = RunCommand(Ctl({"pods"}), 10s);
  ASSERT_EQ(table.exit_code, 0) << table.output;
  EXPECT_THAT(table.output, HasSubstr("box-node1"));
  EXPECT_THAT(table.output, ::testing::Not(HasSubstr("<unknown>")));
  auto wide = RunCommand(Ctl({"pods", "-o", "wide"}), 10s);
  EXPECT_THAT(wide.output, HasSubstr("IP"));
  EXPECT_THAT(wide.output, HasSubstr("   node1   BestEffort"));

  Child watch(Ctl({"pods", "-w"}));
  ASSERT_TRUE(watch.ReadUntil("box-node1", 10s)) << watch.out << watch.err;
  Write("late.yaml", BusyboxPodYaml("late", kSleepUntilTerm));
  // Pending first, then Running: a row for each change.
  EXPECT_TRUE(watch.ReadUntil("late-node1   1/1     Running", 60s)) << watch.out;
  EXPECT_EQ(watch.out.find("READY"), watch.out.rfind("READY")) << "one header only:\n" << watch.out;
  kill(watch.pid(), SIGTERM);
  watch.Wait(10s);
}

}  // namespace
}  // namespace nodelet::testing
