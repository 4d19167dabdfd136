#include "svc-podworkerd/stream_sessions.h"

#include <gtest/gtest.h>

#include "tests/fakes/fake_cri_runtime.h"

namespace nodelet::podworkerd {
namespace {

using ipc::pleg::ContainerRecordT;
using ipc::pleg::ContainerState;
using ipc::pleg::PodRecordT;
using ipc::pleg::SandboxRecordT;
using ipc::pleg::SandboxState;
using ipc::podwork::StreamKind;

std::unique_ptr<ContainerRecordT> C(const std::string& id, const std::string& name,
                                    uint32_t attempt, ContainerState state) {
  auto c = std::make_unique<ContainerRecordT>();
  c->id = id;
  c->name = name;
  c->attempt = attempt;
  c->state = state;
  c->sandbox_id = "sb-" + id;
  return c;
}

PodRecordT Pod(const std::string& uid, const std::string& name, SandboxState sandbox) {
  PodRecordT r;
  r.uid = uid;
  r.name = name;
  r.namespace_ = "default";
  auto s = std::make_unique<SandboxRecordT>();
  s->id = "sandbox-" + uid;
  s->state = sandbox;
  r.sandboxes.push_back(std::move(s));
  return r;
}

StreamAsk Ask(StreamKind kind, const std::string& pod, const std::string& container = "") {
  StreamAsk a;
  a.kind = kind;
  a.namespace_name = "default";
  a.pod_name = pod;
  a.container = container;
  if (kind == StreamKind::Exec) a.cmd = {"sh"};
  if (kind == StreamKind::PortForward) a.ports = {80};
  return a;
}

TEST(StreamSessionsTest, FindsTheNewestRunningInstanceOfTheNamedContainer) {
  std::map<std::string, PodRecordT> pods;
  pods["u1"] = Pod("u1", "web-node1", SandboxState::Ready);
  pods["u1"].containers.push_back(C("old", "app", 0, ContainerState::Exited));
  pods["u1"].containers.push_back(C("new", "app", 1, ContainerState::Running));
  pods["u1"].containers.push_back(C("side", "sidecar", 0, ContainerState::Running));
  auto t = FindStreamTarget(pods, Ask(StreamKind::Exec, "web-node1", "app"));
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->container_id, "new");
  EXPECT_EQ(t->container, "app");
  // Two containers and none named: refused, naming both.
  auto several = FindStreamTarget(pods, Ask(StreamKind::Exec, "web-node1"));
  ASSERT_FALSE(several.ok());
  EXPECT_EQ(several.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(several.status().message().find("app, sidecar"), std::string::npos);
  auto missing = FindStreamTarget(pods, Ask(StreamKind::Attach, "web-node1", "db"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  auto no_pod = FindStreamTarget(pods, Ask(StreamKind::Exec, "nope"));
  EXPECT_EQ(no_pod.status().code(), StatusCode::kNotFound);
  auto other_ns = Ask(StreamKind::Exec, "web-node1", "app");
  other_ns.namespace_name = "kube-system";
  EXPECT_EQ(FindStreamTarget(pods, other_ns).status().code(), StatusCode::kNotFound);
}

TEST(StreamSessionsTest, AnExitedContainerOrABadRequestIsRefused) {
  std::map<std::string, PodRecordT> pods;
  pods["u1"] = Pod("u1", "job-node1", SandboxState::NotReady);
  pods["u1"].containers.push_back(C("c1", "main", 0, ContainerState::Exited));
  auto exited = FindStreamTarget(pods, Ask(StreamKind::Exec, "job-node1"));
  ASSERT_FALSE(exited.ok());
  EXPECT_EQ(exited.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(exited.status().message().find("not running (Exited)"), std::string::npos);
  EXPECT_EQ(FindStreamTarget(pods, Ask(StreamKind::PortForward, "job-node1")).status().code(),
            StatusCode::kFailedPrecondition);
  auto no_cmd = Ask(StreamKind::Exec, "job-node1");
  no_cmd.cmd.clear();
  EXPECT_EQ(FindStreamTarget(pods, no_cmd).status().code(), StatusCode::kInvalidArgument);
  auto bad_port = Ask(StreamKind::PortForward, "job-node1");
  bad_port.ports = {0};
  EXPECT_EQ(FindStreamTarget(pods, bad_port).status().code(), StatusCode::kInvalidArgument);
}

TEST(StreamSessionsTest, ARecreatedPodsLiveRecordWins) {
  std::map<std::string, PodRecordT> pods;
  pods["a-old"] = Pod("a-old", "web-node1", SandboxState::NotReady);
  pods["a-old"].containers.push_back(C("dead", "app", 0, ContainerState::Exited));
  pods["b-new"] = Pod("b-new", "web-node1", SandboxState::Ready);
  pods["b-new"].containers.push_back(C("live", "app", 0, ContainerState::Running));
  auto t = FindStreamTarget(pods, Ask(StreamKind::Exec, "web-node1"));
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->container_id, "live");
  auto pf = FindStreamTarget(pods, Ask(StreamKind::PortForward, "web-node1"));
  ASSERT_TRUE(pf.ok());
  EXPECT_EQ(pf->sandbox_id, "sandbox-b-new");
}

TEST(StreamSessionsTest, OpensTheSessionAtTheRuntime) {
  nodelet::testing::FakeCriRuntime cri;
  cri.AddImage("busybox");
  runtime::v1::PodSandboxConfig sandbox;
  sandbox.mutable_metadata()->set_name("p");
  sandbox.mutable_metadata()->set_uid("u");
  sandbox.mutable_metadata()->set_namespace_("default");
  auto sb = cri.RunPodSandbox(sandbox, "");
  ASSERT_TRUE(sb.ok()) << sb.status().message();
  runtime::v1::ContainerConfig config;
  config.mutable_metadata()->set_name("app");
  config.mutable_image()->set_image("busybox");
  auto id = cri.CreateContainer(*sb, config, sandbox);
  ASSERT_TRUE(id.ok()) << id.status().message();
  StreamTarget target{"app", *id, *sb};
  // Created, not running: the runtime refuses.
  EXPECT_FALSE(OpenStream(cri, Ask(StreamKind::Exec, "p"), target).ok());
  ASSERT_TRUE(cri.StartContainer(*id).ok());
  auto exec = OpenStream(cri, Ask(StreamKind::Exec, "p"), target);
  ASSERT_TRUE(exec.ok()) << exec.status().message();
  EXPECT_EQ(*exec, "fake://exec/" + *id);
  auto attach = OpenStream(cri, Ask(StreamKind::Attach, "p"), target);
  ASSERT_TRUE(attach.ok());
  EXPECT_EQ(*attach, "fake://attach/" + *id);
  auto pf_ask = Ask(StreamKind::PortForward, "p");
  pf_ask.ports = {80, 8080};
  auto pf = OpenStream(cri, pf_ask, target);
  ASSERT_TRUE(pf.ok());
  EXPECT_EQ(*pf, "fake://portforward/" + *sb + "?ports=80,8080");
}

}  // namespace
}  // namespace nodelet::podworkerd
