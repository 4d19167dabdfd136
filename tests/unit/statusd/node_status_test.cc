// The node status in statusd: NodeStore on a real SQLite file (versions grow with content,
// survive a reopen, bad JSON is refused) and the server's SetNodeStatus/GetNodeStatus. The status
// sinks' side is tests/unit/supervisor/status_sink_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "lib/status/status_client.h"
#include "lib/status/status_codec.h"
#include "svc-statusd/node_store.h"
#include "svc-statusd/status_server.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_status_store.h"
#include "tests/testing/harness.h"

namespace nodelet::statusd {
namespace {

namespace fb = ::nodelet::ipc::status;
using flatbuffers::FlatBufferBuilder;
using ::testing::HasSubstr;

std::string NodeJson(const std::string& name, const std::string& ready) {
  return R"({"apiVersion":"v1","kind":"Node","metadata":{"name":")" + name +
         R"("},"status":{"conditions":[{"type":"Ready","status":")" + ready + R"("}]}})";
}

TEST(NodeStoreTest, VersionGrowsWithContentAndSurvivesReopen) {
  nodelet::testing::TempDir dir;
  const std::string db = dir.Sub("status.db");
  {
    auto store = NodeStore::Open(db, RealClock::Get());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_FALSE((*store)->Get().has_value());
    bool changed = false;
    auto r = (*store)->Set(NodeJson("n1", "True"), 100, &changed);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(changed);
    EXPECT_EQ(r->version, 1u);
    // The same content: nothing written, same version.
    r = (*store)->Set(NodeJson("n1", "True"), 110, &changed);
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(changed);
    EXPECT_EQ(r->version, 1u);
    EXPECT_EQ(r->updated_at_unix_s, 100);
    r = (*store)->Set(NodeJson("n1", "False"), 120, &changed);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(changed);
    EXPECT_EQ(r->version, 2u);
  }
  auto again = NodeStore::Open(db, RealClock::Get());
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE((*again)->Get().has_value());
  EXPECT_EQ((*again)->Get()->version, 2u);
  EXPECT_EQ((*again)->Get()->node_json, NodeJson("n1", "False"));
  EXPECT_EQ((*again)->Get()->updated_at_unix_s, 120);
  bool changed = false;
  auto r = (*again)->Set(NodeJson("n1", "True"), 130, &changed);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->version, 3u);
}

TEST(NodeStoreTest, RefusesWhatIsNotANodeAndKeepsTheStoredOne) {
  nodelet::testing::TempDir dir;
  auto store = NodeStore::Open(dir.Sub("status.db"), RealClock::Get());
  ASSERT_TRUE(store.ok());
  bool changed = false;
  ASSERT_TRUE((*store)->Set(NodeJson("n1", "True"), 1, &changed).ok());
  struct Case {
    std::string json, why;
  } cases[] = {
      {"{not json", "not valid JSON"},
      {"[1,2]", "not a JSON object"},
      {R"({"metadata":{}})", "metadata.name"},
      {R"({"metadata":{"name":""}})", "metadata.name"},
      {R"({"metadata":{"name":7}})", "metadata.name"},
      {"{\"metadata\":{\"name\":\"n\"},\"x\":\"" + std::string(kMaxNodeStatusBytes, 'a') + "\"}",
       "over the limit"},
  };
  for (const auto& c : cases) {
    auto r = (*store)->Set(c.json, 2, &changed);
    ASSERT_FALSE(r.ok()) << c.json.substr(0, 40);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr(c.why));
  }
  EXPECT_EQ((*store)->Get()->version, 1u);
  EXPECT_EQ((*store)->Get()->node_json, NodeJson("n1", "True"));
}

class NodeStatusServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = NodeStore::Open(dir_.Sub("status.db"), RealClock::Get());
    ASSERT_TRUE(store.ok());
    node_ = std::move(*store);
    server_.set_node_store(node_.get());
  }
  ipc::Incoming In(FlatBufferBuilder& fbb) {
    ipc::Incoming in;
    in.peer = "supervisor";
    in.payload = ipc::Frame(fbb.GetBufferPointer(), fbb.GetSize());
    return in;
  }
  ipc::Incoming Set(uint64_t id, const std::string& json) {
    FlatBufferBuilder fbb;
    status::FinishStatusMessage(
        fbb, env_, fb::Body::SetNodeStatusRequest,
        fb::CreateSetNodeStatusRequestDirect(fbb, id, json.c_str()).Union());
    return In(fbb);
  }
  ipc::Incoming Get(uint64_t id) {
    FlatBufferBuilder fbb;
    status::FinishStatusMessage(fbb, env_, fb::Body::GetNodeStatusRequest,
                                fb::CreateGetNodeStatusRequest(fbb, id).Union());
    return In(fbb);
  }
  BatchResult Run(std::vector<ipc::Incoming> batch) { return server_.HandleBatch(batch); }
  static const fb::StatusMessage* Reply(const BatchResult& r, size_t i) {
    const std::string& bytes = r.replies.at(i).second;
    auto m = status::DecodeStatusMessage(bytes.data(), bytes.size(), status::kMaxReplyBytes);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? *m : nullptr;
  }

  nodelet::testing::TempDir dir_;
  nodelet::testing::FakeClock clock_;
  nodelet::testing::FakeStatusStore store_;
  StatusManager manager_{clock_};
  StatusServer server_{manager_, store_, 0x1234, status::kMaxRequestBytes};
  ipc::EnvelopeWriter env_{ipc::ServiceId::Supervisor, 7};
  std::unique_ptr<NodeStore> node_;
};

TEST_F(NodeStatusServerTest, SetThenGetAndChangesAreHandedOn) {
  std::vector<ipc::Incoming> batch;
  batch.push_back(Get(1));
  batch.push_back(Set(2, NodeJson("n1", "True")));
  batch.push_back(Get(3));
  BatchResult r = Run(std::move(batch));
  ASSERT_EQ(r.replies.size(), 3u);
  ASSERT_EQ(Reply(r, 0)->body_type(), fb::Body::ErrorReply);
  EXPECT_EQ(Reply(r, 0)->body_as_ErrorReply()->code(), fb::ErrorCode::NotFound);
  ASSERT_EQ(Reply(r, 1)->body_type(), fb::Body::SetNodeStatusReply);
  EXPECT_EQ(Reply(r, 1)->body_as_SetNodeStatusReply()->request_id(), 2u);
  EXPECT_EQ(Reply(r, 1)->body_as_SetNodeStatusReply()->version(), 1u);
  EXPECT_TRUE(Reply(r, 1)->body_as_SetNodeStatusReply()->changed());
  ASSERT_EQ(Reply(r, 2)->body_type(), fb::Body::GetNodeStatusReply);
  EXPECT_EQ(Reply(r, 2)->body_as_GetNodeStatusReply()->node_json()->str(), NodeJson("n1", "True"));
  // No pod status was touched.
  EXPECT_TRUE(r.committed.empty());

  // Unchanged content: answered, the version kept.
  std::vector<ipc::Incoming> again;
  again.push_back(Set(4, NodeJson("n1", "True")));
  r = Run(std::move(again));
  EXPECT_FALSE(Reply(r, 0)->body_as_SetNodeStatusReply()->changed());
  EXPECT_EQ(Reply(r, 0)->body_as_SetNodeStatusReply()->version(), 1u);
}

TEST_F(NodeStatusServerTest, BadNodeStatusGetsAClearErrorAndTheStoredOneStays) {
  std::vector<ipc::Incoming> batch;
  batch.push_back(Set(1, NodeJson("n1", "True")));
  batch.push_back(Set(2, "{\"kind\":\"Node\"}"));
  BatchResult r = Run(std::move(batch));
  ASSERT_EQ(Reply(r, 1)->body_type(), fb::Body::ErrorReply);
  EXPECT_EQ(Reply(r, 1)->body_as_ErrorReply()->code(), fb::ErrorCode::InvalidArgument);
  EXPECT_THAT(Reply(r, 1)->body_as_ErrorReply()->message()->str(), HasSubstr("metadata.name"));
  ASSERT_EQ(r.refused.size(), 1u);
  EXPECT_EQ(node_->Get()->node_json, NodeJson("n1", "True"));
}

}  // namespace
}  // namespace nodelet::statusd
