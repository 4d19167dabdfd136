// The containerd test harness (tests/testing/containerd.h), each test with a containerd of its
// own: Stop() removes what it made and leaves no process, mount or cgroup behind (also after a
// killed containerd), CRI listings right after a restart are complete or refused, Release and
// Attach hand an instance over, and the pod network (tests/testing/pod_network.h,
// docs/runtime.md): an IP of the instance's subnet, a host port on the gateway IP, a broken
// conf noticed, two instances apart, a dead owner's slot cleaned.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "lib/cri/grpc_cri_client.h"
#include "tests/integration/cri_containerd_helpers.h"
#include "tests/testing/containerd.h"
#include "tests/testing/harness.h"
#include "tests/testing/http_get.h"
#include "tests/testing/leak_check.h"
#include "tests/testing/pod_network.h"

namespace nodelet::testing {
namespace {

namespace v1 = ::runtime::v1;
using std::chrono::milliseconds;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// Processes whose command line mentions `needle`.
std::vector<pid_t> ProcessesMentioning(const std::string& needle) {
  std::vector<pid_t> found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string cmdline = ReadTextFile(entry.path() / "cmdline");
    if (cmdline.find(needle) != std::string::npos) found.push_back(std::stoi(name));
  }
  return found;
}

int MountsUnder(const std::string& dir) {
  std::ifstream in("/proc/self/mountinfo");
  int count = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.find(" " + dir + "/") != std::string::npos ||
        line.find(" " + dir + " ") != std::string::npos) {
      ++count;
    }
  }
  return count;
}

// Its own containerd: Stop() must remove what it made and leave nothing of ours behind, both
// when containerd cooperates and when it was killed with its containers still running.
class ContainerdHarnessTest : public ::testing::Test {
 protected:
  // Runs a pod with one `sleep 3600` container; adds the sandbox and container ids to ids_.
  void RunSleeper(ContainerdInstance& containerd, const std::string& name) {
    auto sandbox_config = HostNetworkSandbox(name, dir_.Sub("logs"));
    auto sandbox = containerd.cri().RunPodSandbox(sandbox_config, "");
    ASSERT_TRUE(sandbox.ok()) << sandbox.status().ToString();
    auto container = containerd.cri().CreateContainer(
        *sandbox, BusyboxContainer(name, {"sleep", "3600"}), sandbox_config);
    ASSERT_TRUE(container.ok()) << container.status().ToString();
    ASSERT_TRUE(containerd.cri().StartContainer(*container).ok());
    ids_.push_back(*sandbox);
    ids_.push_back(*container);
    // The check for leftover cgroups below is not vacuous: the container has some now.
    EXPECT_THAT(CgroupsNamed(*container), ::testing::Not(::testing::IsEmpty()));
  }
  void ExpectNothingLeft(const std::string& dir, pid_t containerd_pid,
                         const std::vector<pid_t>& shims) {
    for (const auto& id : ids_) EXPECT_THAT(CgroupsNamed(id), ::testing::IsEmpty()) << id;
    EXPECT_FALSE(ProcessAlive(containerd_pid));
    for (pid_t shim : shims) EXPECT_FALSE(ProcessAlive(shim)) << "shim " << shim;
    EXPECT_THAT(ProcessesMentioning(dir), ::testing::IsEmpty());
    EXPECT_EQ(MountsUnder(dir), 0);
  }
  ContainerdOptions Options() {
    ContainerdOptions options;
    options.dir = dir_.Sub("ctd");
    options.image_tarballs = DefaultImageTarballs(ImagesDir());
    return options;
  }
  TempDir dir_;
  std::vector<std::string> ids_;
};

TEST_F(ContainerdHarnessTest, StopRemovesEverythingItMade) {
  auto started = ContainerdInstance::Start(Options());
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  auto& containerd = **started;
  RunSleeper(containerd, "one");
  RunSleeper(containerd, "two");
  pid_t pid = containerd.pid();
  auto shims = containerd.ShimPids();
  EXPECT_GE(shims.size(), 2u);  // one per sandbox
  EXPECT_GT(MountsUnder(containerd.dir()), 0);

  Status stopped = containerd.Stop();
  EXPECT_TRUE(stopped.ok()) << stopped.ToString();
  ExpectNothingLeft(containerd.dir(), pid, shims);
  EXPECT_FALSE(std::filesystem::exists(containerd.dir() + "/containerd.pid"));
  EXPECT_TRUE(containerd.Stop().ok());  // idempotent
}

