// Host hardening, end to end through the real `nodelet` on a private containerd:
// - a manifest whose metadata.uid holds `../` is refused with a field error naming
//   metadata.uid, the other pods run, and nothing outside the root directory is created or
//   removed;
// - a second nodelet on the same directories exits 1 naming the first one's pid, one on another
//   root but the same run directory fails naming the socket it cannot take, and the first keeps
//   every service (same pids) and every pod (same container);
// - the HTTP listener is held by exactly one process, the supervisor, and no service holds any
//   socket, pipe or file of the supervisor's past its stdio: each holds only what it opened;
//   and /healthz answers beside 100 idle connections.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "tests/testing/containerd.h"
#include "tests/testing/harness.h"
#include "tests/testing/nodelet_fixture.h"

namespace nodelet::testing {
namespace {

namespace v1 = ::runtime::v1;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using ::testing::HasSubstr;

constexpr char kServe[] = "trap 'exit 0' TERM; while true; do sleep 0.2; done";

std::string PodYaml(const std::string& name, const std::string& metadata_extra = "") {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name + "\n" + metadata_extra +
         "spec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 2\n"
         "  volumes:\n  - name: scratch\n    emptyDir: {}\n"
         "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
         "    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"" +
         std::string(kServe) +
         "\"]\n    volumeMounts:\n    - {name: scratch, mountPath: /scratch}\n";
}

std::set<std::string> Entries(const std::string& dir) {
  std::set<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) out.insert(e.path().filename());
  return out;
}

// fd number -> link target ("socket:[123]", "pipe:[45]", "/path", "anon_inode:[eventfd]").
std::map<int, std::string> Fds(pid_t pid) {
  std::map<int, std::string> out;
  std::error_code ec;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::error_code lec;
    auto target = fs::read_symlink(e.path(), lec);
    if (!lec) out[std::atoi(e.path().filename().c_str())] = target.string();
  }
  return out;
}

// The inode of the TCP socket listening on 127.0.0.1:port (from /proc/net/tcp), or "".
std::string ListenerInode(int port) {
  std::ifstream in("/proc/net/tcp");
  std::string line;
  std::getline(in, line);
  char want[16];
  std::snprintf(want, sizeof want, "0100007F:%04X", port);
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string sl, local, remote, state, queues, timer, retr, uid, timeout, inode;
    f >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
    if (local == want && state == "0A") return inode;
  }
  return "";
}

class HostHardeningTest : public NodeletTest {
 protected:
  std::vector<std::string> NodeletArgs(const std::string& root, const std::string& run,
                                       const std::string& log) {
    return {BinDir() + "/nodelet",
            "--root-dir",
            root,
            "--run-dir",
            run,
            "--log-dir",
            log,
            "--runtime-endpoint",
            containerd_->endpoint(),
            "--pod-manifest-path",
            manifests(),
            "--node-name",
            "node1",
            "--http-address",
            "",
            "--cgroup-root",
            TestCgroupRoot(dir_.path())};
  }
};

TEST_F(HostHardeningTest, UidThatLeavesTheRootIsRefusedAndNothingOutsideIsTouched) {
  // root is DIR/root, so ROOT/pods/../../victim is DIR/victim: what an unchecked uid reaches.
  const std::string victim = dir_.Sub("victim");
  fs::create_directories(victim);
  std::ofstream(victim + "/keep") << "keep";
  Write("good.yaml", PodYaml("good"));
  Write("evil.yaml", PodYaml("evil", "  uid: ../../victim\n"));
  Write("evil2.yaml", PodYaml("evil2", "  uid: ../../escaped\n"));
  const auto outside_before = Entries(dir_.path());
  StartNodelet();
  ASSERT_TRUE(WaitFor([&] { return !RunningContainer("good-node1").empty(); }, 40s))
      << PodJson("good-node1").dump(2);

  const std::string log = ReadTextFile(dir_.Sub("nodelet.log"));
  for (const char* file : {"evil.yaml", "evil2.yaml"}) {
    EXPECT_THAT(log, HasSubstr(manifests() + "/" + file)) << file << " must be reported";
  }
  EXPECT_THAT(log, HasSubstr("metadata.uid: Invalid value: \"../../victim\""));
  EXPECT_TRUE(PodJson("evil-node1").is_null()) << PodJson("evil-node1").dump(2);
  EXPECT_TRUE(RunningContainer("evil-node1").empty());

  // Every manifest removed: the good pod goes (its directory too); the refused ones had none.
  const std::string uid = PodJson("good-node1")["metadata"].value("uid", "");
  ASSERT_FALSE(uid.empty());
  for (const char* file : {"good.yaml", "evil.yaml", "evil2.yaml"})
    fs::remove(manifests() + "/" + file);
  EXPECT_TRUE(WaitFor([&] { return !fs::exists(dir_.Sub("root/pods/" + uid)); }, 30s));

  EXPECT_EQ(Entries(victim), std::set<std::string>{"keep"})
      << "nothing may be made or removed in it";
  EXPECT_EQ(ReadTextFile(victim + "/keep"), "keep");
  std::set<std::string> made;
  for (const auto& e : Entries(dir_.path())) {
    if (!outside_before.count(e)) made.insert(e);
  }
  // What nodelet itself makes beside the manifests: its three directories, its log and the
  // test's notify socket. Nothing named after a pod.
  EXPECT_EQ(made, (std::set<std::string>{"root", "run", "nodelet.log", "notify-1.sock"}));
}

