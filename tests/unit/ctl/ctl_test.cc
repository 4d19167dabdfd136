// CtlServer (supervisor side) and nodeletctl's client and formatting, over a real ipc socket in
// a temporary run directory, with a fake ServiceControl.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "ctl/ctl_client.h"
#include "ctl/logs_command.h"
#include "ctl/manifests_command.h"
#include "ctl/service_commands.h"
#include "lib/ipc/endpoints.h"
#include "nodelet_version.h"
#include "supervisor/ctl_server.h"
#include "tests/testing/harness.h"

namespace nodelet {
namespace {

using ipc::ctl::ProcessState;
using ipc::ctl::RequestKind;
using supervisor::ServiceInfo;

class FakeServices : public supervisor::ServiceControl {
 public:
  std::vector<ServiceInfo> List() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return infos_;
  }
  bool Has(const std::string& name) const override {
    for (const auto& i : List()) {
      if (i.name == name) return true;
    }
    return false;
  }
  void Start(const std::string& name, supervisor::DoneCallback done) override {
    if (name == "slow") {
      std::lock_guard<std::mutex> lock(mu_);
      parked_.push_back(std::move(done));
      parked_cv_.notify_all();
      return;
    }
    Set(name, ProcessState::Running, 4242);
    done(true, "started");
  }
  void Stop(const std::string& name, supervisor::DoneCallback done) override {
    Set(name, ProcessState::Stopped, 0);
    done(true, "stopped");
  }
  void Restart(const std::string& name, supervisor::DoneCallback done) override {
    Set(name, ProcessState::Running, 5000);
    done(true, "started");
  }
  void Set(const std::string& name, ProcessState state, int pid) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& i : infos_) {
      if (i.name == name) {
        i.state = state;
        i.pid = pid;
      }
    }
  }
  // Runs on the server's thread: completes parked starts once released.
  void Pump() {
    std::vector<supervisor::DoneCallback> run;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!release_) return;
      run.swap(parked_);
    }
    for (auto& d : run) d(false, "spawn error");
  }
  // Waits until a start has been parked (the server has the request).
  bool WaitParked(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return parked_cv_.wait_for(lock, timeout, [this] { return !parked_.empty(); });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    release_ = true;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable parked_cv_;
  std::vector<ServiceInfo> infos_ = {
      {"plegd", ProcessState::Running, 1234, 62000, "", 0, "ok", "/tmp/plegd.log", 0},
      {"slow", ProcessState::Backoff, 0, 0, "exit 1, restart in 0.4s", 3, "", "", 0},
  };
  std::vector<supervisor::DoneCallback> parked_;
  bool release_ = false;
};

class FakeRuntimeView : public supervisor::RuntimeView {
 public:
  supervisor::RuntimeSnapshot Runtime() const override {
    supervisor::RuntimeSnapshot snap;
    snap.relist = 12;
    ipc::pleg::PodRecordT mine;
    mine.uid = "u1";
    mine.name = "web-node1";
    mine.namespace_ = "default";
    auto sb = std::make_unique<ipc::pleg::SandboxRecordT>();
    sb->id = "0123456789abcdef0123";
    sb->state = ipc::pleg::SandboxState::Ready;
    mine.sandboxes.push_back(std::move(sb));
    auto c = std::make_unique<ipc::pleg::ContainerRecordT>();
    c->id = "fedcba9876543210";
    c->name = "app";
    c->state = ipc::pleg::ContainerState::Exited;
    c->exit_code = 3;
    mine.containers.push_back(std::move(c));
    ipc::pleg::PodRecordT theirs;
    theirs.uid = "u2";
    theirs.name = "handmade";
    theirs.foreign = true;
    snap.pods.push_back(std::move(mine));
    snap.pods.push_back(std::move(theirs));
    return snap;
  }
};

