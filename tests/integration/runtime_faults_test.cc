// Deterministic fault injection in the runtime-restart windows: podworkerd with the
// real plegd and statusd (the test plays the supervisor's part, as podworkerd_test.cc does),
// its --runtime-endpoint pointed at a CriFaultProxy in front of a private containerd. For each
// window W (RunPodSandbox, CreateContainer, StartContainer) the first call of W is held at the
// proxy after containerd answered (the runtime did the work, podworkerd never heard back), then
// a fault F is injected: containerd restarted (stopped, a new one on the same root, state and
// socket; the held call then fails UNAVAILABLE as a dead connection would), or podworkerd
// SIGKILLed (the held call is cancelled with its connection; a new podworkerd gets the desired
// pods again). Then: the pod converges to Running with exactly one READY sandbox and its
// containers running in it, restart counts stay sane and steady; the pod is removed and nothing
// is left: no sandbox or container in CRI, no shim, no container process, no cgroup, no mount
// under the test's directory (tests/testing/leak_check.h).
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

#include "lib/cri/grpc_cri_client.h"
#include "lib/ipc/codec.h"
#include "lib/ipc/endpoints.h"
#include "lib/ipc/sockets.h"
#include "lib/pod/pod_flatbuffers.h"
#include "lib/pod/static_pod.h"
#include "lib/status/status_client.h"
#include "podwork_generated.h"
#include "tests/testing/containerd.h"
#include "tests/testing/cri_fault_proxy.h"
#include "tests/testing/harness.h"
#include "tests/testing/leak_check.h"
#include "tests/testing/service_node.h"

namespace nodelet::testing {
namespace {

namespace fs = std::filesystem;
namespace v1 = ::runtime::v1;
using namespace std::chrono_literals;
using status::PodPhase;
using status::PodStatusRecord;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr char kRunPodSandbox[] = "/runtime.v1.RuntimeService/RunPodSandbox";
constexpr char kCreateContainer[] = "/runtime.v1.RuntimeService/CreateContainer";
constexpr char kStartContainer[] = "/runtime.v1.RuntimeService/StartContainer";
constexpr char kPodUidLabel[] = "io.kubernetes.pod.uid";
constexpr char kContainerNameLabel[] = "io.kubernetes.container.name";

// A command that runs until SIGTERM and then exits 0 at once.
constexpr char kServe[] = "trap 'exit 0' TERM; while true; do sleep 0.2; done";

pod::Pod MakePod(const std::string& yaml) { return MakeStaticPod(yaml, "/manifests/fault.yaml"); }

// The init container of a gated pod exits 0 once this file exists in its root filesystem
// (the test creates it through /proc/PID/root), so the test decides whether it exits before,
// during or after a fault.
constexpr char kGate[] = "/gate";

// A host-network pod running kServe in "app", with an init container "init" when asked: one that
// exits 0 at once, or one that waits for kGate.
std::string PodYaml(const std::string& name, bool with_init, bool gated_init) {
  std::string y = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
                  "\nspec:\n  hostNetwork: true\n  restartPolicy: Always\n"
                  "  terminationGracePeriodSeconds: 5\n";
  if (with_init) {
    std::string init = gated_init ? "while [ ! -e " + std::string(kGate) + " ]; do sleep 0.05; done"
                                  : std::string("true");
    y += "  initContainers:\n  - name: init\n    image: nodelet.local/busybox:1.0\n"
         "    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"" +
         init + "\"]\n";
  }
  y += "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
       "    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"" +
       std::string(kServe) + "\"]\n";
  return y;
}

std::string Label(const google::protobuf::Map<std::string, std::string>& m, const std::string& k) {
  auto it = m.find(k);
  return it == m.end() ? "" : it->second;
}

// containerd, the proxy in front of it, plegd (on containerd directly), statusd, and podworkerd
// (on the proxy).
class FaultNode : public ServiceNode {
 public:
  explicit FaultNode(const TempDir& dir) : ServiceNode(dir, {.fault_proxy = true}) {}
  FaultNode(const TempDir& dir, ServiceNodeOptions options)
      : ServiceNode(dir, std::move(options)) {}

