// The whole PodworkerdService on the in-memory CRI runtime, on a real EventLoop in a temp run
// dir: desired pods arrive on the real work socket (as the supervisor sends them), and a
// stand-in plegd relists the fake runtime onto the real PLEG sockets.
#include "svc-podworkerd/podworkerd_service.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "lib/ipc/endpoints.h"
#include "lib/pod/pod_flatbuffers.h"
#include "pleg_generated.h"
#include "podwork_generated.h"
#include "svc-podworkerd/cri_configs.h"
#include "tests/fakes/fake_cri_runtime.h"
#include "tests/fakes/fake_plegd.h"
#include "tests/testing/harness.h"

namespace nodelet::podworkerd {
namespace {

using namespace std::chrono_literals;

ipc::pleg::ContainerState StateOf(runtime::v1::ContainerState s) {
  switch (s) {
    case runtime::v1::CONTAINER_CREATED:
      return ipc::pleg::ContainerState::Created;
    case runtime::v1::CONTAINER_RUNNING:
      return ipc::pleg::ContainerState::Running;
    case runtime::v1::CONTAINER_EXITED:
      return ipc::pleg::ContainerState::Exited;
    default:
      return ipc::pleg::ContainerState::Unknown;
  }
}

// What plegd's relist finds in the fake runtime: a record per pod (each sandbox and container),
// published through the stand-in plegd as one relist that started now.
void Relist(testing::FakePlegd& plegd, testing::FakeCriRuntime& cri, const Clock& clock) {
  const int64_t started = clock.MonoNanos();
  std::map<std::string, ipc::pleg::PodRecordT> now;
  std::map<std::string, std::string> uid_of_sandbox;
  auto sandboxes = cri.ListPodSandbox({});
  auto containers = cri.ListContainers({});
  if (!sandboxes.ok() || !containers.ok()) return;
  for (const auto& sb : *sandboxes) {
    const std::string uid = sb.metadata().uid();
    uid_of_sandbox[sb.id()] = uid;
    auto& rec = now[uid];
    rec.uid = uid;
    rec.name = sb.metadata().name();
    rec.namespace_ = sb.metadata().namespace_();
    auto s = std::make_unique<ipc::pleg::SandboxRecordT>();
    s->id = sb.id();
    s->state = sb.state() == runtime::v1::SANDBOX_READY ? ipc::pleg::SandboxState::Ready
                                                        : ipc::pleg::SandboxState::NotReady;
    s->attempt = sb.metadata().attempt();
    s->created_at_ns = sb.created_at();
    if (auto st = cri.PodSandboxStatus(sb.id(), false); st.ok()) {
      s->ip = st->status().network().ip();
      s->host_network = st->status().linux().namespaces().options().network() == runtime::v1::NODE;
    }
    rec.sandboxes.push_back(std::move(s));
  }
  for (const auto& c : *containers) {
    auto uid = uid_of_sandbox.find(c.pod_sandbox_id());
    if (uid == uid_of_sandbox.end()) continue;
    auto status = cri.ContainerStatus(c.id(), false);
    if (!status.ok()) continue;
    const auto& st = status->status();
    auto r = std::make_unique<ipc::pleg::ContainerRecordT>();
    r->id = st.id();
    r->name = st.metadata().name();
    r->attempt = st.metadata().attempt();
    r->state = StateOf(st.state());
    r->created_at_ns = st.created_at();
    r->started_at_ns = st.started_at();
    r->finished_at_ns = st.finished_at();
    r->exit_code = st.exit_code();
    r->image = st.image().image();
    r->image_ref = st.image_ref();
    r->sandbox_id = c.pod_sandbox_id();
    if (auto h = st.annotations().find(kContainerHashAnnotation); h != st.annotations().end()) {
      r->spec_hash = std::strtoull(h->second.c_str(), nullptr, 16);
    }
    now[uid->second].containers.push_back(std::move(r));
  }
  plegd.PublishRelist(std::move(now), clock.WallNanos(), started);
}

// The supervisor's side of the work socket.
class StandInSupervisor {
 public:
  StandInSupervisor(ipc::Context& ctx, const std::string& run_dir)
      : dealer_(ctx, ipc::kPodWorkChannel), run_dir_(run_dir) {}
  Status Connect() { return dealer_.Connect(ipc::kPodWorkerEndpoint.Uri(run_dir_)); }