TEST_F(ContainerdHarnessTest, StopCleansUpAfterAKilledContainerd) {
  auto started = ContainerdInstance::Start(Options());
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  auto& containerd = **started;
  RunSleeper(containerd, "orphan");
  pid_t pid = containerd.pid();
  auto shims = containerd.ShimPids();
  ASSERT_FALSE(shims.empty());
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  ASSERT_TRUE(WaitProcessGone(pid, milliseconds(10000)));
  // The shims and the container outlive containerd; Stop() must find and end them.
  for (pid_t shim : shims) EXPECT_TRUE(ProcessAlive(shim));

  Status stopped = containerd.Stop();
  EXPECT_TRUE(stopped.ok()) << stopped.ToString();
  ExpectNothingLeft(containerd.dir(), pid, shims);
}

// Evidence for what a CRI listing means right after a containerd restart (docs/runtime.md): a
// client polls ListPodSandbox and ListContainers as fast as it can while containerd stops and
// starts again over the same root and state. containerd loads its sandboxes and containers
// before it serves CRI, so each answer is either an error (not serving yet, or "server is not
// initialized yet") or the whole set: never fewer sandboxes or containers than exist, and every
// running one still listed as ready/running. If a containerd ever answered with a partial
// listing, this test fails and names the answer.
TEST_F(ContainerdHarnessTest, ListingsAfterARestartAreCompleteOrRefused) {
  auto started = ContainerdInstance::Start(Options());
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  auto& containerd = **started;
  constexpr int kPods = 12;
  for (int i = 0; i < kPods; ++i) RunSleeper(containerd, "listed" + std::to_string(i));

  std::atomic<bool> stop{false};
  struct Answer {
    bool ok = false;
    size_t sandboxes = 0, ready = 0, containers = 0, running = 0;
    std::string error;
  };
  std::vector<Answer> answers;  // the poller's own until it is joined
  std::atomic<size_t> complete_answers{0};
  std::thread poller([&] {
    cri::CriTimeouts timeouts;
    timeouts.query = milliseconds(2000);
    timeouts.call = milliseconds(2000);
    auto client = cri::GrpcCriClient::Create(containerd.endpoint(), timeouts);
    ASSERT_TRUE(client.ok());
    while (!stop.load()) {
      Answer a;
      auto sandboxes = (*client)->ListPodSandbox({});
      auto containers = (*client)->ListContainers({});
      a.ok = sandboxes.ok() && containers.ok();
      if (!a.ok) {
        a.error = !sandboxes.ok() ? sandboxes.status().ToString() : containers.status().ToString();
      } else {
        a.sandboxes = sandboxes->size();
        for (const auto& sb : *sandboxes) a.ready += sb.state() == v1::SANDBOX_READY ? 1 : 0;
        a.containers = containers->size();
        for (const auto& c : *containers) a.running += c.state() == v1::CONTAINER_RUNNING ? 1 : 0;
      }
      if (a.ok) ++complete_answers;
      const bool refused = !a.ok;
      answers.push_back(std::move(a));
      if (refused) {
        // A new channel connects at once, where the old one would wait out gRPC's reconnect
        // back-off and miss the first moments of the new daemon.
        std::this_thread::sleep_for(milliseconds(5));
        auto fresh = cri::GrpcCriClient::Create(containerd.endpoint(), timeouts);
        if (fresh.ok()) client = std::move(fresh);
      }
    }
  });
  Status restarted = containerd.Restart();
  // A few more answers from the restarted daemon.
  const size_t seen = complete_answers.load();
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (complete_answers.load() < seen + 20 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(milliseconds(20));  // polling the poller's progress, bounded
  }
  stop = true;
  poller.join();
  ASSERT_TRUE(restarted.ok()) << restarted.ToString();
  size_t refused = 0, complete = 0;
  std::set<std::string> refusals;
  for (const auto& a : answers) {
    if (!a.ok) {
      ++refused;
      refusals.insert(a.error.substr(0, 160));
      continue;
    }
    ++complete;
    EXPECT_EQ(a.sandboxes, static_cast<size_t>(kPods));
    EXPECT_EQ(a.ready, static_cast<size_t>(kPods));
    EXPECT_EQ(a.containers, static_cast<size_t>(kPods));
    EXPECT_EQ(a.running, static_cast<size_t>(kPods));
  }
  std::cout << "listings during the restart: " << complete << " complete, " << refused << " refused"
            << std::endl;
  for (const auto& r : refusals) std::cout << "  refused with: " << r << std::endl;
  EXPECT_GT(complete, 20u);
  Status stopped = containerd.Stop();
  EXPECT_TRUE(stopped.ok()) << stopped.ToString();
}