// A directory with a good manifest (one pod admitted, one refused by admission, a ConfigMap) and
// a broken one, and a URL whose last fetch failed after it had served one pod; or, with
// all_taken, the good manifest alone.
class FakeManifestsView : public supervisor::ManifestsView {
 public:
  supervisor::ManifestReport Manifests() const override {
    supervisor::ManifestReport r;
    ipc::ctl::ManifestSourceT dir;
    dir.source = "file";
    dir.location = "/m";
    dir.ready = true;
    r.sources.push_back(dir);
    auto pod = [](const std::string& name, const std::string& uid, ipc::ctl::PodAdmission a,
                  const std::string& reason) {
      auto p = std::make_unique<ipc::ctl::ManifestPodT>();
      p->namespace_name = "default";
      p->name = name;
      p->uid = uid;
      p->admission = a;
      p->reason = reason;
      return p;
    };
    ipc::ctl::ManifestStatusT good;
    good.source = "file";
    good.origin = "/m/good.yaml";
    good.pods.push_back(pod("web-node1", "u-web", ipc::ctl::PodAdmission::Admitted, ""));
    good.pods.push_back(pod("big-node1", "u-big", ipc::ctl::PodAdmission::Rejected, "OutOfcpu"));
    auto config = std::make_unique<ipc::ctl::ManifestConfigT>();
    config->kind = "ConfigMap";
    config->namespace_name = "default";
    config->name = "web-config";
    good.configs.push_back(std::move(config));
    r.manifests.push_back(std::move(good));
    if (all_taken) return r;
    ipc::ctl::ManifestStatusT bad;
    bad.source = "file";
    bad.origin = "/m/bad.yaml";
    bad.errors.push_back("spec.containers[0].ports[0].containerPort: Invalid value: 0");
    r.manifests.push_back(std::move(bad));
    ipc::ctl::ManifestSourceT url;
    url.source = "http";
    url.location = "http://127.0.0.1:1/pods.yaml";
    url.ready = true;
    url.failure = "fetch: Connection refused";
    r.sources.push_back(url);
    ipc::ctl::ManifestStatusT kept;
    kept.source = "http";
    kept.origin = url.location;
    kept.pods.push_back(pod("url-node1", "u-url", ipc::ctl::PodAdmission::Admitted, ""));
    r.manifests.push_back(std::move(kept));
    return r;
  }
  std::atomic<bool> all_taken{false};
};

class CtlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<supervisor::CtlServer>(
        ctx_, services_, RealClock::Get(),
        supervisor::CtlServerOptions{dir_.path(), 777, "9.9.9", &runtime_, nullptr, &manifests_});
    ASSERT_TRUE(server_->Bind().ok());
    thread_ = std::thread([this] {
      while (!stop_) {
        zmq::pollitem_t item = server_->PollItem();
        zmq::poll(&item, 1, std::chrono::milliseconds(20));
        if (item.revents & ZMQ_POLLIN) server_->OnReadable();
        services_.Pump();
      }
    });
    opts_.run_dir = dir_.path();
  }
  void TearDown() override {
    stop_ = true;
    thread_.join();
  }

  testing::TempDir dir_;
  ipc::Context ctx_;
  FakeServices services_;
  FakeRuntimeView runtime_;
  FakeManifestsView manifests_;
  std::unique_ptr<supervisor::CtlServer> server_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  ctl::CtlOptions opts_;
};

