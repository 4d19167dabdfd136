// Integration tests of the real nodelet-statusd binary's API (the fixture is in
// statusd_fixture.h): the status API and watch stream over its sockets, concurrent writers, bad
// input, heartbeats (the test binds the control ROUTER itself), and `nodeletctl pods` on what was
// stored. Kill -9 during write bursts, corruption and a full disk are in
// statusd_durability_test.cc.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "control_generated.h"
#include "ctl/cli_output.h"
#include "ctl/pods_command.h"
#include "lib/ipc/endpoints.h"
#include "lib/status/status_client.h"
#include "lib/status/status_codec.h"
#include "tests/integration/statusd_fixture.h"
#include "tests/testing/fake_supervisor.h"

namespace nodelet::statusd {
namespace {

using namespace std::chrono_literals;
using nodelet::testing::FakeSupervisor;
namespace fb = ::nodelet::ipc::status;

TEST_F(StatusdTest, ServesTheStatusApiAndTheWatchStream) {
  auto statusd = Start();
  auto client = Client();
  status::StatusWatcher watcher(ctx_, run());
  ASSERT_TRUE(watcher.Connect().ok());
  // The subscriber joins asynchronously: write a probe until the watcher sees it.
  uint64_t probe_version = 0;
  for (int i = 0; i < 100; ++i) {
    auto r = client->SetPodStatus(Pod("probe"), Running("probe " + std::to_string(i)));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    probe_version = r->version;
    auto ev = watcher.Next(50ms);
    if (ev.ok()) break;
  }
  while (watcher.Next(50ms).ok()) {
  }

  auto set = client->SetPodStatus(Pod("u1", status::RestartPolicy::kNever), Running("hello"));
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->version, 1u);
  EXPECT_TRUE(set->changed);
  auto same = client->SetPodStatus(Pod("u1", status::RestartPolicy::kNever), Running("hello"));
  ASSERT_TRUE(same.ok());
  EXPECT_FALSE(same->changed);
  EXPECT_EQ(same->version, 1u);

  auto got = client->GetPodStatus("u1");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->version, 1u);
  EXPECT_EQ(got->status.message, "hello");
  EXPECT_EQ(got->pod.restart_policy, status::RestartPolicy::kNever);
  EXPECT_GT(got->status.conditions[0].last_transition_time_unix_s, 0);

  auto term = client->TerminatePod("u1");
  ASSERT_TRUE(term.ok()) << term.status().ToString();
  EXPECT_EQ(term->version, 2u);
  got = client->GetPodStatus("u1");
  EXPECT_EQ(got->status.phase, status::PodPhase::kFailed);
  ASSERT_TRUE(got->status.container_statuses[0].state.terminated.has_value());
  EXPECT_EQ(got->status.container_statuses[0].state.terminated->exit_code, 137);
  EXPECT_EQ(got->status.container_statuses[0].state.terminated->reason, "ContainerStatusUnknown");

  // The guards hold over the wire: Failed is final, and the reply says why.
  auto back = client->SetPodStatus(Pod("u1", status::RestartPolicy::kNever), Running("again"));
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(back.status().message().find("phase cannot go from Failed to Running"),
            std::string::npos)
      << back.status().message();

  auto list = client->ListPodStatuses();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->records.size(), 2u);
  EXPECT_EQ(list->records[0].pod.uid, "probe");
  EXPECT_EQ(list->records[1].pod.uid, "u1");

  auto removed = client->RemoveOrphanedStatuses({"u1"});
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, std::vector<std::string>{"probe"});
  auto gone = client->GetPodStatus("probe");
  EXPECT_EQ(gone.status().code(), StatusCode::kNotFound);

  // The watch stream saw every change, in order, without gaps.
  std::vector<status::WatchEvent> events;
  while (events.size() < 3) {
    auto ev = watcher.Next(2000ms);
    ASSERT_TRUE(ev.ok()) << ev.status().ToString();
    events.push_back(*ev);
  }
  EXPECT_EQ(events[0].record.pod.uid, "u1");
  EXPECT_EQ(events[0].record.version, 1u);
  EXPECT_EQ(events[1].record.version, 2u);
  EXPECT_EQ(events[1].record.status.phase, status::PodPhase::kFailed);
  EXPECT_EQ(events[2].kind, status::WatchEvent::Kind::kRemoved);
  EXPECT_EQ(events[2].record.pod.uid, "probe");
  EXPECT_EQ(events[2].record.version, probe_version);
  for (const auto& e : events) EXPECT_FALSE(e.gap);
  EXPECT_EQ(events[2].sequence, events[1].sequence + 1);
  // A list taken now is current at the last sequence published.
  auto after = client->ListPodStatuses();
  EXPECT_EQ(after->watch_sequence, events[2].sequence);
  EXPECT_EQ(after->watch_incarnation, events[2].incarnation);
}