TEST_F(ContainerdHarnessTest, ReleaseAndAttachHandOverTheInstance) {
  std::string dir;
  pid_t pid = -1;
  {
    auto started = ContainerdInstance::Start(Options());
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    dir = (*started)->dir();
    pid = (*started)->pid();
    (*started)->Release();
  }
  EXPECT_TRUE(ProcessAlive(pid));
  // A second Start in the same directory is refused while it runs.
  auto twice = ContainerdInstance::Start(Options());
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.status().code(), StatusCode::kAlreadyExists);

  auto attached = ContainerdInstance::Attach(dir);
  ASSERT_TRUE(attached.ok()) << attached.status().ToString();
  EXPECT_EQ((*attached)->pid(), pid);
  EXPECT_TRUE((*attached)->cri().Version().ok());
  EXPECT_TRUE((*attached)->Stop().ok());
  EXPECT_TRUE(WaitProcessGone(pid, milliseconds(10000)));
  EXPECT_EQ(ContainerdInstance::Attach(dir).status().code(), StatusCode::kNotFound);
}

// ---- The pod network (tests/testing/pod_network.h, docs/runtime.md) ----

bool NetworkReady(ContainerdInstance& containerd) {
  auto status = containerd.cri().RuntimeStatus(false);
  if (!status.ok()) return false;
  for (const auto& c : status->status().conditions()) {
    if (c.type() == "NetworkReady") return c.status();
  }
  return false;
}

// Waits (bounded) until CRI Status reports NetworkReady == want: containerd notices changes of
// its conf dir through inotify a moment later, and CRI offers no event to wait on.
bool WaitNetworkReady(ContainerdInstance& containerd, bool want, milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (NetworkReady(containerd) == want) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(50));  // a poll, bounded by the deadline
  }
}

v1::PodSandboxConfig PodNetworkSandbox(const std::string& name, const std::string& log_dir) {
  auto config = HostNetworkSandbox(name, log_dir);
  config.mutable_linux()->mutable_security_context()->mutable_namespace_options()->set_network(
      v1::POD);
  return config;
}

std::vector<std::string> ResultsCacheFiles(const std::string& network) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(kCniResultsDir, ec)) {
    if (e.path().filename().string().rfind(network + "-", 0) == 0) out.push_back(e.path());
  }
  return out;
}

// What an instance's pod network leaves after Stop(): nothing.
void ExpectPodNetworkGone(const ContainerdInstance& containerd) {
  PodNetwork net = PodNetworkForSlot(containerd.cni_slot());
  EXPECT_FALSE(LinkExists(net.bridge)) << net.bridge;
  EXPECT_THAT(IptablesRulesOf(net), ::testing::IsEmpty());
  EXPECT_FALSE(std::filesystem::exists(containerd.ipam_data_dir()));
  EXPECT_THAT(ResultsCacheFiles(net.network), ::testing::IsEmpty());
  EXPECT_FALSE(std::filesystem::exists(CniSlotLockPath(net.slot)));
}

TEST_F(ContainerdHarnessTest, PodNetworkSandboxGetsAnIpOfTheInstancesSubnet) {
  auto started = ContainerdInstance::Start(Options());
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  auto& containerd = **started;
  ASSERT_TRUE(containerd.has_pod_network());
  EXPECT_THAT(containerd.bridge_name(), StartsWith("nlbr"));
  EXPECT_THAT(containerd.network_name(), StartsWith("nodelet-"));
  EXPECT_THAT(containerd.pod_subnet(), ::testing::EndsWith(".0/24"));
  EXPECT_TRUE(std::filesystem::exists(CniSlotLockPath(containerd.cni_slot())));
  EXPECT_TRUE(WaitNetworkReady(containerd, true, milliseconds(10000)));

  auto config = PodNetworkSandbox("netpod", dir_.Sub("logs"));
  auto sandbox = containerd.cri().RunPodSandbox(config, "");
  ASSERT_TRUE(sandbox.ok()) << sandbox.status().ToString();
  auto status = containerd.cri().PodSandboxStatus(*sandbox, false);
  ASSERT_TRUE(status.ok()) << status.status().ToString();
  std::string ip = status->status().network().ip();
  PodNetwork net = PodNetworkForSlot(containerd.cni_slot());
  EXPECT_THAT(ip, StartsWith(net.ip_prefix));
  EXPECT_NE(ip, containerd.gateway_ip());
  EXPECT_TRUE(LinkExists(containerd.bridge_name()));
  EXPECT_THAT(CheckIpamHolds(containerd.ipam_data_dir(), containerd.network_name(), {ip}),
              ::testing::IsEmpty());
  // The host reaches the pod: the sandbox's pause answers nothing, but ARP must resolve; a
  // ping-less check is a TCP connect to a closed port, refused (RST) rather than unreachable.
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(9);
  inet_pton(AF_INET, ip.c_str(), &addr.sin_addr);
  int rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  int err = errno;
  close(fd);
  EXPECT_EQ(rc, -1);
  EXPECT_EQ(err, ECONNREFUSED) << std::strerror(err);
  ids_.push_back(*sandbox);

  Status stopped = containerd.Stop();
  EXPECT_TRUE(stopped.ok()) << stopped.ToString();
  ExpectPodNetworkGone(containerd);
}

