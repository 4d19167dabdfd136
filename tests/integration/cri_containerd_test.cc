// The CRI client against a real, private containerd (tests/testing/containerd.h) with the
// project's own images: host-network pods, container lifecycle, exec, errors with their gRPC
// codes, and a harness that leaves no process, mount or cgroup behind.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <thread>

#include "lib/cri/containerd_tasks.h"
#include "lib/cri/grpc_cri_client.h"
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

constexpr char kManagedLabel[] = "nodelet.io/test";

v1::PodSandboxConfig HostNetworkSandbox(const std::string& name, const std::string& log_dir) {
  v1::PodSandboxConfig config;
  config.mutable_metadata()->set_name(name);
  config.mutable_metadata()->set_uid("uid-" + name);
  config.mutable_metadata()->set_namespace_("default");
  config.set_log_directory(log_dir);
  (*config.mutable_labels())[kManagedLabel] = name;
  auto* ns = config.mutable_linux()->mutable_security_context()->mutable_namespace_options();
  ns->set_network(v1::NODE);
  ns->set_pid(v1::CONTAINER);
  ns->set_ipc(v1::POD);
  return config;
}

v1::ContainerConfig BusyboxContainer(const std::string& name, std::vector<std::string> command) {
  v1::ContainerConfig config;
  config.mutable_metadata()->set_name(name);
  config.mutable_image()->set_image(kBusyboxImage);
  for (auto& arg : command) config.add_command(arg);
  config.set_log_path(name + ".log");
  (*config.mutable_labels())[kManagedLabel] = name;
  auto* ns = config.mutable_linux()->mutable_security_context()->mutable_namespace_options();
  ns->set_network(v1::NODE);
  ns->set_pid(v1::CONTAINER);
  return config;
}

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

// cgroup directories named `id`, in any hierarchy, at most three levels down.
std::vector<std::string> CgroupsNamed(const std::string& id) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& hierarchy : std::filesystem::directory_iterator("/sys/fs/cgroup", ec)) {
    std::error_code ec2;
    for (auto it = std::filesystem::recursive_directory_iterator(hierarchy.path(), ec2);
         it != std::filesystem::recursive_directory_iterator(); it.increment(ec2)) {
      if (ec2) break;
      if (it.depth() >= 2) it.disable_recursion_pending();
      if (it->path().filename() == id) found.push_back(it->path());
    }
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

// One containerd for the suite's ordinary tests (starting one takes about a second).
class CriContainerdTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    ContainerdOptions options;
    options.dir = dir_->Sub("ctd");
    options.image_tarballs = DefaultImageTarballs(ImagesDir());
    auto started = ContainerdInstance::Start(options);
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    containerd_ = std::move(started).value().release();
  }
  static void TearDownTestSuite() {
    if (containerd_ != nullptr) {
      Status stopped = containerd_->Stop();
      EXPECT_TRUE(stopped.ok()) << stopped.ToString();
      delete containerd_;
      containerd_ = nullptr;
    }
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(containerd_, nullptr) << "containerd did not start";
    log_dir_ = dir_->Sub(
        "logs-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::create_directories(log_dir_);
  }
  cri::GrpcCriClient& cri() { return containerd_->cri(); }

  static TempDir* dir_;
  static ContainerdInstance* containerd_;
  std::string log_dir_;
};

TempDir* CriContainerdTest::dir_ = nullptr;
ContainerdInstance* CriContainerdTest::containerd_ = nullptr;

TEST_F(CriContainerdTest, VersionAndStatusAnswer) {
  auto version = cri().Version();
  ASSERT_TRUE(version.ok()) << version.status().ToString();
  EXPECT_EQ(version->runtime_name(), "containerd");
  EXPECT_EQ(version->runtime_api_version(), "v1");
  auto status = cri().RuntimeStatus(false);
  ASSERT_TRUE(status.ok()) << status.status().ToString();
  bool runtime_ready = false;
  for (const auto& condition : status->status().conditions()) {
    if (condition.type() == "RuntimeReady") runtime_ready = condition.status();
  }
  EXPECT_TRUE(runtime_ready);
}

TEST_F(CriContainerdTest, TheProjectsImagesAreImported) {
  for (const char* ref : {kPauseImage, kBusyboxImage}) {
    v1::ImageSpec spec;
    spec.set_image(ref);
    auto status = cri().ImageStatus(spec, false);
    ASSERT_TRUE(status.ok()) << status.status().ToString();
    ASSERT_TRUE(status->has_image()) << ref;
    EXPECT_THAT(status->image().repo_tags(), ::testing::Contains(ref));
    EXPECT_GT(status->image().size(), 0u);
  }
  v1::ImageSpec absent;
  absent.set_image("nodelet.local/absent:1.0");
  auto status = cri().ImageStatus(absent, false);
  ASSERT_TRUE(status.ok());
  EXPECT_FALSE(status->has_image());
  auto images = cri().ListImages({});
  ASSERT_TRUE(images.ok());
  EXPECT_GE(images->size(), 2u);
}