TEST_F(CtlTest, StatusFormatAndExitCodes) {
  std::ostringstream out, err;
  EXPECT_EQ(ctl::RunStatus(opts_, {"plegd"}, ctl::OutputFormat::kTable, out, err), ctl::kExitOk);
  EXPECT_EQ(out.str(), "plegd" + std::string(28, ' ') + "RUNNING   pid 1234, uptime 0:01:02\n");
  std::ostringstream out2;
  EXPECT_EQ(ctl::RunStatus(opts_, {}, ctl::OutputFormat::kTable, out2, err), ctl::kExitNotRunning);
  EXPECT_NE(out2.str().find("slow" + std::string(29, ' ') + "BACKOFF   exit 1, restart in 0.4s"),
            std::string::npos);
  std::ostringstream out3;
  EXPECT_EQ(ctl::RunStatus(opts_, {"plegd", "nope"}, ctl::OutputFormat::kTable, out3, err),
            ctl::kExitUnknown);
  EXPECT_NE(out3.str().find("nope: ERROR (no such process)"), std::string::npos);
  std::ostringstream json;
  EXPECT_EQ(ctl::RunStatus(opts_, {"plegd"}, ctl::OutputFormat::kJson, json, err), ctl::kExitOk);
  EXPECT_NE(json.str().find("\"state\": \"RUNNING\""), std::string::npos);
  std::ostringstream yaml;
  EXPECT_EQ(ctl::RunStatus(opts_, {"plegd"}, ctl::OutputFormat::kYaml, yaml, err), ctl::kExitOk);
  EXPECT_EQ(yaml.str().rfind("- description: ", 0), 0u) << yaml.str();
  EXPECT_NE(yaml.str().find("\n  name: plegd\n"), std::string::npos) << yaml.str();
  EXPECT_NE(yaml.str().find("\n  state: RUNNING\n"), std::string::npos) << yaml.str();
  std::ostringstream names;
  EXPECT_EQ(ctl::RunStatus(opts_, {}, ctl::OutputFormat::kName, names, err), ctl::kExitNotRunning);
  EXPECT_NE(names.str().find("plegd\n"), std::string::npos) << names.str();
  EXPECT_EQ(names.str().find("RUNNING"), std::string::npos) << names.str();
  std::ostringstream wide;
  EXPECT_EQ(ctl::RunStatus(opts_, {"plegd"}, ctl::OutputFormat::kWide, wide, err), ctl::kExitOk);
  EXPECT_EQ(wide.str().substr(0, wide.str().find('\n')),
            "NAME" + std::string(29, ' ') + "STATE     RESTARTS  HEALTH    DESCRIPTION")
      << wide.str();
}

TEST_F(CtlTest, ActionsPidVersion) {
  std::ostringstream out, err;
  EXPECT_EQ(ctl::RunAction(opts_, RequestKind::Stop, {"plegd"}, out, err), ctl::kExitOk);
  EXPECT_EQ(out.str(), "plegd: stopped\n");
  std::ostringstream pid;
  EXPECT_EQ(ctl::RunPid(opts_, {"plegd"}, pid, err), ctl::kExitOk);
  EXPECT_EQ(pid.str(), "0\n");
  std::ostringstream sup;
  EXPECT_EQ(ctl::RunPid(opts_, {}, sup, err), ctl::kExitOk);
  EXPECT_EQ(sup.str(), "777\n");
  std::ostringstream v;
  EXPECT_EQ(ctl::RunVersion(opts_, false, v, err), ctl::kExitOk);
  EXPECT_EQ(v.str(),
            std::string("Client Version: ") + NODELET_VERSION + "\nServer Version: 9.9.9\n");
  std::ostringstream unknown;
  EXPECT_EQ(ctl::RunAction(opts_, RequestKind::Restart, {"bogus"}, unknown, err),
            ctl::kExitUnknown);
  EXPECT_EQ(unknown.str(), "bogus: ERROR (no such process)\n");
}

TEST_F(CtlTest, ActionIsAnsweredOnlyWhenDone) {
  std::ostringstream out, err;
  std::atomic<bool> answered{false};
  std::thread client([&] {
    ctl::RunAction(opts_, RequestKind::Start, {"slow"}, out, err);
    answered = true;
  });
  // The reply waits for the fake's done-callback; a status request in between is served.
  ASSERT_TRUE(services_.WaitParked(std::chrono::milliseconds(5000)));
  std::ostringstream s;
  EXPECT_EQ(ctl::RunStatus(opts_, {"plegd"}, ctl::OutputFormat::kTable, s, err), ctl::kExitOk);
  EXPECT_FALSE(answered.load());
  services_.Release();
  client.join();
  EXPECT_EQ(out.str(), "slow: ERROR (spawn error)\n");
}