TEST_F(StatusdTest, ConcurrentWritersForTheSamePods) {
  auto statusd = Start();
  constexpr int kWriters = 4;
  constexpr int kWritesEach = 150;
  constexpr int kPods = 5;
  struct Ack {
    std::string uid;
    uint64_t version;
    std::string message;
  };
  std::vector<std::vector<Ack>> acks(kWriters);
  std::vector<std::string> errors(kWriters);
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      status::StatusClient client(ctx_, run(), {ipc::ServiceId::Podworkerd, 2000ms, 10000ms});
      if (!client.Connect().ok()) return;
      for (int i = 0; i < kWritesEach; ++i) {
        std::string uid = "pod" + std::to_string((i + w) % kPods);
        std::string message = "writer " + std::to_string(w) + " write " + std::to_string(i);
        auto r = client.SetPodStatus(Pod(uid), Running(message));
        if (!r.ok()) {
          errors[w] = r.status().ToString();
          return;
        }
        if (!r->changed) {
          errors[w] = "a distinct status was reported unchanged";
          return;
        }
        acks[w].push_back({uid, r->version, message});
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int w = 0; w < kWriters; ++w) ASSERT_EQ(errors[w], "") << "writer " << w;

  std::map<std::string, std::map<uint64_t, std::string>> by_version;
  for (int w = 0; w < kWriters; ++w) {
    std::map<std::string, uint64_t> last;
    for (const auto& a : acks[w]) {
      // Each writer sees its own writes of a pod at strictly increasing versions.
      EXPECT_GT(a.version, last[a.uid]) << "writer " << w << " pod " << a.uid;
      last[a.uid] = a.version;
      // No two acknowledged writes share a version.
      EXPECT_TRUE(by_version[a.uid].emplace(a.version, a.message).second)
          << a.uid << " version " << a.version << " acknowledged twice";
    }
  }
  auto client = Client();
  for (const auto& [uid, versions] : by_version) {
    // Nothing lost: versions 1..N with no hole, and the last one is what is stored.
    EXPECT_EQ(versions.begin()->first, 1u);
    EXPECT_EQ(versions.rbegin()->first, versions.size()) << uid;
    auto got = client->GetPodStatus(uid);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got->version, versions.size());
    EXPECT_EQ(got->status.message, versions.rbegin()->second);
  }
  size_t total = 0;
  for (const auto& [uid, v] : by_version) total += v.size();
  EXPECT_EQ(total, static_cast<size_t>(kWriters * kWritesEach));
}

// A raw DEALER, to send what no client library would.
class RawClient {
 public:
  RawClient(ipc::Context& ctx, const std::string& run_dir) : dealer_(ctx, 64 << 20) {
    EXPECT_TRUE(dealer_.Connect(ipc::kStatusEndpoint.Uri(run_dir)).ok());
  }
  // Sends and waits for one reply.
  const fb::StatusMessage* Call(const void* data, size_t size) {
    zmq::pollitem_t item = dealer_.PollItem(ZMQ_POLLOUT);
    zmq::poll(&item, 1, std::chrono::milliseconds(5000));
    EXPECT_TRUE(dealer_.Send(data, size).ok());
    auto frame = dealer_.Receive(5000ms);
    if (!frame.ok()) {
      ADD_FAILURE() << "no reply: " << frame.status().ToString();
      return nullptr;
    }
    last_ = std::move(frame).value();
    auto m = status::DecodeStatusMessage(last_.data(), last_.size(), 64 << 20);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? *m : nullptr;
  }

 private:
  ipc::DealerClient dealer_;
  ipc::Frame last_;
};

void ExpectError(const fb::StatusMessage* m, uint64_t id, fb::ErrorCode code,
                 const std::string& needle) {
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(m->body_type(), fb::Body::ErrorReply);
  const auto* e = m->body_as_ErrorReply();
  EXPECT_EQ(e->request_id(), id);
  EXPECT_EQ(e->code(), code) << e->message()->str();
  EXPECT_NE(e->message()->str().find(needle), std::string::npos) << e->message()->str();
}

