// PodSyncTest, the fixture of the PodSyncer unit tests (pod_sync_test.cc and
// pod_sync_sandbox_test.cc): a restartPolicy Never pod of one container on the fake runtime,
// whose sandbox is ready as plegd reports it, with helpers to make sandboxes plegd has not seen,
// list the runtime's sandboxes, find a sync's event and record an instance that exited before it
// ever ran.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "lib/pod/canonical.h"
#include "svc-podworkerd/cri_configs.h"
#include "svc-podworkerd/pod_sync.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_cri_runtime.h"

namespace nodelet::podworkerd {

using ipc::pleg::ContainerRecordT;
using ipc::pleg::ContainerState;
using ipc::pleg::PodRecordT;
using ipc::pleg::SandboxRecordT;
using ipc::pleg::SandboxState;
using testing::CriCall;
using testing::FakeCriRuntime;
namespace v1 = ::runtime::v1;

inline constexpr char kSyncImage[] = "nodelet.local/busybox:1.0";

class PodSyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    runtime_.AddImage(kSyncImage);
    pod_.metadata.name = "job";
    pod_.metadata.namespace_name = "default";
    pod_.metadata.uid = "uid-job";
    pod_.spec.restart_policy = "Never";
    pod_.spec.host_network = true;
    pod::Container c;
    c.name = "app";
    c.image = kSyncImage;
    c.image_pull_policy = "IfNotPresent";
    c.command = {"sh", "-c", "exit 0"};
    pod_.spec.containers.push_back(c);
    // The pod's sandbox, ready, as plegd reports it.
    v1::PodSandboxConfig sb = MakeSandboxConfig(pod_, 0, "/nonexistent-log-dir");
    auto id = runtime_.RunPodSandbox(sb, "");
    ASSERT_TRUE(id.ok());
    record_.uid = pod_.metadata.uid;
    record_.name = pod_.metadata.name;
    record_.namespace_ = pod_.metadata.namespace_name;
    auto s = std::make_unique<SandboxRecordT>();
    s->id = *id;
    s->state = SandboxState::Ready;
    s->created_at_ns = 1;
    s->host_network = true;
    record_.sandboxes.push_back(std::move(s));
  }

  // A sandbox of the pod made behind plegd's back (not in record_), with `attempt`.
  std::string UnseenSandbox(uint32_t attempt, bool ready) {
    v1::PodSandboxConfig sb = MakeSandboxConfig(pod_, attempt, "/nonexistent-log-dir");
    auto id = runtime_.RunPodSandbox(sb, "");
    EXPECT_TRUE(id.ok());
    if (!ready) {
      EXPECT_TRUE(runtime_.StopPodSandbox(*id).ok());
    }
    return id.ok() ? *id : "";
  }

  // The attempts of the pod's sandboxes in the runtime, by id.
  std::map<std::string, std::pair<uint32_t, bool>> RuntimeSandboxes() {
    std::map<std::string, std::pair<uint32_t, bool>> out;
    auto list = runtime_.ListPodSandbox({});
    EXPECT_TRUE(list.ok());
    if (!list.ok()) return out;
    for (const auto& s : *list) {
      out[s.id()] = {s.metadata().attempt(), s.state() == v1::SANDBOX_READY};
    }
    return out;
  }

  bool HasEvent(const SyncOutcome& out, const std::string& reason) {
    for (const auto& e : out.events) {
      if (e.reason == reason) return true;
    }
    return false;
  }

  // The app container's first instance, exited without ever running.
  void ExitedBeforeRunning(const std::string& reason, const std::string& message) {
    auto c = std::make_unique<ContainerRecordT>();
    c->id = "c0";
    c->name = "app";
    c->attempt = 0;
    c->state = ContainerState::Exited;
    c->created_at_ns = 2;
    c->started_at_ns = 0;
    c->finished_at_ns = 3;
    c->exit_code = 128;
    c->reason = reason;
    c->message = message;
    c->sandbox_id = record_.sandboxes[0]->id;
    c->spec_hash = pod::ContainerSpecHash(pod_.spec.containers[0]);
    record_.containers.push_back(std::move(c));
  }

  FakeCriRuntime runtime_;
  testing::FakeClock clock_;
  PodSyncer syncer_{runtime_, runtime_, clock_, CrashLoopPolicy{}, "/nonexistent-log-dir"};
  pod::Pod pod_;
  PodRecordT record_;
};

}  // namespace nodelet::podworkerd