TEST_F(ContainerdHarnessTest, WithoutAPodNetworkTheConfDirIsEmptyAndNetworkNotReady) {
  auto options = Options();
  options.pod_network = false;
  auto started = ContainerdInstance::Start(options);
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  auto& containerd = **started;
  EXPECT_FALSE(containerd.has_pod_network());
  EXPECT_EQ(containerd.bridge_name(), "");
  ASSERT_TRUE(std::filesystem::is_directory(containerd.cni_conf_dir()));
  EXPECT_TRUE(std::filesystem::is_empty(containerd.cni_conf_dir()));
  EXPECT_TRUE(WaitNetworkReady(containerd, false, milliseconds(2000)));
  EXPECT_FALSE(NetworkReady(containerd));
  // Host-network pods still run.
  RunSleeper(containerd, "hostnet");
  EXPECT_TRUE(containerd.Stop().ok());
}

TEST_F(ContainerdHarnessTest, ABrokenConfIsNoticedAndAFixedOneToo) {
  auto started = ContainerdInstance::Start(Options());
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  auto& containerd = **started;
  ASSERT_TRUE(WaitNetworkReady(containerd, true, milliseconds(10000)));
  std::string conf = containerd.cni_conf_list();
  ASSERT_FALSE(conf.empty());
  std::string path = containerd.cni_conf_dir() + "/10-nodelet.conflist";
  ASSERT_EQ(unlink(path.c_str()), 0);
  EXPECT_TRUE(WaitNetworkReady(containerd, false, milliseconds(10000)));
  {
    std::ofstream out(path);
    out << conf;
  }
  EXPECT_TRUE(WaitNetworkReady(containerd, true, milliseconds(10000)));
  EXPECT_TRUE(containerd.Stop().ok());
  ExpectPodNetworkGone(containerd);
}

TEST_F(ContainerdHarnessTest, TwoInstancesAtOnceGetDifferentBridgesAndSubnets) {
  auto a_options = Options();
  auto b_options = Options();
  b_options.dir = dir_.Sub("ctd2");
  Result<std::unique_ptr<ContainerdInstance>> a = NotFound("not started"), b = a.status();
  std::thread other([&] { b = ContainerdInstance::Start(b_options); });
  a = ContainerdInstance::Start(a_options);
  other.join();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_NE((*a)->cni_slot(), (*b)->cni_slot());
  EXPECT_NE((*a)->bridge_name(), (*b)->bridge_name());
  EXPECT_NE((*a)->pod_subnet(), (*b)->pod_subnet());
  EXPECT_NE((*a)->network_name(), (*b)->network_name());
  std::map<std::string, std::string> ips;
  for (auto* c : {a->get(), b->get()}) {
    auto config = PodNetworkSandbox("pair", dir_.Sub("logs"));
    auto sandbox = c->cri().RunPodSandbox(config, "");
    ASSERT_TRUE(sandbox.ok()) << sandbox.status().ToString();
    auto status = c->cri().PodSandboxStatus(*sandbox, false);
    ASSERT_TRUE(status.ok());
    EXPECT_THAT(status->status().network().ip(),
                StartsWith(PodNetworkForSlot(c->cni_slot()).ip_prefix));
    EXPECT_TRUE(LinkExists(c->bridge_name()));
  }
  EXPECT_TRUE((*a)->Stop().ok());
  ExpectPodNetworkGone(**a);
  EXPECT_TRUE(LinkExists((*b)->bridge_name()));  // the other one's network stays
  EXPECT_TRUE((*b)->Stop().ok());
  ExpectPodNetworkGone(**b);
}