TEST_F(StatusdTest, BadInputGetsAClearErrorAndServiceKeepsServing) {
  auto statusd = Start();
  RawClient raw(ctx_, run());
  ipc::EnvelopeWriter env(ipc::ServiceId::Unknown, 7);
  auto client = Client();
  ASSERT_TRUE(client->SetPodStatus(Pod("known"), Running("x")).ok());

  std::string garbage = "\x01\x02garbage that is not a FlatBuffer at all";
  ExpectError(raw.Call(garbage.data(), garbage.size()), 0, fb::ErrorCode::InvalidArgument,
              "bad request: ");
  // The same bad request again: answered again, but logged only once.
  ExpectError(raw.Call(garbage.data(), garbage.size()), 0, fb::ErrorCode::InvalidArgument,
              "bad request: ");
  ASSERT_TRUE(client->GetPodStatus("known").ok());

  {
    flatbuffers::FlatBufferBuilder fbb;
    PodStatus s = Running("x");
    s.phase = static_cast<status::PodPhase>(42);
    auto p = status::WritePodIdentity(fbb, Pod("phase"));
    auto st = status::WritePodStatus(fbb, s);
    status::FinishStatusMessage(fbb, env, fb::Body::SetPodStatusRequest,
                                fb::CreateSetPodStatusRequest(fbb, 11, p, st).Union());
    ExpectError(raw.Call(fbb.GetBufferPointer(), fbb.GetSize()), 11, fb::ErrorCode::InvalidArgument,
                "unknown phase 42");
  }
  {
    flatbuffers::FlatBufferBuilder fbb;
    status::FinishStatusMessage(fbb, env, fb::Body::TerminatePodRequest,
                                fb::CreateTerminatePodRequestDirect(fbb, 12, "ghost").Union());
    ExpectError(raw.Call(fbb.GetBufferPointer(), fbb.GetSize()), 12, fb::ErrorCode::NotFound,
                "no status for pod uid 'ghost'");
  }
  {
    flatbuffers::FlatBufferBuilder fbb;
    status::FinishStatusMessage(fbb, env, fb::Body::GetPodStatusRequest,
                                fb::CreateGetPodStatusRequestDirect(fbb, 13, "ghost").Union());
    ExpectError(raw.Call(fbb.GetBufferPointer(), fbb.GetSize()), 13, fb::ErrorCode::NotFound,
                "no status for pod uid 'ghost'");
  }
  {
    flatbuffers::FlatBufferBuilder fbb;
    auto p = status::WritePodIdentity(fbb, Pod("huge"));
    auto st = status::WritePodStatus(fbb, Running(std::string(3 << 20, 'x')));
    status::FinishStatusMessage(fbb, env, fb::Body::SetPodStatusRequest,
                                fb::CreateSetPodStatusRequest(fbb, 14, p, st).Union());
    ExpectError(raw.Call(fbb.GetBufferPointer(), fbb.GetSize()), 0,
                fb::ErrorCode::ResourceExhausted, "exceeds the limit of 1048576");
  }
  // Still serving, still the same process.
  auto after = client->SetPodStatus(Pod("known"), Running("y"));
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->version, 2u);
  EXPECT_EQ(client->GetPodStatus("huge").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(statusd->process().running());
  const std::string log = Log();
  size_t logged = 0;
  for (size_t at = log.find("Refused a request: INVALID_ARGUMENT: bad request");
       at != std::string::npos;
       at = log.find("Refused a request: INVALID_ARGUMENT: bad request", at + 1)) {
    ++logged;
  }
  EXPECT_EQ(logged, 1u) << log;
  EXPECT_NE(log.find("unknown phase 42"), std::string::npos) << log;
}

// Health goes with every heartbeat, the counters with the first after a hello and then with
// every fifth (lib/service/service_runtime.cc), and again right after the supervisor asks for a
// hello (a restarted supervisor has none of them).
TEST_F(StatusdTest, HeartbeatsCarryTheCountersEveryFifthTimeAndAfterEachHello) {
  FakeSupervisor supervisor(ctx_, run());
  auto statusd = Start();
  ASSERT_TRUE(statusd->ready());
  // (The first beats after the start may go before the connection is up: ZMQ_IMMEDIATE.)
  std::vector<size_t> with;
  std::string peer;
  for (size_t i = 0; i < 16; ++i) {
    auto beat = supervisor.NextHeartbeat(5000ms);
    ASSERT_TRUE(beat.has_value()) << "no heartbeat; log:\n" << Log();
    EXPECT_EQ(beat->health, ipc::control::Health::Ok);
    if (beat->has_counters) {
      EXPECT_GT(beat->counters, 0u);
      with.push_back(i);
    }
    peer = beat->peer;
  }
  ASSERT_GE(with.size(), 2u) << "at most one of 16 heartbeats had the counters";
  for (size_t k = 1; k < with.size(); ++k) {
    EXPECT_EQ(with[k] - with[k - 1], 5u) << "beats " << with[k - 1] << " and " << with[k];
  }
  // Asked for a hello right after a beat with the counters, when the next four would carry
  // none: one of the next two does (the first may have been on its way).
  for (bool had = false; !had;) {
    auto beat = supervisor.NextHeartbeat(5000ms);
    ASSERT_TRUE(beat.has_value());
    had = beat->has_counters;
  }
  ASSERT_TRUE(supervisor.AskHello(peer));
  bool counters_soon = false;
  for (int i = 0; i < 2 && !counters_soon; ++i) {
    auto beat = supervisor.NextHeartbeat(5000ms);
    ASSERT_TRUE(beat.has_value());
    counters_soon = beat->has_counters;
  }
  EXPECT_TRUE(counters_soon) << "the counters did not follow the hello";
}

