// Integration tests of the real nodelet-statusd binary: the status API and watch stream over
// its sockets, concurrent writers, kill -9 in the middle of write bursts, bad input, and a full
// disk. statusd runs without a supervisor (its control DEALER just waits); where a test needs
// heartbeats, it binds the control ROUTER itself.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/inotify.h>
#include <sys/mount.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "control_generated.h"
#include "ctl/cli_output.h"
#include "ctl/pods_command.h"
#include "lib/ipc/endpoints.h"
#include "lib/status/status_client.h"
#include "lib/status/status_codec.h"
#include "tests/testing/fake_supervisor.h"
#include "tests/testing/harness.h"

namespace nodelet::statusd {
namespace {

using namespace std::chrono_literals;
using nodelet::testing::BinDir;
using nodelet::testing::FakeSupervisor;
using nodelet::testing::NotifyListener;
using nodelet::testing::Subprocess;
using nodelet::testing::TempDir;
using status::PodIdentity;
using status::PodStatus;
using status::PodStatusRecord;
namespace fb = ::nodelet::ipc::status;

PodIdentity Pod(const std::string& uid,
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

PodStatus Running(const std::string& message) {
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

// Reads a pod's stored row straight from the database file.
struct StoredRow {
  uint64_t version = 0;
  std::string message;
};

class Database {
 public:
  explicit Database(const std::string& path) {
    rc_ = sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE, nullptr);
  }
  ~Database() { sqlite3_close_v2(db_); }
  bool ok() const { return rc_ == SQLITE_OK; }
  int Exec(const char* sql) { return sqlite3_exec(db_, sql, nullptr, nullptr, nullptr); }
  std::string IntegrityCheck() {
    std::string out;
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db_, "PRAGMA integrity_check", -1, &st, nullptr) != SQLITE_OK) {
      return sqlite3_errmsg(db_);
    }
    while (sqlite3_step(st) == SQLITE_ROW)
      out += reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return out;
  }
  std::map<std::string, StoredRow> Rows() {
    std::map<std::string, StoredRow> rows;
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db_, "SELECT uid, version, record FROM pod_status", -1, &st, nullptr);
    while (sqlite3_step(st) == SQLITE_ROW) {
      std::string uid = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
      auto rec = status::DecodeRecordBlob(sqlite3_column_blob(st, 2),
                                          static_cast<size_t>(sqlite3_column_bytes(st, 2)));
      rows[uid] = {static_cast<uint64_t>(sqlite3_column_int64(st, 1)),
                   rec.ok() ? rec->status.message : "<unreadable: " + rec.status().message() + ">"};
    }
    sqlite3_finalize(st);
    return rows;
  }

 private:
  sqlite3* db_ = nullptr;
  int rc_ = SQLITE_ERROR;
};

TEST_F(StatusdTest, KillNineDuringWriteBurstsLosesNothingAcknowledged) {
  constexpr int kRounds = 50;
  constexpr int kPods = 8;
  constexpr int kWindow = 16;
  std::mt19937 rng(20240601);
  // The latest acknowledged (version, message) of each pod over all rounds.
  std::map<std::string, StoredRow> acked;
  int total_acks = 0;
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    auto statusd = Start();
    ASSERT_TRUE(statusd->ready());
    status::PipelinedStatusClient client(ctx_, run(), ipc::ServiceId::Podworkerd);
    ASSERT_TRUE(client.Connect().ok());
    // Kill after a random number of acknowledgements, with requests still in flight.
    const int kill_after = 1 + static_cast<int>(rng() % 40);
    std::map<uint64_t, std::pair<std::string, std::string>> in_flight;  // id -> (uid, message)
    int sent = 0, acks = 0;
    while (acks < kill_after) {
      while (in_flight.size() < kWindow) {
        std::string uid = "p" + std::to_string(rng() % kPods);
        std::string message = "round " + std::to_string(round) + " write " + std::to_string(sent++);
        auto id = client.SendSetPodStatus(Pod(uid), Running(message), 5000ms);
        ASSERT_TRUE(id.ok()) << id.status().ToString();
        in_flight[*id] = {uid, message};
      }
      auto reply = client.Receive(5000ms);
      ASSERT_TRUE(reply.ok()) << reply.status().ToString();
      ASSERT_TRUE(reply->status.ok()) << reply->status.ToString();
      auto it = in_flight.find(reply->request_id);
      ASSERT_NE(it, in_flight.end());
      const auto& [uid, message] = it->second;
      ASSERT_TRUE(reply->result.changed);
      // Versions keep increasing, also across kills.
      ASSERT_GT(reply->result.version, acked[uid].version) << uid;
      acked[uid] = {reply->result.version, message};
      in_flight.erase(it);
      ++acks;
      ++total_acks;
    }
    statusd->Kill9();
    ASSERT_FALSE(statusd->process().running());

    Database db(this->db());
    ASSERT_TRUE(db.ok());
    ASSERT_EQ(db.IntegrityCheck(), "ok");
    auto rows = db.Rows();
    for (const auto& [uid, want] : acked) {
      if (want.version == 0) continue;
      ASSERT_TRUE(rows.count(uid))
          << uid << " acknowledged at version " << want.version << " is missing";
      const StoredRow& got = rows[uid];
      // A later write may have been committed but not acknowledged before the kill.
      ASSERT_GE(got.version, want.version) << uid;
      if (got.version == want.version) {
        EXPECT_EQ(got.message, want.message) << uid;
      }
      acked[uid] = got;  // what the next round must go above
    }
  }
  EXPECT_GE(total_acks, kRounds);
}