TEST_F(CriContainerdTest, HostNetworkPodWithABusyboxContainer) {
  auto sandbox_config = HostNetworkSandbox("sleeper", log_dir_);
  auto sandbox = cri().RunPodSandbox(sandbox_config, "");
  ASSERT_TRUE(sandbox.ok()) << sandbox.status().ToString();

  auto sandbox_status = cri().PodSandboxStatus(*sandbox, false);
  ASSERT_TRUE(sandbox_status.ok()) << sandbox_status.status().ToString();
  EXPECT_EQ(sandbox_status->status().state(), v1::SANDBOX_READY);
  EXPECT_EQ(sandbox_status->status().metadata().name(), "sleeper");
  EXPECT_EQ(sandbox_status->status().linux().namespaces().options().network(), v1::NODE);

  auto container =
      cri().CreateContainer(*sandbox, BusyboxContainer("sleep", {"sleep", "3600"}), sandbox_config);
  ASSERT_TRUE(container.ok()) << container.status().ToString();
  ASSERT_TRUE(cri().StartContainer(*container).ok());

  v1::ContainerFilter in_sandbox;
  in_sandbox.set_pod_sandbox_id(*sandbox);
  auto listed = cri().ListContainers(in_sandbox);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->at(0).id(), *container);
  EXPECT_EQ(listed->at(0).state(), v1::CONTAINER_RUNNING);
  EXPECT_EQ(listed->at(0).labels().at(kManagedLabel), "sleep");

  v1::ContainerFilter running;
  running.mutable_state()->set_state(v1::CONTAINER_RUNNING);
  (*running.mutable_label_selector())[kManagedLabel] = "sleep";
  EXPECT_EQ(cri().ListContainers(running)->size(), 1u);

  auto status = cri().ContainerStatus(*container, false);
  ASSERT_TRUE(status.ok()) << status.status().ToString();
  EXPECT_EQ(status->status().state(), v1::CONTAINER_RUNNING);
  EXPECT_GT(status->status().started_at(), 0);
  EXPECT_EQ(status->status().log_path(), log_dir_ + "/sleep.log");

  auto hi = cri().ExecSync(*container, {"echo", "hi"}, 10);
  ASSERT_TRUE(hi.ok()) << hi.status().ToString();
  EXPECT_EQ(hi->stdout(), "hi\n");
  EXPECT_EQ(hi->exit_code(), 0);
  auto failing = cri().ExecSync(*container, {"sh", "-c", "echo oops >&2; exit 3"}, 10);
  ASSERT_TRUE(failing.ok()) << failing.status().ToString();
  EXPECT_EQ(failing->exit_code(), 3);
  EXPECT_EQ(failing->stderr(), "oops\n");

  // sleep as PID 1 ignores SIGTERM: a zero grace period kills it.
  ASSERT_TRUE(cri().StopContainer(*container, 0).ok());
  status = cri().ContainerStatus(*container, false);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->status().state(), v1::CONTAINER_EXITED);
  EXPECT_EQ(status->status().exit_code(), 137);
  EXPECT_GE(status->status().finished_at(), status->status().started_at());
  EXPECT_TRUE(cri().StopContainer(*container, 0).ok());  // idempotent

  ASSERT_TRUE(cri().StopPodSandbox(*sandbox).ok());
  EXPECT_EQ(cri().PodSandboxStatus(*sandbox, false)->status().state(), v1::SANDBOX_NOTREADY);
  ASSERT_TRUE(cri().RemovePodSandbox(*sandbox).ok());
  EXPECT_EQ(cri().ContainerStatus(*container, false).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(cri().RemovePodSandbox(*sandbox).ok());  // idempotent
}

