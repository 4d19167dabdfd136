#include "svc-statusd/status_server.h"

#include <gtest/gtest.h>

#include "lib/status/status_client.h"
#include "lib/status/status_codec.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_status_store.h"
#include "tests/unit/statusd/status_samples.h"

namespace nodelet::statusd {
namespace {

using namespace nodelet::statusd::testing;  // NOLINT
namespace fb = ::nodelet::ipc::status;
using flatbuffers::FlatBufferBuilder;
using nodelet::testing::FakeClock;
using nodelet::testing::FakeStatusStore;

class StatusServerTest : public ::testing::Test {
 protected:
  ipc::Incoming Frame(const std::string& peer, FlatBufferBuilder& fbb) {
    ipc::Incoming in;
    in.peer = peer;
    in.payload = ipc::Frame(fbb.GetBufferPointer(), fbb.GetSize());
    return in;
  }
  ipc::Incoming Set(const std::string& peer, uint64_t id, const PodIdentity& pod,
                    const PodStatus& status) {
    FlatBufferBuilder fbb;
    auto p = status::WritePodIdentity(fbb, pod);
    auto s = status::WritePodStatus(fbb, status);
    status::FinishStatusMessage(fbb, client_env_, fb::Body::SetPodStatusRequest,
                                fb::CreateSetPodStatusRequest(fbb, id, p, s).Union());
    return Frame(peer, fbb);
  }
  ipc::Incoming Get(uint64_t id, const std::string& uid) {
    FlatBufferBuilder fbb;
    status::FinishStatusMessage(fbb, client_env_, fb::Body::GetPodStatusRequest,
                                fb::CreateGetPodStatusRequestDirect(fbb, id, uid.c_str()).Union());
    return Frame("reader", fbb);
  }
  ipc::Incoming Terminate(uint64_t id, const std::string& uid) {
    FlatBufferBuilder fbb;
    status::FinishStatusMessage(fbb, client_env_, fb::Body::TerminatePodRequest,
                                fb::CreateTerminatePodRequestDirect(fbb, id, uid.c_str()).Union());
    return Frame("writer", fbb);
  }
  ipc::Incoming List(uint64_t id) {
    FlatBufferBuilder fbb;
    status::FinishStatusMessage(fbb, client_env_, fb::Body::ListPodStatusesRequest,
                                fb::CreateListPodStatusesRequest(fbb, id).Union());
    return Frame("reader", fbb);
  }
  BatchResult Run(std::vector<ipc::Incoming> batch) { return server_.HandleBatch(batch); }
  template <typename... In>
  BatchResult Run(ipc::Incoming first, In... rest) {
    std::vector<ipc::Incoming> batch;
    batch.push_back(std::move(first));
    (batch.push_back(std::move(rest)), ...);
    return server_.HandleBatch(batch);
  }

  static const fb::StatusMessage* Reply(const BatchResult& r, size_t i) {
    const std::string& bytes = r.replies.at(i).second;
    auto m = status::DecodeStatusMessage(bytes.data(), bytes.size(), status::kMaxReplyBytes);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? *m : nullptr;
  }
  static const fb::ErrorReply* Error(const BatchResult& r, size_t i) {
    const auto* m = Reply(r, i);
    return m ? m->body_as_ErrorReply() : nullptr;
  }

