// The byte budgets of nodelet's channels as production builds them (lib/ipc/channel_limits.h,
// docs/security.md section 9), over real ZeroMQ sockets in a temp dir:
//   - plegd's events: a subscriber that stops reading holds at most the two queues' marks of
//     events; a PlegMirror that stalled through a flood sees the gap, takes a snapshot and holds
//     every pod again; a 50-pod relist fits in the queues with no gap at all;
//   - podworkerd's work channel (ROUTER/DEALER): a podworkerd that stops reading pushes back on
//     the supervisor's DEALER within the marks, everything accepted arrives, and sending resumes;
//   - a ROUTER whose replies vary in size (statusd's ListPodStatuses) holds at most its byte
//     budget per peer, counted exactly, and sends again once the peer reads.
// Counts of frames are asserted, not RSS, so the tests hold under the sanitizers too.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "lib/ipc/channel_limits.h"
#include "lib/ipc/endpoints.h"
#include "lib/ipc/sockets.h"
#include "lib/pleg/pleg_mirror.h"
#include "pleg_generated.h"
#include "tests/testing/harness.h"

namespace nodelet::ipc {
namespace {

using namespace std::chrono_literals;
using pleg::Body;

// What the kernel's socket buffer (208 KiB for a unix socket here) and ZeroMQ's batching may
// hold on top of the two high-water marks, in frames of `size` bytes.
int KernelSlack(size_t size) { return static_cast<int>(256 * kKiB / size) + 2; }

TEST(ChannelLimitsTest, EveryMarkFitsItsBudgetAndItsTraffic) {
  for (const QueueLimits& q :
       {kPlegEvents, kPlegSnapshots.requests, kPlegSnapshots.replies, kVolumeEvents,
        kPodWorkChannel.requests, kPodWorkChannel.replies, kVolumeChannel.requests,
        kVolumeChannel.replies, kControlChannel.requests, kControlChannel.replies,
        kCtlChannel.requests, kCtlChannel.replies}) {
    EXPECT_GE(q.hwm(), 1);
    EXPECT_LE(static_cast<size_t>(q.hwm()) * q.max_message_bytes, q.budget_bytes);
  }
  // A relist that changes every pod of a full node (110 pods and its RelistDone) fits in one
  // side's queue: relists do not turn into gaps.
  EXPECT_GE(kPlegEvents.hwm(), 2 * 111);
  // A mirror has one snapshot request out at a time.
  EXPECT_GE(kPlegSnapshots.replies.hwm(), 1);
  // The ctl socket's request limit is what it always was (docs/supervisor.md).
  EXPECT_EQ(kCtlChannel.requests.max_message_bytes, 64 * kKiB);
}

// A stand-in for plegd: its PUB and snapshot ROUTER built as plegd builds them, its cache a map.
class FakePlegd {
 public:
  FakePlegd(Context& ctx, const std::string& run_dir)
      : pub_(ctx, kPlegEvents), snapshots_(ctx, kPlegSnapshots) {
    EXPECT_TRUE(pub_.Bind(kPlegEventsEndpoint.Uri(run_dir)).ok());
    EXPECT_TRUE(snapshots_.Bind(kPlegSnapshotEndpoint.Uri(run_dir)).ok());
  }

  // A pod as plegd reports a small real one: a sandbox and two containers.
  static pleg::PodRecordT Pod(int i, uint64_t relist) {
    pleg::PodRecordT rec;
    rec.uid = "0f5c2a9e-7b1d-4c3e-9a8f-" + std::to_string(100000000000 + i);
    rec.name = "web-" + std::to_string(i);
    rec.namespace_ = "default";
    rec.relist = relist;
    auto sandbox = std::make_unique<pleg::SandboxRecordT>();
    sandbox->id = std::string(64, 'a');
    sandbox->ip = "10.88.0." + std::to_string(i % 250);
    rec.sandboxes.push_back(std::move(sandbox));
    for (const char* name : {"app", "sidecar"}) {
      auto c = std::make_unique<pleg::ContainerRecordT>();
      c->id = std::string(64, 'c');
      c->name = name;
      c->state = pleg::ContainerState::Running;
      c->image = "registry.example.com/team/app:1.2.3";
      c->image_ref = "sha256:" + std::string(64, 'e');
      c->sandbox_id = std::string(64, 'a');
      c->log_path = "/var/log/pods/default_web_" + rec.uid + "/" + name + "/0.log";
      rec.containers.push_back(std::move(c));
    }
    return rec;
  }