  // What CRI has, all of it (this containerd is the test's own); every id is remembered for the
  // cgroup leak check, every running container's pid for the process leak check.
  struct RuntimeView {
    std::vector<v1::PodSandbox> sandboxes;
    std::vector<v1::Container> containers;
    std::map<std::string, std::string> exits;  // exited container id -> "exit CODE (REASON)"
    std::string Describe() const {
      std::string s;
      for (const auto& sb : sandboxes) {
        s += "\n  sandbox " + sb.id().substr(0, 12) + " attempt " +
             std::to_string(sb.metadata().attempt()) +
             (sb.state() == v1::SANDBOX_READY ? " READY" : " NOTREADY");
      }
      for (const auto& c : containers) {
        s += "\n  container " + c.id().substr(0, 12) + " " + c.metadata().name() + " attempt " +
             std::to_string(c.metadata().attempt()) + " state " + std::to_string(c.state()) +
             " in " + c.pod_sandbox_id().substr(0, 12);
        if (auto it = exits.find(c.id()); it != exits.end()) s += " " + it->second;
      }
      return s;
    }
  };
  RuntimeView Runtime() {
    RuntimeView view;
    auto sandboxes = containerd().cri().ListPodSandbox({});
    auto containers = containerd().cri().ListContainers({});
    if (sandboxes.ok()) view.sandboxes = *sandboxes;
    if (containers.ok()) view.containers = *containers;
    for (const auto& s : view.sandboxes) seen_ids_.insert(s.id());
    for (const auto& c : view.containers) {
      seen_ids_.insert(c.id());
      if (c.state() == v1::CONTAINER_RUNNING) {
        pid_t pid = ContainerPid(containerd().cri(), c.id());
        if (pid > 0) container_pids_.insert(pid);
      } else if (c.state() == v1::CONTAINER_EXITED) {
        auto st = containerd().cri().ContainerStatus(c.id(), false);
        if (st.ok()) {
          view.exits[c.id()] = "exit " + std::to_string(st->status().exit_code()) + " (" +
                               st->status().reason() + ")";
        }
      }
    }
    return view;
  }

  const std::set<std::string>& seen_ids() const { return seen_ids_; }
  const std::set<pid_t>& container_pids() const { return container_pids_; }

  // A failed test's logs: kept under /tmp/nodelet-runtime-faults/NAME/ (the temp dir goes), and
  // the tails printed.
  void KeepLogs(const std::string& name) {
    std::string keep = "/tmp/nodelet-runtime-faults/" + name;
    std::error_code ec;
    fs::create_directories(keep, ec);
    for (const auto& entry : fs::directory_iterator(dir().path(), ec)) {
      if (entry.path().extension() == ".log")
        fs::copy_file(entry.path(), keep + "/" + entry.path().filename().string(),
                      fs::copy_options::overwrite_existing, ec);
    }
    fs::copy(dir().Sub("log"), keep + "/log",
             fs::copy_options::recursive | fs::copy_options::overwrite_existing, ec);
    fs::copy_file(dir().Sub("ctrd/containerd.log"), keep + "/containerd.log",
                  fs::copy_options::overwrite_existing, ec);
    std::cerr << "logs kept in " << keep << "\n";
    for (const auto& entry : fs::directory_iterator(keep, ec)) {
      if (entry.path().filename().string().rfind("podworkerd", 0) != 0) continue;
      std::ifstream in(entry.path());
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (text.size() > 6000) text = "..." + text.substr(text.size() - 6000);
      std::cerr << "---- " << entry.path().filename().string() << "\n" << text;
    }
  }

 private:
  std::set<std::string> seen_ids_;
  std::set<pid_t> container_pids_;
};

enum class Fault { kContainerdRestart, kPodworkerdKill };

// When a gated init container (held in its StartContainer window) is let go.
enum class Gate {
  kNone,              // no gate: the init container, if any, exits 0 at once
  kAfterFault,        // after the fault: it exits while containerd and podworkerd run
  kWhileRuntimeDown,  // between containerd's exit and its new start: the shim keeps its exit
};

struct Window {
  const char* method;
  bool with_init;
  Gate gate = Gate::kNone;
};

const status::ContainerStatus* Find(const std::vector<status::ContainerStatus>& list,
                                    const std::string& name) {
  for (const auto& c : list) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

bool AppRunning(const PodStatusRecord& r) {
  const auto* app = Find(r.status.container_statuses, "app");
  return r.status.phase == PodPhase::kRunning && app != nullptr && app->state.running.has_value();
}

class RuntimeFaultsTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(node_.Start()); }
  void TearDown() override {
    if (HasFailure()) {
      const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
      node_.KeepLogs(std::string(info->name()) + "-" + std::to_string(getpid()));
    }
  }