  FakeClock clock_;
  FakeStatusStore store_;
  StatusManager manager_{clock_};
  StatusServer server_{manager_, store_, 0x1234, status::kMaxRequestBytes};
  ipc::EnvelopeWriter client_env_{ipc::ServiceId::Podworkerd, 99};
};

TEST_F(StatusServerTest, OneCommitPerBatch) {
  std::vector<ipc::Incoming> batch;
  for (int i = 0; i < 50; ++i) {
    batch.push_back(Set("w", 100 + i, SamplePod("u" + std::to_string(i % 10)),
                        RunningStatus("m" + std::to_string(i))));
  }
  BatchResult r = Run(std::move(batch));
  EXPECT_EQ(store_.commit_calls, 1);
  ASSERT_EQ(store_.batch_sizes.size(), 1u);
  EXPECT_EQ(store_.batch_sizes[0], 50u);
  ASSERT_EQ(r.replies.size(), 50u);
  for (int i = 0; i < 50; ++i) {
    const auto* m = Reply(r, i);
    ASSERT_EQ(m->body_type(), fb::Body::SetPodStatusReply);
    EXPECT_EQ(m->body_as_SetPodStatusReply()->request_id(), 100u + i);
    EXPECT_EQ(m->body_as_SetPodStatusReply()->version(), static_cast<uint64_t>(i / 10 + 1));
    EXPECT_TRUE(m->body_as_SetPodStatusReply()->changed());
  }
  // One watch message per version, sequenced from 1.
  ASSERT_EQ(r.watch_messages.size(), 50u);
  auto last = status::DecodeStatusMessage(r.watch_messages.back().data(),
                                          r.watch_messages.back().size(), status::kMaxReplyBytes);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ((*last)->header()->sequence(), 50u);
  EXPECT_EQ((*last)->header()->incarnation(), 0x1234u);
  EXPECT_EQ(store_.rows.at("u9").version, 5u);
}

TEST_F(StatusServerTest, ReadsInABatchSeeItsCommittedWrites) {
  BatchResult r = Run(Set("w", 1, SamplePod("u1"), RunningStatus("x")), Get(2, "u1"), List(3));
  const auto* get = Reply(r, 1)->body_as_GetPodStatusReply();
  ASSERT_NE(get, nullptr);
  EXPECT_EQ(get->record()->version(), 1u);
  EXPECT_EQ(get->record()->status()->message()->str(), "x");
  const auto* list = Reply(r, 2)->body_as_ListPodStatusesReply();
  ASSERT_NE(list, nullptr);
  EXPECT_EQ(list->records()->size(), 1u);
  EXPECT_EQ(list->watch_sequence(), 1u);
  EXPECT_EQ(list->watch_incarnation(), 0x1234u);
}

TEST_F(StatusServerTest, FailedCommitRollsBackAndAnswersWithTheStoreError) {
  ASSERT_TRUE(Run(Set("w", 1, SamplePod("u1"), RunningStatus("committed"))).commit_status.ok());
  store_.fail_with = ResourceExhausted(
      "Failed to commit 3 status changes in '/x/status.db': "
      "database or disk is full");
  BatchResult r = Run(Set("w", 2, SamplePod("u1"), RunningStatus("lost")),
                      Set("w", 3, SamplePod("u2"), RunningStatus("lost")),
                      // Identical to the pending (lost) change: must not report success.
                      Set("w", 4, SamplePod("u1"), RunningStatus("lost")),
                      // Identical to what is committed, untouched by the batch: fine.
                      Get(5, "u1"), Set("w", 6, SamplePod("u9"), RunningStatus("bad")));
  EXPECT_TRUE(r.commit_attempted);
  EXPECT_EQ(r.commit_status.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(r.committed.empty());
  EXPECT_TRUE(r.watch_messages.empty());
  for (size_t i : {0u, 1u, 2u, 4u}) {
    const auto* e = Error(r, i);
    ASSERT_NE(e, nullptr) << i;
    EXPECT_EQ(e->code(), fb::ErrorCode::ResourceExhausted);
    EXPECT_NE(e->message()->str().find("disk is full"), std::string::npos);
  }
  // The read sees the state after the rollback.
  const auto* get = Reply(r, 3)->body_as_GetPodStatusReply();
  ASSERT_NE(get, nullptr);
  EXPECT_EQ(get->record()->status()->message()->str(), "committed");
  EXPECT_EQ(manager_.Get("u1")->version, 1u);
  EXPECT_EQ(manager_.Get("u2"), nullptr);

  // Space returns: the same writes succeed, with the versions they would have had.
  store_.fail_with = Status::Ok();
  BatchResult ok = Run(Set("w", 7, SamplePod("u1"), RunningStatus("lost")));
  EXPECT_TRUE(ok.commit_status.ok());
  EXPECT_EQ(Reply(ok, 0)->body_as_SetPodStatusReply()->version(), 2u);
  EXPECT_EQ(store_.rows.at("u1").status.message, "lost");
}

TEST_F(StatusServerTest, UnchangedWritesDoNotCommit) {
  Run(Set("w", 1, SamplePod("u1"), RunningStatus("x")));
  BatchResult r = Run(Set("w", 2, SamplePod("u1"), RunningStatus("x")));
  EXPECT_FALSE(r.commit_attempted);
  EXPECT_EQ(store_.commit_calls, 1);
  const auto* reply = Reply(r, 0)->body_as_SetPodStatusReply();
  ASSERT_NE(reply, nullptr);
  EXPECT_FALSE(reply->changed());
  EXPECT_EQ(reply->version(), 1u);
}

TEST_F(StatusServerTest, BadInputGetsClearErrorsAndTheRestIsServed) {
  ipc::Incoming garbage;
  garbage.peer = "evil";
  garbage.payload = ipc::Frame("this is not a flatbuffer at all", 31);
  ipc::Incoming oversized;
  oversized.peer = "evil";
  {
    FlatBufferBuilder fbb;
    PodStatus big = RunningStatus(std::string(status::kMaxRequestBytes + 10, 'x'));
    auto p = status::WritePodIdentity(fbb, SamplePod("big"));
    auto s = status::WritePodStatus(fbb, big);
    status::FinishStatusMessage(fbb, client_env_, fb::Body::SetPodStatusRequest,
                                fb::CreateSetPodStatusRequest(fbb, 77, p, s).Union());
    oversized = Frame("evil", fbb);
  }
  PodStatus unknown_phase = RunningStatus();
  unknown_phase.phase = static_cast<PodPhase>(200);
  ipc::Incoming reply_body;
  {
    FlatBufferBuilder fbb;
    status::FinishStatusMessage(fbb, client_env_, fb::Body::SetPodStatusReply,
                                fb::CreateSetPodStatusReply(fbb, 8, 1, true).Union());
    reply_body = Frame("evil", fbb);
  }
  std::vector<ipc::Incoming> batch;
  batch.push_back(std::move(garbage));
  batch.push_back(std::move(oversized));
  batch.push_back(Set("w", 3, SamplePod("u1"), unknown_phase));
  batch.push_back(Terminate(4, "ghost"));
  batch.push_back(Get(5, "ghost"));
  batch.push_back(std::move(reply_body));
  batch.push_back(Set("w", 7, SamplePod("u1"), RunningStatus()));
  BatchResult r = Run(std::move(batch));

  struct Want {
    uint64_t id;
    fb::ErrorCode code;
    std::string needle;
  };
  std::vector<Want> want = {
      {0, fb::ErrorCode::InvalidArgument, "bad request: "},
      {0, fb::ErrorCode::ResourceExhausted, "exceeds the limit of 1048576"},
      {3, fb::ErrorCode::InvalidArgument, "unknown phase 200"},
      {4, fb::ErrorCode::NotFound, "no status for pod uid 'ghost'"},
      {5, fb::ErrorCode::NotFound, "no status for pod uid 'ghost'"},
      {8, fb::ErrorCode::InvalidArgument, "unexpected message body SetPodStatusReply"},
  };
  for (size_t i = 0; i < want.size(); ++i) {
    const auto* e = Error(r, i);
    ASSERT_NE(e, nullptr) << "reply " << i << " is not an ErrorReply";
    EXPECT_EQ(e->request_id(), want[i].id) << i;
    EXPECT_EQ(e->code(), want[i].code) << i << ": " << e->message()->str();
    EXPECT_NE(e->message()->str().find(want[i].needle), std::string::npos)
        << i << ": " << e->message()->str();
  }
  EXPECT_EQ(r.replies[0].first, "evil");
  const auto* ok = Reply(r, 6)->body_as_SetPodStatusReply();
  ASSERT_NE(ok, nullptr);
  EXPECT_EQ(ok->version(), 1u);
  EXPECT_EQ(server_.counters().bad_messages, 2u);
  EXPECT_GE(r.refused.size(), 4u);
}

TEST_F(StatusServerTest, RemoveOrphansIsCommittedAndPublished) {
  Run(Set("w", 1, SamplePod("a"), RunningStatus()), Set("w", 2, SamplePod("b"), RunningStatus()));
  std::vector<std::string> keep = {"b"};
  FlatBufferBuilder fbb2;
  auto k = fbb2.CreateVectorOfStrings(keep);
  status::FinishStatusMessage(fbb2, client_env_, fb::Body::RemoveOrphanedStatusesRequest,
                              fb::CreateRemoveOrphanedStatusesRequest(fbb2, 10, k).Union());
  BatchResult r = Run(Frame("sup", fbb2));
  const auto* reply = Reply(r, 0)->body_as_RemoveOrphanedStatusesReply();
  ASSERT_NE(reply, nullptr);
  ASSERT_EQ(reply->removed_uids()->size(), 1u);
  EXPECT_EQ(reply->removed_uids()->Get(0)->str(), "a");
  EXPECT_EQ(store_.rows.count("a"), 0u);
  ASSERT_EQ(r.watch_messages.size(), 1u);
  auto m = status::DecodeStatusMessage(r.watch_messages[0].data(), r.watch_messages[0].size(),
                                       status::kMaxReplyBytes);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ((*m)->body_type(), fb::Body::StatusRemoved);
  EXPECT_EQ((*m)->body_as_StatusRemoved()->uid()->str(), "a");

  // Keeping nothing removes everything left.
  FlatBufferBuilder fbb;
  status::FinishStatusMessage(
      fbb, client_env_, fb::Body::RemoveOrphanedStatusesRequest,
      fb::CreateRemoveOrphanedStatusesRequestDirect(fbb, 9, nullptr).Union());
  BatchResult all = Run(Frame("sup", fbb));
  EXPECT_EQ(Reply(all, 0)->body_as_RemoveOrphanedStatusesReply()->removed_uids()->size(), 1u);
  EXPECT_EQ(manager_.size(), 0u);
}

}  // namespace
}  // namespace nodelet::statusd