TEST_F(StatusdTest, NodeletctlPodsListsWhatWasStored) {
  ctl::PodsOptions o;
  o.run_dir = run();
  o.timeout = 1500ms;
  {
    // statusd not running: a clear error, within the timeout, and exit 4 (unknown).
    std::ostringstream out, err;
    EXPECT_EQ(ctl::RunPods(o, out, err), ctl::kExitUnknown);
    EXPECT_NE(err.str().find("failed to list pods"), std::string::npos) << err.str();
    EXPECT_NE(err.str().find("is it running?"), std::string::npos) << err.str();
  }
  auto statusd = Start();
  auto client = Client();
  PodIdentity web = Pod("uid-web");
  web.name = "web";
  PodIdentity job = Pod("uid-job", status::RestartPolicy::kNever);
  job.name = "job";
  job.namespace_ = "batch";
  ASSERT_TRUE(client->SetPodStatus(web, Running("serving")).ok());
  PodStatus done = Running("done");
  done.phase = status::PodPhase::kSucceeded;
  done.container_statuses[0].state = status::ContainerState{};
  done.container_statuses[0].state.terminated =
      status::ContainerStateTerminated{0, 0, "Completed", "", 1, 2, ""};
  done.container_statuses[0].ready = false;
  ASSERT_TRUE(client->SetPodStatus(job, done).ok());

  std::ostringstream out, err;
  ASSERT_EQ(ctl::RunPods(o, out, err), 0) << err.str();
  EXPECT_NE(out.str().find("NAME   READY   STATUS      RESTARTS   AGE"), std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("job    0/1     Completed   0"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("web    1/1     Running     0"), std::string::npos) << out.str();
  // Every namespace by default, NAMESPACE first (kubectl -A); -n drops the column.
  EXPECT_EQ(out.str().rfind("NAMESPACE   NAME", 0), 0u) << out.str();
  EXPECT_NE(out.str().find("\nbatch       job "), std::string::npos) << out.str();
  o.namespace_ = "batch";
  std::ostringstream one_out, one_err;
  ASSERT_EQ(ctl::RunPods(o, one_out, one_err), 0) << one_err.str();
  EXPECT_EQ(one_out.str().rfind("NAME   READY", 0), 0u) << one_out.str();
  EXPECT_EQ(one_out.str().find("web"), std::string::npos) << one_out.str();
  o.namespace_.clear();
  o.output = "name";
  std::ostringstream names_out, names_err;
  ASSERT_EQ(ctl::RunPods(o, names_out, names_err), 0) << names_err.str();
  EXPECT_EQ(names_out.str(), "pod/job\npod/web\n");

  o.output = "json";
  std::ostringstream json_out, json_err;
  ASSERT_EQ(ctl::RunPods(o, json_out, json_err), 0) << json_err.str();
  auto list = nlohmann::json::parse(json_out.str());
  EXPECT_EQ(list["kind"], "PodList");
  ASSERT_EQ(list["items"].size(), 2u);
  EXPECT_EQ(list["items"][0]["metadata"]["namespace"], "batch");
  EXPECT_EQ(list["items"][0]["status"]["phase"], "Succeeded");
  EXPECT_EQ(list["items"][1]["metadata"]["uid"], "uid-web");
  EXPECT_EQ(list["items"][1]["status"]["message"], "serving");

  o.output.clear();
  std::ostringstream pod_out, pod_err;
  ASSERT_EQ(ctl::RunPod(o, "batch/job", pod_out, pod_err), 0) << pod_err.str();
  std::ostringstream by_name_out, by_name_err;
  o.output = "name";
  EXPECT_EQ(ctl::RunPod(o, "pod/job", by_name_out, by_name_err), 0) << by_name_err.str();
  EXPECT_EQ(by_name_out.str(), "pod/job\n");
  o.output.clear();
  EXPECT_NE(pod_out.str().find("Namespace:        batch"), std::string::npos) << pod_out.str();
  EXPECT_NE(pod_out.str().find("Restart Policy:   Never"), std::string::npos) << pod_out.str();
  EXPECT_NE(pod_out.str().find("Conditions:"), std::string::npos) << pod_out.str();
  std::ostringstream none_out, none_err;
  EXPECT_EQ(ctl::RunPod(o, "nothing", none_out, none_err), ctl::kExitUnknown);
  EXPECT_NE(none_err.str().find("no pod 'nothing' (statusd has 2 pods)"), std::string::npos)
      << none_err.str();
}
}  // namespace
}  // namespace nodelet::statusd