// The repair for a task containerd keeps after a cancelled start (lib/cri/containerd_tasks.h),
// against the real task service: its processes die, the task and its cgroups go, and CRI then
// sees the container exited and removes it. A second repair finds nothing and is fine.
TEST_F(CriContainerdTest, ContainerdTasksKillsAndDeletesATask) {
  auto tasks = cri::ContainerdTasks::Create(containerd_->endpoint(), RealClock::Get());
  ASSERT_TRUE(tasks.ok()) << tasks.status().ToString();
  auto sandbox_config = HostNetworkSandbox("tasks", log_dir_);
  auto sandbox = cri().RunPodSandbox(sandbox_config, "");
  ASSERT_TRUE(sandbox.ok()) << sandbox.status().ToString();
  auto container =
      cri().CreateContainer(*sandbox, BusyboxContainer("stuck", {"sleep", "3600"}), sandbox_config);
  ASSERT_TRUE(container.ok()) << container.status().ToString();
  ASSERT_TRUE(cri().StartContainer(*container).ok());
  ASSERT_FALSE(CgroupsNamed(*container).empty());

  Status repaired = (*tasks)->KillAndDelete(*container);
  ASSERT_TRUE(repaired.ok()) << repaired.ToString();
  EXPECT_TRUE(CgroupsNamed(*container).empty());
  // CRI learns of the exit from containerd's task-exit event, asynchronously: polled (CRI has
  // no exit notification in containerd 1.6), bounded.
  v1::ContainerState state = v1::CONTAINER_UNKNOWN;
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
       std::chrono::steady_clock::now() < deadline;
       std::this_thread::sleep_for(std::chrono::milliseconds(20))) {
    auto status = cri().ContainerStatus(*container, false);
    ASSERT_TRUE(status.ok()) << status.status().ToString();
    state = status->status().state();
    if (state == v1::CONTAINER_EXITED) break;
  }
  EXPECT_EQ(state, v1::CONTAINER_EXITED);
  EXPECT_TRUE((*tasks)->KillAndDelete(*container).ok());  // no task left: nothing to do

  EXPECT_TRUE(cri().RemoveContainer(*container).ok());
  ASSERT_TRUE(cri().StopPodSandbox(*sandbox).ok());
  ASSERT_TRUE(cri().RemovePodSandbox(*sandbox).ok());
}

TEST_F(CriContainerdTest, AGracefulStopKeepsTheProcessExitCode) {
  auto sandbox_config = HostNetworkSandbox("graceful", log_dir_);
  auto sandbox = cri().RunPodSandbox(sandbox_config, "");
  ASSERT_TRUE(sandbox.ok()) << sandbox.status().ToString();
  // The shell exits 7 on SIGTERM.
  auto container = cri().CreateContainer(
      *sandbox,
      BusyboxContainer("trapper",
                       {"sh", "-c", "trap 'exit 7' TERM; while true; do sleep 1 & wait $!; done"}),
      sandbox_config);
  ASSERT_TRUE(container.ok()) << container.status().ToString();
  ASSERT_TRUE(cri().StartContainer(*container).ok());
  // The trap is set once the shell runs; exec through it so the stop cannot race its start.
  auto ready = cri().ExecSync(*container, {"true"}, 10);
  ASSERT_TRUE(ready.ok()) << ready.status().ToString();

  ASSERT_TRUE(cri().StopContainer(*container, 20).ok());
  auto status = cri().ContainerStatus(*container, false);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->status().state(), v1::CONTAINER_EXITED);
  EXPECT_EQ(status->status().exit_code(), 7);
  EXPECT_EQ(status->status().reason(), "Error");

  v1::ContainerFilter exited;
  exited.mutable_state()->set_state(v1::CONTAINER_EXITED);
  exited.set_pod_sandbox_id(*sandbox);
  EXPECT_EQ(cri().ListContainers(exited)->size(), 1u);

  ASSERT_TRUE(cri().RemoveContainer(*container).ok());
  EXPECT_TRUE(cri().RemoveContainer(*container).ok());  // idempotent
  ASSERT_TRUE(cri().StopPodSandbox(*sandbox).ok());
  ASSERT_TRUE(cri().RemovePodSandbox(*sandbox).ok());
}

TEST_F(CriContainerdTest, ErrorsCarryTheGrpcCode) {
  auto unknown = cri().ContainerStatus("0123456789abcdef", false);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(unknown.status().message(), StartsWith("CRI ContainerStatus failed: NOT_FOUND: "));

  auto unknown_sandbox = cri().PodSandboxStatus("0123456789abcdef", false);
  ASSERT_FALSE(unknown_sandbox.ok());
  EXPECT_EQ(unknown_sandbox.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(unknown_sandbox.status().message(),
              StartsWith("CRI PodSandboxStatus failed: NOT_FOUND: "));

  auto sandbox_config = HostNetworkSandbox("badimage", log_dir_);
  auto sandbox = cri().RunPodSandbox(sandbox_config, "");
  ASSERT_TRUE(sandbox.ok()) << sandbox.status().ToString();
  auto config = BusyboxContainer("x", {"true"});
  config.mutable_image()->set_image("nodelet.local/absent:1.0");
  auto bad = cri().CreateContainer(*sandbox, config, sandbox_config);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), StartsWith("CRI CreateContainer failed: NOT_FOUND: "));
  EXPECT_THAT(bad.status().message(), HasSubstr("nodelet.local/absent:1.0"));

  // The same sandbox name again is refused while the first one exists.
  auto again = cri().RunPodSandbox(sandbox_config, "");
  ASSERT_FALSE(again.ok());
  EXPECT_THAT(again.status().message(), StartsWith("CRI RunPodSandbox failed: "));
  EXPECT_THAT(again.status().message(), HasSubstr("reserved"));
  ASSERT_TRUE(cri().RemovePodSandbox(*sandbox).ok());
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
