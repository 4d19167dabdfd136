// StatusdTest, the fixture of the statusd-integration suite (statusd_test.cc,
// statusd_durability_test.cc): the real nodelet-statusd binary with its own directories, started
// without a supervisor (its control DEALER just waits), ready once it sent READY=1, and a status
// client on its sockets; Pod() and Running() make the identities and statuses the tests write.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lib/status/status_client.h"
#include "tests/testing/harness.h"

namespace nodelet::statusd {

// The fixture's timeouts are written with these, as the tests' are.
using namespace std::chrono_literals;
using nodelet::testing::BinDir;
using nodelet::testing::NotifyListener;
using nodelet::testing::Subprocess;
using nodelet::testing::TempDir;
using status::PodIdentity;
using status::PodStatus;

inline PodIdentity Pod(const std::string& uid,
                       status::RestartPolicy policy = status::RestartPolicy::kAlways) {
  PodIdentity p;
  p.namespace_ = "default";
  p.name = "pod-" + uid;
  p.uid = uid;
  p.restart_policy = policy;
  p.creation_time_unix_s = 1'700'000'000;
  p.container_count = 1;
  return p;
}

inline PodStatus Running(const std::string& message) {
  PodStatus s;
  s.phase = status::PodPhase::kRunning;
  s.message = message;
  s.pod_ip = "127.0.0.1";
  s.conditions = {{"Ready", status::ConditionStatus::kTrue, 0, 0, "", ""}};
  status::ContainerStatus c;
  c.name = "app";
  c.state.running = status::ContainerStateRunning{1'700'000'001};
  c.ready = true;
  c.started = true;
  c.image = "busybox";
  s.container_statuses = {c};
  return s;
}

// One nodelet-statusd process with its own directories, ready when constructed.
class StatusdProcess {
 public:
  StatusdProcess(const std::string& root_dir, const std::string& run_dir, const std::string& dir,
                 const std::vector<std::string>& extra = {})
      : notify_(dir + "/notify-" + std::to_string(++count_) + ".sock") {
    std::vector<std::string> argv{BinDir() + "/nodelet-statusd",
                                  "--root-dir",
                                  root_dir,
                                  "--run-dir",
                                  run_dir,
                                  "--log-dir",
                                  dir + "/log",
                                  "--heartbeat-interval",
                                  "100"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    process_ = std::make_unique<Subprocess>(
        argv, std::map<std::string, std::string>{{"NOTIFY_SOCKET", notify_.path()}},
        dir + "/statusd.log");
    ready_ = notify_.WaitFor("READY=1", 10s).has_value();
  }
  bool ready() const { return ready_; }
  Subprocess& process() { return *process_; }
  void Kill9() {
    process_->Signal(SIGKILL);
    process_->Wait(10s);
  }

 private:
  static inline int count_ = 0;
  NotifyListener notify_;
  std::unique_ptr<Subprocess> process_;
  bool ready_ = false;
};

class StatusdTest : public ::testing::Test {
 protected:
  std::string root() const { return dir_.Sub("root"); }
  std::string run() const { return dir_.Sub("run"); }
  std::string db() const { return root() + "/statusd/status.db"; }
  std::unique_ptr<StatusdProcess> Start(const std::string& root_dir = "",
                                        const std::vector<std::string>& extra = {}) {
    auto p = std::make_unique<StatusdProcess>(root_dir.empty() ? root() : root_dir, run(),
                                              dir_.path(), extra);
    EXPECT_TRUE(p->ready()) << "statusd did not send READY=1; log:\n" << Log();
    return p;
  }
  std::string Log() const {
    auto text = std::ifstream(dir_.Sub("statusd.log"));
    return std::string(std::istreambuf_iterator<char>(text), {});
  }
  std::unique_ptr<status::StatusClient> Client() {
    status::StatusClientOptions o;
    o.sender = ipc::ServiceId::Podworkerd;
    o.attempt_timeout = 1000ms;
    o.deadline = 5000ms;
    auto c = std::make_unique<status::StatusClient>(ctx_, run(), o);
    EXPECT_TRUE(c->Connect().ok());
    return c;
  }

  TempDir dir_;
  ipc::Context ctx_;
};

}  // namespace nodelet::statusd