  // Publishes a PodUpdate for pod `i` (and keeps it in the cache); returns its size.
  size_t PublishPod(int i) {
    pleg::PodRecordT rec = Pod(i, relist_ + 1);
    flatbuffers::FlatBufferBuilder fbb(2048);
    auto pod = pleg::PodRecord::Pack(fbb, &rec);
    std::vector<flatbuffers::Offset<pleg::Event>> events = {
        pleg::CreateEventDirect(fbb, rec.uid.c_str(), pleg::EventType::ContainerStarted,
                                rec.containers[0]->id.c_str(), "app", 0)};
    auto update = pleg::CreatePodUpdate(fbb, pod, fbb.CreateVector(events));
    // Not `cache_[rec.uid] = std::move(rec)`: the generated operator= takes its argument by
    // value, built (moving rec.uid away) before the key is read.
    std::string uid = rec.uid;
    cache_[uid] = std::move(rec);
    return Publish(fbb, Body::PodUpdate, update.Union());
  }

  size_t PublishRelistDone() {
    ++relist_;
    flatbuffers::FlatBufferBuilder fbb(256);
    auto done = pleg::CreateRelistDoneDirect(fbb, relist_, 1000, 0, 0, 1, "");
    return Publish(fbb, Body::RelistDone, done.Union());
  }

  // Answers the snapshot requests that came, for up to `wait`.
  void ServeSnapshots(std::chrono::milliseconds wait) {
    auto in = snapshots_.Receive(wait);
    while (in.ok()) {
      auto msg = DecodeMessage<pleg::PlegMessage>(in->payload.data(), in->payload.size(),
                                                  pleg::PlegMessageIdentifier());
      if (msg.ok() && (*msg)->body_as_SnapshotRequest() != nullptr) {
        flatbuffers::FlatBufferBuilder fbb(64 * 1024);
        std::vector<flatbuffers::Offset<pleg::PodRecord>> pods;
        for (const auto& [_, rec] : cache_) pods.push_back(pleg::PodRecord::Pack(fbb, &rec));
        EnvelopeWriter reply_writer(ServiceId::Plegd, envelope_.incarnation());
        auto snap = pleg::CreateSnapshot(fbb, (*msg)->body_as_SnapshotRequest()->request_id(),
                                         envelope_.last_sequence(), envelope_.incarnation(),
                                         relist_, fbb.CreateVector(pods));
        auto header = reply_writer.Write(fbb);
        fbb.Finish(pleg::CreatePlegMessage(fbb, header, Body::Snapshot, snap.Union()),
                   pleg::PlegMessageIdentifier());
        EXPECT_TRUE(snapshots_.Send(in->peer, fbb.GetBufferPointer(), fbb.GetSize()).ok());
      }
      in = snapshots_.Receive(0ms);
    }
  }

  Publisher& pub() { return pub_; }
  uint64_t relist() const { return relist_; }

 private:
  size_t Publish(flatbuffers::FlatBufferBuilder& fbb, Body type, flatbuffers::Offset<void> body) {
    auto header = envelope_.Write(fbb);
    fbb.Finish(pleg::CreatePlegMessage(fbb, header, type, body), pleg::PlegMessageIdentifier());
    EXPECT_TRUE(pub_.Publish(fbb.GetBufferPointer(), fbb.GetSize()).ok());
    return fbb.GetSize();
  }

  Publisher pub_;
  RouterServer snapshots_;
  EnvelopeWriter envelope_{ServiceId::Plegd, NewIncarnation()};
  std::map<std::string, pleg::PodRecordT> cache_;
  uint64_t relist_ = 0;
};

// Serves the fake plegd while the mirror works on its loop, until `done` or the deadline.
template <typename Done>
bool Pump(FakePlegd& plegd, EventLoop& loop, std::chrono::seconds deadline, Done done) {
  const auto end = std::chrono::steady_clock::now() + deadline;
  while (std::chrono::steady_clock::now() < end) {
    if (!loop.RunOnce(0ms).ok()) return false;
    if (done()) return true;
    plegd.ServeSnapshots(10ms);
  }
  return false;
}

class PlegChannelBudgetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(mirror_.Connect(loop_).ok());
    ASSERT_TRUE(raw_.Connect(kPlegEventsEndpoint.Uri(dir_.path())).ok());
    // In sync with a plegd that has relisted, and both subscriptions through: RelistDone until
    // the mirror and the raw subscriber have each seen one.
    bool raw_joined = false;
    ASSERT_TRUE(Pump(plegd_, loop_, 10s, [&] {
      if (!mirror_.in_sync()) return false;
      if (mirror_.relist() > 0 && raw_joined) return true;
      plegd_.PublishRelistDone();
      raw_joined = raw_joined || raw_.Receive(20ms).ok();
      return false;
    }));
    // Settled: in sync at plegd's last relist, nothing left in the raw subscriber's queue.
    while (raw_.Receive(50ms).ok()) {
    }
    ASSERT_TRUE(Pump(plegd_, loop_, 10s,
                     [&] { return mirror_.in_sync() && mirror_.relist() == plegd_.relist(); }));
  }