  void SetDesired(std::vector<pod::Pod> pods) {
    pods_ = std::move(pods);
    ++generation_;
  }
  // Sends the desired pods (again: a send can fail until podworkerd is connected).
  void Send() {
    flatbuffers::FlatBufferBuilder fbb(4096);
    std::vector<flatbuffers::Offset<ipc::podwork::DesiredPod>> pods;
    for (const auto& p : pods_) {
      auto fp = pod::PodToFlatBuffer(fbb, p);
      pods.push_back(ipc::podwork::CreateDesiredPod(fbb, fp, fbb.CreateString("file"), 0));
    }
    auto desired = ipc::podwork::CreateDesiredPods(fbb, generation_, fbb.CreateVector(pods),
                                                   /*sources_ready=*/true);
    auto header = envelope_.Write(fbb);
    fbb.Finish(ipc::podwork::CreatePodWorkMessage(fbb, header, ipc::podwork::Body::DesiredPods,
                                                  desired.Union()),
               ipc::podwork::PodWorkMessageIdentifier());
    (void)dealer_.Send(fbb.GetBufferPointer(), fbb.GetSize());  // resent until acked
  }
  // The highest generation podworkerd acknowledged.
  uint64_t DrainAcks() {
    while (dealer_.Readable()) {
      auto frame = dealer_.Receive(0ms);
      if (!frame.ok()) break;
      auto m = ipc::DecodeMessage<ipc::podwork::PodWorkMessage>(
          frame->data(), frame->size(), ipc::podwork::PodWorkMessageIdentifier());
      if (m.ok() && (*m)->body_as_WorkAck()) {
        acked_ = std::max(acked_, (*m)->body_as_WorkAck()->generation());
      }
    }
    return acked_;
  }
  uint64_t generation() const { return generation_; }

 private:
  ipc::DealerClient dealer_;
  std::string run_dir_;
  ipc::EnvelopeWriter envelope_{ipc::ServiceId::Supervisor, 0xbeef};
  std::vector<pod::Pod> pods_;
  uint64_t generation_ = 0;
  uint64_t acked_ = 0;
};

pod::Pod WebPod() {
  pod::Pod p;
  p.metadata.name = "web";
  p.metadata.namespace_name = "default";
  p.metadata.uid = "uid-web";
  p.spec.restart_policy = pod::kRestartPolicyAlways;
  p.spec.termination_grace_period_seconds = 2;
  p.spec.host_network = true;  // the fake runtime gives sandboxes no pod IP
  for (const char* name : {"app", "sidecar"}) {
    pod::Container c;
    c.name = name;
    c.image = "nodelet.local/busybox:1.0";
    c.image_pull_policy = "IfNotPresent";
    c.command = {"sleep", "3600"};
    p.spec.containers.push_back(c);
  }
  return p;
}

class PodworkerdServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.run_dir = dir_.path();
    options_.root_dir = dir_.Sub("root");
    options_.log_dir = dir_.Sub("log");
    std::filesystem::create_directories(options_.root_dir);
    std::filesystem::create_directories(options_.log_dir);
    cri_.AddImage("nodelet.local/busybox:1.0");
    ASSERT_TRUE(plegd_.Bind().ok());
    ASSERT_TRUE(supervisor_.Connect().ok());
    Status s = StartService();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  // A new podworkerd on a new loop (what the previous one posted dies with its loop).
  Status StartService() {
    if (service_) service_->Stop();
    service_.reset();
    ctx_.reset();
    loop_ = std::make_unique<EventLoop>(clock_);
    ctx_ = std::make_unique<ServiceContext>(
        ServiceContext{options_, ipc_, clock_, ++incarnation_, *loop_});
    PodworkerdConfig config;
    config.workers = 2;
    config.resync_period = 200ms;
    PodworkerdRuntime runtime;
    runtime.runtime = &cri_;
    runtime.images = &cri_;
    auto service = PodworkerdService::Create(*ctx_, config, runtime);
    if (!service.ok()) return service.status();
    service_ = std::move(*service);
    return Status::Ok();
  }
  void TearDown() override {
    if (service_) service_->Stop();
  }

