#include "tests/testing/service_node.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <map>

#include "lib/ipc/endpoints.h"
#include "lib/pod/pod_flatbuffers.h"
#include "lib/pod/static_pod.h"
#include "podwork_generated.h"
#include "tests/testing/leak_check.h"

namespace nodelet::testing {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

pod::Pod MakeStaticPod(const std::string& yaml, const std::string& file) {
  pod::StaticPodOrigin origin;
  origin.source = file;
  origin.node_name = "testnode";
  origin.seen = UnixTime{1700000000, 0};
  auto r = pod::LoadStaticPods(yaml, origin);
  EXPECT_TRUE(r.errors.empty()) << (r.errors.empty() ? "" : r.errors[0].message);
  EXPECT_EQ(r.pods.size(), 1u);
  return r.pods.empty() ? pod::Pod{} : r.pods[0].pod;
}

ServiceNode::ServiceNode(const TempDir& dir, ServiceNodeOptions options)
    : dir_(dir), options_(options), envelope_(ipc::ServiceId::Supervisor, ipc::NewIncarnation()) {}

ServiceNode::~ServiceNode() {
  StopServices();
  proxy_.reset();
  if (containerd_) {
    Status s = containerd_->Stop();
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  for (const auto& left : RemoveCgroupTree(TestCgroupRoot(dir_.path()))) {
    ADD_FAILURE() << "cgroup left: " << left;
  }
}

bool ServiceNode::Start() {
  ContainerdOptions opts;
  opts.dir = dir_.Sub("ctrd");
  opts.image_tarballs = DefaultImageTarballs(ImagesDir());
  auto c = ContainerdInstance::Start(opts);
  if (!c.ok()) {
    ADD_FAILURE() << c.status().ToString();
    return false;
  }
  containerd_ = std::move(*c);
  if (options_.fault_proxy) {
    CriFaultProxyOptions popts;
    popts.listen_path = dir_.Sub("proxy.sock");
    popts.upstream_endpoint = containerd_->endpoint();
    auto p = CriFaultProxy::Start(popts);
    if (!p.ok()) {
      ADD_FAILURE() << p.status().ToString();
      return false;
    }
    proxy_ = std::move(*p);
  }
  plegd_ = StartService(
      "plegd", {"--runtime-endpoint", containerd_->endpoint(), "--relist-period", "100ms"});
  statusd_ = StartService("statusd", {});
  podworkerd_ = StartPodworkerd();
  status_ = std::make_unique<status::StatusClient>(ctx_, dir_.Sub("run"));
  watcher_ = std::make_unique<status::StatusWatcher>(ctx_, dir_.Sub("run"));
  work_ = std::make_unique<ipc::DealerClient>(ctx_, 64 * 1024 * 1024);
  return plegd_ && statusd_ && podworkerd_ && status_->Connect().ok() && watcher_->Connect().ok() &&
         work_->Connect(ipc::kPodWorkerEndpoint.Uri(dir_.Sub("run"))).ok();
}

std::unique_ptr<Subprocess> ServiceNode::StartService(const std::string& name,
                                                      std::vector<std::string> extra) {
  const std::string tag = name + "-" + std::to_string(++starts_);
  NotifyListener notify(dir_.Sub(tag + ".notify"));
  std::vector<std::string> argv = {BinDir() + "/nodelet-" + name,
                                   "--root-dir",
                                   dir_.Sub("root"),
                                   "--run-dir",
                                   dir_.Sub("run"),
                                   "--log-dir",
                                   dir_.Sub("log"),
                                   "--heartbeat-interval",
                                   "200"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  auto p = std::make_unique<Subprocess>(
      argv, std::map<std::string, std::string>{{"NOTIFY_SOCKET", notify.path()}},
      dir_.Sub(tag + ".log"));
  if (!notify.WaitFor("READY=1", 15s)) {
    ADD_FAILURE() << name << " did not become ready";
    return nullptr;
  }
  return p;
}

std::unique_ptr<Subprocess> ServiceNode::StartPodworkerd() {
  const std::string endpoint = proxy_ ? proxy_->endpoint() : containerd_->endpoint();
  std::vector<std::string> args = {"--runtime-endpoint",  endpoint,
                                   "--crashloop-initial", "1s",
                                   "--crashloop-max",     "4s",
                                   "--resync-period",     "2s",
                                   "--cgroup-root",       TestCgroupRoot(dir_.path())};
  args.insert(args.end(), options_.podworkerd_args.begin(), options_.podworkerd_args.end());
  return StartService("podworkerd", args);
}

void ServiceNode::KillPodworkerd() {
  ASSERT_NE(podworkerd_, nullptr);
  podworkerd_->Signal(SIGKILL);
  ASSERT_TRUE(podworkerd_->Wait(10s).has_value());
  podworkerd_.reset();
}

void ServiceNode::RestartPodworkerd() {
  podworkerd_ = StartPodworkerd();
  ASSERT_NE(podworkerd_, nullptr);
}

void ServiceNode::StopServices() {
  if (podworkerd_ && podworkerd_->running()) {
    podworkerd_->Signal(SIGTERM);
    podworkerd_->Wait(30s);
  }
  podworkerd_.reset();
  plegd_.reset();
  statusd_.reset();
}

void ServiceNode::SendDesired(const std::vector<pod::Pod>& pods, bool sources_ready) {
  ++generation_;
  flatbuffers::FlatBufferBuilder fbb(4096);
  std::vector<flatbuffers::Offset<ipc::podwork::DesiredPod>> list;
  for (const auto& p : pods) {
    auto fp = pod::PodToFlatBuffer(fbb, p);
    list.push_back(ipc::podwork::CreateDesiredPod(fbb, fp, fbb.CreateString("file"), 0));
  }
  auto desired =
      ipc::podwork::CreateDesiredPods(fbb, generation_, fbb.CreateVector(list), sources_ready);
  auto header = envelope_.Write(fbb);
  fbb.Finish(ipc::podwork::CreatePodWorkMessage(fbb, header, ipc::podwork::Body::DesiredPods,
                                                desired.Union()),
             ipc::podwork::PodWorkMessageIdentifier());
  ASSERT_TRUE(work_->WaitWritable(10s)) << "podworkerd's work socket is not there";
  ASSERT_TRUE(work_->Send(fbb.GetBufferPointer(), fbb.GetSize()).ok());
  auto end = steady_clock::now() + 15s;
  while (steady_clock::now() < end) {
    auto frame = work_->Receive(500ms);
    if (!frame.ok()) continue;
    auto m = ipc::DecodeMessage<ipc::podwork::PodWorkMessage>(
        frame->data(), frame->size(), ipc::podwork::PodWorkMessageIdentifier());
    ASSERT_TRUE(m.ok());
    if (auto ack = (*m)->body_as_WorkAck(); ack && ack->generation() == generation_) return;
    ASSERT_NE((*m)->body_type(), ipc::podwork::Body::ErrorReply);
  }
  FAIL() << "no WorkAck for generation " << generation_;
}

std::optional<status::PodStatusRecord> ServiceNode::WaitStatus(
    const std::string& uid, const std::function<bool(const status::PodStatusRecord&)>& pred,
    milliseconds timeout) {
  auto end = steady_clock::now() + timeout;
  for (;;) {
    auto r = status_->GetPodStatus(uid);
    if (r.ok()) last_ = *r;
    if (r.ok() && pred(*r)) return *r;
    auto now = steady_clock::now();
    if (now >= end) return std::nullopt;
    (void)watcher_->Next(
        std::min<milliseconds>(std::chrono::duration_cast<milliseconds>(end - now), 500ms));
  }
}

std::string ServiceNode::Last() const {
  std::string s = "phase=" + std::to_string(static_cast<int>(last_.status.phase));
  auto add = [&](const status::ContainerStatus& c) {
    s += " " + c.name + "(restarts=" + std::to_string(c.restart_count);
    if (c.state.waiting)
      s += " waiting=" + c.state.waiting->reason + ":" + c.state.waiting->message;
    if (c.state.running) s += " running";
    if (c.state.terminated) s += " exited=" + std::to_string(c.state.terminated->exit_code);
    s += ")";
  };
  for (const auto& c : last_.status.init_container_statuses) add(c);
  for (const auto& c : last_.status.container_statuses) add(c);
  return s;
}

}  // namespace nodelet::testing