  // Hold the first call of `window` after containerd answered, inject `fault`, release; then
  // check convergence, steadiness, removal and leaks.
  void RunWindow(const Window& window, Fault fault) {
    pod::Pod pod = MakePod(PodYaml("fault", window.with_init, window.gate != Gate::kNone));
    const std::string uid = pod.metadata.uid;
    auto hold = node_.proxy().Hold(window.method, ProxyPoint::kAfterAnswer, 60s);
    node_.SendDesired({pod});
    ASSERT_TRUE(hold->WaitHeld(60s))
        << window.method << " never reached the proxy; " << node_.Last();
    ProxyCall held = hold->held_call();
    ASSERT_EQ(held.answer_code, 0) << "containerd refused the held call: " << held.answer_message;
    FaultNode::RuntimeView view = node_.Runtime();
    std::cerr << "[fault] held " << window.method
              << " after containerd answered; runtime:" << view.Describe() << "\n";
    // The gated init container runs (its StartContainer was answered): its host pid opens the
    // gate through /proc/PID/root.
    pid_t init_pid = -1;
    if (window.gate != Gate::kNone) {
      for (const auto& c : view.containers) {
        if (Label(c.labels(), kContainerNameLabel) == "init" &&
            c.state() == v1::CONTAINER_RUNNING) {
          init_pid = ContainerPid(node_.containerd().cri(), c.id());
        }
      }
      ASSERT_GT(init_pid, 0) << "the gated init container does not run";
    }
    auto open_gate = [&] {
      std::ofstream(std::string("/proc/") + std::to_string(init_pid) + "/root" + kGate) << "go\n";
      EXPECT_TRUE(WaitProcessGone(init_pid, 10s)) << "the init container did not exit at the gate";
    };

    if (fault == Fault::kContainerdRestart) {
      std::function<void()> while_down;
      if (window.gate == Gate::kWhileRuntimeDown) while_down = open_gate;
      Status restarted = node_.containerd().Restart(60s, while_down);
      ASSERT_TRUE(restarted.ok()) << restarted.ToString();
      hold->Release(ProxyVerdict::Unavailable("containerd restarted (injected)"));
      ASSERT_TRUE(hold->WaitDone(10s));
      EXPECT_EQ(hold->outcome(), CallHold::Outcome::kReleased);
    } else {
      node_.KillPodworkerd();
      // The dead caller's call is cancelled with its connection, which ends the hold.
      ASSERT_TRUE(hold->WaitDone(10s));
      EXPECT_EQ(hold->outcome(), CallHold::Outcome::kCancelled);
      node_.RestartPodworkerd();
      node_.SendDesired({pod});
    }
    std::cerr << "[fault] injected; runtime:" << node_.Runtime().Describe() << "\n";
    if (window.gate == Gate::kAfterFault) open_gate();

    // Converges: Running, exactly one READY sandbox, app running in it, init done (if any).
    std::string problem;
    auto converged = [&] {
      view = node_.Runtime();
      problem.clear();
      std::vector<const v1::PodSandbox*> ready;
      for (const auto& s : view.sandboxes) {
        if (s.state() == v1::SANDBOX_READY) ready.push_back(&s);
      }
      if (ready.size() != 1) {
        problem = std::to_string(ready.size()) + " READY sandboxes";
        return false;
      }
      if (Label(ready[0]->labels(), kPodUidLabel) != uid) {
        problem = "the READY sandbox is not the pod's";
        return false;
      }
      int app_running = 0, other_running = 0;
      for (const auto& c : view.containers) {
        if (c.state() != v1::CONTAINER_RUNNING) continue;
        bool app = Label(c.labels(), kContainerNameLabel) == "app";
        (app && c.pod_sandbox_id() == ready[0]->id() ? app_running : other_running)++;
      }
      if (app_running != 1 || other_running != 0) {
        problem = std::to_string(app_running) + " app containers running in the READY sandbox, " +
                  std::to_string(other_running) + " other running";
        return false;
      }
      return true;
    };
    auto status = node_.WaitStatus(
        uid, [&](const PodStatusRecord& r) { return AppRunning(r) && converged(); }, 90s);
    ASSERT_TRUE(status) << "the pod did not converge: " << problem << "; status: " << node_.Last()
                        << "; runtime:" << view.Describe();

    // Restart counts: none. In every window the runtime did the work and it succeeded, and the
    // runtime's own listing shows it (as the kubelet would see it: a container that runs is
    // kept, an init container that exited 0 is done), so nothing has a reason to run twice.
    // (An init container that exits while containerd is down keeps its exit: the new containerd
    // reads it from the shim. One that exits while containerd is shutting down can lose it:
    // containerd then reports exit 255 "Unknown" or CONTAINER_UNKNOWN, and the kubelet's rule
    // runs it again. That race is inside containerd's shutdown and is not reproduced here;
    // docs/testing.md.)
    const auto* app = Find(status->status.container_statuses, "app");
    ASSERT_NE(app, nullptr);
    EXPECT_EQ(app->restart_count, 0) << node_.Last();
    if (window.with_init) {
      const auto* init = Find(status->status.init_container_statuses, "init");
      ASSERT_NE(init, nullptr);
      EXPECT_TRUE(init->state.terminated && init->state.terminated->exit_code == 0) << node_.Last();
      EXPECT_EQ(init->restart_count, 0)
          << "the init container ran again after it exited 0: " << node_.Last();
    }
    std::cerr << "[fault] converged: " << node_.Last() << "; runtime:" << view.Describe() << "\n";

    // Steady: over two resync periods nothing restarts and no sandbox is made or killed.
    std::string app_id;
    std::string sandbox_id;
    for (const auto& s : view.sandboxes) {
      if (s.state() == v1::SANDBOX_READY) sandbox_id = s.id();
    }
    for (const auto& c : view.containers) {
      if (c.state() == v1::CONTAINER_RUNNING) app_id = c.id();
    }
    const int32_t restarts = app->restart_count;
    EXPECT_FALSE(node_.WaitStatus(
        uid,
        [&](const PodStatusRecord& r) {
          const auto* a = Find(r.status.container_statuses, "app");
          return a == nullptr || a->restart_count != restarts || !a->state.running;
        },
        4500ms))
        << "the pod did not stay steady: " << node_.Last();
    EXPECT_TRUE(converged()) << problem << "; runtime:" << view.Describe();
    for (const auto& s : view.sandboxes) {
      if (s.state() == v1::SANDBOX_READY) {
        EXPECT_EQ(s.id(), sandbox_id) << "the sandbox changed";
      }
    }
    for (const auto& c : view.containers) {
      if (c.state() == v1::CONTAINER_RUNNING) {
        EXPECT_EQ(c.id(), app_id) << "the app container changed";
      }
    }

    // Removed: nothing is left in CRI.
    node_.SendDesired({});
    auto end = steady_clock::now() + 60s;
    for (;;) {
      view = node_.Runtime();
      if (view.sandboxes.empty() && view.containers.empty()) break;
      if (steady_clock::now() >= end) break;
      node_.WaitStatus(
          uid, [](const PodStatusRecord&) { return false; }, 300ms);
    }
    EXPECT_TRUE(view.sandboxes.empty() && view.containers.empty())
        << "left in CRI 60 s after the pod was removed:" << view.Describe();

    // And nothing on the node: no shim, container process, cgroup or mount.
    node_.StopServices();
    LeakScope scope;
    scope.dir = dir_.path();
    scope.containerd = &node_.containerd();
    scope.ids = node_.seen_ids();
    scope.container_pids = node_.container_pids();
    auto leaks = FindLeaks(scope);
    EXPECT_THAT(leaks, ::testing::IsEmpty());
  }