TEST_F(CtlTest, GarbageGetsAnErrorReplyAndTheServerKeepsServing) {
  ipc::Context ctx;
  ipc::DealerClient dealer(ctx);
  ASSERT_TRUE(dealer.Connect(ipc::kCtlEndpoint.Uri(dir_.path())).ok());
  std::mt19937 rng(7);
  int replies = 0;
  for (int i = 0; i < 20; ++i) {
    std::vector<uint8_t> junk(static_cast<size_t>(1 + rng() % 300));
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    if (i % 3 == 0 && junk.size() > 8) std::memcpy(junk.data() + 4, "NLCL", 4);
    while (!dealer.Send(junk.data(), junk.size()).ok()) {
      zmq::pollitem_t out{dealer.raw().handle(), 0, ZMQ_POLLOUT, 0};
      zmq::poll(&out, 1, std::chrono::milliseconds(1000));
    }
    auto reply = dealer.Receive(std::chrono::milliseconds(5000));
    ASSERT_TRUE(reply.ok());
    auto msg = ipc::DecodeMessage<ipc::ctl::CtlMessage>(reply->data(), reply->size(),
                                                        ipc::ctl::CtlMessageIdentifier());
    ASSERT_TRUE(msg.ok());
    ASSERT_NE((*msg)->body_as_CtlReply(), nullptr);
    EXPECT_FALSE((*msg)->body_as_CtlReply()->ok());
    ++replies;
  }
  EXPECT_EQ(replies, 20);
  EXPECT_GE(server_->bad_requests(), 20u);
  std::ostringstream out, err;
  EXPECT_EQ(ctl::RunStatus(opts_, {"plegd"}, ctl::OutputFormat::kTable, out, err), ctl::kExitOk);
}

TEST_F(CtlTest, RuntimeViewMarksForeignPodsAndExitCodes) {
  std::ostringstream out, err;
  EXPECT_EQ(ctl::RunRuntime(opts_, ctl::OutputFormat::kTable, out, err), ctl::kExitOk);
  const std::string text = out.str();
  EXPECT_NE(text.find("web-node1"), std::string::npos) << text;
  EXPECT_NE(text.find("0123456789abc"), std::string::npos) << text;
  EXPECT_NE(text.find("READY"), std::string::npos) << text;
  EXPECT_NE(text.find("EXITED    exit 3"), std::string::npos) << text;
  EXPECT_NE(text.find("handmade"), std::string::npos) << text;
  EXPECT_NE(text.find("foreign (not nodelet's)"), std::string::npos) << text;
  std::ostringstream json;
  EXPECT_EQ(ctl::RunRuntime(opts_, ctl::OutputFormat::kJson, json, err), ctl::kExitOk);
  EXPECT_NE(json.str().find("\"relist\": 12"), std::string::npos) << json.str();
  std::ostringstream names;
  EXPECT_EQ(ctl::RunRuntime(opts_, ctl::OutputFormat::kName, names, err), ctl::kExitOk);
  EXPECT_NE(names.str().find("/web-node1\n"), std::string::npos) << names.str();
}