  testing::TempDir dir_;
  Context ctx_;
  FakePlegd plegd_{ctx_, dir_.path()};
  EventLoop loop_{RealClock::Get()};
  ::nodelet::pleg::PlegMirror mirror_{ctx_, RealClock::Get(), dir_.path(), ServiceId::Ctl};
  Subscriber raw_{ctx_, kPlegEvents};
};

TEST_F(PlegChannelBudgetTest, StalledSubscriberHoldsAtMostTheMarksAndTheMirrorResyncs) {
  EXPECT_EQ(plegd_.pub().SendHwm(), kPlegEvents.hwm());
  EXPECT_EQ(raw_.ReceiveHwm(), kPlegEvents.hwm());
  const uint64_t gaps = mirror_.gaps();
  const uint64_t snapshots = mirror_.snapshots();
  // Neither the mirror nor the raw subscriber reads while plegd publishes 8 times the mark.
  const int published = 8 * kPlegEvents.hwm();
  size_t largest = 0;
  for (int i = 0; i < published; ++i) largest = std::max(largest, plegd_.PublishPod(i));
  plegd_.PublishRelistDone();
  // Let the I/O threads move what they will into the subscribers' queues.
  const auto settle = std::chrono::steady_clock::now() + 300ms;
  while (std::chrono::steady_clock::now() < settle) (void)raw_.Readable();

  int received = 0;
  while (raw_.Receive(300ms).ok()) ++received;
  // At least one side's mark (nothing is dropped below it), at most both marks and what the
  // kernel holds: the queues held at most 2 x 256 MiB however much was published.
  EXPECT_GE(received, kPlegEvents.hwm());
  EXPECT_LE(received, 2 * kPlegEvents.hwm() + KernelSlack(largest)) << "of " << published;
  EXPECT_LT(received, published + 1);

  // The mirror reads what its queues held. The drops show at the next message that gets through
  // (plegd publishes a RelistDone every relist period, 1 s; here every 100 ms): the mirror sees
  // the gap and takes a snapshot, which holds every pod.
  ASSERT_TRUE(loop_.RunOnce(0ms).ok());
  EXPECT_LT(mirror_.pods().size(), static_cast<size_t>(published));
  auto next_relist = std::chrono::steady_clock::now();
  ASSERT_TRUE(Pump(plegd_, loop_, 10s,
                   [&] {
                     if (mirror_.in_sync() &&
                         mirror_.pods().size() == static_cast<size_t>(published))
                       return true;
                     if (std::chrono::steady_clock::now() >= next_relist) {
                       plegd_.PublishRelistDone();
                       next_relist = std::chrono::steady_clock::now() + 100ms;
                     }
                     return false;
                   }))
      << "pods " << mirror_.pods().size() << " in_sync " << mirror_.in_sync() << " gaps "
      << mirror_.gaps() << " snapshots " << mirror_.snapshots();
  EXPECT_EQ(mirror_.gaps(), gaps + 1);
  EXPECT_EQ(mirror_.snapshots(), snapshots + 1);
  EXPECT_TRUE(mirror_.ready());

  // The channel goes on: the next update is applied without another snapshot.
  plegd_.PublishPod(published);
  ASSERT_TRUE(Pump(plegd_, loop_, 10s,
                   [&] { return mirror_.pods().size() == static_cast<size_t>(published + 1); }));
  EXPECT_EQ(mirror_.snapshots(), snapshots + 1);
}

