// nodelet-plegd against a real, private containerd: lifecycle events and exit codes seen
// through a subscriber's replica (PlegMirror), foreign pods marked, a kill -9 of plegd while
// containers come and go healed by snapshot, and containerd stopped and started under a
// running plegd (health failing, then ok).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "lib/cri/grpc_cri_client.h"
#include "lib/pleg/pleg_mirror.h"
#include "tests/testing/containerd.h"
#include "tests/testing/fake_supervisor.h"
#include "tests/testing/harness.h"
#include "tests/testing/leak_check.h"

namespace nodelet::testing {
namespace {

namespace v1 = ::runtime::v1;
using ipc::pleg::ContainerState;
using ipc::pleg::EventType;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr char kManagedLabel[] = "nodelet.io/managed";

v1::PodSandboxConfig Sandbox(const std::string& name, bool managed, const std::string& log_dir) {
  v1::PodSandboxConfig config;
  config.mutable_metadata()->set_name(name);
  config.mutable_metadata()->set_uid("uid-" + name);
  config.mutable_metadata()->set_namespace_("default");
  config.set_log_directory(log_dir);
  if (managed) (*config.mutable_labels())[kManagedLabel] = "true";
  auto* ns = config.mutable_linux()->mutable_security_context()->mutable_namespace_options();
  ns->set_network(v1::NODE);
  ns->set_pid(v1::CONTAINER);
  ns->set_ipc(v1::POD);
  return config;
}

v1::ContainerConfig Busybox(const std::string& name, std::vector<std::string> command) {
  v1::ContainerConfig config;
  config.mutable_metadata()->set_name(name);
  config.mutable_image()->set_image(kBusyboxImage);
  for (auto& arg : command) config.add_command(arg);
  config.set_log_path(name + ".log");
  auto* ns = config.mutable_linux()->mutable_security_context()->mutable_namespace_options();
  ns->set_network(v1::NODE);
  ns->set_pid(v1::CONTAINER);
  return config;
}

// One nodelet-plegd process, ready (READY=1) when constructed.
class PlegdProcess {
 public:
  PlegdProcess(const TempDir& dir, const std::string& endpoint, const std::string& relist_period)
      : notify_(dir.Sub("notify-" + std::to_string(++count_) + ".sock")) {
    process_ = std::make_unique<Subprocess>(
        std::vector<std::string>{
            BinDir() + "/nodelet-plegd", "--root-dir", dir.Sub("root"), "--run-dir", dir.Sub("run"),
            "--log-dir", dir.Sub("log"), "--heartbeat-interval", "100", "--runtime-endpoint",
            endpoint, "--relist-period", relist_period, "--runtime-request-timeout", "2s"},
        std::map<std::string, std::string>{{"NOTIFY_SOCKET", notify_.path()}},
        dir.Sub("plegd-" + std::to_string(count_) + ".log"));
    ready_ = notify_.WaitFor("READY=1", 10s).has_value();
  }
  bool ready() const { return ready_; }
  Subprocess& process() { return *process_; }

 private:
  static inline int count_ = 0;
  NotifyListener notify_;
  std::unique_ptr<Subprocess> process_;
  bool ready_ = false;
};

// A subscriber's replica on its own loop, run by the test thread, with every event it applied.
class Watcher {
 public:
  Watcher(ipc::Context& ctx, const std::string& run_dir)
      : mirror_(ctx, RealClock::Get(), run_dir, ipc::ServiceId::Ctl) {
    mirror_.on_event = [this](const ipc::pleg::Event& e, const ipc::pleg::PodRecordT&) {
      events_.push_back({e.type(), e.id() ? e.id()->str() : "", e.exit_code()});
    };
    EXPECT_TRUE(mirror_.Connect(loop_).ok());
  }
  struct Seen {
    EventType type;
    std::string id;
    int32_t exit_code;
  };

