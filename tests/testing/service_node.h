// ServiceNode: a node without the supervisor, for the integration tests of podworkerd: a
// private containerd, the real plegd, statusd and podworkerd started as the supervisor would
// start them, and the test in the supervisor's part of the work channel (DesiredPods over
// podwork.fbs). podworkerd may reach containerd through a CriFaultProxy (runtime_faults_test.cc).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lib/ipc/codec.h"
#include "lib/ipc/sockets.h"
#include "lib/pod/pod.h"
#include "lib/status/status_client.h"
#include "tests/testing/containerd.h"
#include "tests/testing/cri_fault_proxy.h"
#include "tests/testing/harness.h"

namespace nodelet::testing {

// A static pod from one manifest's text, as the supervisor would send it (node "testnode").
pod::Pod MakeStaticPod(const std::string& yaml, const std::string& file = "/manifests/test.yaml");

struct ServiceNodeOptions {
  bool fault_proxy = false;  // podworkerd talks to containerd through a CriFaultProxy
  std::vector<std::string> podworkerd_args;  // added to podworkerd's flags, every start
};

class ServiceNode {
 public:
  explicit ServiceNode(const TempDir& dir, ServiceNodeOptions options = {});
  virtual ~ServiceNode();
  ServiceNode(const ServiceNode&) = delete;
  ServiceNode& operator=(const ServiceNode&) = delete;

  // containerd (and the proxy), plegd, statusd, podworkerd, and the test's clients. False (with
  // a test failure added) when any of them did not come up.
  bool Start();

  // Starts nodelet-NAME with the common flags and `extra`, and waits for its READY=1 (15 s).
  std::unique_ptr<Subprocess> StartService(const std::string& name, std::vector<std::string> extra);
  // SIGKILL, reaped; RestartPodworkerd() starts the next one.
  void KillPodworkerd();
  void RestartPodworkerd();
  // podworkerd first (SIGTERM, 30 s, then its group's SIGKILL), then plegd and statusd.
  void StopServices();

  // Sends the desired set and waits for podworkerd's WorkAck of it (15 s).
  void SendDesired(const std::vector<pod::Pod>& pods, bool sources_ready = true);
  // Waits (on statusd's watch stream) until the pod's status satisfies `pred`.
  std::optional<status::PodStatusRecord> WaitStatus(
      const std::string& uid, const std::function<bool(const status::PodStatusRecord&)>& pred,
      std::chrono::milliseconds timeout);
  // The last status read by WaitStatus, for failure messages.
  std::string Last() const;

  ContainerdInstance& containerd() { return *containerd_; }
  CriFaultProxy& proxy() { return *proxy_; }
  const TempDir& dir() const { return dir_; }

 private:
  std::unique_ptr<Subprocess> StartPodworkerd();

  const TempDir& dir_;
  ServiceNodeOptions options_;
  ipc::Context ctx_;
  int starts_ = 0;
  uint64_t generation_ = 0;
  ipc::EnvelopeWriter envelope_;
  std::unique_ptr<ContainerdInstance> containerd_;
  std::unique_ptr<CriFaultProxy> proxy_;
  std::unique_ptr<Subprocess> plegd_, statusd_, podworkerd_;
  std::unique_ptr<status::StatusClient> status_;
  std::unique_ptr<status::StatusWatcher> watcher_;
  std::unique_ptr<ipc::DealerClient> work_;
  status::PodStatusRecord last_;
};

}  // namespace nodelet::testing