  TempDir dir_;
  FaultNode node_{dir_};
};

// RunPodSandbox: the sandbox exists, podworkerd never got its id (once, a second
// RunPodSandbox with attempt 0 met "failed to reserve sandbox name").
TEST_F(RuntimeFaultsTest, RunPodSandboxAnsweredThenContainerdRestarted) {
  RunWindow({kRunPodSandbox, false}, Fault::kContainerdRestart);
}
TEST_F(RuntimeFaultsTest, RunPodSandboxAnsweredThenPodworkerdKilled) {
  RunWindow({kRunPodSandbox, false}, Fault::kPodworkerdKill);
}

// CreateContainer: the container exists (CREATED), podworkerd does not know its id.
TEST_F(RuntimeFaultsTest, CreateContainerAnsweredThenContainerdRestarted) {
  RunWindow({kCreateContainer, false}, Fault::kContainerdRestart);
}
TEST_F(RuntimeFaultsTest, CreateContainerAnsweredThenPodworkerdKilled) {
  RunWindow({kCreateContainer, false}, Fault::kPodworkerdKill);
}
TEST_F(RuntimeFaultsTest, InitCreateContainerAnsweredThenContainerdRestarted) {
  RunWindow({kCreateContainer, true}, Fault::kContainerdRestart);
}
TEST_F(RuntimeFaultsTest, InitCreateContainerAnsweredThenPodworkerdKilled) {
  RunWindow({kCreateContainer, true}, Fault::kPodworkerdKill);
}

// StartContainer: the container runs, podworkerd does not know the start succeeded. The init
// container is gated, so it exits after the fault (or, in the last test, while containerd is
// down: the new containerd must learn its exit 0 from the shim).
TEST_F(RuntimeFaultsTest, StartContainerAnsweredThenContainerdRestarted) {
  RunWindow({kStartContainer, false}, Fault::kContainerdRestart);
}
TEST_F(RuntimeFaultsTest, StartContainerAnsweredThenPodworkerdKilled) {
  RunWindow({kStartContainer, false}, Fault::kPodworkerdKill);
}
TEST_F(RuntimeFaultsTest, InitStartContainerAnsweredThenContainerdRestarted) {
  RunWindow({kStartContainer, true, Gate::kAfterFault}, Fault::kContainerdRestart);
}
TEST_F(RuntimeFaultsTest, InitStartContainerAnsweredThenPodworkerdKilled) {
  RunWindow({kStartContainer, true, Gate::kAfterFault}, Fault::kPodworkerdKill);
}
TEST_F(RuntimeFaultsTest, InitStartContainerAnsweredAndExitedWhileContainerdWasDown) {
  RunWindow({kStartContainer, true, Gate::kWhileRuntimeDown}, Fault::kContainerdRestart);
}

// An orphaned shim (svc-podworkerd/orphan_shims.h): a containerd shim serving an id that neither
// CRI nor containerd knows, as a RunPodSandbox cancelled while its shim created the task left one
// in the soak (docs/chaos.md, "A shim left by a cancelled RunPodSandbox"). That schedule depends
// on containerd's cleanup timing (in tries here the shim more often exited by itself after
// containerd's 5-second cleanup), so the test makes the state it leaves directly, the way
// containerd starts every shim: containerd's runc-v2 shim binary, `start`, in a bundle directory,
// with -address = this containerd's socket and a fresh id. podworkerd must end it (and log it),
// while a running pod's shims, and a shim of another containerd namespace, are left alone.
class OrphanShimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    node_ = std::make_unique<FaultNode>(
        dir_, ServiceNodeOptions{.podworkerd_args = {"--orphan-shim-period", "1s"}});
    ASSERT_TRUE(node_->Start());
  }
  void TearDown() override {
    for (pid_t p : started_) {
      if (ProcessAlive(p)) kill(p, SIGKILL);
    }
    if (HasFailure() && node_) {
      const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
      node_->KeepLogs(std::string(info->name()) + "-" + std::to_string(getpid()));
    }
    node_.reset();
    for (int fd : log_fds_) close(fd);
  }

  // Starts a shim as containerd does and returns its pid (-1 with a failure added).
  pid_t StartShim(const std::string& name, const std::string& ns, const std::string& id) {
    const std::string bundle = dir_.Sub(name);
    fs::create_directories(bundle);
    std::ofstream(bundle + "/config.json") << "{}\n";
    // The shim writes its log into this fifo (containerd reads it): held open, never read.
    if (mkfifo((bundle + "/log").c_str(), 0600) != 0) return -1;
    log_fds_.push_back(open((bundle + "/log").c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
    const std::vector<pid_t> shims_before = node_->containerd().ShimPids();
    const std::set<pid_t> before(shims_before.begin(), shims_before.end());
    std::string shim_bin, containerd_bin;
    for (const char* d : {"/usr/local/bin", "/usr/bin", "/bin"}) {
      if (shim_bin.empty() &&
          access((std::string(d) + "/containerd-shim-runc-v2").c_str(), X_OK) == 0)
        shim_bin = std::string(d) + "/containerd-shim-runc-v2";
      if (containerd_bin.empty() && access((std::string(d) + "/containerd").c_str(), X_OK) == 0)
        containerd_bin = std::string(d) + "/containerd";
    }
    if (shim_bin.empty() || containerd_bin.empty()) {
      ADD_FAILURE() << "containerd-shim-runc-v2 or containerd is not installed";
      return -1;
    }
    CommandResult r =
        RunCommand({"/bin/sh", "-c",
                    "cd '" + bundle + "' && exec '" + shim_bin + "' -namespace " + ns + " -id " +
                        id + " -address '" + node_->containerd().socket_path() +
                        "' -publish-binary '" + containerd_bin + "' start </dev/null"},
                   30s);
    if (r.exit_code != 0) {
      ADD_FAILURE() << "the shim's start failed: " << r.output;
      return -1;
    }
    for (pid_t p : node_->containerd().ShimPids()) {
      if (before.count(p) == 0 &&
          ReadTextFile("/proc/" + std::to_string(p) + "/cmdline").find(id) != std::string::npos) {
        started_.push_back(p);
        return p;
      }
    }
    ADD_FAILURE() << "the shim started (" << r.output << ") but no process serves " << id;
    return -1;
  }

  TempDir dir_;
  std::unique_ptr<FaultNode> node_;
  std::vector<pid_t> started_;
  std::vector<int> log_fds_;
};

TEST_F(OrphanShimTest, AShimNobodyKnowsIsEndedAndKnownOnesStay) {
  pod::Pod pod = MakePod(PodYaml("keeper", false, false));
  const std::string uid = pod.metadata.uid;
  node_->SendDesired({pod});
  FaultNode::RuntimeView view;
  auto running = node_->WaitStatus(
      uid, [&](const PodStatusRecord& r) { return AppRunning(r); }, 90s);
  ASSERT_TRUE(running) << node_->Last();
  view = node_->Runtime();
  std::string app_id;
  for (const auto& c : view.containers) {
    if (c.state() == v1::CONTAINER_RUNNING) app_id = c.id();
  }
  ASSERT_FALSE(app_id.empty());
  const std::vector<pid_t> pod_shims = node_->containerd().ShimPids();
  ASSERT_FALSE(pod_shims.empty());

  const pid_t orphan = StartShim("orphan", "k8s.io", std::string(64, 'a'));
  const pid_t other_ns = StartShim("other", "nodelet-test-other", std::string(64, 'b'));
  ASSERT_GT(orphan, 0);
  ASSERT_GT(other_ns, 0);

  EXPECT_TRUE(WaitProcessGone(orphan, 30s)) << "the orphaned shim " << orphan << " still runs";
  // podworkerd logs the end once the shim and everything below it have exited, i.e. a moment
  // after the exit seen above.
  const std::string ended =
      "Ended containerd shim pid " + std::to_string(orphan) + " of " + std::string(64, 'a');
  auto logged = [&] {
    for (const auto& e : fs::directory_iterator(dir_.path())) {
      if (e.path().filename().string().rfind("podworkerd-", 0) == 0 &&
          ReadTextFile(e.path()).find(ended) != std::string::npos) {
        return true;
      }
    }
    return false;
  };
  for (auto until = steady_clock::now() + 10s; !logged() && steady_clock::now() < until;) {
    node_->WaitStatus(
        uid, [](const PodStatusRecord&) { return false; }, 100ms);  // bounded poll
  }
  EXPECT_TRUE(logged()) << "podworkerd's log does not name the shim it ended";

  // Three more sweeps: the other namespace's shim and the pod's shims stay, the pod keeps its
  // container.
  EXPECT_FALSE(WaitProcessGone(other_ns, 3500ms)) << "a shim of another namespace was ended";
  for (pid_t p : pod_shims) EXPECT_TRUE(ProcessAlive(p)) << "the pod's shim " << p << " was ended";
  view = node_->Runtime();
  bool same = false;
  for (const auto& c : view.containers)
    same |= c.id() == app_id && c.state() == v1::CONTAINER_RUNNING;
  EXPECT_TRUE(same) << "the pod's container changed:" << view.Describe();
  kill(other_ns, SIGKILL);
  EXPECT_TRUE(WaitProcessGone(other_ns, 10s));

  node_->SendDesired({});
  auto end = steady_clock::now() + 60s;
  while (steady_clock::now() < end) {
    view = node_->Runtime();
    if (view.sandboxes.empty() && view.containers.empty()) break;
    node_->WaitStatus(
        uid, [](const PodStatusRecord&) { return false; }, 300ms);
  }
  EXPECT_TRUE(view.sandboxes.empty() && view.containers.empty()) << view.Describe();
  node_->StopServices();
  LeakScope scope;
  scope.dir = dir_.path();
  scope.containerd = &node_->containerd();
  scope.ids = node_->seen_ids();
  scope.container_pids = node_->container_pids();
  EXPECT_THAT(FindLeaks(scope), ::testing::IsEmpty());
}

}  // namespace
}  // namespace nodelet::testing