TEST_F(ContainerdHarnessTest, AHostPortAnswersOnTheGatewayIp) {
  auto started = ContainerdInstance::Start(Options());
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  auto& containerd = **started;
  int host_port = FreeLoopbackPort();
  auto config = PodNetworkSandbox("web", dir_.Sub("logs"));
  auto* mapping = config.add_port_mappings();
  mapping->set_protocol(v1::TCP);
  mapping->set_container_port(8080);
  mapping->set_host_port(host_port);
  auto sandbox = containerd.cri().RunPodSandbox(config, "");
  ASSERT_TRUE(sandbox.ok()) << sandbox.status().ToString();
  auto container_config = BusyboxContainer("web", {"sh", "-c",
                                                   "echo hello-from-the-pod > /tmp/index.html && "
                                                   "exec httpd -f -p 8080 -h /tmp"});
  container_config.mutable_linux()
      ->mutable_security_context()
      ->mutable_namespace_options()
      ->set_network(v1::POD);
  auto container = containerd.cri().CreateContainer(*sandbox, container_config, config);
  ASSERT_TRUE(container.ok()) << container.status().ToString();
  ASSERT_TRUE(containerd.cri().StartContainer(*container).ok());
  ids_.push_back(*sandbox);
  ids_.push_back(*container);

  // httpd listens a moment after its start; there is no event to wait on from the host, so the
  // request is retried, bounded.
  std::string answer;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (answer.find("hello-from-the-pod") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    answer = HttpGetOnce(containerd.gateway_ip(), host_port, "/index.html");
    if (answer.find("hello-from-the-pod") == std::string::npos) {
      std::this_thread::sleep_for(milliseconds(100));  // a retry, bounded by the deadline
    }
  }
  EXPECT_THAT(answer, HasSubstr("hello-from-the-pod"));
  PodNetwork net = PodNetworkForSlot(containerd.cni_slot());
  EXPECT_THAT(IptablesRulesOf(net), ::testing::Not(::testing::IsEmpty()));

  Status stopped = containerd.Stop();
  EXPECT_TRUE(stopped.ok()) << stopped.ToString();
  ExpectPodNetworkGone(containerd);
}

TEST_F(ContainerdHarnessTest, AttachFindsThePodNetworkAndADeadOwnersSlotIsCleaned) {
  std::string dir;
  int slot = -1;
  pid_t pid = -1;
  {
    auto started = ContainerdInstance::Start(Options());
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    auto config = PodNetworkSandbox("kept", dir_.Sub("logs"));
    ASSERT_TRUE((*started)->cri().RunPodSandbox(config, "").ok());
    dir = (*started)->dir();
    slot = (*started)->cni_slot();
    pid = (*started)->pid();
    (*started)->Release();
  }
  // Released: containerd holds the slot, nobody else can take it.
  auto taken = CniSlot::AcquireSlot(slot, "/nowhere");
  EXPECT_EQ(taken.status().code(), StatusCode::kFailedPrecondition);
  auto attached = ContainerdInstance::Attach(dir);
  ASSERT_TRUE(attached.ok()) << attached.status().ToString();
  EXPECT_EQ((*attached)->cni_slot(), slot);
  EXPECT_EQ((*attached)->bridge_name(), PodNetworkForSlot(slot).bridge);
  EXPECT_TRUE(LinkExists((*attached)->bridge_name()));
  EXPECT_TRUE((*attached)->Stop().ok());
  EXPECT_TRUE(WaitProcessGone(pid, milliseconds(10000)));
  ExpectPodNetworkGone(**attached);

  // A dead owner's leftovers: a bridge of that slot and a rule naming it, no lock holder.
  PodNetwork net = PodNetworkForSlot(slot);
  struct CleanOnExit {
    PodNetwork net;
    ~CleanOnExit() { (void)CleanPodNetworkLeftovers(net); }
  } clean_on_exit{net};
  ASSERT_EQ(
      RunCommand({"/usr/sbin/ip", "link", "add", net.bridge, "type", "bridge"}, milliseconds(10000))
          .exit_code,
      0);
  ASSERT_TRUE(AddForwardAcceptRule(net).ok());
  {
    auto again = CniSlot::AcquireSlot(slot, dir_.path());
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_FALSE(LinkExists(net.bridge));
    EXPECT_THAT(IptablesRulesOf(net), ::testing::IsEmpty());
  }
  EXPECT_FALSE(std::filesystem::exists(CniSlotLockPath(slot)));
}

TEST_F(ContainerdHarnessTest, MissingImagesAreNamed) {
  auto options = Options();
  options.image_tarballs = {dir_.Sub("nope.tar")};
  auto started = ContainerdInstance::Start(options);
  ASSERT_FALSE(started.ok());
  EXPECT_EQ(started.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(started.status().message(), HasSubstr("nope.tar"));
}

}  // namespace
}  // namespace nodelet::testing