TEST_F(HostHardeningTest, SecondNodeletExitsAndTheFirstKeepsEveryServiceAndPod) {
  Write("good.yaml", PodYaml("good"));
  StartNodelet();
  std::string container;
  ASSERT_TRUE(WaitFor([&] { return !(container = RunningContainer("good-node1")).empty(); }, 40s));
  std::map<std::string, pid_t> pids;
  for (const char* s : {"plegd", "statusd", "podworkerd", "volumed"}) {
    pids[s] = ServicePid(s);
    ASSERT_GT(pids[s], 0) << s;
  }

  // The same directories: refused by the instance lock, before anything is bound.
  auto second = RunCommand(NodeletArgs(dir_.Sub("root"), dir_.Sub("run"), dir_.Sub("log")), 15s);
  EXPECT_EQ(second.exit_code, 1) << second.output;
  EXPECT_THAT(second.output,
              HasSubstr("nodelet: another nodelet (pid " + std::to_string(nodelet_->pid()) +
                        ") holds " + dir_.Sub("root")));
  // Another root, the same run directory: the control socket's lock refuses it.
  auto third = RunCommand(NodeletArgs(dir_.Sub("root2"), dir_.Sub("run"), dir_.Sub("log2")), 15s);
  EXPECT_EQ(third.exit_code, 1) << third.output;
  EXPECT_THAT(third.output, HasSubstr("is served by another process (pid " +
                                      std::to_string(nodelet_->pid()) + ")"));

  // The first nodelet: every service the same process, answering, and the pod untouched.
  auto status = RunCommand({BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "status"}, 5s);
  EXPECT_EQ(status.exit_code, 0) << status.output;
  for (const auto& [s, pid] : pids) {
    EXPECT_EQ(ServicePid(s), pid) << s << " must not have been restarted";
    EXPECT_THAT(status.output, HasSubstr(s)) << status.output;
  }
  EXPECT_THAT(status.output, ::testing::Not(HasSubstr("FATAL")));
  EXPECT_THAT(status.output, ::testing::Not(HasSubstr("BACKOFF")));
  EXPECT_EQ(RunningContainer("good-node1"), container);
  EXPECT_TRUE(nodelet_->running());
  fs::remove(manifests() + "/good.yaml");
  EXPECT_TRUE(WaitFor([&] { return RunningContainer("good-node1").empty(); }, 30s));
}

TEST_F(HostHardeningTest, HttpListenerIsHeldByOneProcessAndServicesHoldOnlyWhatTheyOpened) {
  const int port = FreeLoopbackPort();
  StartNodelet({"--http-address", "127.0.0.1:" + std::to_string(port)});
  const std::string inode = ListenerInode(port);
  ASSERT_FALSE(inode.empty()) << "no listener on port " << port;
  const std::string listener = "socket:[" + inode + "]";

  // Every process on the machine: only the supervisor holds the listener.
  std::set<pid_t> holders;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = std::atoi(name.c_str());
    for (const auto& [fd, target] : Fds(pid)) {
      if (target == listener) holders.insert(pid);
    }
  }
  EXPECT_EQ(holders, std::set<pid_t>{nodelet_->pid()});

  // What the supervisor holds past stdio that names one object (a socket, a pipe, a file):
  // none of it may be held by a service past its stdio (the pipes to a service's stdout and
  // stderr are its fds 1 and 2).
  std::set<std::string> supervisor_objects;
  for (const auto& [fd, target] : Fds(nodelet_->pid())) {
    if (fd > 2 && target.rfind("anon_inode:", 0) != 0 && target.rfind("/dev/", 0) != 0) {
      supervisor_objects.insert(target);
    }
  }
  ASSERT_TRUE(supervisor_objects.count(listener));
  ASSERT_TRUE(supervisor_objects.count(dir_.Sub("root") + "/nodelet.lock"));
  for (const char* s : {"plegd", "statusd", "podworkerd", "volumed"}) {
    const pid_t pid = ServicePid(s);
    ASSERT_GT(pid, 0) << s;
    const auto fds = Fds(pid);
    ASSERT_FALSE(fds.empty()) << s;
    for (const auto& [fd, target] : fds) {
      if (fd <= 2) continue;
      EXPECT_FALSE(supervisor_objects.count(target))
          << s << " holds the supervisor's " << target << " as fd " << fd;
    }
  }

  // The endpoint still answers /healthz beside 100 idle connections.
  std::vector<int> idle;
  for (int i = 0; i < 100; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    idle.push_back(fd);
  }
  httplib::Client http("127.0.0.1", port);
  http.set_connection_timeout(2s);
  http.set_read_timeout(2s);
  const auto start = std::chrono::steady_clock::now();
  auto health = http.Get("/healthz");
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(health) << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 200) << health->body;
  std::cout << "/healthz beside 100 idle connections: "
            << std::chrono::duration_cast<std::chrono::microseconds>(took).count() << " us\n";
  for (int fd : idle) close(fd);
}

}  // namespace
}  // namespace nodelet::testing