TEST_F(PlegChannelBudgetTest, FiftyPodRelistFitsWithoutAGapWhileTheMirrorIsBusy) {
  const uint64_t gaps = mirror_.gaps();
  const uint64_t snapshots = mirror_.snapshots();
  size_t largest = 0;
  for (int i = 0; i < 50; ++i) largest = std::max(largest, plegd_.PublishPod(i));
  plegd_.PublishRelistDone();
  // A PodUpdate is a few KiB, far below the 1 MiB cap the mark is computed from.
  EXPECT_LT(largest, 4 * kKiB);
  ASSERT_TRUE(Pump(plegd_, loop_, 10s, [&] { return mirror_.pods().size() == 50; }));
  EXPECT_EQ(mirror_.gaps(), gaps);
  EXPECT_EQ(mirror_.snapshots(), snapshots);
}

TEST_F(PlegChannelBudgetTest, EventOverTheCapIsRefusedAndPublishingGoesOn) {
  const std::string big(kPlegEvents.max_message_bytes + 1, 'x');
  Status over = plegd_.pub().Publish(big.data(), big.size());
  EXPECT_EQ(over.code(), StatusCode::kResourceExhausted) << over.ToString();
  plegd_.PublishPod(1);
  ASSERT_TRUE(Pump(plegd_, loop_, 10s, [&] { return mirror_.pods().size() == 1; }));
}

TEST(WorkChannelBudgetTest, StalledPodworkerdPushesBackWithinTheMarksAndRecovers) {
  testing::TempDir dir;
  const std::string uri = kPodWorkerEndpoint.Uri(dir.path());
  Context ctx;
  RouterServer podworkerd(ctx, kPodWorkChannel);
  EXPECT_EQ(podworkerd.ReceiveHwm(), kPodWorkChannel.requests.hwm());
  EXPECT_EQ(podworkerd.SendHwm(), kPodWorkChannel.replies.hwm());
  ASSERT_TRUE(podworkerd.Bind(uri).ok());
  DealerClient supervisor(ctx, kPodWorkChannel);
  EXPECT_EQ(supervisor.ReceiveHwm(), kPodWorkChannel.replies.hwm());
  EXPECT_EQ(supervisor.SendHwm(), kPodWorkChannel.requests.hwm());
  ASSERT_TRUE(supervisor.Connect(uri).ok());
  ASSERT_TRUE(supervisor.WaitWritable(5s));

  // Desired sets of 4 MiB (a large node's) while podworkerd does not read.
  const std::string desired(4 * kMiB, 'd');
  int sent = 0;
  Status refused;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline && sent < 100) {
    Status s = supervisor.Send(desired.data(), desired.size());
    if (!s.ok()) {
      // The queues may still be moving: refused only once nothing moves for a while.
      if (supervisor.WaitWritable(200ms)) continue;
      refused = s;
      break;
    }
    ++sent;
  }
  EXPECT_EQ(refused.code(), StatusCode::kUnavailable) << "sent " << sent;
  EXPECT_LE(sent, 2 * kPodWorkChannel.requests.hwm() + KernelSlack(desired.size()))
      << "more queued than the two marks";

  // A desired set over the channel's limit is refused before anything is queued.
  const std::string huge(kPodWorkChannel.requests.max_message_bytes + 1, 'h');
  EXPECT_EQ(supervisor.Send(huge.data(), huge.size()).code(), StatusCode::kResourceExhausted);

  // podworkerd reads: everything accepted arrives, in order, and the supervisor sends again.
  std::string peer;
  for (int got = 0; got < sent; ++got) {
    auto in = podworkerd.Receive(5s);
    ASSERT_TRUE(in.ok()) << in.status().ToString() << " after " << got;
    EXPECT_EQ(in->payload.size(), desired.size());
    peer = in->peer;
  }
  ASSERT_TRUE(supervisor.WaitWritable(5s));
  ASSERT_TRUE(supervisor.Send("next", 4).ok());
  auto next = podworkerd.Receive(5s);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(next->payload.size(), 4u);

  // Replies: one over the reply limit is refused; an ack arrives.
  const std::string big_reply(kPodWorkChannel.replies.max_message_bytes + 1, 'r');
  EXPECT_EQ(podworkerd.Send(peer, big_reply.data(), big_reply.size()).code(),
            StatusCode::kResourceExhausted);
  ASSERT_TRUE(podworkerd.Send(peer, "ack", 3).ok());
  auto ack = supervisor.Receive(5s);
  ASSERT_TRUE(ack.ok()) << ack.status().ToString();
  EXPECT_EQ(ack->size(), 3u);
}