TEST_F(CtlTest, ManifestsTableJsonAndExitCodes) {
  std::ostringstream out, err;
  EXPECT_EQ(ctl::RunManifests(opts_, ctl::OutputFormat::kTable, out, err), ctl::kExitFailed)
      << "a rejected manifest and a failing source: exit 1: " << err.str();
  const std::string text = out.str();
  EXPECT_EQ(text.substr(0, text.find('\n')),
            "SOURCE  MANIFEST                      STATUS    PODS/REASON")
      << text;
  for (const char* line : {
           "file    /m/good.yaml                  Taken     pod default/web-node1 (uid u-web) "
           "admitted\n",
           "                                                pod default/big-node1 (uid u-big) "
           "rejected: OutOfcpu\n",
           "                                                configmap default/web-config\n",
           "file    /m/bad.yaml                   Rejected  "
           "spec.containers[0].ports[0].containerPort: Invalid value: 0\n",
           "http    http://127.0.0.1:1/pods.yaml  Failed    fetch: Connection refused (keeping "
           "what it served last)\n",
           "http    http://127.0.0.1:1/pods.yaml  Taken     pod default/url-node1 (uid u-url) "
           "admitted\n",
       }) {
    EXPECT_NE(text.find(line), std::string::npos) << "missing: " << line << "in:\n" << text;
  }

  std::ostringstream json;
  EXPECT_EQ(ctl::RunManifests(opts_, ctl::OutputFormat::kJson, json, err), ctl::kExitFailed);
  auto doc = nlohmann::json::parse(json.str(), nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << json.str();
  ASSERT_EQ(doc["manifests"].size(), 3u);
  EXPECT_EQ(doc["manifests"][0]["status"], "Taken");
  EXPECT_EQ(doc["manifests"][0]["pods"][1]["admission"], "rejected");
  EXPECT_EQ(doc["manifests"][0]["pods"][1]["reason"], "OutOfcpu");
  EXPECT_EQ(doc["manifests"][0]["configs"][0]["kind"], "ConfigMap");
  EXPECT_EQ(doc["manifests"][1]["status"], "Rejected");
  EXPECT_EQ(doc["manifests"][1]["errors"][0],
            "spec.containers[0].ports[0].containerPort: Invalid value: 0");
  EXPECT_EQ(doc["sources"][1]["failure"], "fetch: Connection refused");

  std::ostringstream names;
  EXPECT_EQ(ctl::RunManifests(opts_, ctl::OutputFormat::kName, names, err), ctl::kExitFailed);
  EXPECT_EQ(names.str(), "/m/good.yaml\n/m/bad.yaml\nhttp://127.0.0.1:1/pods.yaml\n");

  manifests_.all_taken = true;
  std::ostringstream taken;
  EXPECT_EQ(ctl::RunManifests(opts_, ctl::OutputFormat::kTable, taken, err), ctl::kExitOk)
      << taken.str();
  EXPECT_EQ(taken.str().find("Rejected"), std::string::npos) << taken.str();
}

TEST(CtlClientTest, NoSupervisorIsExit4WithAClearMessage) {
  testing::TempDir dir;
  ctl::CtlOptions o;
  o.run_dir = dir.path();
  std::ostringstream out, err;
  EXPECT_EQ(ctl::RunStatus(o, {}, ctl::OutputFormat::kTable, out, err), ctl::kExitUnknown);
  EXPECT_NE(err.str().find("cannot reach nodelet at " + dir.path() + "/ctl.sock"),
            std::string::npos)
      << err.str();
  std::ostringstream manifests_err;
  EXPECT_EQ(ctl::RunManifests(o, ctl::OutputFormat::kTable, out, manifests_err), ctl::kExitUnknown);
  EXPECT_NE(manifests_err.str().find("cannot reach nodelet"), std::string::npos)
      << manifests_err.str();
  EXPECT_NE(err.str().find("No such file or directory"), std::string::npos) << err.str();
}

TEST(CtlFormatTest, UptimeAndLastLines) {
  EXPECT_EQ(ctl::FormatUptime(62000), "0:01:02");
  EXPECT_EQ(ctl::FormatUptime((86400 + 3723) * 1000ull), "1 day, 1:02:03");
  testing::TempDir dir;
  std::ofstream(dir.Sub("log")) << "a\nb\nc\nd\n";
  EXPECT_EQ(ctl::LastLines(dir.Sub("log"), 2), "c\nd\n");
  EXPECT_EQ(ctl::LastLines(dir.Sub("log"), 10), "a\nb\nc\nd\n");
  EXPECT_EQ(ctl::LastLines(dir.Sub("missing"), 3), "");
}

TEST(CriLogTextTest, StripsPrefixesJoinsPartialLinesAndTails) {
  const std::string log =
      "2024-05-01T12:00:00.000000001Z stdout F first line\n"
      "2024-05-01T12:00:00.000000002Z stderr P part one, \n"
      "2024-05-01T12:00:00.000000003Z stderr F part two\n"
      "2024-05-01T12:00:00.000000004Z stdout F last\n";
  EXPECT_EQ(ctl::CriLogText(log, -1), "first line\npart one, part two\nlast\n");
  EXPECT_EQ(ctl::CriLogText(log, 1), "last\n");
  EXPECT_EQ(ctl::CriLogText("not cri\n", -1), "not cri\n");
}

}  // namespace
}  // namespace nodelet