  // Runs the replica's loop until `done()` holds or the deadline passes; returns done().
  bool PumpUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
    auto end = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
      if (std::chrono::steady_clock::now() >= end) return false;
      EXPECT_TRUE(loop_.RunOnce(std::chrono::milliseconds(50)).ok());
    }
    return true;
  }
  bool Saw(EventType type, const std::string& id) const {
    for (const auto& e : events_) {
      if (e.type == type && e.id == id) return true;
    }
    return false;
  }
  const Seen* Find(EventType type, const std::string& id) const {
    for (const auto& e : events_) {
      if (e.type == type && e.id == id) return &e;
    }
    return nullptr;
  }
  const ipc::pleg::ContainerRecordT* Container(const std::string& id) const {
    for (const auto& [_, pod] : mirror_.pods()) {
      for (const auto& c : pod.containers) {
        if (c->id == id) return c.get();
      }
    }
    return nullptr;
  }
  const ipc::pleg::PodRecordT* Pod(const std::string& uid) const {
    auto it = mirror_.pods().find(uid);
    return it == mirror_.pods().end() ? nullptr : &it->second;
  }
  // container id -> state, over every pod in the replica.
  std::map<std::string, ContainerState> ContainerStates() const {
    std::map<std::string, ContainerState> out;
    for (const auto& [_, pod] : mirror_.pods()) {
      for (const auto& c : pod.containers) out[c->id] = c->state;
    }
    return out;
  }
  pleg::PlegMirror& mirror() { return mirror_; }
  // For failure messages: every pod and container the replica holds.
  std::string Describe() const {
    std::string out;
    for (const auto& [uid, pod] : mirror_.pods()) {
      out += uid + (pod.foreign ? " (foreign)" : "") +
             " sandboxes=" + std::to_string(pod.sandboxes.size()) +
             (pod.inspect_error.empty() ? "" : " error=" + pod.inspect_error) + ":";
      for (const auto& c : pod.containers) {
        out += " " + c->id.substr(0, 12) + "/" + c->name + "=" +
               ipc::pleg::EnumNameContainerState(c->state);
      }
      out += "\n";
    }
    return out;
  }

 private:
  // Before the mirror, which registers on it.
  EventLoop loop_{RealClock::Get()};
  pleg::PlegMirror mirror_;
  std::vector<Seen> events_;
};

ContainerState FromCri(v1::ContainerState s) {
  switch (s) {
    case v1::CONTAINER_CREATED:
      return ContainerState::Created;
    case v1::CONTAINER_RUNNING:
      return ContainerState::Running;
    case v1::CONTAINER_EXITED:
      return ContainerState::Exited;
    default:
      return ContainerState::Unknown;
  }
}

// The runtime's truth: container id -> state.
std::map<std::string, ContainerState> CriContainerStates(cri::RuntimeService& cri) {
  std::map<std::string, ContainerState> out;
  auto list = cri.ListContainers(v1::ContainerFilter());
  EXPECT_TRUE(list.ok()) << list.status().ToString();
  if (!list.ok()) return out;
  for (const auto& c : *list) out[c.id()] = FromCri(c.state());
  return out;
}

class PlegdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ContainerdOptions opts;
    opts.dir = dir_.Sub("ctrd");
    opts.image_tarballs = DefaultImageTarballs(ImagesDir());
    auto c = ContainerdInstance::Start(opts);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    containerd_ = std::move(*c);
    containerd_options_ = opts;
  }
  void TearDown() override {
    if (containerd_) {
      EXPECT_TRUE(containerd_->Stop().ok());
    }
  }
  std::string RunSandbox(const std::string& name, bool managed = true) {
    auto id = cri().RunPodSandbox(Sandbox(name, managed, dir_.Sub("podlogs/" + name)), "");
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return id.ok() ? *id : "";
  }
  std::string RunContainer(const std::string& sandbox, const std::string& sandbox_name,
                           const std::string& name, std::vector<std::string> command) {
    auto id =
        cri().CreateContainer(sandbox, Busybox(name, std::move(command)),
                              Sandbox(sandbox_name, true, dir_.Sub("podlogs/" + sandbox_name)));
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    if (!id.ok()) return "";
    Status s = cri().StartContainer(*id);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return *id;
  }
  cri::GrpcCriClient& cri() { return containerd_->cri(); }

  TempDir dir_;
  ipc::Context ctx_;
  ContainerdOptions containerd_options_;
  std::unique_ptr<ContainerdInstance> containerd_;
};

