// lib/volume VolumeClient against a volumed stand-in (a real ROUTER on volumed's ipc:// endpoint
// in a temp dir): a ready pod's paths, a pod volumed does not know, garbage and stale replies
// skipped until the answer to this request comes, and no volumed ending the call at its deadline.
#include "lib/volume/volume_client.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "lib/ipc/codec.h"
#include "lib/ipc/endpoints.h"
#include "tests/testing/harness.h"
#include "volume_generated.h"

namespace nodelet::volume {
namespace {

using namespace std::chrono_literals;
namespace fb = ipc::volume;

struct Answer {
  bool known = true;
  bool ready = true;
  std::string reason;
  std::vector<std::pair<std::string, std::string>> volumes;
};

// Serves one request on volumed's endpoint: sends `before` (raw frames) first, then the answer.
class VolumedStandIn {
 public:
  VolumedStandIn(ipc::Context& ctx, const std::string& run_dir) : router_(ctx) {
    bound_ = router_.Bind(ipc::kVolumeEndpoint.Uri(run_dir));
  }
  const Status& bound() const { return bound_; }

  // Receives one PodVolumesRequest (5 s at most) and answers it; the pod uid it asked for.
  std::string ServeOne(const Answer& answer,
                       std::function<std::vector<std::string>(uint64_t id)> before = nullptr) {
    auto in = router_.Receive(5s);
    if (!in.ok()) return "<no request: " + in.status().ToString() + ">";
    auto m = ipc::DecodeMessage<fb::VolumeMessage>(in->payload.data(), in->payload.size(),
                                                   fb::VolumeMessageIdentifier());
    if (!m.ok() || !(*m)->body_as_PodVolumesRequest()) return "<bad request>";
    const auto* req = (*m)->body_as_PodVolumesRequest();
    if (before) {
      for (const auto& raw : before(req->request_id())) {
        (void)router_.Send(in->peer, raw.data(), raw.size());  // the test checks the outcome
      }
    }
    std::string reply = Reply(req->request_id(), answer);
    (void)router_.Send(in->peer, reply.data(), reply.size());
    return req->pod_uid() ? req->pod_uid()->str() : "";
  }

  static std::string Reply(uint64_t id, const Answer& a) {
    flatbuffers::FlatBufferBuilder fbb;
    std::vector<flatbuffers::Offset<fb::VolumePath>> paths;
    for (const auto& [name, path] : a.volumes) {
      paths.push_back(fb::CreateVolumePathDirect(fbb, name.c_str(), path.c_str()));
    }
    auto body =
        fb::CreatePodVolumesDirect(fbb, id, "uid-1", a.known, a.ready, a.reason.c_str(), &paths);
    ipc::EnvelopeWriter envelope(ipc::ServiceId::Volumed, 1);
    auto header = envelope.Write(fbb);
    fbb.Finish(fb::CreateVolumeMessage(fbb, header, fb::Body::PodVolumes, body.Union()),
               fb::VolumeMessageIdentifier());
    return std::string(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
  }

 private:
  ipc::RouterServer router_;
  Status bound_;
};

class VolumeClientTest : public ::testing::Test {
 protected:
  // The stand-in answers one request, so the first attempt must get its answer: an attempt and a
  // deadline long enough for a sanitizer build on a loaded machine (the deadline's own test is
  // below, with short ones).
  VolumeClient PatientClient() {
    VolumeClientOptions options;
    options.attempt_timeout = 10s;
    options.deadline = 10s;
    return VolumeClient(ctx_, dir_.path(), options);
  }

  testing::TempDir dir_;
  ipc::Context ctx_;
};

TEST_F(VolumeClientTest, AReadyPodsPathsByVolumeName) {
  VolumedStandIn volumed(ctx_, dir_.path());
  ASSERT_TRUE(volumed.bound().ok()) << volumed.bound().ToString();
  std::string asked;
  std::thread server([&] {
    asked = volumed.ServeOne({true, true, "", {{"data", "/r/pods/uid-1/volumes/data"}}});
  });
  VolumeClient client = PatientClient();
  auto got = client.PodVolumes("uid-1");
  server.join();
  EXPECT_EQ(asked, "uid-1");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->ready);
  ASSERT_EQ(got->paths.size(), 1u);
  EXPECT_EQ(got->paths.at("data"), "/r/pods/uid-1/volumes/data");
}

TEST_F(VolumeClientTest, APodVolumedDoesNotKnowIsNotReadyAndSaysWhy) {
  VolumedStandIn volumed(ctx_, dir_.path());
  ASSERT_TRUE(volumed.bound().ok());
  std::thread server([&] { volumed.ServeOne({/*known=*/false, /*ready=*/true, "", {}}); });
  VolumeClient client = PatientClient();
  auto got = client.PodVolumes("uid-1");
  server.join();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_FALSE(got->ready);
  EXPECT_EQ(got->reason, "volumed does not know the pod yet");
}

TEST_F(VolumeClientTest, NotReadyCarriesVolumedsReason) {
  VolumedStandIn volumed(ctx_, dir_.path());
  ASSERT_TRUE(volumed.bound().ok());
  std::thread server([&] {
    volumed.ServeOne({true, /*ready=*/false, "hostPath /x: not a directory", {}});
  });
  VolumeClient client = PatientClient();
  auto got = client.PodVolumes("uid-1");
  server.join();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_FALSE(got->ready);
  EXPECT_EQ(got->reason, "hostPath /x: not a directory");
}

TEST_F(VolumeClientTest, GarbageAndRepliesToOtherRequestsAreSkipped) {
  VolumedStandIn volumed(ctx_, dir_.path());
  ASSERT_TRUE(volumed.bound().ok());
  std::thread server([&] {
    volumed.ServeOne({true, true, "", {{"right", "/right"}}}, [](uint64_t id) {
      return std::vector<std::string>{
          std::string("\x00\x01garbage that does not verify", 29),
          VolumedStandIn::Reply(id + 1000, {true, true, "", {{"stale", "/stale"}}}),
      };
    });
  });
  VolumeClient client = PatientClient();
  auto got = client.PodVolumes("uid-1");
  server.join();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->paths.size(), 1u);
  EXPECT_EQ(got->paths.count("right"), 1u);
}

TEST_F(VolumeClientTest, NoVolumedEndsTheCallAtItsDeadline) {
  VolumeClientOptions options;
  options.attempt_timeout = 50ms;
  options.deadline = 200ms;
  VolumeClient client(ctx_, dir_.path(), options);
  const auto start = std::chrono::steady_clock::now();
  auto got = client.PodVolumes("uid-1");
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(got.status().code() == StatusCode::kDeadlineExceeded ||
              got.status().code() == StatusCode::kUnavailable)
      << got.status().ToString();
  EXPECT_LT(took, 3s);
}

}  // namespace
}  // namespace nodelet::volume