// The database is damaged while statusd runs (every page after the first overwritten, as a
// failing disk or a stray writer would): the periodic PRAGMA quick_check finds it, statusd moves
// the file aside as it does at start-up, writes every status it holds into a fresh file with the
// same versions, and keeps serving; a restart then loads them from the fresh file.
TEST_F(StatusdTest, CorruptionFoundWhileRunningIsRecoveredWithEveryStatus) {
  auto statusd = Start("", {"--db-check-period", "200ms"});
  auto client = Client();
  std::map<std::string, uint64_t> versions;
  for (int i = 0; i < 20; ++i) {
    const std::string uid = "uid-" + std::to_string(i);
    auto r = client->SetPodStatus(Pod(uid), Running("message " + std::to_string(i)));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    versions[uid] = r->version;
  }
  {
    // Everything into the main file, then every page but the first overwritten; a write of
    // page 1 through the WAL makes statusd's connection drop its page cache.
    Database db(this->db());
    ASSERT_TRUE(db.ok());
    ASSERT_EQ(db.Exec("PRAGMA wal_checkpoint(TRUNCATE)"), SQLITE_OK);
    const auto size = std::filesystem::file_size(this->db());
    ASSERT_GT(size, 4096u);
    int fd = open(this->db().c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    const std::string junk(size - 4096, '\xa5');
    ASSERT_EQ(pwrite(fd, junk.data(), junk.size(), 4096), static_cast<ssize_t>(junk.size()));
    close(fd);
    ASSERT_EQ(db.Exec("PRAGMA user_version=7"), SQLITE_OK);
  }
  auto moved_aside = [&] {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(root() + "/statusd", ec)) {
      if (e.path().filename().string().rfind("status.db.corrupt-", 0) == 0) return true;
    }
    return false;
  };
  // Woken by the rename into the directory (inotify), within a deadline.
  int watch = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  ASSERT_GE(watch, 0);
  inotify_add_watch(watch, (root() + "/statusd").c_str(), IN_MOVED_TO | IN_CREATE);
  const auto end = std::chrono::steady_clock::now() + 10s;
  while (!moved_aside() && std::chrono::steady_clock::now() < end) {
    pollfd p{watch, POLLIN, 0};
    if (poll(&p, 1, 200) > 0) {
      char buf[4096];
      while (read(watch, buf, sizeof buf) > 0) {
      }
    }
  }
  close(watch);
  ASSERT_TRUE(moved_aside()) << Log();
  EXPECT_NE(Log().find("failed its periodic check"), std::string::npos) << Log();

  // Served from memory, and in the fresh file with the same versions.
  for (const auto& [uid, version] : versions) {
    auto got = client->GetPodStatus(uid);
    ASSERT_TRUE(got.ok()) << uid << ": " << got.status().ToString();
    EXPECT_EQ(got->version, version) << uid;
  }
  // New writes work and go above.
  auto more = client->SetPodStatus(Pod("uid-0"), Running("after"));
  ASSERT_TRUE(more.ok()) << more.status().ToString();
  EXPECT_GT(more->version, versions["uid-0"]);
  statusd->Kill9();
  {
    Database db(this->db());
    ASSERT_TRUE(db.ok());
    EXPECT_EQ(db.IntegrityCheck(), "ok");
    auto rows = db.Rows();
    EXPECT_EQ(rows.size(), versions.size());
    for (const auto& [uid, version] : versions) {
      EXPECT_EQ(rows[uid].version, uid == "uid-0" ? more->version : version) << uid;
    }
  }
  auto again = Start();
  auto client2 = Client();
  auto back = client2->GetPodStatus("uid-19");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->version, versions["uid-19"]);
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