TEST_F(PlegdTest, ContainerStartedDiedWithExitCodeAndRemoved) {
  PlegdProcess plegd(dir_, containerd_->endpoint(), "100ms");
  ASSERT_TRUE(plegd.ready());
  Watcher w(ctx_, dir_.Sub("run"));
  // The replica must be live before the container starts: a start that happens while it is
  // still connecting arrives in its first snapshot, as state, without a ContainerStarted event.
  ASSERT_TRUE(w.PumpUntil([&] { return w.mirror().in_sync(); }, 10s));

  std::string sandbox = RunSandbox("lifecycle");
  std::string foreign = RunSandbox("foreign", /*managed=*/false);
  std::string cid = RunContainer(sandbox, "lifecycle", "sleeper", {"sleep", "1000"});
  ASSERT_FALSE(cid.empty());

  ASSERT_TRUE(w.PumpUntil([&] { return w.Saw(EventType::ContainerStarted, cid); }, 10s));
  ASSERT_TRUE(w.PumpUntil([&] { return w.Pod("uid-foreign") != nullptr; }, 10s)) << w.Describe();
  EXPECT_TRUE(w.Pod("uid-foreign")->foreign);
  ASSERT_NE(w.Pod("uid-lifecycle"), nullptr);
  EXPECT_FALSE(w.Pod("uid-lifecycle")->foreign);
  ASSERT_NE(w.Container(cid), nullptr);
  EXPECT_EQ(w.Container(cid)->state, ContainerState::Running);
  EXPECT_EQ(w.Container(cid)->sandbox_id, sandbox);
  EXPECT_EQ(w.Container(cid)->name, "sleeper");

  pid_t pid = ContainerPid(cri(), cid);
  ASSERT_GT(pid, 0);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  ASSERT_TRUE(w.PumpUntil([&] { return w.Saw(EventType::ContainerDied, cid); }, 10s));
  EXPECT_EQ(w.Find(EventType::ContainerDied, cid)->exit_code, 137);
  ASSERT_NE(w.Container(cid), nullptr);
  EXPECT_EQ(w.Container(cid)->state, ContainerState::Exited);
  EXPECT_EQ(w.Container(cid)->exit_code, 137);

  ASSERT_TRUE(cri().RemoveContainer(cid).ok());
  ASSERT_TRUE(w.PumpUntil([&] { return w.Saw(EventType::ContainerRemoved, cid); }, 10s));
  EXPECT_EQ(w.Container(cid), nullptr);
  EXPECT_EQ(w.mirror().bad_messages(), 0u);
}

TEST_F(PlegdTest, KillNineWhileContainersChurnHealsToRuntimeTruth) {
  auto plegd = std::make_unique<PlegdProcess>(dir_, containerd_->endpoint(), "100ms");
  ASSERT_TRUE(plegd->ready());
  Watcher w(ctx_, dir_.Sub("run"));
  ASSERT_TRUE(w.PumpUntil([&] { return w.mirror().in_sync(); }, 10s));

  std::string sandbox = RunSandbox("churn");
  ASSERT_FALSE(sandbox.empty());
  // Containers come and go on another thread (its own CRI client) while plegd is killed.
  auto churn_client = cri::GrpcCriClient::Create(containerd_->endpoint());
  ASSERT_TRUE(churn_client.ok());
  std::atomic<bool> stop{false};
  std::atomic<int> rounds{0};
  std::thread churn([&] {
    auto& c = **churn_client;
    auto sandbox_config = Sandbox("churn", true, dir_.Sub("podlogs/churn"));
    std::vector<std::string> live;
    for (int i = 0; !stop.load() && i < 200; ++i) {
      auto id = c.CreateContainer(
          sandbox, Busybox("c" + std::to_string(i), {"sh", "-c", i % 2 ? "exit 3" : "sleep 1000"}),
          sandbox_config);
      if (!id.ok()) continue;
      (void)c.StartContainer(*id);
      live.push_back(*id);
      if (live.size() > 4) {
        (void)c.StopContainer(live.front(), 0);
        (void)c.RemoveContainer(live.front());
        live.erase(live.begin());
      }
      ++rounds;
    }
  });

  // Let plegd see some of it, then kill it mid-churn and start a new one.
  w.PumpUntil([&] { return rounds.load() >= 3; }, 20s);
  plegd->process().Signal(SIGKILL);
  ASSERT_TRUE(plegd->process().Wait(10s).has_value());
  w.PumpUntil([&] { return rounds.load() >= 6; }, 20s);
  plegd = std::make_unique<PlegdProcess>(dir_, containerd_->endpoint(), "100ms");
  ASSERT_TRUE(plegd->ready());
  w.PumpUntil([&] { return rounds.load() >= 10; }, 30s);
  stop = true;
  churn.join();
  ASSERT_GE(rounds.load(), 10);

  // Once the runtime is still, the replica must equal it exactly.
  std::map<std::string, ContainerState> truth = CriContainerStates(cri());
  bool equal = w.PumpUntil([&] { return w.ContainerStates() == truth; }, 15s);
  EXPECT_TRUE(equal) << "replica has " << w.ContainerStates().size() << " containers, runtime "
                     << truth.size() << "\n"
                     << w.Describe();
  EXPECT_GE(w.mirror().snapshots(), 2u) << "the new plegd incarnation must cause a resync";
  EXPECT_EQ(w.mirror().bad_messages(), 0u);
}