TEST(WorkChannelBudgetTest, ReconnectKeepsTheBounds) {
  Context ctx;
  DealerClient client(ctx, kVolumeChannel);
  ASSERT_TRUE(client.Connect("ipc:///nonexistent-dir-for-test/none.sock").ok());
  ASSERT_TRUE(client.Reconnect().ok());
  EXPECT_EQ(client.ReceiveHwm(), kVolumeChannel.replies.hwm());
  EXPECT_EQ(client.SendHwm(), kVolumeChannel.requests.hwm());
  EXPECT_EQ(static_cast<size_t>(client.raw().get(zmq::sockopt::maxmsgsize)),
            kVolumeChannel.replies.max_message_bytes);
  RequestClient request(ctx, "ipc:///nonexistent-dir-for-test/none.sock", kVolumeChannel);
  ASSERT_TRUE(request.Connect().ok());
}

// statusd's replies: thousands of small SetPodStatus replies may be queued for a pipelining
// client, or a few big ListPodStatuses ones; a count cannot bound both, so bytes are counted.
TEST(RouterByteBudgetTest, QueuedBytesPerPeerStayWithinTheBudgetAndDrain) {
  testing::TempDir dir;
  const std::string uri = "ipc://" + dir.Sub("status.sock");
  Context ctx;
  RouterServer server(ctx, 4 * kMiB);
  server.raw().set(zmq::sockopt::sndhwm, 4096);
  constexpr size_t kBudget = 8 * kMiB;
  server.BoundQueuedBytesPerPeer(kBudget);
  ASSERT_TRUE(server.Bind(uri).ok());
  DealerClient client(ctx, 4 * kMiB);
  client.raw().set(zmq::sockopt::rcvhwm, 1);  // a client that stops reading
  ASSERT_TRUE(client.Connect(uri).ok());
  ASSERT_TRUE(client.WaitWritable(5s));
  ASSERT_TRUE(client.Send("list", 4).ok());
  auto request = server.Receive(5s);
  ASSERT_TRUE(request.ok()) << request.status().ToString();
  const std::string peer = request->peer;

  const std::string reply(1 * kMiB, 'l');
  int accepted = 0;
  Status refused;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline && accepted < 1000) {
    Status s = server.Send(peer, reply.data(), reply.size());
    if (s.ok()) {
      ++accepted;
      EXPECT_LE(server.QueuedBytes(peer), kBudget);
      continue;
    }
    refused = s;
    // The I/O thread may still be writing: refused for good once the count stops falling.
    const size_t queued = server.QueuedBytes(peer);
    (void)server.Receive(200ms);
    if (server.QueuedBytes(peer) == queued) break;
  }
  EXPECT_EQ(refused.code(), StatusCode::kUnavailable) << refused.ToString();
  EXPECT_NE(refused.message().find("budget"), std::string::npos) << refused.ToString();
  EXPECT_LE(server.QueuedBytes(peer), kBudget);
  // The budget in the server, the client's mark and what the kernel holds; not 4096 replies.
  EXPECT_LE(accepted, static_cast<int>(kBudget / reply.size()) + 1 + KernelSlack(reply.size()));

  // The client reads: every accepted reply arrives, nothing is left queued, sending works.
  for (int got = 0; got < accepted; ++got) {
    auto f = client.Receive(5s);
    ASSERT_TRUE(f.ok()) << f.status().ToString() << " after " << got;
    EXPECT_EQ(f->size(), reply.size());
  }
  const auto drained = std::chrono::steady_clock::now() + 5s;
  while (server.QueuedBytes(peer) != 0 && std::chrono::steady_clock::now() < drained) {
    (void)server.Receive(10ms);
  }
  EXPECT_EQ(server.QueuedBytes(peer), 0u);
  ASSERT_TRUE(server.Send(peer, "done", 4).ok());
  auto done = client.Receive(5s);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->size(), 4u);
  // A peer that is gone: refused, and nothing stays counted for it.
  EXPECT_EQ(server.Send("no-such-peer", "x", 1).code(), StatusCode::kUnavailable);
  EXPECT_EQ(server.QueuedBytes("no-such-peer"), 0u);
}

}  // namespace
}  // namespace nodelet::ipc