// A tmpfs mounted for the life of the object; unmounted (lazily, so it never fails because of a
// straggler) on destruction, also when the test fails.
class TmpfsMount {
 public:
  TmpfsMount(const std::string& path, const std::string& size) : path_(path) {
    std::filesystem::create_directories(path);
    std::string opts = "size=" + size + ",mode=0700";
    if (mount("tmpfs", path.c_str(), "tmpfs", 0, opts.c_str()) == 0) {
      mounted_ = true;
    } else {
      error_ = strerror(errno);
    }
  }
  ~TmpfsMount() {
    if (mounted_) umount2(path_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }

 private:
  std::string path_;
  bool mounted_ = false;
  std::string error_;
};

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

TEST_F(StatusdTest, FullDiskFailsWritesClearlyAndRecoversWithoutRestart) {
  if (geteuid() != 0) GTEST_SKIP() << "mounting a tmpfs needs root";
  const std::string small_root = dir_.Sub("small-root");
  TmpfsMount tmpfs(small_root, "2m");
  if (!tmpfs.mounted()) GTEST_SKIP() << "cannot mount a tmpfs: " << tmpfs.error();
  FakeSupervisor supervisor(ctx_, run());
  auto statusd = Start(small_root);
  ASSERT_TRUE(statusd->ready());
  const pid_t pid = statusd->process().pid();
  auto client = Client();
  ASSERT_TRUE(client->SetPodStatus(Pod("before"), Running("small")).ok());
  ASSERT_TRUE(supervisor.WaitForHealth(ipc::control::Health::Ok, 5000ms).has_value());

  // Fill the disk.
  const std::string filler = small_root + "/filler";
  {
    FILE* f = fopen(filler.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::string chunk(4096, 'f');
    while (fwrite(chunk.data(), 1, chunk.size(), f) == chunk.size() && fflush(f) == 0) {
    }
    fclose(f);
  }
  // A write that needs new space fails with a clear error.
  Status failure;
  for (int i = 0; i < 20 && failure.ok(); ++i) {
    auto r = client->SetPodStatus(Pod("big" + std::to_string(i)),
                                  Running(std::string(200 << 10, 'a' + i % 26)));
    if (!r.ok()) failure = r.status();
  }
  ASSERT_FALSE(failure.ok()) << "writes kept succeeding on a full disk";
  EXPECT_EQ(failure.code(), StatusCode::kResourceExhausted) << failure.ToString();
  EXPECT_NE(failure.message().find("disk is full"), std::string::npos) << failure.ToString();
  EXPECT_NE(failure.message().find("status.db"), std::string::npos) << failure.ToString();
  auto degraded = supervisor.WaitForHealth(ipc::control::Health::Degraded, 5000ms);
  ASSERT_TRUE(degraded.has_value())
      << "health did not degrade; last reason: " << supervisor.last_reason();
  EXPECT_NE(degraded->find("store writes failing"), std::string::npos) << *degraded;
  // Reads keep working meanwhile.
  auto before = client->GetPodStatus("before");
  ASSERT_TRUE(before.ok());
  EXPECT_EQ(before->status.message, "small");

  // Space returns: the next write works, health recovers, same process.
  ASSERT_EQ(unlink(filler.c_str()), 0);
  auto r = client->SetPodStatus(Pod("after"), Running(std::string(200 << 10, 'z')));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->version, 1u);
  EXPECT_TRUE(supervisor.WaitForHealth(ipc::control::Health::Ok, 5000ms).has_value());
  EXPECT_TRUE(statusd->process().running());
  EXPECT_EQ(statusd->process().pid(), pid);
  auto after = client->GetPodStatus("after");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->status.message.size(), size_t{200 << 10});
  statusd.reset();
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