// A plegd that has not completed a relist (here: it cannot reach the runtime) serves an empty
// snapshot. A replica follows it (in sync) but is not ready, so no consumer takes the empty
// cache for a node without pods; a plegd that relisted makes it ready, with the pods.
TEST_F(PlegdTest, AReplicaIsReadyOnlyOncePlegdHasRelisted) {
  std::string sandbox = RunSandbox("present");
  ASSERT_FALSE(sandbox.empty());
  auto plegd =
      std::make_unique<PlegdProcess>(dir_, "unix://" + dir_.Sub("no-runtime.sock"), "100ms");
  ASSERT_TRUE(plegd->ready());
  Watcher w(ctx_, dir_.Sub("run"));
  ASSERT_TRUE(w.PumpUntil([&] { return w.mirror().in_sync(); }, 10s));
  // Several relist periods go by, each failing.
  w.PumpUntil([] { return false; }, 1s);
  EXPECT_TRUE(w.mirror().in_sync());
  EXPECT_FALSE(w.mirror().ready());
  EXPECT_EQ(w.mirror().relist(), 0u);
  EXPECT_TRUE(w.mirror().pods().empty());

  plegd->process().Signal(SIGKILL);
  ASSERT_TRUE(plegd->process().Wait(10s).has_value());
  plegd = std::make_unique<PlegdProcess>(dir_, containerd_->endpoint(), "100ms");
  ASSERT_TRUE(plegd->ready());
  ASSERT_TRUE(w.PumpUntil([&] { return w.mirror().ready(); }, 15s));
  bool found = false;
  for (const auto& [_, pod] : w.mirror().pods()) {
    for (const auto& sb : pod.sandboxes) found = found || sb->id == sandbox;
  }
  EXPECT_TRUE(found) << w.Describe();
}

TEST_F(PlegdTest, ContainerdStoppedAndStartedMakesHealthFailingThenOk) {
  FakeSupervisor supervisor(ctx_, dir_.Sub("run"));
  PlegdProcess plegd(dir_, containerd_->endpoint(), "100ms");
  ASSERT_TRUE(plegd.ready());
  ASSERT_TRUE(supervisor.WaitForHealth(ipc::control::Health::Ok, 10s).has_value());

  ASSERT_TRUE(containerd_->Stop().ok());
  containerd_.reset();
  auto failing = supervisor.WaitForHealth(ipc::control::Health::Failing, 15s);
  ASSERT_TRUE(failing.has_value()) << "last reason: " << supervisor.last_reason();
  EXPECT_THAT(*failing, HasSubstr("unreachable"));

  auto c = ContainerdInstance::Start(containerd_options_);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  containerd_ = std::move(*c);
  EXPECT_TRUE(supervisor.WaitForHealth(ipc::control::Health::Ok, 30s).has_value())
      << "last reason: " << supervisor.last_reason();
  EXPECT_TRUE(plegd.process().running()) << "plegd must ride out a runtime restart";
}

// With a 60 s relist period only runtime events can make plegd see a change within seconds:
// containerd's event stream makes it relist at once (a start, a kill, a removal), also after
// containerd restarted (the stream is subscribed again, and the gap is covered by a relist).
TEST_F(PlegdTest, RuntimeEventsMakeALongPeriodRelistAtOnceAlsoAfterAContainerdRestart) {
  PlegdProcess plegd(dir_, containerd_->endpoint(), "60s");
  ASSERT_TRUE(plegd.ready());
  Watcher w(ctx_, dir_.Sub("run"));
  ASSERT_TRUE(w.PumpUntil([&] { return w.mirror().in_sync(); }, 10s));

  std::string sandbox = RunSandbox("evented");
  std::string cid = RunContainer(sandbox, "evented", "sleeper", {"sleep", "1000"});
  ASSERT_FALSE(cid.empty());
  ASSERT_TRUE(w.PumpUntil([&] { return w.Saw(EventType::ContainerStarted, cid); }, 5s))
      << w.Describe();
  pid_t pid = ContainerPid(cri(), cid);
  ASSERT_GT(pid, 0);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  ASSERT_TRUE(w.PumpUntil([&] { return w.Saw(EventType::ContainerDied, cid); }, 5s));
  EXPECT_EQ(w.Find(EventType::ContainerDied, cid)->exit_code, 137);
  ASSERT_TRUE(cri().RemoveContainer(cid).ok());
  ASSERT_TRUE(w.PumpUntil([&] { return w.Saw(EventType::ContainerRemoved, cid); }, 5s));

  ASSERT_TRUE(containerd_->Restart().ok());
  std::string again = RunContainer(sandbox, "evented", "again", {"sleep", "1000"});
  ASSERT_FALSE(again.empty());
  // The stream's back-off is at most 5 s; well under the period.
  ASSERT_TRUE(w.PumpUntil([&] { return w.Saw(EventType::ContainerStarted, again); }, 15s))
      << w.Describe();
  EXPECT_TRUE(plegd.process().running());
}