  // Runs the loop, the stand-ins relisting and resending, until `done` or 20 s.
  template <typename Done>
  bool RunUntil(Done done) {
    const MonoTime end = clock_.Now() + 20s;
    MonoTime next_relist{}, next_send{}, next_resend{};
    while (clock_.Now() < end) {
      // Like the supervisor: at once when the set changed, else at every housekeeping tick.
      const bool changed = supervisor_.DrainAcks() < supervisor_.generation();
      if (clock_.Now() >= next_send || (changed && clock_.Now() >= next_resend)) {
        supervisor_.Send();
        next_send = clock_.Now() + 500ms;
        next_resend = clock_.Now() + 50ms;
      }
      if (clock_.Now() >= next_relist) {
        Relist(plegd_, cri_, clock_);
        next_relist = clock_.Now() + 30ms;
      }
      plegd_.AnswerSnapshots();
      EXPECT_TRUE(loop_->RunOnce(10ms).ok());
      if (done()) return true;
    }
    return false;
  }

  // Sandboxes (ready ones) and running containers of the pod in the fake runtime.
  std::pair<int, std::set<std::string>> RuntimeView(const std::string& uid) {
    int ready = 0;
    std::set<std::string> sandbox_ids, running;
    auto sandboxes = cri_.ListPodSandbox({});
    if (sandboxes.ok()) {
      for (const auto& sb : *sandboxes) {
        if (sb.metadata().uid() != uid) continue;
        sandbox_ids.insert(sb.id());
        if (sb.state() == runtime::v1::SANDBOX_READY) ++ready;
      }
    }
    auto containers = cri_.ListContainers({});
    if (containers.ok()) {
      for (const auto& c : *containers) {
        if (sandbox_ids.count(c.pod_sandbox_id()) && c.state() == runtime::v1::CONTAINER_RUNNING) {
          running.insert(c.metadata().name());
        }
      }
    }
    return {ready, running};
  }
  size_t ObjectsOf(const std::string& uid) {
    size_t n = 0;
    std::set<std::string> sandbox_ids;
    auto sandboxes = cri_.ListPodSandbox({});
    if (sandboxes.ok()) {
      for (const auto& sb : *sandboxes) {
        if (sb.metadata().uid() == uid) sandbox_ids.insert(sb.id());
      }
    }
    n += sandbox_ids.size();
    auto containers = cri_.ListContainers({});
    if (containers.ok()) {
      for (const auto& c : *containers) n += sandbox_ids.count(c.pod_sandbox_id());
    }
    return n;
  }
  uint64_t Counter(const std::string& name) {
    for (const auto& [k, v] : service_->Counters()) {
      if (k == name) return v;
    }
    return 0;
  }

