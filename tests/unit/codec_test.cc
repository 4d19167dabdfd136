#include "lib/ipc/codec.h"

#include <gtest/gtest.h>

#include <random>

#include "control_generated.h"

namespace nodelet::ipc {
namespace {

using control::ControlMessage;

std::vector<uint8_t> MakeHeartbeat(EnvelopeWriter& writer, const std::string& reason) {
  flatbuffers::FlatBufferBuilder fbb;
  auto header = writer.Write(fbb);
  auto hb = control::CreateHeartbeat(fbb, control::Health::Degraded, fbb.CreateString(reason), 42);
  fbb.Finish(control::CreateControlMessage(fbb, header, control::Body::Heartbeat, hb.Union()),
             control::ControlMessageIdentifier());
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

TEST(CodecTest, EnvelopeRoundTrip) {
  EnvelopeWriter writer(ServiceId::Plegd, 0xabcdef);
  MakeHeartbeat(writer, "first");
  auto buf = MakeHeartbeat(writer, "runtime down");
  auto msg =
      DecodeMessage<ControlMessage>(buf.data(), buf.size(), control::ControlMessageIdentifier());
  ASSERT_TRUE(msg.ok()) << msg.status().ToString();
  const Envelope* h = (*msg)->header();
  EXPECT_EQ(h->schema_version(), kSchemaVersion);
  EXPECT_EQ(h->sender(), ServiceId::Plegd);
  EXPECT_EQ(h->incarnation(), 0xabcdefu);
  EXPECT_EQ(h->sequence(), 2u);
  EXPECT_GT(h->sent_mono_ns(), 0);
  ASSERT_EQ((*msg)->body_type(), control::Body::Heartbeat);
  EXPECT_EQ((*msg)->body_as_Heartbeat()->reason()->str(), "runtime down");
  EXPECT_EQ((*msg)->body_as_Heartbeat()->uptime_ms(), 42u);
}

TEST(CodecTest, RejectsTruncatedBuffers) {
  EnvelopeWriter writer(ServiceId::Plegd, 1);
  auto buf = MakeHeartbeat(writer, "a reason long enough to matter");
  for (size_t len = 0; len < buf.size(); ++len) {
    auto msg = DecodeMessage<ControlMessage>(buf.data(), len, control::ControlMessageIdentifier());
    EXPECT_FALSE(msg.ok()) << "truncated to " << len << " bytes was accepted";
  }
}

TEST(CodecTest, RejectsOversized) {
  EnvelopeWriter writer(ServiceId::Plegd, 1);
  auto buf = MakeHeartbeat(writer, std::string(2000, 'x'));
  auto msg = DecodeMessage<ControlMessage>(buf.data(), buf.size(),
                                           control::ControlMessageIdentifier(), 1024);
  ASSERT_FALSE(msg.ok());
  EXPECT_EQ(msg.status().code(), StatusCode::kResourceExhausted);
}

TEST(CodecTest, RejectsWrongIdentifier) {
  EnvelopeWriter writer(ServiceId::Plegd, 1);
  auto buf = MakeHeartbeat(writer, "x");
  auto msg = DecodeMessage<ControlMessage>(buf.data(), buf.size(), "NLCL");
  ASSERT_FALSE(msg.ok());
  EXPECT_NE(msg.status().message().find("identifier"), std::string::npos);
}

// Found by fuzzing: the verifier accepts a body type without a body.
TEST(CodecTest, RejectsBodyTypeWithoutBody) {
  flatbuffers::FlatBufferBuilder fbb;
  auto header = CreateEnvelope(fbb, kSchemaVersion, ServiceId::Plegd, 1, 1, 1);
  fbb.Finish(control::CreateControlMessage(fbb, header, control::Body::Heartbeat),
             control::ControlMessageIdentifier());
  auto msg = DecodeMessage<ControlMessage>(fbb.GetBufferPointer(), fbb.GetSize(),
                                           control::ControlMessageIdentifier());
  ASSERT_FALSE(msg.ok());
  EXPECT_NE(msg.status().message().find("carries none"), std::string::npos);
}

TEST(CodecTest, RejectsMissingEnvelopeAndWrongVersion) {
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(control::CreateControlMessage(fbb), control::ControlMessageIdentifier());
  auto msg = DecodeMessage<ControlMessage>(fbb.GetBufferPointer(), fbb.GetSize(),
                                           control::ControlMessageIdentifier());
  ASSERT_FALSE(msg.ok());
  EXPECT_NE(msg.status().message().find("envelope"), std::string::npos);

  flatbuffers::FlatBufferBuilder fbb2;
  auto header = CreateEnvelope(fbb2, kSchemaVersion + 1, ServiceId::Plegd, 1, 1, 1);
  fbb2.Finish(control::CreateControlMessage(fbb2, header), control::ControlMessageIdentifier());
  auto msg2 = DecodeMessage<ControlMessage>(fbb2.GetBufferPointer(), fbb2.GetSize(),
                                            control::ControlMessageIdentifier());
  ASSERT_FALSE(msg2.ok());
  EXPECT_NE(msg2.status().message().find("schema version"), std::string::npos);
}

TEST(CodecTest, RandomBuffersNeverCrash) {
  std::mt19937 rng(12345);
  EnvelopeWriter writer(ServiceId::Plegd, 1);
  auto valid = MakeHeartbeat(writer, "seed");
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> buf;
    if (i % 2 == 0) {
      buf.resize(rng() % 512);
      for (auto& b : buf) b = static_cast<uint8_t>(rng());
      // Give half of them the right identifier so the verifier itself is exercised.
      if (buf.size() >= 8) std::memcpy(buf.data() + 4, "NLCT", 4);
    } else {
      buf = valid;  // flip a few bytes of a valid message
      for (int k = 0; k < 3; ++k) buf[rng() % buf.size()] = static_cast<uint8_t>(rng());
    }
    auto msg =
        DecodeMessage<ControlMessage>(buf.data(), buf.size(), control::ControlMessageIdentifier());
    if (msg.ok()) {
      ++accepted;
      // An accepted buffer must be safe to read in full.
      (void)(*msg)->header()->sequence();
      if (auto hb = (*msg)->body_as_Heartbeat(); hb && hb->reason()) (void)hb->reason()->str();
    }
  }
  // Pure random bytes almost never form a valid message; mutated ones sometimes do.
  EXPECT_LT(accepted, 20000);
}

}  // namespace
}  // namespace nodelet::ipc