// A runtime that stays away a while: gRPC's own reconnect back-off (1 s growing by 1.6 up to
// 2 min by default) must not keep plegd's event stream from coming back once containerd does.
// Down 16 s, a default channel's next attempt comes about 10 s after containerd is back; every
// channel to the runtime's socket backs off at most 1 s (lib/cri/grpc_cri_client.h), so the
// stream is back within plegd's own back-off (at most 5 s).
TEST_F(PlegdTest, TheEventStreamComesBackSoonAfterALongRuntimeOutage) {
  PlegdProcess plegd(dir_, containerd_->endpoint(), "60s");
  ASSERT_TRUE(plegd.ready());
  Watcher w(ctx_, dir_.Sub("run"));
  ASSERT_TRUE(w.PumpUntil([&] { return w.mirror().in_sync(); }, 10s));
  std::string sandbox = RunSandbox("outage");
  ASSERT_TRUE(containerd_
                  ->Restart(60s,
                            [] {
                              std::this_thread::sleep_for(
                                  16s);  // the outage itself, not a wait for an event
                            })
                  .ok());
  const auto back = std::chrono::steady_clock::now();
  std::string cid = RunContainer(sandbox, "outage", "after", {"sleep", "1000"});
  ASSERT_FALSE(cid.empty());
  ASSERT_TRUE(w.PumpUntil([&] { return w.Saw(EventType::ContainerStarted, cid); }, 20s))
      << w.Describe();
  EXPECT_LT(std::chrono::steady_clock::now() - back, 8s)
      << "the container's start was seen only through a late resubscription";
}

// `nodeletctl runtime` prints plegd's view, served from its snapshot through the supervisor.
TEST_F(PlegdTest, NodeletctlRuntimeShowsPlegdViewThroughSupervisor) {
  NotifyListener notify(dir_.Sub("nodelet-notify.sock"));
  Subprocess nodelet(
      {BinDir() + "/nodelet", "--root-dir", dir_.Sub("root"), "--run-dir", dir_.Sub("run"),
       "--log-dir", dir_.Sub("log"), "--runtime-endpoint", containerd_->endpoint(),
       "--relist-period", "100ms", "--cgroup-root", TestCgroupRoot(dir_.path())},
      {{"NOTIFY_SOCKET", notify.path()}}, dir_.Sub("nodelet.log"));
  ASSERT_TRUE(notify.WaitFor("READY=1", 20s).has_value()) << "all four services must start";

  std::string sandbox = RunSandbox("web");
  RunSandbox("stranger", /*managed=*/false);
  std::string cid = RunContainer(sandbox, "web", "server", {"sleep", "1000"});
  ASSERT_FALSE(cid.empty());

  const std::vector<std::string> ctl = {BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"),
                                        "runtime"};
  CommandResult r;
  auto shows_all = [&] {
    r = RunCommand(ctl, 5s);
    return r.exit_code == 0 && r.output.find("server") != std::string::npos &&
           r.output.find("RUNNING") != std::string::npos &&
           r.output.find("stranger") != std::string::npos;
  };
  auto end = std::chrono::steady_clock::now() + 15s;
  bool shown = shows_all();
  while (!shown && std::chrono::steady_clock::now() < end) {
    // Each round waits for the next relist report rather than a fixed time.
    notify.Receive(200ms);
    shown = shows_all();
  }
  ASSERT_TRUE(shown) << r.output;
  // The foreign pod is marked; nodelet's own is not.
  std::string stranger_line, web_line;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("stranger", 0) == 0) stranger_line = line;
    if (line.rfind("web", 0) == 0) web_line = line;
  }
  EXPECT_THAT(stranger_line, HasSubstr("foreign"));
  EXPECT_THAT(web_line, ::testing::Not(HasSubstr("foreign")));
  EXPECT_THAT(web_line, HasSubstr("READY"));

  auto json =
      RunCommand({BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run"), "runtime", "--json"}, 5s);
  ASSERT_EQ(json.exit_code, 0) << json.output;
  auto parsed = nlohmann::json::parse(json.output, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded()) << json.output;
  EXPECT_GT(parsed["relist"].get<uint64_t>(), 0u);

  nodelet.Signal(SIGTERM);
  auto status = nodelet.Wait(15s);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0);
}

}  // namespace
}  // namespace nodelet::testing