  testing::TempDir dir_;
  CommonOptions options_;
  ipc::Context ipc_;
  const Clock& clock_ = RealClock::Get();
  testing::FakeCriRuntime cri_;
  testing::FakePlegd plegd_{ipc_, dir_.path()};
  StandInSupervisor supervisor_{ipc_, dir_.path()};
  uint64_t incarnation_ = 0;
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<ServiceContext> ctx_;
  std::unique_ptr<PodworkerdService> service_;
};

TEST_F(PodworkerdServiceTest, DesiredPodRunsAndRemovedPodIsKilledAndRemoved) {
  const pod::Pod web = WebPod();
  supervisor_.SetDesired({web});
  ASSERT_TRUE(RunUntil([&] {
    auto [ready, running] = RuntimeView(web.metadata.uid);
    return ready == 1 && running == std::set<std::string>{"app", "sidecar"};
  })) << "sandbox and containers never ran";
  // Resyncs on a fresh cache change nothing: still one sandbox and one instance of each.
  const uint64_t syncs = Counter("syncs");
  ASSERT_TRUE(RunUntil([&] { return Counter("syncs") >= syncs + 3; }));
  EXPECT_EQ(ObjectsOf(web.metadata.uid), 3u);
  EXPECT_EQ(RuntimeView(web.metadata.uid).second, (std::set<std::string>{"app", "sidecar"}));
  // The resends of the same set were acknowledged without being applied again.
  ASSERT_TRUE(RunUntil([&] { return Counter("desired_unchanged") >= 2; }));

  supervisor_.SetDesired({});
  ASSERT_TRUE(RunUntil([&] { return ObjectsOf(web.metadata.uid) == 0; }))
      << "the removed pod's sandbox or containers are still there";
  EXPECT_EQ(Counter("kills"), 1u);
  ASSERT_TRUE(RunUntil([&] { return Counter("pods") == 0; })) << "the pod was never forgotten";
}

TEST_F(PodworkerdServiceTest, RestartedPodworkerdKillsTheOrphanItFindsInThePlegView) {
  const pod::Pod web = WebPod();
  supervisor_.SetDesired({web});
  ASSERT_TRUE(RunUntil([&] { return RuntimeView(web.metadata.uid).second.size() == 2; }));

  // A new podworkerd whose sources no longer want the pod: it knows it only from plegd's view.
  ASSERT_TRUE(StartService().ok());
  supervisor_.SetDesired({});
  ASSERT_TRUE(RunUntil([&] { return ObjectsOf(web.metadata.uid) == 0; }))
      << "the orphan's sandbox or containers are still there";
  EXPECT_EQ(Counter("orphans_killed"), 1u);
  EXPECT_EQ(Counter("kills"), 0u);
}

// A pod whose kill fails (the runtime refuses every stop) and that the dispatcher forgets is
// still in use while plegd shows a container of it not exited (found by the chaos soak: a kill
// failed across a containerd restart, the pod left the in-use set, and volumed removed its
// emptyDir while the container still ran). Foreign and removed records do not count.
TEST(PodsWithLiveContainersTest, AnyContainerNotExitedKeepsThePodInUse) {
  auto record = [](const std::string& uid, std::vector<ipc::pleg::ContainerState> states,
                   bool foreign = false, bool removed = false) {
    ipc::pleg::PodRecordT r;
    r.uid = uid;
    r.foreign = foreign;
    r.removed = removed;
    for (auto st : states) {
      auto c = std::make_unique<ipc::pleg::ContainerRecordT>();
      c->state = st;
      r.containers.push_back(std::move(c));
    }
    return r;
  };
  using S = ipc::pleg::ContainerState;
  std::map<std::string, ipc::pleg::PodRecordT> pods;
  pods.emplace("running", record("running", {S::Exited, S::Running}));
  pods.emplace("created", record("created", {S::Created}));
  pods.emplace("unknown", record("unknown", {S::Unknown}));
  pods.emplace("exited", record("exited", {S::Exited, S::Exited}));
  pods.emplace("empty", record("empty", {}));
  pods.emplace("foreign", record("foreign", {S::Running}, true));
  pods.emplace("removed", record("removed", {S::Running}, false, true));
  EXPECT_EQ(PodsWithLiveContainers(pods), (std::set<std::string>{"created", "running", "unknown"}));
}

}  // namespace
}  // namespace nodelet::podworkerd
